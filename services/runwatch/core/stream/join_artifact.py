"""Run-join handlers for artifacts and release gates.

Split from :mod:`runwatch.core.stream.join`: an artifact's serialization, an empty
artifact, the model registry's verdict, and required gates (safety tests,
evaluations) that must have passed before a model is registered or promoted.
Gate decisions are remembered per run (``signals["gates"]``: gate → decision).
"""

from __future__ import annotations

from runwatch.core.records import ArtifactEvent, GateDecision
from runwatch.core.signals import rules
from runwatch.core.stream.runstate import Output, RunConfig, RunState, emit


def artifact(s: RunState, e: ArtifactEvent, at: int, now: int, cfg: RunConfig) -> list[Output]:
    """Fold one artifact event: serialization, emptiness, registry status, required gates."""
    found = [
        rules.checkpoint_integrity("", "", e.serialization_ok, at, e.uri),
        rules.artifact_empty(e.uri, e.kind, e.size_bytes, e.sha256 or "", at),
        rules.registry_status(e.uri, e.registry_status or "", at),
    ]
    if e.kind == "model" and cfg.required_gates:
        gates: dict[str, str] = s.signals.get("gates", {})
        found.append(rules.missing_gates(e.uri, e.registry_status or "", cfg.required_gates,
                                         gates, at))
    out: list[Output] = []
    for f in found:
        if f:
            out += emit(s, cfg, f, now, one_shot=True)
    return out


def gate(s: RunState, e: GateDecision, at: int, now: int, cfg: RunConfig) -> list[Output]:
    """Fold one gate decision: remember it, and alert when it failed (with what failed)."""
    gates: dict[str, str] = s.signals.setdefault("gates", {})
    gates[e.gate] = e.decision
    reasons = list(e.reasons)
    failed_slices = [sl.name for sl in e.slices if not sl.passed]
    if failed_slices:
        reasons.append(f"slices failed: {', '.join(failed_slices[:5])}")
    f = rules.failed_gate(e.gate, e.decision != "fail", "; ".join(reasons), at)
    return emit(s, cfg, f, now, one_shot=True) if f else []
