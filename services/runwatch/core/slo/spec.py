"""``slos.yaml``: objectives as code, in the OpenSLO v1 shape where it fits (parse, validate).

Size: one file format: its parsing and its validation with file/line/key errors, per kind.

The file holds one or more YAML documents (``---`` between them), each an
OpenSLO v1 ``SLO``::

    apiVersion: openslo/v1
    kind: SLO
    metadata: {name: llm-pretrain-window, displayName: ...}
    spec:
      description: ...
      owner: foundation                  # runwatch: the team the alert is routed to
      indicator:
        metadata: {name: training-window}
        spec: {kind: training_window, family: llm-pretrain, maxDuration: 2h}
      timeWindow: [{duration: 30d, isRolling: true}]
      budgetingMethod: Occurrences
      objectives: [{target: 0.95}]
      alertPolicy: {minEvents: 10}       # runwatch: burn-rate tiers, budget conditions

Where runwatch departs from OpenSLO: the indicator's ``spec`` names a built-in
runwatch indicator ``kind`` with its parameters instead of ``ratioMetric``
queries; ``alertPolicy`` is inline (OpenSLO refers to separate AlertPolicy
objects); one objective per SLO; only ``Occurrences`` budgeting. Every error
names the file, the line and the key.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from runwatch.core.paging.routes import parse_duration_ms
from runwatch.core.signals.rules import REGISTERED
from runwatch.core.slo.burn import BurnTier, default_tiers
from runwatch.core.slo.timewin import Window, parse_cron, zone

_NAME = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,62}[a-z0-9])?$")


class SloConfigError(ValueError):
    """An SLO file is invalid; the message names the file, line and key."""


@dataclass(frozen=True, slots=True)
class AlertSettings:
    """How an objective alerts.

    Attributes:
        tiers: Multi-window burn-rate tiers.
        min_events: Events a tier's long window needs before its burn rate counts.
        budget_exhausted: Alert when the budget is spent (the SLI is below target).
        next_bad_exhausts: Alert when one more bad event would spend it.

    """

    tiers: tuple[BurnTier, ...] = field(default_factory=default_tiers)
    min_events: int = 10
    budget_exhausted: bool = True
    next_bad_exhausts: bool = True


@dataclass(frozen=True, slots=True)
class Objective:
    """One validated objective.

    Attributes:
        name: ``metadata.name`` (the alert's detector is ``slo:<name>``).
        kind: The indicator kind.
        params: The kind's parameters, parsed (durations in ms, cutoffs as Cron).
        target: The objective, in (0, 1].
        window: The time window.
        display_name: ``metadata.displayName``.
        description: ``spec.description``.
        owner: The owning team.
        alerting: Alert settings.
        source: ``file:line`` of the document.

    """

    name: str
    kind: str
    params: Mapping[str, Any]
    target: float
    window: Window
    display_name: str = ""
    description: str = ""
    owner: str | None = None
    alerting: AlertSettings = field(default_factory=AlertSettings)
    source: str = ""


Parser = Callable[[Any], Any]


def _str(v: Any) -> str:
    if not isinstance(v, str) or not v:
        msg = "must be a non-empty string"
        raise ValueError(msg)
    return v


def _duration(v: Any) -> int:
    ms = parse_duration_ms(_str(v))
    if ms <= 0:
        msg = "must be a positive duration"
        raise ValueError(msg)
    return ms


def _number(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        msg = "must be a number"
        raise ValueError(msg)
    return float(v)


def _share(v: Any) -> float:
    x = _number(v)
    if not 0.0 <= x <= 1.0:
        msg = "must be between 0 and 1"
        raise ValueError(msg)
    return x


def _bool(v: Any) -> bool:
    if not isinstance(v, bool):
        msg = "must be true or false"
        raise ValueError(msg)
    return v


def _strings(v: Any) -> tuple[str, ...]:
    if not isinstance(v, list) or not v:
        msg = "must be a non-empty list of strings"
        raise ValueError(msg)
    return tuple(_str(x) for x in v)


def _lower_strings(v: Any) -> tuple[str, ...]:
    return tuple(x.lower() for x in _strings(v))


def _positive_int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        msg = "must be a positive integer"
        raise ValueError(msg)
    return v


def _tz(v: Any) -> str:
    zone(_str(v))
    return str(v)


def _cron(v: Any) -> Any:
    return parse_cron(_str(v))


# kind -> {yaml key: (param name, parser, default; REQUIRED when it must be given)}
REQUIRED = object()
KINDS: dict[str, dict[str, tuple[str, Parser, Any]]] = {
    "data_availability": {
        "dataset": ("dataset", _str, REQUIRED),
        "versionPattern": ("version_pattern", _str, "*"),
        "cutoff": ("cutoff", _cron, REQUIRED),
        "timeZone": ("tz", _tz, "UTC"),
        "lookback": ("lookback_ms", _duration, None),
    },
    "training_window": {
        "family": ("family", _str, REQUIRED),
        "maxDuration": ("max_duration_ms", _duration, None),
        "deadline": ("deadline", _cron, None),
        "timeZone": ("tz", _tz, "UTC"),
    },
    "evaluation_retained": {
        "family": ("family", _str, REQUIRED),
        "grace": ("grace_ms", _duration, 3_600_000),
        "requireValidation": ("require_validation", _bool, True),
        "requireGate": ("require_gate", _bool, True),
    },
    "registry_control": {
        "family": ("family", _str, None),
        "statuses": ("statuses", _lower_strings, tuple(sorted(REGISTERED))),
    },
    "resumability": {
        "family": ("family", _str, None),
        "maxLoss": ("max_loss_ms", _duration, REQUIRED),
    },
    "reproducibility": {
        "family": ("family", _str, REQUIRED),
        "metric": ("metric", _str, REQUIRED),
        "tolerance": ("tolerance", _number, REQUIRED),
        "relative": ("relative", _bool, False),
        "minRepeats": ("min_repeats", _positive_int, 2),
    },
    "fairness": {
        "team": ("team", _str, REQUIRED),
        "quota": ("quota", _share, REQUIRED),
        "bucket": ("bucket_ms", _duration, 86_400_000),
    },
}


class _Doc:
    """Error helpers for one document of one file."""

    def __init__(self, source: str) -> None:
        self.source = source

    def err(self, node: yaml.Node, key: str, text: str) -> SloConfigError:
        return SloConfigError(f"{self.source}:{node.start_mark.line + 1}: {key}: {text}")

    def mapping(self, node: yaml.Node, key: str,
                allowed: set[str] | None = None) -> dict[str, tuple[yaml.Node, yaml.Node]]:
        if not isinstance(node, yaml.MappingNode):
            raise self.err(node, key, "expected a mapping")
        out: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        for k, v in node.value:
            if not isinstance(k, yaml.ScalarNode):
                raise self.err(k, key, "keys must be plain strings")
            if k.value in out:
                raise self.err(k, f"{key}.{k.value}", "duplicate key")
            if allowed is not None and k.value not in allowed:
                raise self.err(k, f"{key}.{k.value}", "unknown key (known: "
                               f"{', '.join(sorted(allowed))})")
            out[str(k.value)] = (k, v)
        return out

    def need(self, items: Mapping[str, tuple[yaml.Node, yaml.Node]], name: str,
             parent: yaml.Node, key: str) -> yaml.Node:
        if name not in items:
            raise self.err(parent, key, f"missing key {name!r}")
        return items[name][1]

    def value(self, node: yaml.Node, key: str, parse: Parser) -> Any:
        try:
            return parse(yaml.safe_load(yaml.serialize(node)))
        except (ValueError, yaml.YAMLError) as exc:
            raise self.err(node, key, str(exc)) from exc


def parse_slos(text: str, source: str = "<slos>") -> list[Objective]:
    """Parse and validate an SLO file.

    Args:
        text: The YAML text (one or more documents).
        source: File name for the error messages.

    Returns:
        The objectives, in file order.

    Raises:
        SloConfigError: On any problem, naming ``source:line`` and the key.

    """
    try:
        docs = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError as exc:
        msg = f"{source}: invalid YAML: {exc}"
        raise SloConfigError(msg) from exc
    out: list[Objective] = []
    seen: dict[str, str] = {}
    for node in docs:
        if node is None:
            continue
        obj = _objective(node, _Doc(source))
        if obj.name in seen:
            msg = (f"{obj.source}: metadata.name: {obj.name!r} is already defined at "
                   f"{seen[obj.name]}")
            raise SloConfigError(msg)
        seen[obj.name] = obj.source
        out.append(obj)
    if not out:
        msg = f"{source}:1: the file defines no SLO"
        raise SloConfigError(msg)
    return out


def _objective(node: yaml.Node, d: _Doc) -> Objective:
    top = d.mapping(node, "document", {"apiVersion", "kind", "metadata", "spec"})
    api = d.value(d.need(top, "apiVersion", node, "document"), "apiVersion", _str)
    if api != "openslo/v1":
        raise d.err(top["apiVersion"][1], "apiVersion", f"{api!r}: only 'openslo/v1' is read")
    kind = d.value(d.need(top, "kind", node, "document"), "kind", _str)
    if kind != "SLO":
        raise d.err(top["kind"][1], "kind", f"{kind!r}: only 'SLO' documents are read")
    meta_node = d.need(top, "metadata", node, "document")
    meta = d.mapping(meta_node, "metadata", {"name", "displayName", "labels", "annotations"})
    name = d.value(d.need(meta, "name", meta_node, "metadata"), "metadata.name", _str)
    if not _NAME.match(name):
        raise d.err(meta["name"][1], "metadata.name",
                    f"{name!r}: use lowercase letters, digits, '.', '_' and '-' (at most 64)")
    display = d.value(meta["displayName"][1], "metadata.displayName", _str) \
        if "displayName" in meta else ""
    spec_node = d.need(top, "spec", node, "document")
    spec = d.mapping(spec_node, "spec", {
        "description", "service", "owner", "indicator", "timeWindow", "budgetingMethod",
        "objectives", "alertPolicy"})
    description = d.value(spec["description"][1], "spec.description", _str) \
        if "description" in spec else ""
    owner = d.value(spec["owner"][1], "spec.owner", _str) if "owner" in spec else None
    if "budgetingMethod" in spec:
        method = d.value(spec["budgetingMethod"][1], "spec.budgetingMethod", _str)
        if method != "Occurrences":
            raise d.err(spec["budgetingMethod"][1], "spec.budgetingMethod",
                        f"{method!r}: runwatch budgets by Occurrences (events) only")
    ind_kind, params = _indicator(d.need(spec, "indicator", spec_node, "spec"), d)
    target = _target(d.need(spec, "objectives", spec_node, "spec"), d)
    window = _window(d.need(spec, "timeWindow", spec_node, "spec"), d)
    alerting = _alerting(spec["alertPolicy"][1], d) if "alertPolicy" in spec else AlertSettings()
    return Objective(name=name, kind=ind_kind, params=params, target=target, window=window,
                     display_name=display, description=description, owner=owner,
                     alerting=alerting, source=f"{d.source}:{node.start_mark.line + 1}")


def _indicator(node: yaml.Node, d: _Doc) -> tuple[str, dict[str, Any]]:
    ind = d.mapping(node, "spec.indicator", {"metadata", "spec"})
    if "metadata" in ind:
        d.mapping(ind["metadata"][1], "spec.indicator.metadata", {"name", "displayName"})
    spec_node = d.need(ind, "spec", node, "spec.indicator")
    where = "spec.indicator.spec"
    items = d.mapping(spec_node, where)
    kind = d.value(d.need(items, "kind", spec_node, where), f"{where}.kind", _str)
    if kind not in KINDS:
        raise d.err(items["kind"][1], f"{where}.kind",
                    f"unknown indicator kind {kind!r} (one of {', '.join(KINDS)})")
    table = KINDS[kind]
    params: dict[str, Any] = {}
    for key, (knode, vnode) in items.items():
        if key == "kind":
            continue
        if key not in table:
            raise d.err(knode, f"{where}.{key}",
                        f"unknown key for kind {kind} (known: {', '.join(table)})")
        pname, parse, _default = table[key]
        params[pname] = d.value(vnode, f"{where}.{key}", parse)
    for key, (pname, _parse, default) in table.items():
        if pname in params:
            continue
        if default is REQUIRED:
            raise d.err(spec_node, where, f"kind {kind} needs {key!r}")
        params[pname] = default
    if kind == "training_window" and params["max_duration_ms"] is None \
            and params["deadline"] is None:
        raise d.err(spec_node, where, "kind training_window needs 'maxDuration' or 'deadline'")
    return kind, params


def _target(node: yaml.Node, d: _Doc) -> float:
    if not isinstance(node, yaml.SequenceNode) or len(node.value) != 1:
        raise d.err(node, "spec.objectives", "give exactly one objective (a list of one)")
    item = node.value[0]
    obj = d.mapping(item, "spec.objectives[0]", {"displayName", "target", "op", "value"})
    target = d.value(d.need(obj, "target", item, "spec.objectives[0]"),
                     "spec.objectives[0].target", _number)
    if not 0.0 < target <= 1.0:
        raise d.err(obj["target"][1], "spec.objectives[0].target",
                    f"{target}: a target is a ratio in (0, 1], e.g. 0.95")
    return target


def _window(node: yaml.Node, d: _Doc) -> Window:
    if not isinstance(node, yaml.SequenceNode) or len(node.value) != 1:
        raise d.err(node, "spec.timeWindow", "give exactly one time window (a list of one)")
    item = node.value[0]
    where = "spec.timeWindow[0]"
    w = d.mapping(item, where, {"duration", "isRolling", "calendar"})
    text = d.value(d.need(w, "duration", item, where), f"{where}.duration", _str)
    rolling = d.value(w["isRolling"][1], f"{where}.isRolling", _bool) if "isRolling" in w else True
    if rolling:
        try:
            return Window(_duration(text))
        except ValueError as exc:
            raise d.err(w["duration"][1], f"{where}.duration", str(exc)) from exc
    periods = {"1d": "day", "1w": "week", "1M": "month"}
    if text not in periods:
        raise d.err(w["duration"][1], f"{where}.duration",
                    f"{text!r}: a calendar window is 1d, 1w or 1M")
    tz = "UTC"
    if "calendar" in w:
        cal = d.mapping(w["calendar"][1], f"{where}.calendar", {"startTime", "timeZone"})
        if "timeZone" in cal:
            tz = d.value(cal["timeZone"][1], f"{where}.calendar.timeZone", _tz)
    return Window(0, periods[text], tz)


def _alerting(node: yaml.Node, d: _Doc) -> AlertSettings:
    where = "spec.alertPolicy"
    a = d.mapping(node, where, {"burnRates", "minEvents", "budgetExhausted", "nextBadExhausts"})
    tiers = default_tiers()
    if "burnRates" in a:
        tiers = _tiers(a["burnRates"][1], d)
    min_events = d.value(a["minEvents"][1], f"{where}.minEvents", _positive_int) \
        if "minEvents" in a else 10
    exh = d.value(a["budgetExhausted"][1], f"{where}.budgetExhausted", _bool) \
        if "budgetExhausted" in a else True
    nxt = d.value(a["nextBadExhausts"][1], f"{where}.nextBadExhausts", _bool) \
        if "nextBadExhausts" in a else True
    return AlertSettings(tiers, min_events, exh, nxt)


def _tiers(node: yaml.Node, d: _Doc) -> tuple[BurnTier, ...]:
    where = "spec.alertPolicy.burnRates"
    if not isinstance(node, yaml.SequenceNode):
        raise d.err(node, where, "expected a list of {budget, longWindow, shortWindow, severity}")
    out = []
    for i, item in enumerate(node.value):
        at = f"{where}[{i}]"
        t = d.mapping(item, at, {"budget", "longWindow", "shortWindow", "severity"})
        share = d.value(d.need(t, "budget", item, at), f"{at}.budget", _share)
        long_ms = d.value(d.need(t, "longWindow", item, at), f"{at}.longWindow", _duration)
        short_ms = d.value(t["shortWindow"][1], f"{at}.shortWindow", _duration) \
            if "shortWindow" in t else long_ms // 12
        sev = d.value(t["severity"][1], f"{at}.severity", _str) if "severity" in t else "critical"
        if sev not in ("info", "warning", "critical"):
            raise d.err(t["severity"][1], f"{at}.severity", f"{sev!r}: info, warning or critical")
        if short_ms > long_ms:
            raise d.err(item, at, "shortWindow must not be longer than longWindow")
        out.append(BurnTier(share, long_ms, short_ms, sev))  # type: ignore[arg-type]
    return tuple(out)
