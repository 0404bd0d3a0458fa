"""Per-run cost and waste by cause, and their roll-ups (pure; see docs/cost.md).

The store's run summaries hold, per run, the GPU time of its allocated GPUs
split in the attribution order: *idle* (no process on an allocated GPU), then
*stalled* (a process, but no training step for over 300 s), then by outcome
*no usable artifact* (a failed, preempted or cancelled run without any good
checkpoint or usable artifact: all its busy time) or *work lost* (such a run
with one: its busy time after the last good checkpoint), and what is left as a
utilization histogram. The last cause, *below the operating range*, is judged
here against the family-and-hardware baseline learnt from succeeded runs: the
shortfall ``hours - util_hours / baseline`` of the busy time whose utilization
is under :data:`BELOW_FACTOR` of the baseline, beyond the family's usual shortfall (its
succeeded runs' median shortfall per busy GPU-hour: evaluation passes and checkpoint
writes a healthy run of the family has too; a run within 1 / :data:`BELOW_FACTOR` of it
is in range). Each GPU-second lands in one cause at most, so the causes add up.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from runwatch.core.cost.prices import NO_PRICE, UNKNOWN_MODEL, Prices

CAUSES: tuple[str, ...] = ("idle", "stalled", "no_artifact", "work_lost", "below_baseline")
#: Busy time under this share of the family-and-hardware baseline is below its range.
BELOW_FACTOR = 0.75
#: Succeeded runs a family-and-hardware baseline needs.
MIN_BASELINE_RUNS = 3
#: Allocated time not covered by GPU samples beyond this share is a telemetry gap.
GAP_SHARE = 0.10
TERMINATED = frozenset({"failed", "cancelled", "preempted"})
GROUP_KEYS = ("family", "team", "queue", "priority_class", "run")
#: Baselines are learnt from at least this much history (``runwatch cost``, ``investigate``).
HISTORY_S = 30 * 86_400
#: The columns of the ``run_costs`` view (0031) a :class:`RunCost` is read from, in
#: :func:`run_cost_from_row`'s order; the last is ``ended_at`` in epoch ms.
RUN_COST_COLUMNS = (
    "run_id, team, experiment_family, queue, priority_class, node_pool, tenancy, "
    "gpu_model, gpu_count, outcome, toUnixTimestamp64Milli(running_at), queue_delay_s, "
    "allocated_gpu_hours, observed_gpu_hours, noproc_gpu_hours, stalled_gpu_hours, "
    "no_artifact_gpu_hours, lost_gpu_hours, busy_util_hours, busy_util_weighted, "
    "usable_artifact, step_records, skewed_nodes, toUnixTimestamp64Milli(ended_at)")


@dataclass(frozen=True, slots=True)
class RunCost:
    """One run summary, as the cost attribution reads it (times in hours)."""

    run_id: str
    team: str = ""
    family: str = ""
    queue: str = ""
    priority_class: str = ""
    node_pool: str = ""
    tenancy: str = ""
    gpu_model: str = ""
    gpu_count: int = 0
    outcome: str = ""
    running_at_ms: int | None = None
    queue_delay_s: float | None = None
    allocated_h: float = 0.0
    observed_h: float = 0.0
    idle_h: float = 0.0
    stalled_h: float = 0.0
    no_artifact_h: float = 0.0
    lost_h: float = 0.0
    busy_hours: Mapping[int, float] = field(default_factory=dict)
    busy_weighted: Mapping[int, float] = field(default_factory=dict)
    usable_artifact: bool = False
    step_records: int = 0
    skewed_nodes: int = 0

    @property
    def gpu_hours(self) -> float:
        """GPU-hours billed: the allocation's, else what the samples saw."""
        return self.allocated_h if self.allocated_h > 0 else self.observed_h

    @property
    def busy_median_util(self) -> float | None:
        """Median utilization of the run's remaining busy time (None without any)."""
        return _hist_median(self.busy_hours, self.busy_weighted)


def run_cost_from_row(row: Sequence[Any]) -> RunCost:
    """Return the :class:`RunCost` of one ``run_costs`` row selected as :data:`RUN_COST_COLUMNS`."""
    (rid, team, fam, queue, pc, pool, ten, model, gpus, outcome, running, delay, alloc, obs,
     idle, stalled, noart, lost, hist_h, hist_u, usable, steps, skewed, _end) = row
    return RunCost(run_id=str(rid), team=str(team), family=str(fam), queue=str(queue),
                   priority_class=str(pc), node_pool=str(pool), tenancy=str(ten),
                   gpu_model=str(model), gpu_count=int(gpus), outcome=str(outcome),
                   running_at_ms=None if running is None else int(running),
                   queue_delay_s=None if delay is None else float(delay),
                   allocated_h=float(alloc), observed_h=float(obs), idle_h=float(idle),
                   stalled_h=float(stalled), no_artifact_h=float(noart), lost_h=float(lost),
                   busy_hours={int(k): float(v) for k, v in hist_h.items()},
                   busy_weighted={int(k): float(v) for k, v in hist_u.items()},
                   usable_artifact=bool(usable), step_records=int(steps),
                   skewed_nodes=int(skewed))


def _hist_median(hours: Mapping[int, float], weighted: Mapping[int, float]) -> float | None:
    total = sum(hours.values())
    if total <= 0:
        return None
    acc = 0.0
    for k in sorted(hours):
        acc += hours[k]
        if acc >= total / 2:
            return weighted.get(k, k * hours[k]) / hours[k] if hours[k] else float(k)
    return None  # pragma: no cover - the loop always reaches half the total


@dataclass(frozen=True, slots=True)
class Baseline:
    """A family-and-hardware operating point: median busy utilization of its succeeded runs.

    ``below_share`` is their median shortfall per busy GPU-hour (:func:`shortfall_h`): the
    time under the range a healthy run of the family spends (evaluation, checkpoint writes).
    """

    family: str
    gpu_model: str
    util_p50: float
    runs: int
    below_share: float = 0.0


def baselines(runs: Iterable[RunCost]) -> dict[tuple[str, str], Baseline]:
    """Learn each (family, GPU model)'s baseline from its succeeded runs.

    Args:
        runs: Run summaries (any window; more history makes a steadier baseline).

    Returns:
        Baselines of the pairs with at least :data:`MIN_BASELINE_RUNS` succeeded runs.

    """
    medians: dict[tuple[str, str], list[float]] = {}
    members: dict[tuple[str, str], list[RunCost]] = {}
    for r in runs:
        m = r.busy_median_util
        if r.outcome == "succeeded" and m is not None:
            medians.setdefault((r.family, r.gpu_model), []).append(m)
            members.setdefault((r.family, r.gpu_model), []).append(r)
    out = {}
    for k, v in medians.items():
        p50 = median(v)
        if len(v) < MIN_BASELINE_RUNS or p50 <= 0:
            continue
        shares = [shortfall_h(r, p50) / busy for r in members[k]
                  if (busy := sum(h for h in r.busy_hours.values() if h > 0)) > 0]
        out[k] = Baseline(k[0], k[1], p50, len(v), median(shares) if shares else 0.0)
    return out


def shortfall_h(run: RunCost, util_p50: float) -> float:
    """The shortfall ``hours - util_hours / util_p50`` of the run's busy time under the range."""
    lo = util_p50 * BELOW_FACTOR
    out = 0.0
    for k, h in run.busy_hours.items():
        if h <= 0:
            continue
        u = run.busy_weighted.get(k, k * h)
        if u / h < lo:
            out += h - u / util_p50
    return max(out, 0.0)


def below_baseline_h(run: RunCost, base: Baseline | None) -> float:
    """GPU-hours lost by running under the baseline's range (0 without a baseline).

    The shortfall beyond the family's usual one (``below_share`` per busy GPU-hour); none
    when the run's share is within 1 / :data:`BELOW_FACTOR` of the usual one.
    """
    if base is None:
        return 0.0
    raw = shortfall_h(run, base.util_p50)
    busy = sum(h for h in run.busy_hours.values() if h > 0)
    if busy <= 0 or raw <= 0 or raw / busy <= base.below_share / BELOW_FACTOR:
        return 0.0
    return max(raw - base.below_share * busy, 0.0)


@dataclass(slots=True)
class RunWaste:
    """A run's cost and waste, attributed."""

    run: RunCost
    waste_h: dict[str, float]
    price: float | None
    unpriced_reason: str
    baseline: Baseline | None

    @property
    def cost(self) -> float | None:
        """Cost of the run's GPU-hours (None when unpriced)."""
        return None if self.price is None else self.price * self.run.gpu_hours

    @property
    def unobserved_h(self) -> float:
        """Allocated GPU-hours no GPU sample covers, beyond the tolerance (else 0)."""
        gap = self.run.allocated_h - self.run.observed_h
        return gap if self.run.allocated_h > 0 and gap > GAP_SHARE * self.run.allocated_h else 0.0


def ran(run: RunCost) -> bool:
    """Whether the run got to run: a running state, or GPU time allocated or seen."""
    return run.running_at_ms is not None or run.gpu_hours > 0


def attribute(run: RunCost, base: Baseline | None, prices: Prices) -> RunWaste:
    """Attribute one run's waste by cause and price it."""
    waste = {"idle": run.idle_h, "stalled": run.stalled_h, "no_artifact": run.no_artifact_h,
             "work_lost": run.lost_h, "below_baseline": below_baseline_h(run, base)}
    if not ran(run):  # cancelled while queued: nothing used, nothing to price
        price, reason = 0.0, ""
    elif not run.gpu_model:
        price, reason = None, UNKNOWN_MODEL
    elif run.running_at_ms is None:
        price, reason = None, NO_PRICE
    else:
        quote = prices.quote(run.gpu_model, run.running_at_ms,
                             {"queue": run.queue, "priority_class": run.priority_class,
                              "node_pool": run.node_pool, "tenancy": run.tenancy})
        price, reason = quote.per_gpu_hour, quote.reason
    return RunWaste(run, waste, price, reason, base)


def _pct(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    pos = (len(s) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


def rollup(items: Sequence[RunWaste], by: str) -> list[dict[str, Any]]:
    """Roll attributed runs up by ``family``, ``team``, ``queue``, ``priority_class`` or ``run``.

    Returns:
        One dict per group, the most costly (then most GPU-hours) first.

    """
    groups: dict[str, list[RunWaste]] = {}
    for w in items:
        key = w.run.run_id if by == "run" else getattr(w.run, by)
        groups.setdefault(key or "(none)", []).append(w)
    out = [dict(key=k, **summarise(v)) for k, v in groups.items()]
    out.sort(key=lambda g: (-(g["cost"] or 0.0), -g["gpu_hours"], g["key"]))
    return out


def summarise(items: Sequence[RunWaste]) -> dict[str, Any]:
    """The figures of a set of attributed runs (a group, or all of them)."""
    completed = [w for w in items if w.run.outcome == "succeeded"]
    gpu_h = sum(w.run.gpu_hours for w in items)
    priced = [w for w in items if w.price is not None]
    waste = {c: sum(w.waste_h[c] for w in items) for c in CAUSES}
    waste_cost = sum((w.price or 0.0) * sum(w.waste_h.values()) for w in priced)
    delays = [w.run.queue_delay_s for w in items if w.run.queue_delay_s is not None]
    # a run cancelled in the queue used nothing: not a run that ended without its artifact
    terminated = [w for w in items if w.run.outcome in TERMINATED and ran(w.run)]
    outcomes: dict[str, int] = {}
    for w in items:
        outcomes[w.run.outcome or "unknown"] = outcomes.get(w.run.outcome or "unknown", 0) + 1
    return {
        "runs": len(items),
        "completed_runs": len(completed),
        "gpu_hours": round(gpu_h, 3),
        "cost": round(sum(w.cost or 0.0 for w in priced), 2) if priced else None,
        "unpriced_runs": len(items) - len(priced),
        "unpriced_gpu_hours": round(sum(w.run.gpu_hours for w in items if w.price is None), 3),
        "gpu_hours_per_completed_run": _r(gpu_h / len(completed)) if completed else None,
        "queue_delay_p50_s": _r(_pct(delays, 0.5), 1),
        "queue_delay_p95_s": _r(_pct(delays, 0.95), 1),
        "outcomes": dict(sorted(outcomes.items())),
        "usable_artifact_runs": sum(1 for w in items if w.run.usable_artifact),
        "terminated_without_artifact_share": _r(
            sum(1 for w in terminated if not w.run.usable_artifact) / len(items))
        if items else None,
        "wasted_gpu_hours": {c: round(h, 3) for c, h in waste.items()},
        "wasted_gpu_hours_total": round(sum(waste.values()), 3),
        "wasted_cost": round(waste_cost, 2) if priced else None,
    }


def bad_input(items: Sequence[RunWaste]) -> dict[str, Any]:
    """What could not be priced or measured: counts and GPU-hours, never zeros in disguise."""
    reasons: dict[str, int] = {}
    models: dict[str, int] = {}
    for w in items:
        if w.price is None:
            reasons[w.unpriced_reason] = reasons.get(w.unpriced_reason, 0) + 1
            if w.unpriced_reason == UNKNOWN_MODEL:
                name = w.run.gpu_model or "(none reported)"
                models[name] = models.get(name, 0) + 1
    gaps = [w for w in items if w.unobserved_h > 0]
    return {
        "unpriced_runs": sum(reasons.values()),
        "unpriced_gpu_hours": round(sum(w.run.gpu_hours for w in items if w.price is None), 3),
        "unpriced_reasons": dict(sorted(reasons.items())),
        "unknown_gpu_models": dict(sorted(models.items())),
        "telemetry_gap_runs": len(gaps),
        "unobserved_gpu_hours": round(sum(w.unobserved_h for w in gaps), 3),
        "clock_skew_runs": sum(1 for w in items if w.run.skewed_nodes > 0),
        "no_baseline_runs": sum(1 for w in items if w.baseline is None),
        "no_step_telemetry_runs": sum(1 for w in items if w.run.step_records == 0),
    }


def cost_report(runs: Sequence[RunCost], history: Sequence[RunCost], prices: Prices,
                by: str) -> dict[str, Any]:
    """The whole ``runwatch cost`` answer for the runs of a window.

    Args:
        runs: The window's run summaries.
        history: Summaries the baselines are learnt from (the window's, or more).
        prices: The prices.
        by: Group key (one of :data:`GROUP_KEYS`).

    Returns:
        ``currency``, ``by``, ``totals``, ``groups``, ``baselines`` and ``bad_input``.

    """
    base = baselines(history)
    items = [attribute(r, base.get((r.family, r.gpu_model)), prices) for r in runs]
    return {
        "currency": prices.currency,
        "by": by,
        "attribution_order": list(CAUSES),
        "totals": summarise(items),
        "groups": rollup(items, by),
        "baselines": [{"family": b.family, "gpu_model": b.gpu_model,
                       "util_p50": round(b.util_p50, 1), "runs": b.runs,
                       "below_share": round(b.below_share, 3)}
                      for b in sorted(base.values(), key=lambda b: (b.family, b.gpu_model))],
        "bad_input": bad_input(items),
    }
