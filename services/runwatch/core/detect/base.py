"""The detector protocol shared by every streaming detector in runwatch.

Detectors follow river's semantics: ``score_one(x)`` scores a value against
what was learned so far and never changes state; ``learn_one(x)`` then folds
the value in. Their state round-trips through plain JSON-able dicts
(``to_state()`` / ``from_state()``) so the processor can keep it in a changelog
table without pickle.
"""

from __future__ import annotations

import math
from typing import Any, Protocol, Self, runtime_checkable

State = dict[str, Any]


@runtime_checkable
class Detector(Protocol):
    """A univariate streaming anomaly detector."""

    def score_one(self, x: float) -> float:
        """Return an anomaly score in [0, 1] for ``x`` without learning it."""
        ...

    def learn_one(self, x: float) -> None:
        """Fold ``x`` into the detector's state."""
        ...

    def to_state(self) -> State:
        """Return the full state as a JSON-able dict."""
        ...

    @classmethod
    def from_state(cls, state: State) -> Self:
        """Rebuild a detector from :meth:`to_state` output."""
        ...


def check_finite(x: float) -> float:
    """Return ``x`` as a float, refusing NaN and infinities.

    Args:
        x: The value to check.

    Returns:
        ``float(x)``.

    Raises:
        ValueError: If ``x`` is not finite.

    """
    value = float(x)
    if not math.isfinite(value):
        msg = f"detector input must be finite, got {value!r}"
        raise ValueError(msg)
    return value


def check_kind(state: State, kind: str) -> None:
    """Refuse a state dict that belongs to another detector type.

    Args:
        state: The state dict.
        kind: The expected ``kind`` entry.

    Raises:
        ValueError: If the state's kind differs.

    """
    got = state.get("kind")
    if got != kind:
        msg = f"state is for detector kind {got!r}, expected {kind!r}"
        raise ValueError(msg)


def normal_tail(z: float) -> float:
    """Return the Gaussian confidence of ``|z|``: ``1 - 2 Q(|z|)``.

    Args:
        z: A z-score.

    Returns:
        ``erf(|z| / sqrt(2))`` in [0, 1]; 0 for z = 0, close to 1 for large ``|z|``.

    """
    return math.erf(abs(z) / math.sqrt(2.0))
