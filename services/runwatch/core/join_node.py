"""Run-join handlers for node samples and the per-run HalfSpaceTrees signal.

Split from :mod:`runwatch.core.join`: GPU errors, throttling, utilization and
SM occupancy of the run's own GPUs, the cause of an occupancy decline, and
the HST anomaly score over the run's normalized indicator vector.
"""

from __future__ import annotations

from runwatch.core import indicators as ind
from runwatch.core import rules
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
    """Fold a node sample (already re-keyed to this run) into the run state.

    Only the run's own GPUs count: those running its processes, else its allocation.
    """
    mine = set(s.gpu_indices)
    gpus = [g for g in e.gpus
            if any(p.run_id == s.run_id for p in g.processes) or not mine or g.index in mine]
    out: list[Output] = []
    for g in gpus:
        f = rules.gpu_errors(e.node, g.index, g.xid or 0, g.ecc_uncorrected, at)
        if f:
            out += emit(s, cfg, f, now, one_shot=True, node=e.node)
    if gpus:
        out += observe(s, cfg, "gpu_utilization", ind.gpu_utilization([g.util_pct for g in gpus]),
                       at, now, bl, f"node {e.node}")
        throttled = [g.index for g in gpus if g.throttle_reasons]
        if throttled:
            out += emit(s, cfg, Finding("indicator:gpu_throttle", "throttle_reasons",
                                        "infrastructure", "warning", float(len(throttled)),
                                        0.0, 0.5, at, f"GPUs {throttled} throttled on {e.node}",
                                        subject=e.node, alert=False), now, one_shot=True)
        occ = ind.gpu_occupancy([g.sm_active_pct for g in gpus if g.sm_active_pct is not None])
        out += observe(s, cfg, "gpu_occupancy", occ, at, now, bl,
                       f"node {e.node}: SM occupancy {occ:.0%}", signal=occupancy_cause(s, at,
                                                                                     cfg))
    return out


def occupancy_cause(s: RunState, at: int, cfg: RunConfig) -> str:
    """Return the cause of a GPU occupancy decline: infrastructure or execution.

    Execution when the window holds execution evidence (a slower loader,
    restarts, a smaller batch, lower throughput) and no infrastructure evidence
    (XID/ECC errors, throttling); infrastructure otherwise.
    """
    signals = {f.signal for f in evidence_at(s, at) if at - f.at_ms <= cfg.window_ms
               and f.indicator not in ("gpu_occupancy", "gpu_utilization")}
    if "execution" in signals and "infrastructure" not in signals:
        return "execution"
    return "infrastructure"
