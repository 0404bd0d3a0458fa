"""Probable cause from the evidence correlated within a window.

A symptom in the learning signal (validation decline, rising loss, NaN) says
that something is wrong, rarely why. The classifier looks at every other
finding about the same run inside a correlation window and names the signal
class that explains it: a label-balance shift points at data; a smaller
effective batch with worker restarts points at execution; an XID points at
infrastructure. A finding that is itself in a causal class (a checksum
mismatch, a missing data report) is its own cause.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from runwatch.core.rules import Finding

Cause = Literal["data", "execution", "learning", "artifact", "infrastructure", "unknown"]

# Ties between causal classes go to the first in this order.
PRIORITY: tuple[Cause, ...] = ("infrastructure", "data", "execution", "artifact")


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
        The verdict. A symptom in a causal class is its own cause with
        confidence 1; a learning symptom takes the causal class with the most
        weight (score sum) in the window, else ``learning``.

    """
    near = [f for f in in_window(evidence, symptom.at_ms, window_ms) if f is not symptom]
    if symptom.signal != "learning":
        support = tuple(f for f in near if f.signal == symptom.signal) + (symptom,)
        return Verdict(symptom.signal, 1.0, support)
    weights: dict[Cause, float] = {c: 0.0 for c in PRIORITY}
    for f in near:
        if f.signal in weights:
            weights[f.signal] += max(f.score, 0.05)
    total = sum(weights.values())
    if total <= 0:
        learning = tuple(f for f in near if f.signal == "learning") + (symptom,)
        return Verdict("learning", 1.0, learning)
    best = max(PRIORITY, key=lambda c: (weights[c], -PRIORITY.index(c)))
    support = tuple(f for f in near if f.signal == best) + (symptom,)
    return Verdict(best, weights[best] / total, support)
