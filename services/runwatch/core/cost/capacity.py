"""Capacity attribution: where a window's lost throughput went, with the evidence (pure).

Five causes, each measured in GPU-hours (see docs/cost.md):

* ``accelerator_supply``: queue delay of jobs (minutes x GPUs asked for) in
  minutes when the cluster had fewer free GPUs than the job needed;
* ``scheduler_policy``: queue delay in minutes when enough GPUs were free
  (``fragmented`` when no single node had enough, else ``idle``);
* ``distributed_storage``: the excess loader wait and checkpoint time of runs
  whose loader waits rose (over twice their own median) in the same
  :data:`BUCKET_MS` buckets as those of at least :data:`MIN_RUNS` runs in all,
  in an episode (consecutive such buckets) in which their checkpoint times
  rose too (over twice their own median);
* ``network_fabric``: the excess compute time of runs whose compute time per
  step rose (over 1.5 x their median) together, on at least two nodes, while
  their loader waits did not;
* ``workload_configuration``: the below-baseline GPU time of runs that had
  nothing of the above in the window.

The cause with the most lost GPU-hours is the bottleneck.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from statistics import median
from typing import Any

BUCKET_MS = 300_000
MIN_RUNS = 3
LOADER_RISE = 2.0
LOADER_MIN_EXCESS_MS = 100.0
CKPT_RISE = 2.0
COMPUTE_RISE = 1.5
CAUSES = ("accelerator_supply", "scheduler_policy", "distributed_storage", "network_fabric",
          "workload_configuration")


@dataclass(frozen=True, slots=True)
class QueueWait:
    """A job's wait between queued and running."""

    run_id: str
    queued_ms: int
    running_ms: int
    gpus: int


@dataclass(frozen=True, slots=True)
class NodeMinute:
    """GPUs a node reported in one minute, and how many of them ran no process."""

    minute_ms: int
    node: str
    gpus: int
    free: int


@dataclass(frozen=True, slots=True)
class StepBucket:
    """A run's step timings summed over one bucket."""

    run_id: str
    bucket_ms: int
    steps: int
    loader_ms: float
    compute_ms: float


@dataclass(frozen=True, slots=True)
class CkptBucket:
    """A run's checkpoints summed over one bucket."""

    run_id: str
    bucket_ms: int
    count: int
    duration_ms: float


def _queue(waits: Sequence[QueueWait], minutes: Sequence[NodeMinute]) -> dict[str, Any]:
    by_min: dict[int, list[NodeMinute]] = {}
    for m in minutes:
        by_min.setdefault(m.minute_ms, []).append(m)
    supply = sched = frag = unknown = 0.0
    supply_runs: set[str] = set()
    sched_runs: set[str] = set()
    full_minutes: set[int] = set()
    for w in waits:
        start = w.queued_ms - w.queued_ms % 60_000
        for t in range(start, w.running_ms, 60_000):
            lo, hi = max(t, w.queued_ms), min(t + 60_000, w.running_ms)
            h = (hi - lo) / 3_600_000 * max(w.gpus, 1)
            nodes = by_min.get(t)
            if not nodes:
                unknown += h
                continue
            free = sum(n.free for n in nodes)
            if free >= max(w.gpus, 1):
                sched += h
                sched_runs.add(w.run_id)
                if max(n.free for n in nodes) < w.gpus:
                    frag += h
            else:
                supply += h
                supply_runs.add(w.run_id)
                full_minutes.add(t)
    total_gpus = max((sum(n.gpus for n in v) for v in by_min.values()), default=0)
    return {
        "accelerator_supply": (supply, {
            "queued_runs": len(supply_runs), "minutes_short_of_gpus": len(full_minutes),
            "cluster_gpus": total_gpus}),
        "scheduler_policy": (sched, {
            "queued_runs": len(sched_runs), "fragmented_gpu_hours": round(frag, 3),
            "idle_gpu_hours": round(sched - frag, 3)}),
        "unknown_queue_gpu_hours": unknown,
    }


def _rises(values: Mapping[int, float], factor: float, min_excess: float
           ) -> tuple[float, dict[int, float]]:
    base = median(values.values())
    return base, {b: v for b, v in values.items() if v > base * factor and v - base > min_excess}


def _episodes(buckets: Iterable[int]) -> list[list[int]]:
    """Group buckets into runs of consecutive ones."""
    out: list[list[int]] = []
    for b in sorted(buckets):
        if out and b - out[-1][-1] <= BUCKET_MS:
            out[-1].append(b)
        else:
            out.append([b])
    return out


def _storage_network(steps: Sequence[StepBucket], ckpts: Sequence[CkptBucket],
                     gpus: Mapping[str, int], nodes: Mapping[str, Sequence[str]]
                     ) -> tuple[tuple[float, dict[str, Any]], tuple[float, dict[str, Any]],
                                set[str]]:
    per_run: dict[str, dict[int, StepBucket]] = {}
    for s in steps:
        if s.steps > 0:
            per_run.setdefault(s.run_id, {})[s.bucket_ms] = s
    ck_run: dict[str, dict[int, CkptBucket]] = {}
    for c in ckpts:
        if c.count > 0:
            ck_run.setdefault(c.run_id, {})[c.bucket_ms] = c
    loader_up: dict[int, dict[str, float]] = {}
    compute_up: dict[int, dict[str, float]] = {}
    loader_base: dict[str, float] = {}
    for run, buckets in per_run.items():
        if len(buckets) < 4:
            continue
        lb, lup = _rises({b: s.loader_ms / s.steps for b, s in buckets.items()}, LOADER_RISE,
                         LOADER_MIN_EXCESS_MS)
        loader_base[run] = lb
        for b, v in lup.items():
            loader_up.setdefault(b, {})[run] = (v - lb) * buckets[b].steps
        cb, cup = _rises({b: s.compute_ms / s.steps for b, s in buckets.items()}, COMPUTE_RISE,
                         LOADER_MIN_EXCESS_MS)
        for b, v in cup.items():
            if b not in lup:
                compute_up.setdefault(b, {})[run] = (v - cb) * buckets[b].steps
    ck_base = {r: median(c.duration_ms / c.count for c in v.values())
               for r, v in ck_run.items() if len(v) >= 3}
    storage_h = 0.0
    storage_runs: set[str] = set()
    storage_buckets: list[int] = []
    loader_ms = ckpt_ms = 0.0
    for episode in _episodes([b for b, runs in loader_up.items() if len(runs) >= MIN_RUNS]):
        lo, hi = episode[0], episode[-1] + BUCKET_MS
        ck_excess: dict[str, float] = {}
        for r in {r for b in episode for r in loader_up[b]}:
            for b, c in ck_run.get(r, {}).items():
                if (lo <= b < hi and r in ck_base
                        and c.duration_ms / c.count > CKPT_RISE * ck_base[r]):
                    ck_excess[r] = ck_excess.get(r, 0.0) + c.duration_ms - c.count * ck_base[r]
        if not ck_excess:
            continue
        storage_buckets.extend(episode)
        for b in episode:
            for r, ms in loader_up[b].items():
                loader_ms += ms * max(gpus.get(r, 1), 1)
                storage_runs.add(r)
        for r, ms in ck_excess.items():
            ckpt_ms += ms * max(gpus.get(r, 1), 1)
            storage_runs.add(r)
    storage_h = (loader_ms + ckpt_ms) / 3_600_000
    net_h = 0.0
    net_runs: set[str] = set()
    net_buckets: list[int] = []
    for b, runs in sorted(compute_up.items()):
        spread = {n for r in runs for n in nodes.get(r, ())}
        if len(runs) < MIN_RUNS or len(spread) < 2:
            continue
        net_buckets.append(b)
        for r, ms in runs.items():
            net_h += ms * max(gpus.get(r, 1), 1) / 3_600_000
            net_runs.add(r)
    storage = (storage_h, {"runs": sorted(storage_runs), "buckets": len(storage_buckets),
                           "first_bucket_ms": storage_buckets[0] if storage_buckets else None,
                           "excess_loader_gpu_hours": round(loader_ms / 3_600_000, 3),
                           "excess_checkpoint_gpu_hours": round(ckpt_ms / 3_600_000, 3)})
    network = (net_h, {"runs": sorted(net_runs), "buckets": len(net_buckets),
                       "nodes": sorted({n for r in net_runs for n in nodes.get(r, ())})})
    return storage, network, storage_runs | net_runs


def capacity_report(waits: Sequence[QueueWait], minutes: Sequence[NodeMinute],
                    steps: Sequence[StepBucket], ckpts: Sequence[CkptBucket],
                    gpus: Mapping[str, int], nodes: Mapping[str, Sequence[str]],
                    below_baseline: Iterable[tuple[str, float, float | None, float | None]]
                    ) -> dict[str, Any]:
    """Attribute a window's lost throughput to the five causes.

    Args:
        waits: Queue waits that ended in the window (a preempted run queued again has one
            per attempt).
        minutes: Per node and minute, GPUs reported and GPUs without a process.
        steps: Step timings per run and bucket.
        ckpts: Checkpoints per run and bucket.
        gpus: GPUs per run.
        nodes: Nodes per run.
        below_baseline: ``(run_id, below-baseline GPU-hours, run's busy median
            utilization, baseline)`` of the window's runs.

    Returns:
        ``bottleneck`` (a cause, or None when nothing was lost) and ``causes``,
        the largest first, each with ``lost_gpu_hours`` and ``evidence``.

    """
    q = _queue(waits, minutes)
    storage, network, slowed = _storage_network(steps, ckpts, gpus, nodes)
    cfg_h = 0.0
    cfg_runs = []
    for run, hours, util, base in below_baseline:
        if hours > 0 and run not in slowed:
            cfg_h += hours
            cfg_runs.append({"run_id": run, "lost_gpu_hours": round(hours, 3),
                             "busy_util_p50": None if util is None else round(util, 1),
                             "baseline_util_p50": None if base is None else round(base, 1)})
    found = {"accelerator_supply": q["accelerator_supply"],
             "scheduler_policy": q["scheduler_policy"],
             "distributed_storage": storage, "network_fabric": network,
             "workload_configuration": (cfg_h, {"runs": cfg_runs})}
    causes = [{"cause": c, "lost_gpu_hours": round(h, 3), "evidence": ev}
              for c, (h, ev) in found.items()]
    causes.sort(key=lambda c: (-c["lost_gpu_hours"], CAUSES.index(c["cause"])))
    top = causes[0]["cause"] if causes[0]["lost_gpu_hours"] > 0 else None
    unknown = round(q["unknown_queue_gpu_hours"], 3)
    return {"bottleneck": top, "causes": causes,
            "unknown": {"queue_gpu_hours_without_occupancy": unknown}}
