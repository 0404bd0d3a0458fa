"""Routing rules: which receivers get an alert, with Alertmanager-like route trees.

Size: one rules format: its parsing, its validation with file/line/key errors, and its matching.

A rules file (YAML) holds ``receivers`` and one root ``route``. Each route has
optional ``match`` (equality) and ``match_re`` (anchored regular expression)
matchers on alert attributes (``severity``, ``probable_cause``, ``team``,
``experiment_family``, ``detector``, ``indicator``, ``run_id``, ``node``,
``status``, ``owner`` (the owning team, see :mod:`runwatch.core.paging.ownership`)
and ``labels.<name>``), a ``receiver`` (inherited from the parent
when absent), ``continue`` and nested ``routes``. Evaluation follows
Alertmanager: children are tried in order; the first matching child handles
the alert unless it sets ``continue: true``, in which case later siblings are
tried as well; a route none of whose children match handles the alert itself.

Endpoints and secrets never appear in clear: each receiver names them through
``<field>_env`` (an environment variable) or ``<field>_file`` (a file). This
module only parses and validates; resolving the references is I/O done by the
pager. Every error names the file and line of the offending node (the file is
read through :mod:`runwatch.core.yamlconf`; :func:`parse_duration_ms` lives there).
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Literal, get_args

import yaml

from runwatch.core.records.alerts import AlertStatus, ProbableCause, Severity
from runwatch.core.yamlconf import Reader, compose
from runwatch.core.yamlconf import parse_duration_ms as parse_duration_ms

ReceiverKind = Literal["alertmanager", "pagerduty", "opsgenie", "slack", "webhook"]
RECEIVER_KINDS: tuple[str, ...] = ("alertmanager", "pagerduty", "opsgenie", "slack", "webhook")
MATCH_KEYS = frozenset(
    {
        "severity",
        "probable_cause",
        "team",
        "experiment_family",
        "detector",
        "indicator",
        "run_id",
        "node",
        "status",
        "owner",
    }
)
CLOSED_VALUES: dict[str, tuple[str, ...]] = {
    "severity": get_args(Severity),
    "probable_cause": get_args(ProbableCause),
    "status": get_args(AlertStatus),
}
"""Attributes whose values are a fixed set (``Alert``'s enums): a matcher on another value
(``severity: critcal``) could never match, so it is refused where it is written."""


def attribute_problem(name: str) -> str | None:
    """Say why ``name`` is no attribute an alert has (None: it is one)."""
    if name in MATCH_KEYS or (name.startswith("labels.") and len(name) > 7):
        return None
    return (f"unknown attribute {name!r} (use one of {', '.join(sorted(MATCH_KEYS))} "
            "or labels.<name>)")


def value_problem(name: str, value: str, *, regex: bool) -> str | None:
    """Say why ``value`` (a regex when ``regex``) can match none of ``name``'s values.

    Only attributes with a closed set of values (:data:`CLOSED_VALUES`) are judged; a
    regex that does not compile is left to the caller, which names it.
    """
    closed = CLOSED_VALUES.get(name)
    if closed is None:
        return None
    if regex:
        try:
            pattern = re.compile(value)
        except re.error:
            return None
        if not any(pattern.fullmatch(v) for v in closed):
            return f"{value!r} matches none of {name}'s values ({', '.join(closed)})"
    elif value not in closed:
        return f"{value!r} is not one of {name}'s values ({', '.join(closed)})"
    return None


# Secret fields per receiver kind: never literal; always ``*_env`` / ``*_file``.
SECRET_FIELDS: dict[str, frozenset[str]] = {
    "alertmanager": frozenset({"token"}),
    "pagerduty": frozenset({"routing_key"}),
    "opsgenie": frozenset({"api_key"}),
    "slack": frozenset({"url"}),
    "webhook": frozenset({"secret", "token"}),
}
REQUIRED_FIELDS: dict[str, frozenset[str]] = {
    "alertmanager": frozenset({"url"}),
    "pagerduty": frozenset({"routing_key"}),
    "opsgenie": frozenset({"api_key"}),
    "slack": frozenset({"url"}),
    "webhook": frozenset({"url", "secret"}),
}
PLAIN_FIELDS = frozenset({"url"})
_SECRET_WORDS = re.compile(r"(token|key|secret|sig|signature|password|auth|apikey)", re.I)
_URL = re.compile(r"^(?P<scheme>https?)://(?P<netloc>[^/?#]+)(?P<path>[^?#]*)(?:\?(?P<query>[^#]*))?")
DEFAULT_REPEAT_MS = 4 * 3_600_000


class RulesError(ValueError):
    """A rules file is invalid; the message names the file and line."""


_Reader = Reader[RulesError]


@dataclass(frozen=True, slots=True)
class ValueRef:
    """Where a receiver setting comes from: a literal, an env variable or a file."""

    kind: Literal["literal", "env", "file"]
    value: str


@dataclass(frozen=True, slots=True)
class ReceiverSpec:
    """One receiver as declared in the rules file (references unresolved)."""

    name: str
    kind: ReceiverKind
    repeat_interval_ms: int
    settings: Mapping[str, ValueRef]
    line: int


@dataclass(frozen=True, slots=True)
class Route:
    """One node of the route tree."""

    receiver: str
    match: Mapping[str, str] = field(default_factory=dict)
    match_re: Mapping[str, re.Pattern[str]] = field(default_factory=dict)
    continue_: bool = False
    group_by: tuple[str, ...] = ()
    routes: tuple[Route, ...] = ()
    line: int = 0

    def matches(self, attrs: Mapping[str, str]) -> bool:
        """Say whether this route's own matchers accept the attributes.

        Args:
            attrs: Alert attributes as built by :func:`alert_attributes`.

        Returns:
            True when every matcher accepts.

        """
        for key, want in self.match.items():
            if attrs.get(key, "") != want:
                return False
        return all(rx.fullmatch(attrs.get(key, "")) for key, rx in self.match_re.items())


@dataclass(frozen=True, slots=True)
class Rules:
    """A validated rules file."""

    receivers: Mapping[str, ReceiverSpec]
    route: Route


def alert_attributes(alert: object) -> dict[str, str]:
    """Flatten an alert into the attributes matchers see.

    Args:
        alert: An ``Alert`` record (duck-typed).

    Returns:
        Attribute name → string value; labels appear as ``labels.<name>``.

    """
    attrs: dict[str, str] = {}
    for key in MATCH_KEYS:
        value = getattr(alert, key, None)
        if value is not None:
            attrs[key] = str(value)
    for key, value in (getattr(alert, "labels", None) or {}).items():
        attrs[f"labels.{key}"] = str(value)
    return attrs


def route_alert(rules: Rules, attrs: Mapping[str, str]) -> list[Route]:
    """Return the routes that handle an alert, in order (receivers may repeat).

    Args:
        rules: The validated rules.
        attrs: Alert attributes (see :func:`alert_attributes`).

    Returns:
        The handling routes; the root handles anything no child takes.

    """
    return _walk(rules.route, attrs) or [rules.route]


def receivers_for(rules: Rules, attrs: Mapping[str, str]) -> list[ReceiverSpec]:
    """Return the distinct receivers an alert goes to, in route order.

    Args:
        rules: The validated rules.
        attrs: Alert attributes.

    Returns:
        Receiver specs without duplicates.

    """
    seen: dict[str, ReceiverSpec] = {}
    for route in route_alert(rules, attrs):
        seen.setdefault(route.receiver, rules.receivers[route.receiver])
    return list(seen.values())


def _walk(route: Route, attrs: Mapping[str, str]) -> list[Route]:
    if not route.matches(attrs):
        return []
    found: list[Route] = []
    for child in route.routes:
        got = _walk(child, attrs)
        if got:
            found.extend(got)
            if not child.continue_:
                break
    return found or [route]


# ----------------------------------------------------------------- parsing


def parse_rules(text: str, source: str = "<rules>") -> Rules:
    """Parse and validate a rules file.

    Args:
        text: The YAML text.
        source: File name used in error messages.

    Returns:
        The validated rules.

    Raises:
        RulesError: On any problem, naming ``source:line``.

    """
    root = compose(text, source, RulesError)
    if not isinstance(root, yaml.MappingNode):
        msg = f"{source}:1: the rules file must be a mapping with 'receivers' and 'route'"
        raise RulesError(msg)
    r = Reader(source, RulesError)
    top = r.mapping(root, allowed={"receivers", "route"}, where="top level")
    if "receivers" not in top or "route" not in top:
        raise r.err(root, "", "the rules file needs both 'receivers' and 'route'")
    receivers = _parse_receivers(r, top["receivers"][1])
    route = _parse_route(r, top["route"][1], None, receivers, is_root=True)
    return Rules(receivers=receivers, route=route)


def _parse_receivers(r: _Reader, node: yaml.Node) -> dict[str, ReceiverSpec]:
    out: dict[str, ReceiverSpec] = {}
    for item in r.sequence(node, "'receivers'"):
        spec = _parse_receiver(r, item)
        if spec.name in out:
            raise r.err(item, "", f"duplicate receiver name {spec.name!r}")
        out[spec.name] = spec
    if not out:
        raise r.err(node, "", "at least one receiver is needed")
    return out


def _parse_receiver(r: _Reader, node: yaml.Node) -> ReceiverSpec:
    items = r.mapping(node, where="a receiver")
    if "name" not in items or "kind" not in items:
        raise r.err(node, "", "a receiver needs 'name' and 'kind'")
    name = r.string(items["name"][1], "receiver name")
    kind = r.string(items["kind"][1], "receiver kind")
    if kind not in RECEIVER_KINDS:
        raise r.err(items["kind"][1], "", f"receiver {name!r}: unknown kind {kind!r} "
                    f"(one of {', '.join(RECEIVER_KINDS)})")
    repeat_ms = DEFAULT_REPEAT_MS
    settings: dict[str, ValueRef] = {}
    secrets = SECRET_FIELDS[kind]
    allowed = secrets | PLAIN_FIELDS
    for key, (knode, vnode) in items.items():
        if key in ("name", "kind"):
            continue
        if key == "repeat_interval":
            repeat_ms = r.parsed(vnode, f"receiver {name!r}", parse_duration_ms)
            if repeat_ms <= 0:  # Alertmanager would get endsAt = now: resolved as it fires
                raise r.err(vnode, "", f"receiver {name!r}: repeat_interval must be longer "
                            "than 0 (e.g. 4h)")
            continue
        base, _, suffix = key.rpartition("_")
        if suffix in ("env", "file") and base in allowed:
            if base in settings:
                raise r.err(knode, "", f"receiver {name!r}: {base!r} given twice")
            settings[base] = ValueRef(suffix, r.string(vnode, key))  # type: ignore[arg-type]
            continue
        if key in secrets:
            raise r.err(
                knode, "",
                f"receiver {name!r}: literal secret {key!r} is not allowed in the rules file; "
                f"use {key}_env: VAR or {key}_file: /path",
            )
        if key in PLAIN_FIELDS:
            if key in settings:
                raise r.err(knode, "", f"receiver {name!r}: {key!r} given twice")
            url = r.string(vnode, key)
            _check_plain_url(r, url, name, vnode)
            settings[key] = ValueRef("literal", url)
            continue
        raise r.err(knode, "", f"receiver {name!r} ({kind}): unknown setting {key!r}")
    missing = sorted(REQUIRED_FIELDS[kind] - settings.keys())
    if missing:
        raise r.err(
            node, "",
            f"receiver {name!r} ({kind}) needs {', '.join(missing)} "
            "(as <field>_env or <field>_file)",
        )
    return ReceiverSpec(name, kind, repeat_ms, settings, r.line(node))  # type: ignore[arg-type]


def url_problem(url: str) -> str | None:
    """Say what keeps ``url`` from being a receiver's http(s) URL (None: it is one).

    A host is needed and a port must be a number in 1-65535 (``http://h:abc/`` and
    ``http://[::1`` passed the check and then stopped the pager at its first alert).
    """
    if _URL.match(url) is None:
        return "is not an http(s) URL"
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return f"is not a valid URL ({exc})"
    if not parts.hostname:
        return "has no host"
    if port == 0:
        return "has port 0"
    return None


def _check_plain_url(r: _Reader, url: str, name: str, node: yaml.Node) -> None:
    parts = _URL.match(url)
    problem = url_problem(url)
    if parts is None or problem is not None:
        raise r.err(node, "", f"receiver {name!r}: {url!r} {problem}")
    if "@" in parts.group("netloc"):
        raise r.err(
            node, "",
            f"receiver {name!r}: the URL carries credentials; use url_env or url_file",
        )
    query = parts.group("query") or ""
    if query and _SECRET_WORDS.search(query):
        raise r.err(
            node, "",
            f"receiver {name!r}: the URL query looks like it carries a token; "
            "use url_env or url_file",
        )


def _parse_matchers(
    r: _Reader, node: yaml.Node, *, regex: bool
) -> dict[str, str] | dict[str, re.Pattern[str]]:
    items = r.mapping(node, where="'match_re'" if regex else "'match'")
    out: dict[str, object] = {}
    for key, (knode, vnode) in items.items():
        problem = attribute_problem(key)
        if problem is not None:
            raise r.err(knode, "", f"bad matcher: {problem}")
        if not isinstance(vnode, yaml.ScalarNode):
            raise r.err(vnode, "", f"bad matcher {key!r}: the value must be a string")
        value = str(vnode.value)
        problem = value_problem(key, value, regex=regex)
        if problem is not None:  # a typo that would route nothing
            raise r.err(vnode, "", f"bad matcher {key!r}: {problem}")
        if regex:
            try:
                out[key] = re.compile(value)
            except re.error as exc:
                raise r.err(
                    vnode, "", f"bad matcher {key!r}: invalid regex {value!r}: {exc}"
                ) from exc
        else:
            out[key] = value
    return out  # type: ignore[return-value]


def _parse_route(
    r: _Reader,
    node: yaml.Node,
    parent: str | None,
    receivers: Mapping[str, ReceiverSpec],
    *,
    is_root: bool = False,
) -> Route:
    items = r.mapping(node, allowed={"receiver", "match", "match_re", "continue", "group_by",
                                     "routes"}, where="a route")
    receiver = parent
    if "receiver" in items:
        vnode = items["receiver"][1]
        receiver = r.string(vnode, "receiver")
        if receiver not in receivers:
            raise r.err(
                vnode, "",
                f"unknown receiver {receiver!r} (declared: {', '.join(sorted(receivers))})",
            )
    if receiver is None:
        raise r.err(node, "", "the root route needs a 'receiver'")
    match = _parse_matchers(r, items["match"][1], regex=False) if "match" in items else {}
    match_re = _parse_matchers(r, items["match_re"][1], regex=True) if "match_re" in items else {}
    if is_root and (match or match_re):
        raise r.err(node, "", "the root route matches everything; put matchers on sub-routes")
    cont = r.boolean(items["continue"][1], "'continue'") if "continue" in items else False
    group_by = r.strings(items["group_by"][1], "'group_by'", non_empty=False) \
        if "group_by" in items else ()
    children = [_parse_route(r, c, receiver, receivers)
                for c in r.sequence(items["routes"][1], "'routes'")] if "routes" in items else []
    return Route(
        receiver=receiver,
        match=match,  # type: ignore[arg-type]
        match_re=match_re,  # type: ignore[arg-type]
        continue_=cont,
        group_by=group_by,
        routes=tuple(children),
        line=r.line(node),
    )


def unknown_owner_problems(text: str, source: str, teams: Collection[str]) -> list[str]:
    """Return ``file:line: ...`` for each ``owner`` matcher that names no team of ``teams``.

    The owner an alert carries is a team of the ownership file, so ``match: {owner:
    data-engineerin}`` (a typo) routes nothing, silently. ``pager --check`` runs this with
    the ownership file's teams.

    Args:
        text: The rules file's text (already valid: see :func:`parse_rules`).
        source: Its name, for the messages.
        teams: The teams the ownership file declares.

    Returns:
        One message per matcher that can match no team (empty when all can).

    """
    known = ", ".join(sorted(teams))
    out: list[str] = []

    def walk(node: yaml.Node) -> None:
        if isinstance(node, yaml.MappingNode):
            for knode, vnode in node.value:
                key = getattr(knode, "value", None)
                if key in ("match", "match_re") and isinstance(vnode, yaml.MappingNode):
                    for mk, mv in vnode.value:
                        if mk.value != "owner" or not isinstance(mv, yaml.ScalarNode):
                            continue
                        value = str(mv.value)
                        try:
                            hits = (any(re.fullmatch(value, t) for t in teams)
                                    if key == "match_re" else value in teams)
                        except re.error:
                            continue
                        if not hits:
                            out.append(f"{source}:{mv.start_mark.line + 1}: {key} owner "
                                       f"{value!r} names no team of the ownership file "
                                       f"({known}): the route would catch nothing")
                walk(vnode)
        elif isinstance(node, yaml.SequenceNode):
            for item in node.value:
                walk(item)

    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if root is not None:
        walk(root)
    return out
