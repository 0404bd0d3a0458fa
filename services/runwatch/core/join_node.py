"""Run-join handlers for node samples and the per-run HalfSpaceTrees signal.

Split from :mod:`runwatch.core.join`: GPU errors, throttling, utilization and
SM occupancy of the run's own GPUs, the cause of an occupancy decline, and
the HST anomaly score over the run's normalized indicator vector. The
occupancy indicator uses SM occupancy where the agent measured it and GPU
utilization where it did not (``source=`` in the alert evidence detail says which).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from runwatch.core import rules
from runwatch.core.indicators import occupancy_or_utilization
from runwatch.core.indwatch import HST_LEVEL, HST_MIN_Z, HST_WARMUP, WATCH_SIGNAL, most_deviating
from runwatch.core.indwatch import normalized_vector as hst_vector
from runwatch.core.records import NodeSample
from runwatch.core.rules import Finding
from runwatch.core.runstate import (
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
Gpu = tuple[int, float, float | None, int, int, int]
"""One GPU of a node entry: index, util %, SM active % (or None), throttle reasons, XID, ECC
uncorrected."""
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
    [[index, util, sm, throttle, xid, ecc_unc], ...]], ...]}``.
    """

    run_id: str
    emitted_at_ms: int
    nodes: tuple[NodeEntry, ...]
    AVRO_NAME: ClassVar[str] = NODE_AGG

    def to_json(self) -> bytes:
        """Return the compact JSON payload."""
        n = [[e.node, e.at_ms, [list(g) for g in e.gpus]] for e in self.nodes]
        return json.dumps({"v": NODE_AGG_VERSION, "run": self.run_id, "n": n},
                          separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> NodeAgg:
        """Parse :meth:`to_json` output.

        Raises:
            ValueError: If the bytes are not a node aggregate (with the reason).

        """
        try:
            d = json.loads(data)
            if d.get("v") != NODE_AGG_VERSION:
                msg = f"node aggregate version {d.get('v')!r} unsupported"
                raise ValueError(msg)
            nodes = tuple(NodeEntry(str(node), int(at), tuple(_gpu(g) for g in gpus))
                          for node, at, gpus in d["n"])
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


def _gpu(g: Any) -> Gpu:
    index, util, sm, throttle, xid, ecc = g
    return (int(index), float(util), None if sm is None else float(sm), int(throttle),
            int(xid), int(ecc))


def entry_of(s: RunState, e: NodeSample) -> NodeEntry:
    """Reduce a full node sample to the run's own GPUs.

    Those running its processes, else its allocation (all GPUs when it has none).
    """
    mine = set(s.gpu_indices)
    return NodeEntry(e.node, int(e.emitted_at_ms), tuple(
        (g.index, g.util_pct, g.sm_active_pct, g.throttle_reasons, g.xid or 0,
         g.ecc_uncorrected)
        for g in e.gpus
        if any(p.run_id == s.run_id for p in g.processes) or not mine or g.index in mine))


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


def node_sample(s: RunState, e: NodeSample, at: int, now: int, cfg: RunConfig,
                bl: Baseline | None) -> list[Output]:
    """Fold a full node sample (already re-keyed to this run) into the run state.

    Only the run's own GPUs count: those running its processes, else its allocation.
    """
    return node_entry(s, entry_of(s, e), at, now, cfg, bl)


def node_agg(s: RunState, e: NodeAgg, now: int, cfg: RunConfig,
             bl: Baseline | None) -> list[Output]:
    """Fold a per-run node aggregate (GPUs already reduced to the run's own) into the state."""
    out: list[Output] = []
    for entry in e.nodes:
        out += node_entry(s, entry, entry.at_ms, now, cfg, bl)
    return out


def pct_mean(pct: list[float]) -> float:
    """Return :func:`~runwatch.core.indicators.gpu_utilization` without numpy (8 values).

    The mean of the finite percentages as a fraction clipped to [0, 1]; nan for none.
    """
    xs = [x for x in pct if math.isfinite(x)]
    return min(max(sum(xs) / len(xs) / 100.0, 0.0), 1.0) if xs else math.nan


def node_entry(s: RunState, e: NodeEntry, at: int, now: int, cfg: RunConfig,
               bl: Baseline | None) -> list[Output]:
    """Fold one node's reading of the run's GPUs: errors, throttling, utilization, occupancy."""
    gpus = e.gpus
    out: list[Output] = []
    for index, _util, _sm, _thr, xid, ecc in gpus:
        if xid or ecc:
            f = rules.gpu_errors(e.node, index, xid, ecc, at)
            if f:
                out += emit(s, cfg, f, now, one_shot=True, node=e.node)
    if gpus:
        out += observe(s, cfg, "gpu_utilization", pct_mean([g[1] for g in gpus]), at, now, bl,
                       f"node {e.node}")
        throttled = [g[0] for g in gpus if g[3]]
        if throttled:
            out += emit(s, cfg, Finding("indicator:gpu_throttle", "throttle_reasons",
                                        "infrastructure", "warning", float(len(throttled)),
                                        0.0, 0.5, at, f"GPUs {throttled} throttled on {e.node}",
                                        subject=e.node, alert=False), now, one_shot=True)
        occ, source = occupancy_or_utilization([g[2] for g in gpus], [g[1] for g in gpus])
        what = "SM occupancy" if source == "sm_occupancy" else "GPU utilization (no SM occupancy)"
        out += observe(s, cfg, "gpu_occupancy", occ, at, now, bl,
                       f"node {e.node}: {what} {occ:.0%}; source={source}",
                       signal=occupancy_cause(s, at, cfg))
    return out


def occupancy_cause(s: RunState, at: int, cfg: RunConfig) -> str:
    """Return the cause of a GPU occupancy decline: infrastructure or execution.

    Execution when the window holds execution evidence (a slower loader,
    restarts, a smaller batch, lower throughput), or the run's loader share or
    effective batch size already sits past its baseline by the effect bound
    (a slow loader starves the GPUs before its own watch fires), and there is
    no infrastructure evidence (XID/ECC errors, throttling); infrastructure
    otherwise.
    """
    signals = {f.signal for f in evidence_at(s, at) if at - f.at_ms <= cfg.window_ms
               and f.indicator not in ("gpu_occupancy", "gpu_utilization")}
    if "infrastructure" in signals:
        return "infrastructure"
    starving = any(watch_of(s, cfg, n, None).beyond_effect(cfg.specs[n])
                   for n in STARVING_WATCHES if n in s.watches)
    return "execution" if "execution" in signals or starving else "infrastructure"
