"""Probable cause from the evidence correlated within a window.

A symptom in the learning signal (validation decline, rising loss, NaN) or in
throughput says that something is wrong, rarely why. The classifier looks at
every other finding about the same run inside a correlation window, keeps
only the findings that can plausibly cause that kind of symptom (the
plausibility map below), and names the signal class with the most weight: a
label-balance shift points at data; a smaller effective batch with worker
restarts points at execution; an XID points at infrastructure. A finding that
is itself in a causal class (a checksum mismatch, a missing data report) is
its own cause.

The plausibility map
--------------------
Evidence is weighed by what its mechanism can do, not by its class alone.
Symptoms come in three kinds (:func:`symptom_kind`):

* ``numerics``: non-finite loss, gradient norm or values (``rule:non_finite``);
* ``learning``: any other learning-signal finding (trends, validation decline,
  gradient variance);
* ``throughput``: the job going slower (throughput);
* ``stop``: the job not stepping at all (``rule:stalled``).

Each piece of evidence explains a set of those kinds (:func:`explains`),
looked up by its detector, then its indicator, then its signal class:

============================================== ================================
evidence                                       can explain
============================================== ================================
data findings (shift, drift, zero rows,        numerics, learning (bad or
rejected samples, schema, nulls, ranges)       shifted values reach the model)
``rule:missing_data_report``                   nothing (a reporting gap, not a
                                               fault in the data)
restarts, worker restarts                      numerics, learning, throughput,
                                               stop (resumed state, a restart)
effective batch                                learning, throughput (smaller batch)
other execution findings                       learning, throughput, stop
loader share, checkpoint share, throughput,    throughput, stop (a loader or a
stalls, queue delay (``queue_delay_ms``)       checkpoint write that slows, then
                                               hangs)
GPU XID, uncorrected ECC                       numerics, learning, throughput,
                                               stop (corrupted values, lost work,
                                               a lost GPU)
other infrastructure findings (utilization,    throughput only: a throttled or
occupancy, throttling, clocks, temperature,    less busy GPU steps slower, it does
power, memory, interconnect)                   not stop; GPUs that idle while a job
                                               does not step are its consequence
``rule:checkpoint_checksum``                   numerics, learning (a resumed
                                               corrupt checkpoint: counted once
                                               a process may have loaded it,
                                               ``runstate.evidence_at``)
image policy (``rule:image_allow_list``,       nothing: policy findings say
``rule:image_missing``), failed gates,         where a run stands, not what
serialization, other artifact findings         happened to its computation
============================================== ================================

Symptoms outside the three kinds (data, artifact, infrastructure findings,
execution findings that are mechanisms themselves) are their own cause, as is a
loss divergence after a jump of the learning rate (labelled
``lr_raised_at_step``): the rate is its mechanism, whatever restart evidence
the window holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from runwatch.core.signals.rules import Finding

Cause = Literal["data", "execution", "learning", "artifact", "infrastructure", "unknown"]

# Ties between causal classes go to the first in this order.
PRIORITY: tuple[Cause, ...] = ("infrastructure", "data", "execution", "artifact")

Effect = Literal["numerics", "learning", "throughput", "stop"]

_NONE: frozenset[Effect] = frozenset()
_ALL: frozenset[Effect] = frozenset(("numerics", "learning", "throughput", "stop"))
_MODEL: frozenset[Effect] = frozenset(("numerics", "learning"))
_SPEED: frozenset[Effect] = frozenset(("throughput",))
_SLOW: frozenset[Effect] = frozenset(("throughput", "stop"))  # execution slowness: may hang

#: Symptom indicators that are effects on speed rather than mechanisms.
THROUGHPUT_SYMPTOMS = frozenset({"throughput", "token_throughput", "step_gap_ms"})

#: Detector or indicator → the symptom kinds that evidence can explain.
EXPLAINS: dict[str, frozenset[Effect]] = {
    # policy and reporting findings: they explain nothing but themselves
    "rule:image_allow_list": _NONE,
    "rule:image_missing": _NONE,
    "rule:failed_gate": _NONE,
    "rule:missing_data_report": _NONE,
    "rule:checkpoint_serialization": _NONE,
    "rule:queue_deadline": _NONE,
    # artifact integrity: training resumed from a corrupt checkpoint
    "rule:checkpoint_checksum": _MODEL,
    # hardware faults
    "rule:gpu_xid": _ALL,
    "rule:gpu_ecc": _ALL,
    "xid": _ALL,
    "ecc_uncorrected": _ALL,
    # restarts change the model's state and the batch
    "indicator:restarts": _ALL,
    "restart_count": _ALL,
    "worker_restarts": _ALL,
    "effective_batch_size": frozenset(("learning", "throughput")),
    # slowness: the job goes slower, the model learns the same
    "rule:stalled": _SLOW,
    "loader_share": _SLOW,
    "checkpoint_share": _SLOW,
    "throughput": _SLOW,
    "token_throughput": _SLOW,
    "step_gap_ms": _SLOW,
    "queue_delay_ms": _SLOW,
}

#: Indicators of hard GPU faults: a stall they come with is theirs, whatever else was seen.
GPU_FAULTS = frozenset({"xid", "ecc_uncorrected"})

#: Default reach of evidence not named in :data:`EXPLAINS`, by signal class.
EXPLAINS_BY_SIGNAL: dict[str, frozenset[Effect]] = {
    "data": _MODEL,
    "execution": frozenset(("learning", "throughput", "stop")),
    "infrastructure": _SPEED,
    "artifact": _NONE,
    "learning": _NONE,
}


def symptom_kind(symptom: Finding) -> Effect | None:
    """Return the kind of symptom a finding is, or None when it is its own cause.

    Args:
        symptom: The finding that raises an alert.

    Returns:
        ``numerics``, ``learning``, ``throughput``, ``stop`` (a stall) or None.

    """
    if symptom.detector == "rule:non_finite":
        return "numerics"
    if symptom.detector == "rule:loss_divergence" and "lr_raised_at_step" in symptom.labels:
        return None  # a jump of the learning rate before it is its mechanism
    if symptom.signal == "learning":
        return "learning"
    if symptom.detector == "rule:stalled":
        return "stop"
    if symptom.indicator in THROUGHPUT_SYMPTOMS:
        return "throughput"
    return None


def explains(evidence: Finding) -> frozenset[Effect]:
    """Return the symptom kinds a piece of evidence can plausibly cause.

    Args:
        evidence: A finding about the run.

    Returns:
        The kinds, from :data:`EXPLAINS` (detector first, then indicator) or
        the signal class's default.

    """
    hit = EXPLAINS.get(evidence.detector)
    if hit is None:
        hit = EXPLAINS.get(evidence.indicator)
    if hit is None:
        hit = EXPLAINS_BY_SIGNAL.get(evidence.signal, _NONE)
    return hit


@dataclass(frozen=True, slots=True)
class Verdict:
    """The classifier's answer.

    Attributes:
        cause: The probable cause.
        confidence: Share of the causal weight behind it, in [0, 1].
        evidence: The findings that support it, oldest first.

    """

    cause: Cause
    confidence: float
    evidence: tuple[Finding, ...]


def in_window(evidence: Iterable[Finding], now_ms: int, window_ms: int) -> list[Finding]:
    """Keep the findings whose time lies within ``window_ms`` before ``now_ms``.

    Args:
        evidence: Findings about one run.
        now_ms: The reference time (the symptom's time).
        window_ms: Correlation window.

    Returns:
        Findings with ``now_ms - window_ms <= at_ms <= now_ms``, oldest first.

    """
    lo = now_ms - window_ms
    return sorted((f for f in evidence if lo <= f.at_ms <= now_ms), key=lambda f: f.at_ms)


def classify(symptom: Finding, evidence: Sequence[Finding], window_ms: int) -> Verdict:
    """Name the probable cause of ``symptom`` from correlated evidence.

    Args:
        symptom: The finding that raises the alert.
        evidence: Other findings about the same run (any age; the window applies).
        window_ms: Correlation window before the symptom.

    Returns:
        The verdict. A symptom that is not an effect (:func:`symptom_kind`) is
        its own cause with confidence 1. An effect takes the causal class with
        the most weight (score sum) among the evidence in the window that can
        plausibly cause it (:func:`explains`), else its own class (``learning``
        for numerics and learning symptoms).

    """
    # the run's evidence holds the symptom too (recorded as it was seen, and read back as
    # a copy): as its own support it was listed twice in every alert
    same = (symptom.detector, symptom.indicator, symptom.subject)
    near = [f for f in in_window(evidence, symptom.at_ms, window_ms)
            if f is not symptom and (f.detector, f.indicator, f.subject) != same]
    kind = symptom_kind(symptom)
    if kind is None:
        support = tuple(f for f in near if f.signal == symptom.signal) + (symptom,)
        return Verdict(symptom.signal, 1.0, support)
    weights: dict[Cause, float] = {c: 0.0 for c in PRIORITY}
    # the symptom's own indicator (its watch's earlier findings, a drift of the same
    # figure) is the symptom seen again, not a cause: it would vote for its own class
    plausible = [f for f in near if f.signal in weights and kind in explains(f)
                 and f.indicator != symptom.indicator]
    for f in plausible:
        weights[f.signal] += max(f.score, 0.05)
    total = sum(weights.values())
    if total <= 0:
        own = tuple(f for f in near if f.signal == symptom.signal) + (symptom,)
        return Verdict(symptom.signal, 1.0, own)
    gpu_faults = [f for f in plausible if f.indicator in GPU_FAULTS]
    if kind == "stop" and gpu_faults:
        # a hard GPU fault stops a job by itself; a loader that was slow before it does not
        # outvote it (several execution findings did: a GPU that fell off the bus was
        # called an execution stall)
        return Verdict("infrastructure", weights["infrastructure"] / total,
                       (*gpu_faults, symptom))
    best = max(PRIORITY, key=lambda c: (weights[c], -PRIORITY.index(c)))
    support = tuple(f for f in plausible if f.signal == best) + (symptom,)
    return Verdict(best, weights[best] / total, support)
