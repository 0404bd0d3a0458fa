"""Run-join handlers for node samples and the per-run HalfSpaceTrees signal.

Size: the node-sample handlers and the per-run HalfSpaceTrees signal, which
reads the same aggregates.

Split from :mod:`runwatch.core.stream.join`: GPU errors, throttling, utilization and
SM occupancy of the run's own GPUs, the cause of an occupancy decline, and
the HST anomaly score over the run's normalized indicator vector. The
occupancy indicator uses SM occupancy where the agent measured it and GPU
utilization where it did not (``source=`` in the alert evidence detail says which).
"""

from __future__ import annotations

import json
import math
from bisect import bisect_left
from dataclasses import dataclass
from operator import sub
from typing import Any, ClassVar, Literal

from runwatch.core.jsontext import compact, parse
from runwatch.core.signals import rules
from runwatch.core.signals.cause import THROUGHPUT_SYMPTOMS
from runwatch.core.signals.indicators import occupancy_or_utilization
from runwatch.core.signals.indwatch import (
    ALERTING_WATCHES,
    HST_LEVEL,
    HST_MIN_Z,
    HST_WARMUP,
    WATCH_SIGNAL,
    most_deviating,
)
from runwatch.core.signals.indwatch import normalized_vector as hst_vector
from runwatch.core.signals.rules import Finding
from runwatch.core.stream.runstate import (
    Output,
    RunConfig,
    RunState,
    emit,
    evidence_at,
    hst_learned,
    hst_of,
    observe,
    watch_of,
)

Baseline = dict[str, list[float]]
Gpu = tuple[Any, ...]
"""One GPU of a node entry: index (int), util % (float), SM active % (float or None), throttle
reasons, XID, ECC uncorrected (ints), memory used/total (float; None: total unknown),
temperature °C (float), SM clock MHz (int), NVLink rx+tx bytes/s (float; None: not reported).
An entry of an older worker has only the first six."""
THROTTLE_EVIDENCE = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
"""NVML clocks-event reasons that slow a busy GPU down: SW power cap, HW slowdown, SW thermal,
HW thermal, HW power brake. GPU idle (0x1), application clocks (0x2), sync boost (0x10) and
display clocks (0x100) are settings or consequences, not causes."""

STARVING_WATCHES = ("loader_share", "effective_batch_size")
"""Execution indicators that starve the GPUs when they move (see :func:`occupancy_cause`)."""
NODE_AGG = "runwatch.internal.NodeAgg"
NODE_AGG_VERSION = 1


@dataclass(frozen=True, slots=True)
class NodeEntry:
    """One node sample reduced to what a run's join uses: the run's own GPUs."""

    node: str
    at_ms: int
    gpus: tuple[Gpu, ...]


@dataclass(frozen=True, slots=True)
class NodeAgg:
    """Node samples of one run, aggregated per batch (the ``rw.internal.node-by-run`` payload).

    Compact JSON, internal to the processor: ``{"v":1,"run":..,"n":[[node, at_ms,
    [[index, util, sm, throttle, xid, ecc_unc, mem, temp, clock, nvlink], ...]], ...]}``
    (:data:`Gpu`; six-field GPUs of an older worker are read too).
    """

    run_id: str
    emitted_at_ms: int
    nodes: tuple[NodeEntry, ...]
    AVRO_NAME: ClassVar[str] = NODE_AGG

    def to_json(self) -> bytes:
        """Return the compact JSON payload."""
        n = [[e.node, e.at_ms, e.gpus] for e in self.nodes]  # tuples encode as arrays
        return compact({"v": NODE_AGG_VERSION, "run": self.run_id, "n": n}).encode()

    @classmethod
    def from_json(cls, data: bytes) -> NodeAgg:
        """Parse :meth:`to_json` output.

        Raises:
            ValueError: If the bytes are not a node aggregate (with the reason).

        """
        try:
            d = parse(data)
            if d.get("v") != NODE_AGG_VERSION:
                msg = f"node aggregate version {d.get('v')!r} unsupported"
                raise ValueError(msg)
            nodes = tuple(NodeEntry(str(node), int(at), _gpus(gpus)) for node, at, gpus in d["n"])
            run = d["run"]
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            msg = f"not a node aggregate: {exc}"
            raise ValueError(msg) from exc
        if not isinstance(run, str) or not run or not nodes:
            msg = "not a node aggregate: run id or nodes missing"
            raise ValueError(msg)
        return cls(run, max(e.at_ms for e in nodes), nodes)

    @staticmethod
    def bundle(aggs: list[NodeAgg]) -> bytes:
        """Return several aggregates as one payload: their :meth:`to_json` lines.

        The node agent sends one bundle per destination partition per batch
        (every run in it hashes to that partition), so the run agent gets a
        handful of messages per second instead of one per run. A single
        aggregate is a one-line bundle.
        """
        return b"\n".join(agg.to_json() for agg in aggs)

    @classmethod
    def unbundle(cls, data: bytes) -> list[tuple[NodeAgg | str, bytes]]:
        """Split a :meth:`bundle` payload into (aggregate or error reason, its own bytes).

        A line that is not an aggregate gives its reason in place of the
        aggregate (it is dead-lettered alone; the other lines are kept).
        """
        out: list[tuple[NodeAgg | str, bytes]] = []
        for line in data.split(b"\n"):
            if not line.strip():
                continue
            try:
                out.append((cls.from_json(line), line))
            except ValueError as exc:
                out.append((str(exc), line))
        return out or [("not a node aggregate: empty payload", data)]

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-able dict (held events)."""
        return json.loads(self.to_json())  # type: ignore[no-any-return]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> NodeAgg:
        """Rebuild from :meth:`to_dict` output."""
        return cls.from_json(json.dumps(d).encode())


AllocOp = Literal["add", "remove"]
ALLOC_CHANGE_VERSION = 1


@dataclass(frozen=True, slots=True)
class AllocChange:
    """A run's allocation on one node changed (the ``rw.internal.job-by-node`` payload).

    Compact JSON, internal to the processor, keyed by node like ``rw.exec.node``:
    ``{"v":1,"run":..,"node":..,"op":"add"|"remove","gpus":[..],"at":..}``;
    ``gpus`` empty means every GPU of the node, ``at`` is the job event's time.
    """

    run_id: str
    node: str
    op: AllocOp
    gpus: tuple[int, ...] = ()
    at_ms: int = 0

    def to_json(self) -> bytes:
        """Return the compact JSON payload."""
        return json.dumps({"v": ALLOC_CHANGE_VERSION, "run": self.run_id, "node": self.node,
                           "op": self.op, "gpus": list(self.gpus), "at": self.at_ms},
                          separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> AllocChange:
        """Parse :meth:`to_json` output.

        Raises:
            ValueError: If the bytes are not an allocation change (with the reason).

        """
        try:
            d = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            msg = f"allocation change is not JSON: {exc}"
            raise ValueError(msg) from exc
        if not isinstance(d, dict) or d.get("v") != ALLOC_CHANGE_VERSION:
            msg = "allocation change: expected a JSON object with v=1"
            raise ValueError(msg)
        run, node, op, gpus, at = (d.get("run"), d.get("node"), d.get("op"),
                                   d.get("gpus", []), d.get("at", 0))
        if not (isinstance(run, str) and run and isinstance(node, str) and node):
            msg = "allocation change: run and node must be non-empty strings"
            raise ValueError(msg)
        if op not in ("add", "remove"):
            msg = f"allocation change: op must be add or remove, not {op!r}"
            raise ValueError(msg)
        if (not isinstance(gpus, list) or not all(type(g) is int and g >= 0 for g in gpus)
                or type(at) is not int):
            msg = "allocation change: gpus must be GPU indices and at an epoch ms integer"
            raise ValueError(msg)
        return cls(run, node, op, tuple(sorted(set(gpus))), at)


def _gpus(gpus: Any) -> tuple[Gpu, ...]:
    """Return a node entry's GPUs read from JSON, each as :func:`_gpu` makes it.

    One comprehension over the usual ten-field GPUs (no call per GPU); a list
    that is not all of those (an older worker's six fields) goes GPU by GPU.
    """
    try:
        return tuple([(int(i), float(u), None if sm is None else float(sm), int(th), int(x),
                       int(e), None if m is None else float(m), None if t is None else float(t),
                       None if c is None else int(c), None if lk is None else float(lk))
                      for i, u, sm, th, x, e, m, t, c, lk in gpus])
    except ValueError:  # a GPU not of ten fields, or a value that is no number: the GPU-by-GPU
        return tuple(_gpu(g) for g in gpus)  # reader gives the result, or the same error


def _gpu(g: Any) -> Gpu:
    if len(g) == 6:  # an older worker's entry
        index, util, sm, throttle, xid, ecc = g
        return (int(index), float(util), None if sm is None else float(sm), int(throttle),
                int(xid), int(ecc))
    index, util, sm, throttle, xid, ecc, mem, temp, clock, link = g
    return (int(index), float(util), None if sm is None else float(sm), int(throttle),
            int(xid), int(ecc), None if mem is None else float(mem),
            None if temp is None else float(temp), None if clock is None else int(clock),
            None if link is None else float(link))


def gpu_of(index: int, util: float, sm: float | None, throttle: int, xid: int | None, ecc: int,
           used: int, total: int, temp: float, clock: int, nvl_rx: float | None,
           nvl_tx: float | None) -> Gpu:
    """Return a node entry's GPU tuple from a GPU sample's fields (records and dicts alike).

    Memory becomes a used/total fraction (4 decimals), NVLink rx+tx one rate (whole bytes/s).
    """
    link = None if nvl_rx is None and nvl_tx is None else float(round((nvl_rx or 0.0)
                                                                      + (nvl_tx or 0.0)))
    return (index, util, sm, throttle, xid or 0, ecc,
            round4(used / total) if total > 0 else None, temp, clock, link)


def round4(x: float) -> float:
    """Return ``round(x, 4)`` (the same float), cheaply for a fraction in [0, 1].

    ``round(x, 4)`` is the double nearest the decimal ``k / 10**4``, ``k`` the
    correctly rounded (half-even) ``x * 10**4``; ``k / 1e4`` is that double too
    (IEEE division of exact integers rounds correctly). ``x * 1e4`` is off by
    at most one ulp (about 2e-12 here), so its rounding picks the same ``k``
    unless it sits within 1e-9 of a half: those, and values outside [0, 1],
    take ``round`` itself.
    """
    if 0.0 <= x <= 1.0:
        y = x * 1e4
        k = round(y)
        if abs(abs(y - k) - 0.5) > 1e-9:
            return k / 1e4
    return round(x, 4)


def hst_evidence(s: RunState, cfg: RunConfig, at: int, now: int) -> list[Output]:
    """Score the run's normalized indicator vector with its HalfSpaceTrees (evidence only).

    An anomalous vector counts as evidence for the signal of the indicator that
    sits furthest out, and only when that one is itself several sigmas out.
    """
    live = {k: watch_of(s, cfg, k, None) for k in s.watches}
    vec = hst_vector(live)
    hst = hst_of(s)
    score = hst.score_one(vec)
    hst.learn_one(vec)
    hst_learned(s)
    if s.hst_n < HST_WARMUP or score < HST_LEVEL:
        return []
    name, z = most_deviating(live, cfg.specs)
    if not name or z < HST_MIN_Z:
        return []
    f = Finding("detector:hst", name, WATCH_SIGNAL[name], "info",  # type: ignore[arg-type]
                score, HST_LEVEL, score * 0.5, at,
                f"Indicator vector anomalous (HST {score:.2f}); {name} {z:.1f} sigma out",
                alert=False)
    return emit(s, cfg, f, now, one_shot=True)


def node_agg(s: RunState, e: NodeAgg, now: int, cfg: RunConfig,
             bl: Baseline | None) -> list[Output]:
    """Fold a per-run node aggregate (GPUs already reduced to the run's own) into the state.

    Readings stamped while the run was off its GPUs (after its end, or between a
    preemption or requeue and its next ``running``) are not its own: a release
    reaches the nodes agent through the runs agent, so a node's next samples can be
    routed to the run before it is applied, and a preempted run keeps its nodes
    (the scheduler may give them back). Idle GPUs, or the next job's XID, must not
    page it. Nor must the previous job's: readings stamped before the run was first
    placed (its first ``scheduled`` or ``running``), or while it waits ``queued`` with an
    allocation named and was never placed (the node's current job runs there), are not
    its own either.
    """
    out: list[Output] = []
    gaps = s.off_gpus
    placed = s.signals.get("placed_at")
    if placed is None and s.job_state == "queued":
        return out
    for entry in e.nodes:
        at = entry.at_ms
        if placed is not None and at < placed:
            continue
        if gaps and any(a < at and (not b or at < b) for a, b in gaps):
            continue
        out += node_entry(s, entry, at, now, cfg, bl)
    return out


def pct_mean(pct: list[float]) -> float:
    """Return :func:`~runwatch.core.signals.indicators.gpu_utilization` without numpy (8 values).

    The mean of the finite percentages as a fraction clipped to [0, 1]; nan for none.
    """
    xs = [x for x in pct if math.isfinite(x)]
    return min(max(sum(xs) / len(xs) / 100.0, 0.0), 1.0) if xs else math.nan


def node_entry(s: RunState, e: NodeEntry, at: int, now: int, cfg: RunConfig,
               bl: Baseline | None) -> list[Output]:
    """Fold one node's reading of the run's GPUs.

    Errors, throttling and slowdowns, memory pressure, utilization, NVLink throughput and
    occupancy.
    """
    gpus = e.gpus
    out: list[Output] = []
    for g in gpus:
        if g[4] or g[5]:
            f = rules.gpu_errors(e.node, g[0], g[4], g[5], at)
            if f:
                out += emit(s, cfg, f, now, one_shot=True, node=e.node)
    if gpus:
        util = pct_mean([g[1] for g in gpus])
        started = training(s, at, util)
        learning = usual_throttle(s, e, cfg) if started else False
        if any(g[3] for g in gpus) or s.signals.get("slow"):
            out += throttling(s, e, at, now, cfg, evidence=started and not learning)
        mem = [g[6] for g in gpus if len(g) > 6 and g[6] is not None]
        if mem:
            out += memory_pressure(s, e.node, max(mem), at, now, cfg)
        link = [g[9] for g in gpus if len(g) > 9 and g[9] is not None]
        if link and started and util >= BUSY:  # idle phases move no gradients
            # the slowest GPU's links (one GPU's lost link set slows every all-reduce), on
            # the run's slowest node (its nodes' readings alternate: see GPU_ROUND_MS)
            node, rate = slowest_node(s, "link", e.node, at, min(link))
            out += observe(s, cfg, "interconnect", rate, at, now, bl,
                           f"node {node}: NVLink {rate / 1e9:.2f} GB/s on its slowest GPU")
        if not started:
            return out
        occ, source = occupancy_or_utilization([g[2] for g in gpus], [g[1] for g in gpus])
        reading = [at, e.node, util, occ, source]
        if not s.first_step_at_ms:  # a run without steps: nothing to tell its pauses by
            return out + _gpu_reading(s, reading, now, cfg, bl)
        s.gpu_pending.append(reading)
        s.gpu_pending.sort(key=lambda r: r[0])
        del s.gpu_pending[:-PENDING_MAX]
        out += settle(s, now, cfg, bl)
    return out


STEPPING_K = 3.0
"""A node reading belongs to training when it lies between two consecutive steps of the run
at most this many typical step intervals apart (median of the intervals between its recent
steps): the run was stepping around it. Evaluation passes, checkpoint writes and other
pauses between steps run the GPUs at another level and are not the level the GPU watches
learn or judge; a slower step (a starved GPU) is still a step, and an interval up to three
typical ones is still stepping. The whole interval decides, not the nearest step: a window
of three intervals around each step read the first and last two minutes of every evaluation
pass between 40-second steps as training, and paged a fall of occupancy at each one."""
PENDING_MAX = 64
"""Node readings of a run kept waiting for its steps (a long pause drops the oldest)."""


GPU_ROUND_MS = 5_000
"""The GPU watches read a run's nodes in rounds at least this long: each node's mean over
the round, the run's value the slowest node's. A round ends when a node reports again
after this long (so every node of the run had its turn, whatever the agents' interval).
Per reading, two problems: a multi-node run's readings alternate between its nodes, so
one node whose GPUs fell idle was never three readings in a row below the run's level
(and was never paged); and at the agent's 1 s interval three readings are three seconds,
so a healthy run's 6 s input hiccup when it opened a new shard paged a fall."""


def node_round(s: RunState, key: str, node: str, at: int, values: tuple[float, ...],
               tag: str = "") -> tuple[int, str, tuple[float, ...], str] | None:
    """Add a node's reading to the run's current round of ``key``; return a round it ends.

    Args:
        s: The run state (the rounds live in ``s.signals["rounds"]``).
        key: Which round (GPU watches, interconnect).
        node: The node read.
        at: The reading's event time.
        values: Its values (non-finite ones are left out of the means).
        tag: Kept with the node's values (the last one of the round).

    Returns:
        None while the round goes on; else (event time of the round's last reading,
        the slowest node (lowest mean of the last value), its means, its tag).

    """
    rounds = s.signals.setdefault("rounds", {})
    cur = rounds.get(key)
    done = None
    if cur is not None and node in cur[1] and at - cur[0] >= GPU_ROUND_MS:
        done, cur = cur, None
    if cur is None:
        cur = rounds[key] = [at, {}, at]
    acc = cur[1].get(node)
    if acc is None:
        acc = cur[1][node] = [0.0] * (2 * len(values)) + [tag]
    for i, v in enumerate(values):
        if math.isfinite(v):
            acc[2 * i] += v
            acc[2 * i + 1] += 1
    acc[-1] = tag
    cur[2] = max(cur[2], at)
    if done is None:
        return None
    means = {n: tuple(a[2 * i] / a[2 * i + 1] if a[2 * i + 1] else math.nan
                      for i in range(len(values))) + (a[-1],)
             for n, a in done[1].items()}
    slowest = min(means, key=lambda n: (means[n][-2] if math.isfinite(means[n][-2])
                                        else math.inf))
    m = means[slowest]
    return int(done[2]), slowest, m[:-1], str(m[-1])


NODE_FRESH_MS = 60_000
"""A node's latest reading stands for it this long in :func:`slowest_node`."""


def slowest_node(s: RunState, key: str, node: str, at: int, value: float) -> tuple[str, float]:
    """Record a node's latest ``key`` value; return the run's lowest one of those still fresh.

    Each reading is judged as it comes (an evidence watch's pace), but against
    every node of the run: the lowest latest value of the nodes read within
    :data:`NODE_FRESH_MS` before it.
    """
    last = s.signals.setdefault("latest", {}).setdefault(key, {})
    last[node] = [at, value]
    for n in [n for n, (t, _) in last.items() if at - t > NODE_FRESH_MS]:
        del last[n]
    low = min(last, key=lambda n: last[n][1])
    return low, float(last[low][1])


def _gpu_reading(s: RunState, r: list[Any], now: int, cfg: RunConfig,
                 bl: Baseline | None) -> list[Output]:
    done = node_round(s, "gpu", r[1], r[0], (r[2], r[3]), r[4])
    if done is None:
        return []
    at, node, (util, occ), source = done
    out = observe(s, cfg, "gpu_utilization", util, at, now, bl, f"node {node}")
    what = "SM occupancy" if source == "sm_occupancy" else "GPU utilization (no SM occupancy)"
    return out + observe(s, cfg, "gpu_occupancy", occ, at, now, bl,
                         f"node {node}: {what} {occ:.0%}; source={source}",
                         cause=lambda: (occupancy_cause(s, at, cfg),
                                        "gpu_occupancy" in ALERTING_WATCHES))


def stepped(s: RunState, at: int, now: int, cfg: RunConfig,
            bl: Baseline | None) -> list[Output]:
    """Record a step's event time; fold the node readings it shows to be training.

    Args:
        s: The run state.
        at: The step's event time (``StepTiming`` or ``LearningStep``).
        now: Current time.
        cfg: Processor knobs.
        bl: Workload baseline.

    Returns:
        Alerts of the GPU watches.

    """
    times = s.step_at
    if at not in times:  # a step's timing and learning records share their time
        times.append(at)
        if len(times) > 1 and times[-2] > at:
            times.sort()
        _note_gap(s, times, at)
        del times[:-STEP_TIMES]
    return settle(s, now, cfg, bl) if s.gpu_pending else []


STEP_TIMES = 64
"""Recent step event times a run keeps (to tell its pauses from its training)."""
STEP_GAPS = 64
"""Pauses between steps a run keeps beyond its recent steps (``RunState.step_gaps``)."""


def _note_gap(s: RunState, times: list[int], at: int) -> None:
    """Keep the pauses next to a new step, for node readings older than the kept steps.

    A step arriving inside a kept pause (out of order) splits it: the pause is
    dropped and the intervals on either side of the step are judged anew.
    """
    gaps = s.step_gaps
    if gaps and any(a < at < b for a, b in gaps):
        gaps[:] = [g for g in gaps if not g[0] < at < g[1]]
    i = times.index(at)
    sides = [(times[i - 1], at)] if i else []
    if i + 1 < len(times):
        sides.append((at, times[i + 1]))
    limit = _stepping_gap(times)
    for lo, hi in sides:
        if hi - lo > limit and [lo, hi] not in gaps:
            gaps.append([lo, hi])
            if len(gaps) > 1 and gaps[-2][0] > lo:
                gaps.sort()
    del gaps[:-STEP_GAPS]


def _stepping_gap(times: list[int]) -> float:
    """Return the longest interval between two steps that is still stepping (``STEPPING_K``)."""
    return STEPPING_K * step_interval(times)


def step_interval(times: list[int]) -> float:
    """Return the median interval between a run's recent step records; inf for fewer than two.

    Args:
        times: Event times of the run's recent steps, sorted (``RunState.step_at``).

    """
    diffs = sorted(map(sub, times[1:], times))  # intervals between steps (C-level, no frames)
    return float(diffs[len(diffs) // 2]) if diffs else math.inf


def settle(s: RunState, now: int, cfg: RunConfig, bl: Baseline | None) -> list[Output]:
    """Fold waiting node readings that a step falls near; drop those inside a pause.

    A reading inside an interval between two consecutive steps at most
    :data:`STEPPING_K` typical step intervals long is training and goes to the GPU
    watches, in event-time order. One inside a longer interval sat in a pause
    (evaluation, checkpoint) and is dropped, as is one taken during a checkpoint
    write the run reported (``RunState.checkpoints``); one after the latest step waits for
    the next. A reading older than the steps kept (:data:`STEP_TIMES`) is judged
    by the pauses kept (``RunState.step_gaps``, :data:`STEP_GAPS`).
    Pure event time: the outcome does not depend on whether the node path or
    the step path is read first.
    """
    times = s.step_at
    if not times:
        return []
    usual = step_interval(times)
    gap = STEPPING_K * usual
    out: list[Output] = []
    keep: list[list[Any]] = []
    # the checkpoint writes the run reported (their events precede the next step on its
    # topic): a pause however short, which a run logging every 10th step hid in its steps
    writes = [(end - spent, end) for end, spent in s.checkpoints] if s.checkpoints else ()
    evals = s.signals.get("val_at")
    for r in s.gpu_pending:
        at = r[0]
        if times[-1] < at:
            keep.append(r)  # no step after it yet: the steps after it may still come
        elif writes and any(a <= at <= b for a, b in writes):
            continue  # read while the run wrote a checkpoint
        elif evals and at > times[0] and _evaluating(times, at, evals, usual):
            continue  # read before an evaluation's result, since the step before it
        elif (stepping(times, at, gap) if at > times[0]
              else not any(a < at < b for a, b in s.step_gaps)):
            # training; a reading older than the kept steps (a backfill's node samples
            # folded after its steps) is unless it lies in a pause the run kept
            out += _gpu_reading(s, r, now, cfg, bl)
    s.gpu_pending = keep
    return out


def _evaluating(times: list[int], at: int, evals: list[int], usual: float) -> bool:
    """Return whether a reading lies between a step and an evaluation result before the next.

    An evaluation pass ends at its result (``run.validation``); when it began is not
    said, so when the interval holding the result is longer than the run's usual one
    (:data:`EVAL_LONGER`), the readings from the last step record before the result up
    to the result are the pass's. Within a run that logs every 200th one-second step, a
    5-minute pass at a fifth of the GPU spans less than three logging intervals, was
    read as training and paged an occupancy fall, blamed on the infrastructure.
    """
    i = bisect_left(times, at)  # times[i - 1] < at <= times[i]
    lo, hi = times[i - 1], times[i]
    if hi - lo <= EVAL_LONGER * usual:  # no longer than the run's usual interval (``usual``)
        return False
    return any(lo < v < hi and at <= v for v in evals)


EVAL_LONGER = 1.25
"""An interval between step records holds an evaluation pass (its readings before the result
are dropped) only when it is this much longer than the run's usual one: a run that
validates in every logging interval has its passes in its usual interval, and dropping
their readings left no training readings at all (a fall of its GPUs to a third went
unpaged)."""


def stepping(times: list[int], at: int, gap: float) -> bool:
    """Return whether the run was stepping at ``at``: the steps around it are ``gap`` apart at most.

    Args:
        times: Step event times (their ends), sorted (as :func:`stepped` keeps them); one
            at or after ``at``.
        at: A node reading's event time.
        gap: The longest interval between two steps that is still stepping (may be
            infinite).

    Returns:
        Whether the interval from the step before ``at`` to the first step at or after it
        is at most ``gap``; before the first step kept, whether that step ends within
        ``gap`` of the reading (the one before it is not known). A binary search.

    """
    i = bisect_left(times, at)  # the first step ending at or after the reading
    if i == len(times):
        return False
    return times[i] - (times[i - 1] if i else at) <= gap


def training(s: RunState, at: int, util: float) -> bool:
    """Whether the run was past its start-up at event time ``at`` (its GPU watches learn then).

    Start-up (loading a model, warming caches, compiling) runs the GPUs at low
    utilization, and a baseline learned from it would sit near zero: a later
    fall could never clear its bound (pauses between steps are left out later:
    :func:`settle`). Training starts at the run's first step
    (``StepTiming`` or ``LearningStep``, event time); a run that reports no
    steps at all (no SDK: neither a step nor a manifest so far) counts from
    the first reading where its GPUs are busy (:data:`BUSY`). A run that is
    never busy (an evaluation job, an input-bound family) is then not watched
    at all rather than paged against a baseline it never had. Samples before
    the first step that arrive after it (topics are read independently) are
    left out by their event time.

    Args:
        s: The run state (``gpu_busy`` is set once a step-less run is busy).
        at: The node reading's event time.
        util: Mean utilization of the run's GPUs in the reading (fraction).

    Returns:
        Whether the reading counts for the GPU utilization and occupancy watches.

    """
    if s.first_step_at_ms:
        return at >= s.first_step_at_ms
    if s.manifest_at_ms:  # an SDK run whose first step has not arrived yet
        return False
    s.gpu_busy = s.gpu_busy or util >= BUSY
    return s.gpu_busy


BUSY = 0.5
"""Mean GPU utilization from which the run's GPUs count as busy (training, not loading)."""
SLOWDOWN_FOR_MS = 60_000
"""How long (event time) a GPU must stay in a hardware slowdown before it alerts: Prometheus'
``for: 1m`` convention; a power brake or thermal event shorter than that costs a few steps."""
MEM_BUCKET_MS = 60_000
"""Memory pressure keeps the run's highest used/total fraction per node per minute."""


def usual_throttle(s: RunState, e: NodeEntry, cfg: RunConfig) -> bool:
    """Learn the throttle reasons the run's GPUs on a node show as it starts training.

    While the GPU watches learn their baseline (the occupancy watch's warm-up, in training
    readings of the node), each GPU's reasons are its usual ones (``RunState.signals``):
    a GPU that sits at its power cap from the start trains at that level, so the cap is
    part of the level and explains no fall from it. Returns whether it is still learning.
    """
    seen: dict[str, int] = s.signals.setdefault("throttle_seen", {})
    n = seen.get(e.node, 0)
    if n >= cfg.specs["gpu_occupancy"].warmup:
        return False
    seen[e.node] = n + 1
    usual: dict[str, int] = s.signals.setdefault("throttle_usual", {})
    for g in e.gpus:
        if g[3] & THROTTLE_EVIDENCE:
            key = f"{e.node}/{g[0]}"
            usual[key] = usual.get(key, 0) | (g[3] & THROTTLE_EVIDENCE)
    return True


def throttling(s: RunState, e: NodeEntry, at: int, now: int, cfg: RunConfig, *,
               evidence: bool = True) -> list[Output]:
    """Throttle reasons of the run's GPUs on one node: evidence, and sustained slowdowns.

    A reason in :data:`THROTTLE_EVIDENCE` that a GPU did not show as the run started
    training (:func:`usual_throttle`) is evidence for the cause of a symptom (occupancy
    or throughput falling); one it showed all along is not (no evidence at all while
    ``evidence`` is false: start-up and the learning readings). A reason in
    :data:`~runwatch.core.signals.rules.SLOWDOWN_MASK`
    held for :data:`SLOWDOWN_FOR_MS` of event time alerts (``rule:gpu_slowdown``,
    infrastructure, one finding per node), whenever it began.
    """
    out: list[Output] = []
    usual: dict[str, int] = s.signals.get("throttle_usual", {})
    throttled = [g[0] for g in e.gpus if evidence
                 and g[3] & THROTTLE_EVIDENCE & ~usual.get(f"{e.node}/{g[0]}", 0)]
    if throttled:
        out += emit(s, cfg, Finding("indicator:gpu_throttle", "throttle_reasons",
                                    "infrastructure", "warning", float(len(throttled)),
                                    0.0, 0.5, at, f"GPUs {throttled} throttled on {e.node}",
                                    subject=e.node, alert=False), now, one_shot=True)
    slow: dict[str, int] = s.signals.setdefault("slow", {})
    held = []
    for g in e.gpus:
        key = f"{e.node}/{g[0]}"
        if not g[3] & rules.SLOWDOWN_MASK:
            slow.pop(key, None)
            continue
        since = slow.setdefault(key, at)
        held.append((g[0], g[3], at - since, g[7] if len(g) > 7 else None,
                     g[8] if len(g) > 8 else None))
    if not slow:
        del s.signals["slow"]
    f = rules.gpu_slowdown(e.node, held, SLOWDOWN_FOR_MS, at) if held else None
    if f:
        out += emit(s, cfg, f, now, one_shot=True, node=e.node)
    return out


def memory_pressure(s: RunState, node: str, frac: float, at: int, now: int,
                    cfg: RunConfig) -> list[Output]:
    """Keep the run's peak GPU memory fraction per minute on a node; check it once a minute.

    See :func:`~runwatch.core.signals.rules.gpu_memory_pressure` (the buckets are its input).
    """
    per_node: dict[str, list[list[float]]] = s.signals.setdefault("mem", {})
    buckets = per_node.setdefault(node, [])
    minute = at // MEM_BUCKET_MS
    if buckets and buckets[-1][0] == minute:
        if frac > buckets[-1][1]:
            buckets[-1][1] = frac
        return []
    if buckets and minute < buckets[-1][0]:
        return []  # late sample of a closed minute: the peak it could raise is already judged
    buckets.append([minute, frac])
    del buckets[:-rules.MEM_WINDOWS * max(rules.MEM_SCALES)]
    f = rules.gpu_memory_pressure([(int(m), v) for m, v in buckets], at, node)
    return emit(s, cfg, f, now, one_shot=True, node=node) if f else []


def throughput_cause(s: RunState, at: int, cfg: RunConfig) -> tuple[str, bool]:
    """Return the signal of a throughput fall and whether it pages on its own.

    A run that gets slower is a symptom. When the run's loader share or
    effective batch size sits past its baseline by the effect bound, those
    explain it and page for it themselves: evidence only (one problem, one
    page). Otherwise it pages as an execution finding; the cause classifier
    (:func:`~runwatch.core.signals.cause.classify`) then names infrastructure when the
    window holds evidence that can slow a run (throttling or a hardware
    slowdown, an interconnect carrying half its usual traffic, XID/ECC
    errors), waiting ``correlation_delay_ms`` for such evidence from the node
    stream, and execution when nothing outside the job changed.
    """
    starving = any(watch_of(s, cfg, n, None).beyond_effect(cfg.specs[n])
                   for n in STARVING_WATCHES if n in s.watches)
    return "execution", not starving


def occupancy_cause(s: RunState, at: int, cfg: RunConfig) -> str:
    """Return the cause of a GPU occupancy decline: infrastructure or execution.

    Execution when the window holds execution evidence (a slower loader,
    restarts, a smaller batch), or the run's loader share or effective batch
    size already sits past its baseline by the effect bound (a slow loader
    starves the GPUs before its own watch fires), and there is no
    infrastructure evidence (XID/ECC errors, throttling); infrastructure
    otherwise. A run getting slower is no such evidence: idle GPUs slow it as
    much as a slow loader does (a fall of throughput paged first made one
    node's idle GPUs an execution problem).
    """
    signals = {f.signal for f in evidence_at(s, at) if at - f.at_ms <= cfg.window_ms
               and f.indicator not in ("gpu_occupancy", "gpu_utilization")
               and f.indicator not in THROUGHPUT_SYMPTOMS}
    if "infrastructure" in signals:
        return "infrastructure"
    starving = any(watch_of(s, cfg, n, None).beyond_effect(cfg.specs[n])
                   for n in STARVING_WATCHES if n in s.watches)
    return "execution" if "execution" in signals or starving else "infrastructure"
