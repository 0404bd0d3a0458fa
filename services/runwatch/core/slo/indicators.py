"""The built-in indicator kinds: stored facts in, good and bad events out (pure).

Size: seven indicator kinds, each its row type and its pure function, kept side by side.

Each kind takes rows of a small fixed shape (a :class:`typing.NamedTuple`,
what the evaluator's query for the kind returns from ClickHouse), the
objective's parameters, the window's exclusive start and the evaluation time,
and returns the window's :class:`SliEvent` s. An event belongs to the window
when ``start < at_ms <= now``; an event whose outcome is not known yet (a run
still inside its allowed duration, a cutoff still ahead, a run inside its
grace period) is not an event yet. Everything is recomputed from the store on
each evaluation, so a late row (stored after the evaluation that needed it,
event time inside the window) changes the next evaluation's answer, and an
evaluation never counts an event twice.
"""

from __future__ import annotations

import bisect
import fnmatch
import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from runwatch.core.cost.running import running_intervals
from runwatch.core.gates import registry
from runwatch.core.gates.evaluate import exceeds
from runwatch.core.signals.rules import is_model, status_word
from runwatch.core.slo.timewin import cutoffs, iso, next_cutoff, previous_cutoff, zone

TERMINAL = frozenset({"succeeded", "failed", "cancelled"})


@dataclass(frozen=True, slots=True)
class SliEvent:
    """One good or bad event of an objective.

    Attributes:
        key: What the event is (a run id, an artifact event id, ``dataset@cutoff``).
        at_ms: Its event time.
        good: Whether it met the objective.
        run_ids: The runs it concerns.
        observed: The measured value (duration in s, share, lost minutes...).
        expected: The bound it was held to.
        detail: In words.

    """

    key: str
    at_ms: int
    good: bool
    run_ids: tuple[str, ...] = ()
    observed: float | None = None
    expected: float | None = None
    detail: str = ""


class DataReportRow(NamedTuple):
    """A stored data-quality report of the objective's dataset."""

    at_ms: int
    version: str
    row_count: int
    schema_failures: int
    drifted: int
    run_id: str
    dataset_uri: str = ""


class RunRow(NamedTuple):
    """A run's job timeline: first ``running``, the terminal event, the last state."""

    run_id: str
    started_ms: int
    ended_ms: int | None
    state: str
    family: str = ""


class RetainedRow(NamedTuple):
    """A run's end and how many validation results and gate decisions are stored for it."""

    run_id: str
    ended_ms: int
    state: str
    validations: int
    gates: int
    family: str = ""


class RegistryRow(NamedTuple):
    """An artifact event with a registry status, and its run's gate decisions.

    ``decisions`` holds ``(at_ms, gate, decision)`` of every stored decision of the run;
    ``kind`` is the artifact's kind as stored (``model``, ``dataset``, ``Model``...).
    """

    event_id: str
    run_id: str
    at_ms: int
    uri: str
    status: str
    decisions: Sequence[tuple[int, str, str]]
    family: str = ""
    kind: str = "model"


class PreemptionRow(NamedTuple):
    """A preemption, with the run's good checkpoints and (re)starts (event times)."""

    run_id: str
    at_ms: int
    checkpoints_ms: Sequence[int]
    starts_ms: Sequence[int]
    family: str = ""


class ReproRow(NamedTuple):
    """A run's lineage group and its last value of the objective's metric."""

    run_id: str
    group: str
    at_ms: int
    value: float
    family: str = ""


class UsageRow(NamedTuple):
    """A run's job events, whose running intervals x their GPUs are its GPU use.

    ``jobs`` are (ts_ms, state, allocated GPUs: 0 when the event names none); ``gpus`` is
    the manifest's GPU count, for an interval no job event gives an allocation.
    """

    run_id: str
    team: str
    jobs: tuple[tuple[int, str, int], ...]
    gpus: int = 0


def _inside(start: int, now: int, at: int) -> bool:
    return start < at <= now


def data_availability(p: Mapping[str, Any], rows: Sequence[DataReportRow], start: int,
                      now: int) -> list[SliEvent]:
    """One event per cutoff passed in the window: good when a passing report came before it.

    ``dataset`` is a URI or a glob (``s3://lake/ads/*``): a report of any
    matching dataset counts. A report counts for a cutoff when its version
    matches ``versionPattern``,
    its event time lies after the previous cutoff (or within ``lookback``) and
    at or before this one, it has rows, no schema failures and no drifted
    feature. A report timed after the cutoff counts for the next one. Cutoffs
    before the first report read (up to 32 days before the window) are no
    events: a new dataset's pipeline is not late for the days before it existed.
    """
    tz = zone(p["tz"])
    rows = sorted((r for r in rows if not r.dataset_uri
                   or fnmatch.fnmatchcase(r.dataset_uri, p["dataset"])), key=lambda r: r.at_ms)
    times = [r.at_ms for r in rows]
    out: list[SliEvent] = []
    if not rows:  # no report of the dataset at all: no data (a misnamed dataset is no outage)
        return out
    # a cutoff before the dataset's first report read is no event: its pipeline did not exist
    passed = cutoffs(p["cutoff"], tz, max(start, times[0] - 1), now)
    # each cutoff's previous one is the one before it in the list: only the first is looked up
    # (a search per cutoff cost 8 s a round for a 15-minute cron over 30 days, 70 s for 5 minutes)
    first_prev = previous_cutoff(p["cutoff"], tz, passed[0]) if passed else None
    for i, c in enumerate(passed):
        since = (c - p["lookback_ms"] if p["lookback_ms"] else
                 passed[i - 1] if i else first_prev)
        since = c - 400 * 86_400_000 if since is None else since
        seen = rows[bisect.bisect_right(times, since):bisect.bisect_right(times, c)]
        ok = [r for r in seen if fnmatch.fnmatchcase(r.version, p["version_pattern"])
              and r.row_count > 0 and r.schema_failures == 0 and r.drifted == 0]
        runs = tuple(sorted({r.run_id for r in ok or seen if r.run_id}))
        detail = (f"{p['dataset']}: passing report by {iso(c)}" if ok else
                  f"{p['dataset']}: no passing report by {iso(c)} "
                  f"({len(seen)} report(s) since {iso(since)}, none passing)")
        out.append(SliEvent(f"{p['dataset']}@{iso(c)}", c, bool(ok), runs, float(len(ok)), 1.0,
                            detail))
    return out


def training_window(p: Mapping[str, Any], rows: Sequence[RunRow], start: int,
                    now: int) -> list[SliEvent]:
    """One event per run of the family: good when it succeeded within the duration or deadline.

    A finished run is an event at its end. A run still going is a bad event as
    soon as it overruns (at ``start + maxDuration``, or at its deadline, the
    first ``deadline`` cutoff after it started); until then it is no event.
    """
    max_ms = p["max_duration_ms"]
    tz = zone(p["tz"])
    out: list[SliEvent] = []
    for r in rows:
        limit = r.started_ms + max_ms if max_ms else None
        if p["deadline"] is not None:
            dl = next_cutoff(p["deadline"], tz, r.started_ms)
            limit = dl if limit is None or (dl is not None and dl < limit) else limit
        if r.ended_ms is not None and r.state in TERMINAL:
            took = r.ended_ms - r.started_ms
            late = limit is not None and r.ended_ms > limit
            good = r.state == "succeeded" and not late
            why = ("on time" if good else f"{r.state}" if r.state != "succeeded" else
                   f"took {_hm(took)}, over the limit by {_hm(r.ended_ms - (limit or 0))}")
            ev = SliEvent(r.run_id, r.ended_ms, good, (r.run_id,), took / 1000,
                          None if limit is None else (limit - r.started_ms) / 1000,
                          f"run {r.run_id}: {why}")
        elif limit is not None and now > limit:
            ev = SliEvent(r.run_id, limit, False, (r.run_id,), (now - r.started_ms) / 1000,
                          (limit - r.started_ms) / 1000,
                          f"run {r.run_id}: still {r.state} after {_hm(now - r.started_ms)}, "
                          f"past its limit of {_hm(limit - r.started_ms)}")
        else:
            continue
        if _inside(start, now, ev.at_ms):
            out.append(ev)
    return out


def evaluation_retained(p: Mapping[str, Any], rows: Sequence[RetainedRow], start: int,
                        now: int) -> list[SliEvent]:
    """One event per successful run: good when its validation results and gate decision are stored.

    A run counts once its ``grace`` after the end has passed (results and
    gates are written after training); a row stored late within the grace is
    no bad event.
    """
    out: list[SliEvent] = []
    for r in rows:
        if r.state != "succeeded" or r.ended_ms + p["grace_ms"] > now:
            continue
        missing = [what for what, need, n in (("validation results", p["require_validation"],
                                               r.validations),
                                              ("gate decision", p["require_gate"], r.gates))
                   if need and n == 0]
        detail = (f"run {r.run_id}: results and gate stored" if not missing else
                  f"run {r.run_id}: no {' and no '.join(missing)} stored")
        if _inside(start, now, r.ended_ms):
            out.append(SliEvent(r.run_id, r.ended_ms, not missing, (r.run_id,),
                                float(len(missing)), 0.0, detail))
    return out


def registry_control(p: Mapping[str, Any], rows: Sequence[RegistryRow], start: int,
                     now: int) -> list[SliEvent]:
    """One event per artifact reaching a watched registry status: good when its gates allowed it.

    The processor's rule (``rule:registry_without_gate``) and this SLI share
    :func:`runwatch.core.gates.registry.release_allowed`: the release is
    allowed when the latest decision of one of the run's gates, among those
    timed at or before the registration, is ``pass`` (a human approval of a
    review, ``runwatch gate approve``, is such a pass). As for the processor's rule, only a
    model counts (a dataset or a tokenizer registered in a catalog is no release), and
    kinds and statuses compare as :func:`~runwatch.core.signals.rules.status_word` spells
    them (``Model``, ``Production``, ``deployed `` with a template's trailing space).
    """
    out: list[SliEvent] = []
    for r in rows:
        if not is_model(r.kind) or status_word(r.status) not in p["statuses"] \
                or not _inside(start, now, r.at_ms):
            continue
        before = sorted(d for d in r.decisions if d[0] <= r.at_ms)
        good = registry.release_allowed(registry.latest_by_gate((g, d) for _t, g, d in before))
        detail = (f"run {r.run_id}: {r.uri} {r.status} after a passing gate" if good else
                  f"run {r.run_id}: {r.uri} {r.status} without a passing or approved gate")
        out.append(SliEvent(r.event_id, r.at_ms, good, (r.run_id,), None, None, detail))
    return out


def resumability(p: Mapping[str, Any], rows: Sequence[PreemptionRow], start: int,
                 now: int) -> list[SliEvent]:
    """One event per preemption: good when at most ``maxLoss`` of work since the last checkpoint.

    Lost work runs from the later of the last good checkpoint and the last
    (re)start before the preemption. A run preempted again without a (re)start in
    between is the same preemption told twice (the scheduler's hook and the SDK's
    SIGTERM handler both report it): it counts once, at the first report.
    """
    out: list[SliEvent] = []
    limit = p["max_loss_ms"]
    told: dict[str, int] = {}  # run -> its previous preemption report
    for r in sorted(rows, key=lambda row: (row.run_id, row.at_ms)):
        prev = told.get(r.run_id)
        told[r.run_id] = r.at_ms
        if prev is not None and not any(prev < t <= r.at_ms for t in r.starts_ms):
            continue
        if not _inside(start, now, r.at_ms):
            continue
        marks = [t for t in (*r.checkpoints_ms, *r.starts_ms) if t <= r.at_ms]
        since = max(marks) if marks else r.at_ms
        lost = r.at_ms - since
        out.append(SliEvent(f"{r.run_id}@{r.at_ms}", r.at_ms, lost <= limit, (r.run_id,),
                            lost / 60_000, limit / 60_000,
                            f"run {r.run_id}: preempted {_hm(lost)} after its last checkpoint "
                            f"(at most {_hm(limit)})"))
    return out


def reproducibility(p: Mapping[str, Any], rows: Sequence[ReproRow], start: int,
                    now: int) -> list[SliEvent]:
    """One event per run of a repeated lineage: good within ``tolerance`` of the group's median.

    A group (runs sharing a lineage) counts once it holds ``minRepeats``
    runs in the window; ``relative`` tolerances are a share of the median.
    The median is over the group's finite values; a run whose value is NaN
    or infinite is a bad event (it reproduced nothing) and moves no median. A run
    exactly ``tolerance`` from the median as written is good (float rounding of the
    difference does not count: :func:`~runwatch.core.gates.evaluate.exceeds`).
    """
    groups: dict[str, list[ReproRow]] = defaultdict(list)
    for r in rows:
        if _inside(start, now, r.at_ms):
            groups[r.group].append(r)
    out: list[SliEvent] = []
    for members in groups.values():
        if len(members) < max(2, p["min_repeats"]):
            continue
        finite = [m.value for m in members if math.isfinite(m.value)]
        median = statistics.median(finite) if finite else math.nan
        bound = p["tolerance"] * abs(median) if p["relative"] else p["tolerance"]
        for m in members:
            if not math.isfinite(m.value):
                out.append(SliEvent(m.run_id, m.at_ms, False, (m.run_id,), None,
                                    bound if math.isfinite(bound) else None,
                                    f"run {m.run_id}: {p['metric']} is {m.value} (not a finite "
                                    f"number) among {len(members)} repeats"))
                continue
            off = abs(m.value - median)
            good = not exceeds(off, bound, m.value, median)
            out.append(SliEvent(m.run_id, m.at_ms, good, (m.run_id,), off, bound,
                                f"run {m.run_id}: {p['metric']} {m.value:.4g}, {off:.4g} from "
                                f"the median of {len(members)} repeats (at most {bound:.4g})"))
    return out


def fairness(p: Mapping[str, Any], rows: Sequence[UsageRow], start: int,
             now: int) -> list[SliEvent]:
    """One event per finished bucket: good when the team's share of GPU-hours is within quota.

    A run's GPU use is each of its running intervals x that interval's allocated GPUs,
    drawn as the run summary draws them for ``runwatch cost``
    (:func:`~runwatch.core.cost.running.running_intervals`): the wait in the queue between
    the attempts of a preempted run is no GPU use; an interval still open runs to ``now``.
    Buckets are ``bucket`` long, aligned to the epoch (UTC days by default);
    a bucket without GPU use is no event, and neither is one that began before
    the window's start: its share would be computed from a part of it.
    """
    size = p["bucket_ms"]
    total: dict[int, float] = defaultdict(float)
    team: dict[int, float] = defaultdict(float)
    runs: dict[int, set[str]] = defaultdict(set)
    for r in rows:
        for t0, t1, gpus in running_intervals(r.jobs, now, r.gpus):
            t, end = max(t0, start), min(t1, now)
            while t < end and gpus > 0:
                b = t - t % size
                upto = min(end, b + size)
                gpu_h = gpus * (upto - t) / 3_600_000
                total[b] += gpu_h
                if r.team == p["team"]:
                    team[b] += gpu_h
                    runs[b].add(r.run_id)
                t = upto
    out: list[SliEvent] = []
    for b in sorted(total):
        if b < start or b + size > now or total[b] <= 0:
            continue
        share = team[b] / total[b]
        out.append(SliEvent(f"{p['team']}@{iso(b)}", b + size, share <= p["quota"],
                            tuple(sorted(runs[b])), share, p["quota"],
                            f"team {p['team']}: {share:.0%} of {total[b]:.1f} GPU-hours "
                            f"from {iso(b)} (quota {p['quota']:.0%})"))
    return out


def _hm(ms: int) -> str:
    minutes = int(round(ms / 60_000))
    return f"{minutes // 60}h{minutes % 60:02d}m"


#: kind -> (row type, compute function).
COMPUTE: dict[str, tuple[type, Callable[..., list[SliEvent]]]] = {
    "data_availability": (DataReportRow, data_availability),
    "training_window": (RunRow, training_window),
    "evaluation_retained": (RetainedRow, evaluation_retained),
    "registry_control": (RegistryRow, registry_control),
    "resumability": (PreemptionRow, resumability),
    "reproducibility": (ReproRow, reproducibility),
    "fairness": (UsageRow, fairness),
}

#: kind -> the signal class its bad events belong to (their probable cause when the bad
#: events' own alerts name none that can explain them).
SIGNAL: dict[str, str] = {
    "data_availability": "data", "training_window": "execution",
    "evaluation_retained": "artifact", "registry_control": "artifact",
    "resumability": "execution", "reproducibility": "learning", "fairness": "execution",
}
