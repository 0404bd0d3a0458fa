"""Page-Hinkley drift detection for many series at once.

Matches river's ``drift.PageHinkley`` (0.26) update for update: a drift flag
raised on one update resets that series' statistics at the start of the next
update; the running mean is river's ``stats.Mean``; ``min_increase`` starts at
+inf and ``max_decrease`` at -1 (as river does); the test runs only once the
series has seen ``min_instances`` values since its last reset; ``mode`` picks
increases (``up``), decreases (``down``) or ``both``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Self

import numpy as np
import numpy.typing as npt

from runwatch.core.detect.base import State, check_finite, check_kind

PHMode = Literal["up", "down", "both"]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


def _f(size: int, value: float) -> FloatArray:
    return np.full(size, value, dtype=np.float64)


@dataclass(slots=True)
class VecPageHinkley:
    """Page-Hinkley test over per-series state arrays.

    Attributes:
        min_instances: Values since reset before the test may fire.
        delta: Magnitude of changes that are tolerated.
        threshold: Detection threshold (lambda).
        alpha: Forgetting factor of the cumulative sums.
        mode: ``up``, ``down`` or ``both``.

    """

    min_instances: int = 30
    delta: float = 0.005
    threshold: float = 50.0
    alpha: float = 1 - 0.0001
    mode: PHMode = "both"
    n: FloatArray = field(default_factory=lambda: _f(0, 0.0))
    mean: FloatArray = field(default_factory=lambda: _f(0, 0.0))
    sum_inc: FloatArray = field(default_factory=lambda: _f(0, 0.0))
    sum_dec: FloatArray = field(default_factory=lambda: _f(0, 0.0))
    min_inc: FloatArray = field(default_factory=lambda: _f(0, np.inf))
    max_dec: FloatArray = field(default_factory=lambda: _f(0, -1.0))
    drift: BoolArray = field(default_factory=lambda: np.zeros(0, dtype=bool))

    def __post_init__(self) -> None:
        if self.mode not in ("up", "down", "both"):
            msg = f"invalid Page-Hinkley mode {self.mode!r}"
            raise ValueError(msg)

    def __len__(self) -> int:
        return int(self.n.shape[0])

    def grow(self, size: int) -> None:
        """Extend to ``size`` series (new slots are fresh)."""
        extra = size - len(self)
        if extra <= 0:
            return
        self.n = np.concatenate([self.n, _f(extra, 0.0)])
        self.mean = np.concatenate([self.mean, _f(extra, 0.0)])
        self.sum_inc = np.concatenate([self.sum_inc, _f(extra, 0.0)])
        self.sum_dec = np.concatenate([self.sum_dec, _f(extra, 0.0)])
        self.min_inc = np.concatenate([self.min_inc, _f(extra, np.inf)])
        self.max_dec = np.concatenate([self.max_dec, _f(extra, -1.0)])
        self.drift = np.concatenate([self.drift, np.zeros(extra, dtype=bool)])

    def _tests(
        self, s_inc: FloatArray, s_dec: FloatArray, mn: FloatArray, mx: FloatArray
    ) -> tuple[FloatArray, FloatArray]:
        return s_inc - mn, mx - s_dec

    def update(self, x: FloatArray, idx: npt.NDArray[np.intp] | None = None) -> BoolArray:
        """Feed one value to each selected series.

        Args:
            x: Values, one per selected series (indices must be unique).
            idx: Series indices (all series when None).

        Returns:
            The drift flag of each selected series after this update.

        """
        if not np.all(np.isfinite(x)):
            msg = "VecPageHinkley.update got non-finite input"
            raise ValueError(msg)
        sel = np.arange(len(self)) if idx is None else idx
        reset = self.drift[sel]
        n = np.where(reset, 0.0, self.n[sel]) + 1.0
        mean = np.where(reset, 0.0, self.mean[sel])
        mean = mean + (1.0 / n) * (x - mean)
        dev = x - mean
        s_inc = self.alpha * np.where(reset, 0.0, self.sum_inc[sel]) + dev - self.delta
        s_dec = self.alpha * np.where(reset, 0.0, self.sum_dec[sel]) + dev + self.delta
        mn = np.minimum(np.where(reset, np.inf, self.min_inc[sel]), s_inc)
        mx = np.maximum(np.where(reset, -1.0, self.max_dec[sel]), s_dec)
        t_inc, t_dec = self._tests(s_inc, s_dec, mn, mx)
        if self.mode == "up":
            fired = t_inc > self.threshold
        elif self.mode == "down":
            fired = t_dec > self.threshold
        else:
            fired = (t_inc > self.threshold) | (t_dec > self.threshold)
        drift = np.where(n >= self.min_instances, fired, False)
        self.n[sel], self.mean[sel] = n, mean
        self.sum_inc[sel], self.sum_dec[sel] = s_inc, s_dec
        self.min_inc[sel], self.max_dec[sel] = mn, mx
        self.drift[sel] = drift
        return drift

    def statistic(self) -> FloatArray:
        """Return each series' current test statistic divided by the threshold."""
        t_inc, t_dec = self._tests(self.sum_inc, self.sum_dec, self.min_inc, self.max_dec)
        t_inc = np.where(np.isfinite(t_inc), t_inc, 0.0)
        if self.mode == "up":
            t = t_inc
        elif self.mode == "down":
            t = t_dec
        else:
            t = np.maximum(t_inc, t_dec)
        return np.asarray(t / self.threshold, dtype=np.float64)

    def to_state(self) -> State:
        """Return the state as a JSON-able dict (inf encoded as None)."""
        return {
            "kind": "vec_ph",
            "params": [self.min_instances, self.delta, self.threshold, self.alpha, self.mode],
            "n": self.n.tolist(),
            "mean": self.mean.tolist(),
            "sum_inc": self.sum_inc.tolist(),
            "sum_dec": self.sum_dec.tolist(),
            "min_inc": [None if np.isinf(v) else float(v) for v in self.min_inc],
            "max_dec": self.max_dec.tolist(),
            "drift": self.drift.tolist(),
        }

    @classmethod
    def from_state(cls, state: State) -> Self:
        """Rebuild from :meth:`to_state` output."""
        check_kind(state, "vec_ph")
        mi, delta, thr, alpha, mode = state["params"]
        return cls(
            min_instances=int(mi),
            delta=float(delta),
            threshold=float(thr),
            alpha=float(alpha),
            mode=mode,
            n=np.asarray(state["n"], dtype=np.float64),
            mean=np.asarray(state["mean"], dtype=np.float64),
            sum_inc=np.asarray(state["sum_inc"], dtype=np.float64),
            sum_dec=np.asarray(state["sum_dec"], dtype=np.float64),
            min_inc=np.asarray(
                [np.inf if v is None else v for v in state["min_inc"]], dtype=np.float64
            ),
            max_dec=np.asarray(state["max_dec"], dtype=np.float64),
            drift=np.asarray(state["drift"], dtype=bool),
        )


class PageHinkleyDetector:
    """Single-series Page-Hinkley with the detector protocol (score, then learn).

    The score is the test statistic the value *would* produce, over the
    threshold, clipped to [0, 1]; 1 means the value triggers a drift.
    """

    __slots__ = ("ph",)

    def __init__(self, ph: VecPageHinkley | None = None, **params: object) -> None:
        """Create from an existing one-slot state or from Page-Hinkley parameters."""
        if ph is None:
            ph = VecPageHinkley(**params)  # type: ignore[arg-type]
            ph.grow(1)
        self.ph = ph

    @property
    def drift_detected(self) -> bool:
        """Whether the last learned value raised a drift."""
        return bool(self.ph.drift[0])

    def score_one(self, x: float) -> float:
        """Return the would-be test statistic over the threshold, in [0, 1]."""
        probe = VecPageHinkley.from_state(self.ph.to_state())
        probe.update(np.array([check_finite(x)]))
        return float(min(1.0, max(0.0, probe.statistic()[0])))

    def learn_one(self, x: float) -> None:
        """Update the test with ``x``."""
        self.ph.update(np.array([check_finite(x)]))

    def to_state(self) -> State:
        """Return the state as a JSON-able dict."""
        return self.ph.to_state()

    @classmethod
    def from_state(cls, state: State) -> PageHinkleyDetector:
        """Rebuild from :meth:`to_state` output."""
        return cls(ph=VecPageHinkley.from_state(state))
