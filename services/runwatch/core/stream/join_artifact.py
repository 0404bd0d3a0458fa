"""Run-join handlers for artifacts and release gates.

Split from :mod:`runwatch.core.stream.join`: an artifact's serialization, an empty
artifact, the model registry's verdict, and required gates (safety tests,
evaluations) that must have passed before a model is registered or promoted.
Gate decisions are remembered per run (``signals["gates"]``: gate → decision).

Registry control (``rule:registry_without_gate``): a model (artifact kind ``model``;
a dataset or a tokenizer registered in a catalog is not a release) that reaches a
registered status without a passing or approved gate decision for its run
(:func:`runwatch.core.gates.registry.violation`) is a hard alert. The gate
decision and the registry event come from different producers, so either may
be processed first: a registration without a gate waits
(``signals["registry_wait"]``) for ``cfg.gate_wait_ms`` of the processor's own
time; a passing or approved decision processed within the wait settles it
without an alert, and :func:`registry_due` (the timer) fires what is still
unsettled. Only a decision stamped by the registration's event time (give or
take ``gate_wait_ms`` of clock skew) settles it: a pass made twenty minutes
after the model was registered does not, whichever is read first. Required gates
(``cfg.required_gates``, ``rule:missing_gate``) wait and settle the same way, and page
in place of registry control. A gate's decision is its latest by event time.
"""

from __future__ import annotations

from runwatch.core.gates import registry
from runwatch.core.records import ArtifactEvent, GateDecision
from runwatch.core.signals import rules
from runwatch.core.signals.rules import Finding
from runwatch.core.stream.runstate import Output, RunConfig, RunState, emit


def release_event(e: object) -> bool:
    """Whether a record is a model's registry event: it needs no other record of its run.

    A model is registered or promoted hours or days after its training ended, when
    a run that reported no gate and no model has been retired (6 h): held for a
    manifest that never comes, the registration of an ungated model, the very one
    registry control is for, was dead-lettered as an unseen run's.
    """
    return isinstance(e, ArtifactEvent) and rules.is_model(e.kind) and bool(e.registry_status)


def artifact(s: RunState, e: ArtifactEvent, at: int, now: int, cfg: RunConfig) -> list[Output]:
    """Fold one artifact event: serialization, emptiness, registry status, required gates."""
    if release_event(e):
        s.known = True
    found = [
        rules.checkpoint_integrity("", "", e.serialization_ok, at, e.uri,
                                   what=f"Artifact {e.kind}"),
        rules.artifact_empty(e.uri, e.kind, e.size_bytes, e.sha256 or "", at),
        rules.registry_status(e.uri, e.registry_status or "", at),
    ]
    model = rules.is_model(e.kind)
    out: list[Output] = []
    for f in found:
        if f:
            out += emit(s, cfg, f, now, one_shot=True)
    if model:  # release evidence: the run's state is kept for its promotion
        s.signals["models"] = s.signals.get("models", 0) + 1
    status = e.registry_status or ""
    # a model in use needs its gate; a dataset or tokenizer in a catalog is no release.
    # Required gates wait for their decisions as registry control does: a pass made
    # before the registration and processed two seconds after it paged rule:missing_gate
    if model and _unreleasable(s, e.uri, status, at, cfg) is not None:
        waiting = s.signals.setdefault("registry_wait", {})
        waiting.setdefault(e.uri, {"since_ms": now, "at_ms": at, "status": status})
        out += registry_due(s, now, cfg)
    return out


def _unreleasable(s: RunState, uri: str, status: str, at: int, cfg: RunConfig) -> Finding | None:
    """Return what a registration at ``at`` breaks, given the decisions made by then.

    A required gate not passed (``rule:missing_gate``, naming the gates) is the more
    specific of the two and pages alone: with ``REQUIRED_GATES`` set, a model
    registered with no gate at all paged both rules, twice for one registration.
    Else registry control (``rule:registry_without_gate``) when it is on.
    """
    gates = _gates_by(s, at, cfg)
    if cfg.required_gates:
        f = rules.missing_gates(uri, status, cfg.required_gates, gates, at)
        if f is not None:
            return f
    why = registry.violation(status, gates) if cfg.registry_control else None
    if why is None:
        return None
    return Finding(detector="rule:registry_without_gate", indicator="registry_status",
                   signal="artifact", severity="critical", observed=0.0, expected=1.0,
                   score=1.0, at_ms=at,
                   title=f"Model {uri} {status} without a passing or approved gate",
                   detail=f"{why}; waited {cfg.gate_wait_ms} ms for a decision", subject=uri,
                   hard=True)


SEED_SPREAD = "seed_spread."
"""Prefix of a gate decision's measurement of a metric's spread across repeats (seeds)."""


def seed_variance(s: RunState, e: GateDecision, at: int, now: int,
                  cfg: RunConfig) -> list[Output]:
    """Raise ``rule:seed_variance`` (learning) when a decision measured seeds spread too wide.

    ``runwatch gate check`` measures the spread of the policy's metric across the
    repeats of the run's lineage (``measured["seed_spread.<metric>"]``, bound in
    ``thresholds``): the run join sees one run at a time, so the spread comes
    with the decision, and the processor raises it as a learning signal.
    """
    out: list[Output] = []
    for key, spread in sorted(e.measured.items()):
        bound = e.thresholds.get(key)
        if not key.startswith(SEED_SPREAD) or bound is None or not spread > bound:
            continue
        metric = key[len(SEED_SPREAD):]
        f = Finding(detector="rule:seed_variance", indicator=metric, signal="learning",
                    severity="warning", observed=spread, expected=bound,
                    score=min(spread / bound / 2, 1.0) if bound > 0 else 1.0, at_ms=at,
                    title=f"{metric} spreads {spread:.3g} across seeds (bound {bound:.3g})",
                    detail=f"gate {e.gate}: spread of {metric} across the repeats of this "
                    f"lineage; {e.policy or 'no policy'}", subject=e.gate)
        out += emit(s, cfg, f, now, one_shot=True)
    return out


def _gates_by(s: RunState, at: int, cfg: RunConfig) -> dict[str, str]:
    """Return the run's gate decisions made by a registration's event time.

    Gate -> its latest decision, leaving out decisions stamped more than
    ``gate_wait_ms`` after ``at`` (the producers' clocks may differ by that
    much): a model registered before its gate passed broke registry control,
    also when a replay reads the pass first. Decisions of states written
    before decision times were kept count as made in time.
    """
    gates: dict[str, str] = s.signals.get("gates", {})
    times: dict[str, int] = s.signals.get("gate_at", {})
    return {g: d for g, d in gates.items() if times.get(g, 0) <= at + cfg.gate_wait_ms}


def registry_due(s: RunState, now: int, cfg: RunConfig) -> list[Output]:
    """Fire registry control for registrations whose wait for a gate decision is over.

    Args:
        s: The run state (updated in place).
        now: The processor's clock (its own wait, like held events).
        cfg: Processor knobs (``gate_wait_ms``).

    Returns:
        Alerts to publish.

    """
    waiting: dict[str, dict[str, object]] = s.signals.get("registry_wait") or {}
    out: list[Output] = []
    for uri, w in list(waiting.items()):
        if now - int(w["since_ms"]) < cfg.gate_wait_ms:  # type: ignore[call-overload]
            continue
        del waiting[uri]
        f = _unreleasable(s, uri, str(w["status"]), int(w["at_ms"]), cfg)  # type: ignore[call-overload]
        if f is not None:
            out += emit(s, cfg, f, now, one_shot=True)
    if not waiting:
        s.signals.pop("registry_wait", None)
    return out


def gate(s: RunState, e: GateDecision, at: int, now: int, cfg: RunConfig) -> list[Output]:
    """Fold one gate decision: remember it, and alert when it failed (with what failed).

    A decision needs no other record of its run: ``runwatch gate check`` judges a run
    from the store, also days after its state here was retired (or a run this
    processor never saw), and a failed release check pages then too.
    """
    s.known = True
    gates: dict[str, str] = s.signals.setdefault("gates", {})
    times: dict[str, int] = s.signals.setdefault("gate_at", {})
    if at >= times.get(e.gate, 0):  # its latest decision by event time, not by arrival: a
        gates[e.gate] = e.decision  # review redelivered after its approval undid the approval
        times[e.gate] = at
    reasons = list(e.reasons)
    failed_slices = [sl.name for sl in e.slices if not sl.passed]
    if failed_slices:
        reasons.append(f"slices failed: {', '.join(failed_slices[:5])}")
    f = rules.failed_gate(e.gate, e.decision != "fail", "; ".join(reasons), at)
    out = emit(s, cfg, f, now, one_shot=True) if f else []
    out += seed_variance(s, e, at, now, cfg)
    waiting = s.signals.get("registry_wait") or {}
    for uri, w in list(waiting.items()):  # a decision processed after the registration
        reg_at = int(w["at_ms"])  # type: ignore[call-overload]
        if _unreleasable(s, uri, str(w["status"]), reg_at, cfg) is None:
            del waiting[uri]
    if not waiting:
        s.signals.pop("registry_wait", None)
    return out
