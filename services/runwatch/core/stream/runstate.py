"""Per-run state and the join: ``step(state, event, now_ms) -> (state, outputs)``.

Size: the run state's fields and their JSON round trip: one contract with the changelog.

One :class:`RunState` holds everything the processor knows about a run: job
state and attempts, allocation, recent step timings, indicator watches, last
checkpoint, validation history, dataset refs and data-quality snapshot,
evidence and the alert book. It round-trips through JSON
(:func:`dumps` / :func:`loads`), never pickle. Handlers for each record type
live in :mod:`runwatch.core.joins`-style private functions below; outputs are
Alert and DeadLetter records.
"""

from __future__ import annotations

import json
import math
import uuid
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any

from runwatch.core.detect import HalfSpaceTreesDetector
from runwatch.core.jsontext import compact, parse
from runwatch.core.paging import lifecycle as alerting
from runwatch.core.paging.lifecycle import AlertBook, AlertContext, AlertPolicy
from runwatch.core.records import Alert, DeadLetter, Source
from runwatch.core.signals.cause import THROUGHPUT_SYMPTOMS, classify
from runwatch.core.signals.indwatch import (
    ALERTING_WATCHES,
    WATCH_SIGNAL,
    IndicatorWatch,
    Reading,
    default_specs,
)
from runwatch.core.signals.rules import SCHEMA_FAIL_SHARE, Finding, ImageMissing
from runwatch.core.signals.workload import RunningStats, WatchSpec, workload_key

Output = Alert | DeadLetter
_NS = uuid.UUID("0b7f6a52-51c3-4c1e-a0a4-3d1f7e2b9c10")


@dataclass(frozen=True, slots=True)
class RunConfig:
    """Processor knobs that the run state needs (all times in ms).

    Attributes:
        source: The processor's Source stamped on outputs.
        lateness_ms: How far behind the run's watermark an event may arrive.
        hold_ms: How long events of an unseen run are held before dead-lettering.
        hold_max: Most events held per unseen run.
        image_allow_list: Allowed image prefixes (empty = rule off).
        image_missing: With an allow-list, what a run without an image gets:
            ``allow`` (nothing), ``warn`` (a warning alert) or ``deny`` (critical).
        required_gates: Gates (safety tests, evaluations) a model must have passed
            before it is registered or promoted (empty = rule off).
        registry_control: Alert (``rule:registry_without_gate``) when an artifact is
            registered without a passing or approved gate decision for its run.
        gate_wait_ms: How long (processing time) a registration waits for its run's
            gate decision before registry control fires (0: at once).
        stall_k: Stall bound in median step times.
        stall_min_ms: Floor on the stall bound.
        data_wait_ms: How long a manifest dataset may go without a data report.
        window_ms: Evidence correlation window.
        restart_alert: Restarts at which the restart count alerts on its own.
        label_shift: Label-balance distance counted as a shift.
        schema_fail_share: Share of a report's rows that may fail the schema
            before ``rule:schema_failures`` fires (:data:`rules.SCHEMA_FAIL_SHARE`).
        val_decline_abs: Absolute validation decline from the best that counts, for a rate
            (an accuracy, an error rate); a loss is judged relatively (``on_loss_scale``).
        val_decline_rel: Relative validation decline from the best that counts.
        val_persist: Consecutive declined evaluations before alerting.
        baseline_min_n: Least finished-run count for a workload baseline to seed watches.
        correlation_delay_ms: How long a learning or throughput symptom waits
            (processing time) for causal evidence from other topics before it
            fires with its own class (``learning``, ``execution``); 0 fires at
            once. Like Alertmanager's group_wait: topics are consumed
            independently, so evidence may be processed after the symptom.
        min_event_ms: Event times before this are dead-lettered (0: no floor).
        max_ahead_ms: Event times this far past ``now_ms`` are dead-lettered (0: no bound);
            see :mod:`runwatch.core.stream.eventtime`.
        ended_retention_ms: An ended run's state is retired (deleted, its alerts resolved,
            its dataset subscriptions dropped) once the input's event time is this far
            past its last event (0: kept for ever).
        silent_retention_ms: The same for a run that never ended but sent nothing for
            this long (0: kept for ever).
        release_retention_ms: The same for an ended run with release evidence (a gate
            decision or a model artifact): a model is promoted, and its gate checked,
            days after its training ended (0: kept for ever).
        policy: Alert lifecycle knobs.
        specs: Indicator → watch spec.

    """

    source: Source
    lateness_ms: int = 60_000
    hold_ms: int = 30_000
    hold_max: int = 1_000
    image_allow_list: tuple[str, ...] = ()
    image_missing: ImageMissing = "allow"
    required_gates: tuple[str, ...] = ()
    registry_control: bool = True
    gate_wait_ms: int = 60_000
    stall_k: float = 10.0
    stall_min_ms: int = 600_000
    data_wait_ms: int = 600_000
    window_ms: int = 1_800_000
    restart_alert: int = 5
    label_shift: float = 0.15
    schema_fail_share: float = SCHEMA_FAIL_SHARE
    val_decline_abs: float = 0.02
    val_decline_rel: float = 0.05
    val_persist: int = 2
    baseline_min_n: int = 200
    correlation_delay_ms: int = 0
    min_event_ms: int = 0
    max_ahead_ms: int = 0
    ended_retention_ms: int = 21_600_000
    silent_retention_ms: int = 604_800_000
    release_retention_ms: int = 2_592_000_000
    policy: AlertPolicy = field(default_factory=AlertPolicy)
    specs: dict[str, WatchSpec] = field(default_factory=default_specs)


@dataclass(slots=True)
class RunState:
    """Everything known about one run (JSON-able fields only)."""

    run_id: str
    known: bool = False
    watermark_ms: int = 0
    watermarks: dict[str, int] = field(default_factory=dict)
    late_count: int = 0
    team: str | None = None
    family: str | None = None
    gpu_model: str | None = None
    gpu_count: int = 0
    image: str | None = None
    datasets: list[str] = field(default_factory=list)
    dataset_keys: list[list[str]] = field(default_factory=list)  # [uri, ref] it subscribes to
    manifest_at_ms: int = 0
    job_state: str = ""
    attempt: int = 0
    states: list[str] = field(default_factory=list)
    restarts: int = 0
    queued_at_ms: int = 0
    started_at_ms: int | None = None
    # stretches off its GPUs, [from, to]: an end, preemption or requeue to the next running
    # (to 0 while it lasts); the last OFF_GPUS_KEPT of them
    off_gpus: list[list[int]] = field(default_factory=list)
    deadline_ms: int = 0
    nodes: list[str] = field(default_factory=list)
    gpu_indices: list[int] = field(default_factory=list)
    step_ms: list[float] = field(default_factory=list)
    last_step_at_ms: int = 0
    last_step: int = -1
    first_step_at_ms: int = 0
    gpu_busy: bool = False
    step_at: list[int] = field(default_factory=list)
    #: Pauses between steps (intervals over ``STEPPING_K`` typical ones), [last step before,
    #: first after], the latest ``STEP_GAPS``: node readings older than ``step_at`` (a
    #: backfill's steps folded before its node samples) are told from training by them.
    step_gaps: list[list[int]] = field(default_factory=list)
    gpu_pending: list[list[Any]] = field(default_factory=list)
    worker_restarts: int = 0
    first_at_ms: int = 0
    checkpoint_ms: float = 0.0
    checkpoints: list[list[float]] = field(default_factory=list)
    last_checkpoint: dict[str, Any] = field(default_factory=dict)
    losses: list[list[float]] = field(default_factory=list)
    grads: list[float] = field(default_factory=list)
    val_metric: str = ""
    val_best: float | None = None
    val_history: list[list[float]] = field(default_factory=list)
    val_declines: int = 0
    #: Validation streams (dataset|slice -> [metric, best, history, declines, warm restart
    #: judged since]); the ``val_*`` fields above are a state written before streams.
    val_streams: dict[str, list[Any]] = field(default_factory=dict)
    reports: dict[str, dict[str, Any]] = field(default_factory=dict)
    watches: dict[str, Any] = field(default_factory=dict)  # JSON dict or live IndicatorWatch
    stats: dict[str, list[float]] = field(default_factory=dict)
    evidence: dict[str, dict[str, Any]] = field(default_factory=dict)
    alerts: dict[str, Any] = field(default_factory=dict)
    pending: list[dict[str, Any]] = field(default_factory=list)
    waiting: dict[str, dict[str, Any]] = field(default_factory=dict)
    held_since_ms: int = 0
    dead_seq: int = 0
    hst: Any = None
    hst_n: int = 0
    hst_saved: str | None = None  # JSON text of the HST snapshot written to the changelog
    signals: dict[str, Any] = field(default_factory=dict)  # node/learning/artifact rule memory

    @property
    def workload(self) -> str:
        """Return the workload key (family, GPU model, GPU count) for baselines."""
        return workload_key(self.family, self.gpu_model, self.gpu_count)


def new_state(run_id: str) -> RunState:
    """Return the empty state of a run never seen before."""
    return RunState(run_id=run_id)


_FIELDS = tuple(f.name for f in fields(RunState))


_NO_STATS = [0, 0.0, 0.0]  # RunningStats().to_state(): an indicator not seen yet (never mutated)
_KEYS: dict[str, str] = {}  # watch name -> its JSON string (a handful of indicator names)
_HEAVY = ("watches", "hst", "hst_saved")
_LIGHT = tuple(n for n in _FIELDS if n not in _HEAVY)


def _watch_json(w: Any) -> str:
    if isinstance(w, IndicatorWatch):
        return w.to_json()
    return compact(w)


def _key_json(k: str) -> str:
    text = _KEYS.get(k)
    if text is None:
        text = _KEYS[k] = json.dumps(k)
    return text


def dumps(state: RunState) -> bytes:
    """Serialize a run state to JSON bytes (NaN allowed, never pickle).

    Live detector objects are written as JSON snapshots refreshed every few
    updates rather than on every save (their state is most of the bytes and of
    the encoding time): each watch's level gate and latch are always current,
    its detectors (z-score, trend, ADWIN) at most ``indwatch.HEAVY_EVERY``
    updates old, the HST's masses at most ``HST_SAVE_EVERY``. A run recovered
    from the changelog resumes from those snapshots; hard rules, evidence,
    the alert book and the gates are exact.
    """
    d = {name: getattr(state, name) for name in _LIGHT}
    head = compact(d)
    hst = (state.hst_saved or "null" if isinstance(state.hst, HalfSpaceTreesDetector)
           else compact(state.hst))
    watches = ",".join(f"{_key_json(k)}:{_watch_json(v)}" for k, v in state.watches.items())
    tail = f',"watches":{{{watches}}},"hst":{hst},"hst_saved":null}}'
    return (head[:-1] + tail).encode()


def loads(data: bytes) -> RunState:
    """Rebuild a run state from :func:`dumps` output.

    Detector states stay JSON dicts until first used (:func:`watch_of`).

    Raises:
        ValueError: If the bytes are not a run state.

    """
    try:
        d = parse(data)
        return RunState(**d)
    except (TypeError, json.JSONDecodeError) as exc:
        msg = f"not a run state: {exc}"
        raise ValueError(msg) from exc


def watch_of(state: RunState, cfg: RunConfig, name: str,
             baseline: dict[str, list[float]] | None) -> IndicatorWatch:
    """Return the live watch of an indicator (rebuilt from JSON, or new and warm-started)."""
    raw = state.watches.get(name)
    if isinstance(raw, IndicatorWatch):
        return raw
    w = (IndicatorWatch.from_state(raw) if raw is not None
         else IndicatorWatch.new(name, cfg.specs[name], baseline, cfg.baseline_min_n))
    state.watches[name] = w
    return w


HST_SAVE_EVERY = 25


def hst_learned(state: RunState) -> None:
    """Count one HST update; refresh the HST snapshot written to the changelog when due."""
    state.hst_n += 1
    if state.hst_saved is None or state.hst_n % HST_SAVE_EVERY == 0:
        state.hst_saved = compact(state.hst.to_state())


def hst_of(state: RunState) -> HalfSpaceTreesDetector:
    """Return the run's live HalfSpaceTrees over its normalized indicator vector."""
    h = state.hst
    if isinstance(h, HalfSpaceTreesDetector):
        return h
    saved = h
    h = (HalfSpaceTreesDetector.from_state(h) if h is not None
         else HalfSpaceTreesDetector(n_trees=5, height=4, window_size=50, seed=7))
    state.hst = h
    state.hst_saved = None if saved is None else compact(saved)
    return h


# --------------------------------------------------------------------------- helpers


def finding_to_dict(f: Finding) -> dict[str, Any]:
    """Return a finding as a JSON-able dict."""
    return {k: getattr(f, k) for k in Finding.__slots__}  # type: ignore[attr-defined]


def finding_from_dict(d: dict[str, Any]) -> Finding:
    """Rebuild a finding from :func:`finding_to_dict` output."""
    return Finding(**d)


def context(state: RunState, cfg: RunConfig, node: str | None = None) -> AlertContext:
    """Return the alert context (identity and labels) of a run."""
    labels = {"workload": state.workload}
    return AlertContext(state.run_id, cfg.source, state.team, state.family, node, labels)


def dead_letter(state: RunState, cfg: RunConfig, reason: str, original: bytes, topic: str,
                now_ms: int) -> DeadLetter:
    """Return a DeadLetter for something this run's join rejected.

    Its id is the same when a replay rejects the same record again (the sink keeps one),
    and differs for another record with the same reason, also when the run's state was
    retired and started again (its sequence starts again).
    """
    state.dead_seq += 1
    name = f"{state.run_id}:{state.dead_seq}:{reason}:{zlib.crc32(original)}"
    return DeadLetter(
        event_id=str(uuid.uuid5(_NS, name)),
        run_id=state.run_id, emitted_at_ms=now_ms, source=cfg.source, seq=state.dead_seq,
        topic=topic, reason=reason, original=original, failed_at_ms=now_ms,
    )


def emit(state: RunState, cfg: RunConfig, f: Finding, now_ms: int, *, one_shot: bool,
         node: str | None = None) -> list[Output]:
    """Record a finding as evidence and, when it alerts, run the alert lifecycle.

    Args:
        state: The run state (updated in place).
        cfg: Processor knobs.
        f: The finding.
        now_ms: Current time.
        one_shot: Rule findings resolve by quiet time; detector findings by hysteresis.
        node: Node concerned, if any.

    Returns:
        Alerts to publish.

    """
    key = f"{f.detector}|{f.indicator}|{f.subject}"
    seen = state.evidence.get(key)
    if seen is None:
        state.evidence[key] = {"f": finding_to_dict(f), "first": f.at_ms, "last": f.at_ms}
    else:  # keep the span over which the condition was seen
        seen["f"] = finding_to_dict(f)
        seen["first"] = min(seen["first"], f.at_ms)
        seen["last"] = max(seen["last"], f.at_ms)
    if len(state.evidence) > 64:
        oldest = min(state.evidence, key=lambda k: state.evidence[k]["last"])
        del state.evidence[oldest]
    out = flush_waiting(state, cfg, now_ms, force=False)
    if not f.alert:
        return out
    if cfg.correlation_delay_ms > 0 and (f.signal == "learning"
                                         or f.indicator in THROUGHPUT_SYMPTOMS):
        key = f"{f.detector}|{f.indicator}|{f.subject}"
        if f.hard:  # page now; evidence processed within the delay updates the cause
            fired = _fire(state, cfg, f, now_ms, one_shot=one_shot, node=node)
            _hold_fired(state, key, f, fired, now_ms)
            return out + fired
        held = state.waiting.get(key)
        if held is not None and "fired" in held:  # fired, listening for late evidence
            if firing_entry(state, f.detector, f.indicator, f.subject) is not None:
                # a repeat goes to its alert at once (last seen, the resolve streak reset)
                return out + _fire(state, cfg, f, now_ms, one_shot=one_shot, node=node)
            del state.waiting[key]  # resolved meanwhile: a new one waits as any does
        state.waiting.setdefault(key, {"since_ms": now_ms, "f": finding_to_dict(f),
                                       **({} if one_shot else {"one_shot": False})})
        return out + flush_waiting(state, cfg, now_ms, force=False)
    return out + _fire(state, cfg, f, now_ms, one_shot=one_shot, node=node)


def _same_file(a: str, b: str) -> bool:
    a, b = (x.removeprefix("file://").rstrip("/") for x in (a, b))
    return bool(a and b) and (a == b or a.startswith(b + "/") or b.startswith(a + "/"))


def _loaded(state: RunState, uri: str, found_ms: int, at_ms: int) -> bool:
    """Whether the run may have loaded the checkpoint ``uri`` found corrupt at ``found_ms``.

    A corrupt checkpoint harms the model only once a process loads it: an attempt that
    names it as where it resumed from (``resumed_from``), or one that started again after
    it was found without naming any (a restart that loads the latest). The process that
    wrote it still holds the good state: a NaN 5 minutes after a mismatched write, in a run
    that never resumed, was blamed on the checkpoint (cause artifact).
    """
    named = state.signals.get("resumed_from") or []
    if named:
        return any(_same_file(uri, r) for r in named)
    return found_ms <= int(state.signals.get("resumed", 0)) <= at_ms


def evidence_at(state: RunState, at_ms: int) -> list[Finding]:
    """Return the run's evidence as seen at ``at_ms``.

    A condition seen over a span counts at the latest time it was seen up to
    ``at_ms``; one first seen after ``at_ms`` does not count. A data condition
    about a dataset (a label shift, drift, a feature off its range, a failed
    stage) that its latest report or stage asserted holds until the dataset's
    next one (of the same partition, when a recurring partition's report said so): it
    counts at
    ``at_ms`` (an hourly dataset's shift explained a decline half an hour after
    the report, and not three quarters of an hour after it, while every report
    said the same).

    Args:
        state: The run state.
        at_ms: The symptom's time.

    Returns:
        Findings timed for correlation with a symptom at ``at_ms``.
    """
    out = []
    reports = state.reports
    stages = state.signals.get("stages") or {}
    for e in state.evidence.values():
        if e["first"] > at_ms:
            continue
        f = finding_from_dict(e["f"])
        if f.detector == "rule:checkpoint_checksum" and not _loaded(state, f.subject,
                                                                    e["first"], at_ms):
            continue
        seen = min(e["last"], at_ms)
        if f.signal == "data" and (f.subject in reports or f.subject in stages):
            parts = ((reports.get(f.subject) or {}).get("hist") or {}).get("parts") or {}
            part = f.labels.get("partition") if f.labels else None
            if part in parts and parts[part][2]:
                # a recurring partition (a region, a shard: reported before) that said so,
                # not the dataset's others; a partition reported once (an hour's) is the
                # dataset's latest news until the next partition
                latest = parts[part][1]
            else:
                latest = max((r.get("at_ms") or 0 for r in (reports.get(f.subject),
                                                              stages.get(f.subject)) if r),
                             default=0)
            if latest <= e["last"] <= at_ms:
                seen = at_ms  # no report (or stage) of the dataset since it said so
        out.append(replace(f, at_ms=seen))
    return out


def _fire(state: RunState, cfg: RunConfig, f: Finding, now_ms: int, *, one_shot: bool,
          node: str | None = None) -> list[Output]:
    verdict = classify(f, evidence_at(state, f.at_ms), cfg.window_ms)
    book = AlertBook.from_state(state.alerts)
    out = alerting.fire(book, f, verdict, context(state, cfg, node), now_ms, cfg.policy,
                        seen_ms=state.watermark_ms,
                        one_shot=one_shot)
    state.alerts = book.to_state()
    return list(out)


def flush_waiting(state: RunState, cfg: RunConfig, now_ms: int, *, force: bool) -> list[Output]:
    """Settle learning and throughput symptoms waiting for correlated evidence.

    Two kinds wait for ``cfg.correlation_delay_ms`` of processing time, because
    topics are consumed independently and a cause may be processed after its
    symptom:

    * a statistical learning symptom has not fired yet: it fires as soon as
      causal evidence names a cause, or as ``learning`` when the delay is over;
    * a hard rule's symptom (a NaN loss) fired at once: when causal evidence
      processed within the delay names another cause, the alert is re-sent
      (same alert id and dedup key) with that cause and its evidence.

    Either kind, once fired, listens :data:`LATE_EVIDENCE_MS` longer: evidence stamped
    before the symptom but processed after it (a worker behind its load, the data agent's
    round trip) re-sends it with the cause it names once, as a worker keeping up would have
    named it at once.

    Args:
        state: The run state (updated in place).
        cfg: Processor knobs.
        now_ms: Current time.
        force: Settle every waiting symptom regardless.

    Returns:
        Alerts to publish.
    """
    if not state.waiting:
        return []
    out: list[Output] = []
    for key, w in list(state.waiting.items()):
        f = finding_from_dict(w["f"])
        verdict = classify(f, evidence_at(state, f.at_ms), cfg.window_ms)
        waited = now_ms - w["since_ms"]
        if "fired" in w:
            if force or waited >= cfg.correlation_delay_ms + LATE_EVIDENCE_MS:
                del state.waiting[key]
            elif verdict.cause not in (w["fired"], f.signal):
                del state.waiting[key]
                out += _update(state, cfg, f, now_ms)
            continue
        if force or waited >= cfg.correlation_delay_ms or verdict.cause != f.signal:
            del state.waiting[key]  # due, or a cause other than its own default
            fired = _fire(state, cfg, f, now_ms, one_shot=w.get("one_shot", True))
            if not force and verdict.cause == f.signal:  # its own default: late evidence
                _hold_fired(state, key, f, fired, w["since_ms"])  # may still name another
            out += fired
    return out


LATE_EVIDENCE_MS = 60_000
"""Processing time a fired learning or throughput symptom keeps listening for evidence
stamped before it (:func:`flush_waiting`). The data agent's round trip and a worker behind
its load took longer than the correlation delay under load (two cores shared with the
broker): a feature shift's validation decline was paged ``learning`` and stayed so while
the drift report, stamped a minute before the decline, was still on its way."""


def _hold_fired(state: RunState, key: str, f: Finding, fired: list[Output],
                since_ms: int) -> None:
    """Keep a symptom that fired in ``waiting`` (with its cause) for late evidence."""
    for a in fired:
        if isinstance(a, Alert) and a.status == "firing" and a.detector == f.detector:
            state.waiting[key] = {"since_ms": since_ms, "f": finding_to_dict(f),
                                  "fired": a.probable_cause}


def _update(state: RunState, cfg: RunConfig, f: Finding, now_ms: int) -> list[Output]:
    verdict = classify(f, evidence_at(state, f.at_ms), cfg.window_ms)
    book = AlertBook.from_state(state.alerts)
    out = alerting.update_cause(book, f, verdict, context(state, cfg), now_ms, cfg.policy)
    state.alerts = book.to_state()
    return list(out)


def clear(state: RunState, cfg: RunConfig, detector: str, indicator: str, now_ms: int,
          subject: str = "", at_ms: int | None = None,
          policy: AlertPolicy | None = None) -> list[Output]:
    """Record a healthy evaluation (event time ``at_ms``) of an alerting condition.

    Hysteresis as ``cfg.policy`` says, or ``policy``.
    """
    if firing_entry(state, detector, indicator, subject) is None:
        return []  # nothing to count healthy (the common case: no book to rebuild)
    book = AlertBook.from_state(state.alerts)
    out = alerting.healthy(book, state.run_id, detector, indicator, subject,
                           context(state, cfg), now_ms, policy or cfg.policy, at_ms)
    state.alerts = book.to_state()
    return list(out)


_AT_ONCE = AlertPolicy(clear_after=1, resolve_ms=0)


def resolve_now(state: RunState, cfg: RunConfig, detector: str, indicator: str, now_ms: int,
                at_ms: int, subject: str = "") -> list[Output]:
    """Resolve a firing alert at once: an event showed its condition over (or never true)."""
    return clear(state, cfg, detector, indicator, now_ms, subject, at_ms, policy=_AT_ONCE)


def firing_entry(state: RunState, detector: str, indicator: str,
                 subject: str = "") -> dict[str, Any] | None:
    """Return the run's alert book entry of this condition while it fires, else None."""
    entries = state.alerts.get("entries")
    if not entries:  # the common case on a step's path: no alert at all
        return None
    entry = entries.get(alerting.dedup_key(state.run_id, detector, indicator, subject))
    return entry if entry is not None and entry["status"] == "firing" else None


def _hold(state: RunState, detector: str, indicator: str) -> None:
    """Keep a firing alert firing through an out-of-range evaluation that does not fire."""
    if firing_entry(state, detector, indicator) is not None:
        book = AlertBook.from_state(state.alerts)
        alerting.hold(book, state.run_id, detector, indicator)
        state.alerts = book.to_state()


def observe(state: RunState, cfg: RunConfig, name: str, x: float, at_ms: int, now_ms: int,
            baseline: dict[str, list[float]] | None, detail: str = "",
            signal: str | None = None,
            cause: Callable[[], tuple[str, bool]] | None = None,
            baseline_key: str | None = None) -> list[Output]:
    """Feed one indicator value to its watch; emit evidence or an alert when it fires.

    Args:
        state: The run state (updated in place).
        cfg: Processor knobs.
        name: Indicator name (a key of ``cfg.specs``).
        x: The value (non-finite values are ignored).
        at_ms: Event time.
        now_ms: Current time.
        baseline: Finished-run statistics of the run's workload, if any.
        detail: Extra text for the evidence.
        signal: Signal class of a firing finding (default: the indicator's own).
        cause: Called only when the watch fires (evidence lookups are not free):
            (signal class, whether the finding alerts); overrides ``signal`` and
            :data:`~runwatch.core.signals.indwatch.ALERTING_WATCHES`.
        baseline_key: Where the run's statistics go in its workload baseline, and where the
            watch is seeded from (default ``name``): throughput per step size, since a
            family's runs at another batch size run at another rate.

    Returns:
        Alerts to publish.

    """
    if not math.isfinite(x):
        return []
    spec = cfg.specs[name]
    key = baseline_key or name
    state.stats[key] = RunningStats.added(state.stats.get(key, _NO_STATS), x)
    if key != name and name not in state.watches:
        baseline = {name: baseline[key]} if baseline and key in baseline else None
    r = watch_of(state, cfg, name, baseline).update(x, spec)
    out: list[Output] = []
    if r.drift:
        out += emit(state, cfg, _adwin_finding(name, r, at_ms), now_ms, one_shot=True)
    detector = f"watch:{name}"
    if not r.firing:
        if name in ALERTING_WATCHES:
            if r.beyond:
                _hold(state, detector, name)
            else:
                out += clear(state, cfg, detector, name, now_ms, at_ms=at_ms)
        return out
    alerts = name in ALERTING_WATCHES
    if cause is not None:
        signal, alerts = cause()
    verb = ("rose" if spec.direction == "up" else "fell") if r.kind == "level" else (
        "trending up" if spec.direction == "up" else "trending down")
    f = Finding(
        detector=detector, indicator=name,
        signal=(signal or WATCH_SIGNAL[name]),  # type: ignore[arg-type]
        severity="warning", observed=r.level, expected=r.expected, score=r.score,
        # the value that fired, not the smoothed level: started at a seed of 257 samples/s,
        # a run at 64 read "fell to 156"
        at_ms=at_ms, title=f"{name} {verb} to {x:.3g} (baseline {r.expected:.3g})",
        detail=(detail or f"{name}={x:.4g}") + f"; z={r.z:.2f} slope={r.slope:.3g}/update",
        alert=alerts,
    )
    return out + emit(state, cfg, f, now_ms, one_shot=False)


def _adwin_finding(name: str, r: Reading, at_ms: int) -> Finding:
    return Finding(
        detector="detector:adwin", indicator=name, signal=WATCH_SIGNAL[name],  # type: ignore[arg-type]
        severity="info", observed=r.level, expected=r.expected, score=0.3, at_ms=at_ms,
        title=f"ADWIN drift in {name}", alert=False,
    )
