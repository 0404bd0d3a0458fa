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
names the file, the line and the key (:mod:`runwatch.core.yamlconf` reads the
nodes).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from runwatch.core.signals.rules import REGISTERED, status_word
from runwatch.core.slo.burn import BurnTier, default_tiers
from runwatch.core.slo.timewin import Window, parse_cron
from runwatch.core.yamlconf import LONGEST_DURATION_MS, Reader, compose_all

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


_Reader = Reader[SloConfigError]
#: Reads one value: (reader, node, key) -> the parsed value, or the reader's error.
Parser = Callable[[_Reader, yaml.Node, str], Any]

_str: Parser = Reader.string
_duration: Parser = Reader.duration
_share: Parser = Reader.share
_bool: Parser = Reader.boolean
_positive_int: Parser = Reader.positive_int
_tz: Parser = Reader.timezone


def _window_ms(r: _Reader, node: yaml.Node, key: str) -> int:
    ms = r.duration(node, key)
    if ms > LONGEST_DURATION_MS:
        raise r.err(node, key, f"{node.value!r} is longer than ten years (3660d)")
    return ms


def _non_negative(r: _Reader, node: yaml.Node, key: str) -> float:
    return r.number(node, key, minimum=0.0)


def _status_words(r: _Reader, node: yaml.Node, key: str) -> tuple[str, ...]:
    """Registry statuses as the processor compares them (``Production`` -> ``production``)."""
    return tuple(status_word(x) for x in r.strings(node, key))


def _cron(r: _Reader, node: yaml.Node, key: str) -> Any:
    return r.parsed(node, key, parse_cron)


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
        "statuses": ("statuses", _status_words, tuple(sorted(REGISTERED))),
    },
    "resumability": {
        "family": ("family", _str, None),
        "maxLoss": ("max_loss_ms", _duration, REQUIRED),
    },
    "reproducibility": {
        "family": ("family", _str, REQUIRED),
        "metric": ("metric", _str, REQUIRED),
        "tolerance": ("tolerance", _non_negative, REQUIRED),
        "relative": ("relative", _bool, False),
        "minRepeats": ("min_repeats", _positive_int, 2),
    },
    "fairness": {
        "team": ("team", _str, REQUIRED),
        "quota": ("quota", _share, REQUIRED),
        "bucket": ("bucket_ms", _duration, 86_400_000),
    },
}


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
    r = Reader(source, SloConfigError)
    out: list[Objective] = []
    seen: dict[str, str] = {}  # name -> source:line of its metadata.name
    for node in compose_all(text, source, SloConfigError):
        obj, name_at = _objective(node, r)
        if obj.name in seen:
            msg = f"{name_at}: metadata.name: {obj.name!r} is already defined at {seen[obj.name]}"
            raise SloConfigError(msg)
        seen[obj.name] = name_at
        out.append(obj)
    if not out:
        msg = f"{source}:1: the file defines no SLO"
        raise SloConfigError(msg)
    return out


def _objective(node: yaml.Node, r: _Reader) -> tuple[Objective, str]:
    """Return the document's objective and ``source:line`` of its ``metadata.name``."""
    top = r.mapping(node, "document", {"apiVersion", "kind", "metadata", "spec"})
    api = r.string(r.need(top, "apiVersion", node), "apiVersion")
    if api != "openslo/v1":
        raise r.err(top["apiVersion"][1], "apiVersion", f"{api!r}: only 'openslo/v1' is read")
    kind = r.string(r.need(top, "kind", node), "kind")
    if kind != "SLO":
        raise r.err(top["kind"][1], "kind", f"{kind!r}: only 'SLO' documents are read")
    meta_node = r.need(top, "metadata", node)
    meta = r.mapping(meta_node, "metadata", {"name", "displayName", "labels", "annotations"})
    name = r.string(r.need(meta, "name", meta_node, "metadata"), "metadata.name")
    if not _NAME.match(name):
        raise r.err(meta["name"][1], "metadata.name",
                    f"{name!r}: use lowercase letters, digits, '.', '_' and '-' (at most 64)")
    display = r.string(meta["displayName"][1], "metadata.displayName") \
        if "displayName" in meta else ""
    spec_node = r.need(top, "spec", node)
    spec = r.mapping(spec_node, "spec", {
        "description", "service", "owner", "indicator", "timeWindow", "budgetingMethod",
        "objectives", "alertPolicy"})
    description = r.string(spec["description"][1], "spec.description") \
        if "description" in spec else ""
    owner = r.string(spec["owner"][1], "spec.owner") if "owner" in spec else None
    if "budgetingMethod" in spec:
        method = r.string(spec["budgetingMethod"][1], "spec.budgetingMethod")
        if method != "Occurrences":
            raise r.err(spec["budgetingMethod"][1], "spec.budgetingMethod",
                        f"{method!r}: runwatch budgets by Occurrences (events) only")
    ind_kind, params = _indicator(r.need(spec, "indicator", spec_node, "spec"), r)
    target = _target(r.need(spec, "objectives", spec_node, "spec"), r)
    window = _window(r.need(spec, "timeWindow", spec_node, "spec"), r)
    alerting = _alerting(spec["alertPolicy"][1], r) if "alertPolicy" in spec else AlertSettings()
    return Objective(name=name, kind=ind_kind, params=params, target=target, window=window,
                     display_name=display, description=description, owner=owner,
                     alerting=alerting, source=r.at(node)), r.at(meta["name"][1])


def _indicator(node: yaml.Node, r: _Reader) -> tuple[str, dict[str, Any]]:
    ind = r.mapping(node, "spec.indicator", {"metadata", "spec"})
    if "metadata" in ind:
        r.mapping(ind["metadata"][1], "spec.indicator.metadata", {"name", "displayName"})
    spec_node = r.need(ind, "spec", node, "spec.indicator")
    where = "spec.indicator.spec"
    items = r.mapping(spec_node, where)
    kind = r.string(r.need(items, "kind", spec_node, where), f"{where}.kind")
    if kind not in KINDS:
        raise r.err(items["kind"][1], f"{where}.kind",
                    f"unknown indicator kind {kind!r} (one of {', '.join(KINDS)})")
    table = KINDS[kind]
    params: dict[str, Any] = {}
    for key, (knode, vnode) in items.items():
        if key == "kind":
            continue
        if key not in table:
            raise r.err(knode, f"{where}.{key}",
                        f"unknown key for kind {kind} (known: {', '.join(table)})")
        pname, parse, _default = table[key]
        params[pname] = parse(r, vnode, f"{where}.{key}")
    for key, (pname, _parse, default) in table.items():
        if pname in params:
            continue
        if default is REQUIRED:
            raise r.err(spec_node, where, f"kind {kind} needs {key!r}")
        params[pname] = default
    if kind == "training_window" and params["max_duration_ms"] is None \
            and params["deadline"] is None:
        raise r.err(spec_node, where, "kind training_window needs 'maxDuration' or 'deadline'")
    return kind, params


def _target(node: yaml.Node, r: _Reader) -> float:
    if not isinstance(node, yaml.SequenceNode) or len(node.value) != 1:
        raise r.err(node, "spec.objectives", "give exactly one objective (a list of one)")
    item = node.value[0]
    where = "spec.objectives[0]"
    obj = r.mapping(item, where, {"displayName", "target", "op", "value"})
    target = r.number(r.need(obj, "target", item, where), f"{where}.target")
    if not 0.0 < target <= 1.0:
        raise r.err(obj["target"][1], f"{where}.target",
                    f"{target}: a target is a ratio in (0, 1], e.g. 0.95")
    return target


def _window(node: yaml.Node, r: _Reader) -> Window:
    if not isinstance(node, yaml.SequenceNode) or len(node.value) != 1:
        raise r.err(node, "spec.timeWindow", "give exactly one time window (a list of one)")
    item = node.value[0]
    where = "spec.timeWindow[0]"
    w = r.mapping(item, where, {"duration", "isRolling", "calendar"})
    duration = r.need(w, "duration", item, where)
    rolling = r.boolean(w["isRolling"][1], f"{where}.isRolling") if "isRolling" in w else True
    if rolling:
        return Window(_window_ms(r, duration, f"{where}.duration"))
    text = r.string(duration, f"{where}.duration")
    periods = {"1d": "day", "1w": "week", "1M": "month"}
    if text not in periods:
        raise r.err(duration, f"{where}.duration", f"{text!r}: a calendar window is 1d, 1w or 1M")
    tz = "UTC"
    if "calendar" in w:
        cal = r.mapping(w["calendar"][1], f"{where}.calendar", {"startTime", "timeZone"})
        if "timeZone" in cal:
            tz = r.timezone(cal["timeZone"][1], f"{where}.calendar.timeZone")
    return Window(0, periods[text], tz)


def _alerting(node: yaml.Node, r: _Reader) -> AlertSettings:
    where = "spec.alertPolicy"
    a = r.mapping(node, where, {"burnRates", "minEvents", "budgetExhausted", "nextBadExhausts"})
    tiers = _tiers(a["burnRates"][1], r) if "burnRates" in a else default_tiers()
    min_events = r.positive_int(a["minEvents"][1], f"{where}.minEvents") \
        if "minEvents" in a else 10
    exh = r.boolean(a["budgetExhausted"][1], f"{where}.budgetExhausted") \
        if "budgetExhausted" in a else True
    nxt = r.boolean(a["nextBadExhausts"][1], f"{where}.nextBadExhausts") \
        if "nextBadExhausts" in a else True
    return AlertSettings(tiers, min_events, exh, nxt)


def _tiers(node: yaml.Node, r: _Reader) -> tuple[BurnTier, ...]:
    where = "spec.alertPolicy.burnRates"
    if not isinstance(node, yaml.SequenceNode):
        raise r.err(node, where, "expected a list of {budget, longWindow, shortWindow, severity}")
    out = []
    for i, item in enumerate(node.value):
        at = f"{where}[{i}]"
        t = r.mapping(item, at, {"budget", "longWindow", "shortWindow", "severity"})
        budget = r.need(t, "budget", item, at)
        share = r.share(budget, f"{at}.budget")
        if share <= 0:  # its rate would be 0: it fired on every window of good events
            raise r.err(budget, f"{at}.budget",
                        f"must be a share of the budget above 0 (e.g. 0.05), got {budget.value!r}")
        long_ms = _window_ms(r, r.need(t, "longWindow", item, at), f"{at}.longWindow")
        short_ms = _window_ms(r, t["shortWindow"][1], f"{at}.shortWindow") \
            if "shortWindow" in t else long_ms // 12
        sev = r.string(t["severity"][1], f"{at}.severity") if "severity" in t else "critical"
        if sev not in ("info", "warning", "critical"):
            raise r.err(t["severity"][1], f"{at}.severity", f"{sev!r}: info, warning or critical")
        if short_ms > long_ms:
            raise r.err(item, at, "shortWindow must not be longer than longWindow")
        out.append(BurnTier(share, long_ms, short_ms, sev))  # type: ignore[arg-type]
    return tuple(out)
