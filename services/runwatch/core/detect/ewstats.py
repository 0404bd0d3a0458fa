"""Exponentially weighted mean / variance z-scores, scalar and vectorized.

The update formulas match river's ``stats.EWMean`` and ``stats.EWVar`` exactly
(river 0.26, Rust core): the first value sets the mean, later values update it
as ``mean = a * x + (1 - a) * mean`` with ``a = fading_factor``; the variance is
``EW(x**2) - EW(x)**2`` with both means updated the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Self

import numpy as np
import numpy.typing as npt

from runwatch.core.detect.base import State, check_finite, check_kind, normal_tail

FloatArray = npt.NDArray[np.float64]


@dataclass(slots=True)
class EWZScore:
    """Z-score of a value against an exponentially weighted mean and variance.

    Attributes:
        fading_factor: river's ``fading_factor`` (weight of the newest value).
        n: Values learned so far.
        mean: EW mean of the values.
        sq_mean: EW mean of the squared values.
        min_n: Values to learn before scores are non-zero.

    """

    fading_factor: float = 0.05
    n: int = 0
    mean: float = 0.0
    sq_mean: float = 0.0
    min_n: int = 10

    def __post_init__(self) -> None:
        if not 0.0 <= self.fading_factor <= 1.0:
            msg = f"fading_factor must be in [0, 1], got {self.fading_factor}"
            raise ValueError(msg)

    @property
    def var(self) -> float:
        """EW variance as river's ``EWVar.get()`` returns it."""
        return self.sq_mean - self.mean * self.mean

    def zscore(self, x: float) -> float:
        """Return ``(x - mean) / std`` (0 while the variance is zero)."""
        var = self.var
        if var <= 0.0:
            return 0.0
        return (x - self.mean) / math.sqrt(var)

    def score_one(self, x: float) -> float:
        """Return the Gaussian confidence of ``|z|`` in [0, 1]."""
        if self.n < self.min_n:
            return 0.0
        return normal_tail(self.zscore(check_finite(x)))

    def learn_one(self, x: float) -> None:
        """Update the EW mean and squared mean with ``x``."""
        x = check_finite(x)
        a = self.fading_factor
        if self.n == 0:
            self.mean = x
            self.sq_mean = x * x
        else:
            self.mean = a * x + (1.0 - a) * self.mean
            self.sq_mean = a * x * x + (1.0 - a) * self.sq_mean
        self.n += 1

    def seed(self, mean: float, var: float, n: int) -> None:
        """Start from summary statistics instead of cold (see ``warmstart``)."""
        self.mean = float(mean)
        self.sq_mean = float(var) + float(mean) ** 2
        self.n = int(n)

    def to_state(self) -> State:
        """Return the state as a JSON-able dict."""
        return {
            "kind": "ewz",
            "fading_factor": self.fading_factor,
            "n": self.n,
            "mean": self.mean,
            "sq_mean": self.sq_mean,
            "min_n": self.min_n,
        }

    @classmethod
    def from_state(cls, state: State) -> Self:
        """Rebuild from :meth:`to_state` output."""
        check_kind(state, "ewz")
        return cls(
            fading_factor=float(state["fading_factor"]),
            n=int(state["n"]),
            mean=float(state["mean"]),
            sq_mean=float(state["sq_mean"]),
            min_n=int(state["min_n"]),
        )


@dataclass(slots=True)
class VecEWStats:
    """EW mean and variance of many series at once (one slot per series).

    Attributes:
        fading_factor: river's ``fading_factor``.
        n: Per-series count of learned values.
        mean: Per-series EW mean.
        sq_mean: Per-series EW mean of squares.

    """

    fading_factor: float
    n: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    mean: FloatArray = field(default_factory=lambda: np.zeros(0))
    sq_mean: FloatArray = field(default_factory=lambda: np.zeros(0))

    @classmethod
    def zeros(cls, size: int, fading_factor: float) -> VecEWStats:
        """Return ``size`` fresh series."""
        return cls(
            fading_factor=fading_factor,
            n=np.zeros(size, dtype=np.int64),
            mean=np.zeros(size),
            sq_mean=np.zeros(size),
        )

    def __len__(self) -> int:
        return int(self.n.shape[0])

    def grow(self, size: int) -> None:
        """Extend to ``size`` series (new slots are fresh)."""
        extra = size - len(self)
        if extra <= 0:
            return
        self.n = np.concatenate([self.n, np.zeros(extra, dtype=np.int64)])
        self.mean = np.concatenate([self.mean, np.zeros(extra)])
        self.sq_mean = np.concatenate([self.sq_mean, np.zeros(extra)])

    @property
    def var(self) -> FloatArray:
        """Per-series EW variance (river's ``EWVar.get()``)."""
        return self.sq_mean - self.mean * self.mean

    def zscore(self, x: FloatArray, idx: npt.NDArray[np.intp] | None = None) -> FloatArray:
        """Z-scores of ``x`` against the current state (0 where variance is 0).

        Args:
            x: Values, one per selected series.
            idx: Series indices for ``x`` (all series when None).

        Returns:
            The z-scores, scored before learning.

        """
        sel = slice(None) if idx is None else idx
        mean = self.mean[sel]
        var = self.sq_mean[sel] - mean * mean
        pos = var > 0.0
        out = np.zeros_like(x, dtype=np.float64)
        np.divide(x - mean, np.sqrt(np.where(pos, var, 1.0)), out=out, where=pos)
        return out

    def learn(self, x: FloatArray, idx: npt.NDArray[np.intp] | None = None) -> None:
        """Fold one value into each selected series.

        Args:
            x: Values, one per selected series (indices must be unique).
            idx: Series indices for ``x`` (all series when None).

        """
        if not np.all(np.isfinite(x)):
            msg = "VecEWStats.learn got non-finite input"
            raise ValueError(msg)
        sel = np.arange(len(self)) if idx is None else idx
        a = self.fading_factor
        first = self.n[sel] == 0
        mean = self.mean[sel]
        sq = self.sq_mean[sel]
        self.mean[sel] = np.where(first, x, a * x + (1.0 - a) * mean)
        self.sq_mean[sel] = np.where(first, x * x, a * x * x + (1.0 - a) * sq)
        self.n[sel] += 1

    def to_state(self) -> State:
        """Return the state as a JSON-able dict of lists."""
        return {
            "kind": "vec_ew",
            "fading_factor": self.fading_factor,
            "n": self.n.tolist(),
            "mean": self.mean.tolist(),
            "sq_mean": self.sq_mean.tolist(),
        }

    @classmethod
    def from_state(cls, state: State) -> Self:
        """Rebuild from :meth:`to_state` output."""
        check_kind(state, "vec_ew")
        return cls(
            fading_factor=float(state["fading_factor"]),
            n=np.asarray(state["n"], dtype=np.int64),
            mean=np.asarray(state["mean"], dtype=np.float64),
            sq_mean=np.asarray(state["sq_mean"], dtype=np.float64),
        )
