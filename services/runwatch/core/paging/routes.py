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
pager. Every error names the file and line of the offending node.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import yaml

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
_DURATION = re.compile(r"^(\d+)(ms|s|m|h|d)$")
_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
DEFAULT_REPEAT_MS = 4 * 3_600_000


class RulesError(ValueError):
    """A rules file is invalid; the message names the file and line."""


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


def parse_duration_ms(text: str) -> int:
    """Parse ``90s``, ``15m``, ``2h``, ``1d``, ``500ms`` into milliseconds.

    Args:
        text: The duration.

    Returns:
        Milliseconds.

    Raises:
        ValueError: When the text is not a duration.

    """
    m = _DURATION.match(text.strip())
    if not m:
        msg = f"bad duration {text!r} (use e.g. 30s, 15m, 2h, 1d)"
        raise ValueError(msg)
    return int(m.group(1)) * _UNITS_MS[m.group(2)]


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
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        msg = f"{source}: invalid YAML: {exc}"
        raise RulesError(msg) from exc
    if not isinstance(root, yaml.MappingNode):
        msg = f"{source}:1: the rules file must be a mapping with 'receivers' and 'route'"
        raise RulesError(msg)
    top = _mapping(root, source)
    _only(top, {"receivers", "route"}, source, "top level")
    if "receivers" not in top or "route" not in top:
        msg = f"{source}:{_line(root)}: the rules file needs both 'receivers' and 'route'"
        raise RulesError(msg)
    receivers = _parse_receivers(top["receivers"][1], source)
    route = _parse_route(top["route"][1], source, None, receivers, is_root=True)
    return Rules(receivers=receivers, route=route)


def _line(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1


def _err(source: str, node: yaml.Node, text: str) -> RulesError:
    return RulesError(f"{source}:{_line(node)}: {text}")


def _mapping(node: yaml.Node, source: str) -> dict[str, tuple[yaml.Node, yaml.Node]]:
    if not isinstance(node, yaml.MappingNode):
        raise _err(source, node, "expected a mapping")
    out: dict[str, tuple[yaml.Node, yaml.Node]] = {}
    for key, value in node.value:
        if not isinstance(key, yaml.ScalarNode):
            raise _err(source, key, "keys must be plain strings")
        if key.value in out:
            raise _err(source, key, f"duplicate key {key.value!r}")
        out[str(key.value)] = (key, value)
    return out


def _only(
    items: Mapping[str, tuple[yaml.Node, yaml.Node]], allowed: set[str], source: str, where: str
) -> None:
    for name, (key, _) in items.items():
        if name not in allowed:
            raise _err(source, key, f"unknown key {name!r} in {where}")


def _scalar(node: yaml.Node, source: str, what: str) -> str:
    if not isinstance(node, yaml.ScalarNode) or node.value == "":
        raise _err(source, node, f"{what} must be a non-empty string")
    return str(node.value)


def _parse_receivers(node: yaml.Node, source: str) -> dict[str, ReceiverSpec]:
    if not isinstance(node, yaml.SequenceNode):
        raise _err(source, node, "'receivers' must be a list")
    out: dict[str, ReceiverSpec] = {}
    for item in node.value:
        spec = _parse_receiver(item, source)
        if spec.name in out:
            raise _err(source, item, f"duplicate receiver name {spec.name!r}")
        out[spec.name] = spec
    if not out:
        raise _err(source, node, "at least one receiver is needed")
    return out


def _parse_receiver(node: yaml.Node, source: str) -> ReceiverSpec:
    items = _mapping(node, source)
    if "name" not in items or "kind" not in items:
        raise _err(source, node, "a receiver needs 'name' and 'kind'")
    name = _scalar(items["name"][1], source, "receiver name")
    kind = _scalar(items["kind"][1], source, "receiver kind")
    if kind not in RECEIVER_KINDS:
        raise _err(
            source, items["kind"][1], f"receiver {name!r}: unknown kind {kind!r} "
            f"(one of {', '.join(RECEIVER_KINDS)})"
        )
    repeat_ms = DEFAULT_REPEAT_MS
    settings: dict[str, ValueRef] = {}
    secrets = SECRET_FIELDS[kind]
    allowed = secrets | PLAIN_FIELDS
    for key, (knode, vnode) in items.items():
        if key in ("name", "kind"):
            continue
        if key == "repeat_interval":
            try:
                repeat_ms = parse_duration_ms(_scalar(vnode, source, "repeat_interval"))
            except ValueError as exc:
                raise _err(source, vnode, f"receiver {name!r}: {exc}") from exc
            continue
        base, _, suffix = key.rpartition("_")
        if suffix in ("env", "file") and base in allowed:
            if base in settings:
                raise _err(source, knode, f"receiver {name!r}: {base!r} given twice")
            settings[base] = ValueRef(suffix, _scalar(vnode, source, key))  # type: ignore[arg-type]
            continue
        if key in secrets:
            raise _err(
                source, knode,
                f"receiver {name!r}: literal secret {key!r} is not allowed in the rules file; "
                f"use {key}_env: VAR or {key}_file: /path",
            )
        if key in PLAIN_FIELDS:
            url = _scalar(vnode, source, key)
            _check_plain_url(url, name, source, vnode)
            settings[key] = ValueRef("literal", url)
            continue
        raise _err(source, knode, f"receiver {name!r} ({kind}): unknown setting {key!r}")
    missing = sorted(REQUIRED_FIELDS[kind] - settings.keys())
    if missing:
        raise _err(
            source, node,
            f"receiver {name!r} ({kind}) needs {', '.join(missing)} "
            "(as <field>_env or <field>_file)",
        )
    return ReceiverSpec(name, kind, repeat_ms, settings, _line(node))  # type: ignore[arg-type]


def _check_plain_url(url: str, name: str, source: str, node: yaml.Node) -> None:
    parts = _URL.match(url)
    if parts is None:
        raise _err(source, node, f"receiver {name!r}: {url!r} is not an http(s) URL")
    if "@" in parts.group("netloc"):
        raise _err(
            source, node,
            f"receiver {name!r}: the URL carries credentials; use url_env or url_file",
        )
    query = parts.group("query") or ""
    if query and _SECRET_WORDS.search(query):
        raise _err(
            source, node,
            f"receiver {name!r}: the URL query looks like it carries a token; "
            "use url_env or url_file",
        )


def _parse_matchers(
    node: yaml.Node, source: str, *, regex: bool
) -> dict[str, str] | dict[str, re.Pattern[str]]:
    items = _mapping(node, source)
    out: dict[str, object] = {}
    for key, (knode, vnode) in items.items():
        if key not in MATCH_KEYS and not (key.startswith("labels.") and len(key) > 7):
            raise _err(
                source, knode,
                f"bad matcher: unknown attribute {key!r} "
                f"(use one of {', '.join(sorted(MATCH_KEYS))} or labels.<name>)",
            )
        if not isinstance(vnode, yaml.ScalarNode):
            raise _err(source, vnode, f"bad matcher {key!r}: the value must be a string")
        value = str(vnode.value)
        if regex:
            try:
                out[key] = re.compile(value)
            except re.error as exc:
                raise _err(
                    source, vnode, f"bad matcher {key!r}: invalid regex {value!r}: {exc}"
                ) from exc
        else:
            out[key] = value
    return out  # type: ignore[return-value]


def _parse_route(
    node: yaml.Node,
    source: str,
    parent: str | None,
    receivers: Mapping[str, ReceiverSpec],
    *,
    is_root: bool = False,
) -> Route:
    items = _mapping(node, source)
    _only(items, {"receiver", "match", "match_re", "continue", "group_by", "routes"}, source,
          "a route")
    receiver = parent
    if "receiver" in items:
        vnode = items["receiver"][1]
        receiver = _scalar(vnode, source, "receiver")
        if receiver not in receivers:
            raise _err(
                source, vnode,
                f"unknown receiver {receiver!r} (declared: {', '.join(sorted(receivers))})",
            )
    if receiver is None:
        raise _err(source, node, "the root route needs a 'receiver'")
    match = _parse_matchers(items["match"][1], source, regex=False) if "match" in items else {}
    match_re = (
        _parse_matchers(items["match_re"][1], source, regex=True) if "match_re" in items else {}
    )
    if is_root and (match or match_re):
        raise _err(source, node, "the root route matches everything; put matchers on sub-routes")
    cont = False
    if "continue" in items:
        vnode = items["continue"][1]
        text = _scalar(vnode, source, "continue").lower()
        if text not in ("true", "false"):
            raise _err(source, vnode, "'continue' must be true or false")
        cont = text == "true"
    group_by: tuple[str, ...] = ()
    if "group_by" in items:
        gnode = items["group_by"][1]
        if not isinstance(gnode, yaml.SequenceNode):
            raise _err(source, gnode, "'group_by' must be a list")
        group_by = tuple(_scalar(g, source, "group_by entry") for g in gnode.value)
    children: list[Route] = []
    if "routes" in items:
        rnode = items["routes"][1]
        if not isinstance(rnode, yaml.SequenceNode):
            raise _err(source, rnode, "'routes' must be a list")
        children = [_parse_route(c, source, receiver, receivers) for c in rnode.value]
    return Route(
        receiver=receiver,
        match=match,  # type: ignore[arg-type]
        match_re=match_re,  # type: ignore[arg-type]
        continue_=cont,
        group_by=group_by,
        routes=tuple(children),
        line=_line(node),
    )
