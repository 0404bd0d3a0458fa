"""Baseline detectors for the NAB harness and the registry of detector names.

Every detector here takes one float per row through ``score_one`` (before
learning) and ``learn_one``. Baselines:

* ``windowed_gaussian``: NAB's windowed Gaussian (last 1000 values, step 1,
  population std floored at 1e-6, score 0 on the first row). NAB feeds nupic's
  ``normalProbability`` (the Gaussian tail probability) out as the score; we
  output its complement ``1 - 2 Q(|z|)`` so that higher means more anomalous,
  as the harness's thresholding (score >= threshold) requires.
* ``hst``: river ``HalfSpaceTrees`` over the value min-max scaled by the
  range seen so far.
* ``random``: seeded uniform scores.
* ``cad_ose``: NAB's contextOSE (CAD OSE), made causal: the value range is
  fixed from the first 150 values instead of the whole file's min / max, and
  the rest period is 150 (NAB: probation / 5). See
  :mod:`runwatch.core.detect.contextual`.
* ``relative_entropy``: NAB's relative entropy detector, quantizing by the
  range seen so far instead of the whole file's. See
  :mod:`runwatch.core.detect.relentropy`.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import replace

from runwatch.bench.runner import BenchDetector
from runwatch.core.detect import DefaultConfig, DefaultDetector, HalfSpaceTreesDetector
from runwatch.core.detect.base import State
from runwatch.core.detect.contextual import CadOseDetector
from runwatch.core.detect.relentropy import RelativeEntropyDetector


class WindowedGaussian:
    """NAB's windowed Gaussian baseline with O(1) running sums."""

    __slots__ = ("window", "_buf", "_sum", "_sq")

    def __init__(self, window: int = 1000) -> None:
        """Create with NAB's window size."""
        self.window = window
        self._buf: deque[float] = deque()
        self._sum = 0.0
        self._sq = 0.0

    def score_one(self, x: float) -> float:
        """Return ``erf(|z| / sqrt 2)`` against the window's mean and std."""
        n = len(self._buf)
        if n == 0:
            return 0.0
        mean = self._sum / n
        var = max(self._sq / n - mean * mean, 0.0)
        std = math.sqrt(var) if var > 0 else 0.0
        if std == 0.0:
            std = 1e-6
        return math.erf(abs(x - mean) / std / math.sqrt(2.0))

    def learn_one(self, x: float) -> None:
        """Slide the window by one value."""
        self._buf.append(x)
        self._sum += x
        self._sq += x * x
        if len(self._buf) > self.window:
            old = self._buf.popleft()
            self._sum -= old
            self._sq -= old * old

    def to_state(self) -> State:
        """Return the window as a JSON-able dict."""
        return {"kind": "windowed_gaussian", "window": self.window, "buf": list(self._buf)}


class RandomDetector:
    """Seeded uniform random scores."""

    __slots__ = ("seed", "_rng")

    def __init__(self, seed: int = 0) -> None:
        """Create with a seed."""
        self.seed = seed
        self._rng = random.Random(seed)

    def score_one(self, x: float) -> float:
        """Return a uniform random score."""
        return self._rng.random()

    def learn_one(self, x: float) -> None:
        """Learn nothing."""

    def to_state(self) -> State:
        """Return the generator state as a JSON-able dict."""
        version, internal, gauss = self._rng.getstate()
        return {"kind": "random", "seed": self.seed, "rng": [version, list(internal), gauss]}


class ScaledHST:
    """river HalfSpaceTrees on the value scaled into [0, 1] by the range seen so far."""

    __slots__ = ("hst", "lo", "hi")

    def __init__(self, seed: int = 42) -> None:
        """Create river's default forest: 10 trees of height 8, window 250."""
        self.hst = HalfSpaceTreesDetector(n_trees=10, height=8, window_size=250, seed=seed)
        self.lo = math.inf
        self.hi = -math.inf

    def _scale(self, x: float) -> dict[str, float]:
        lo, hi = min(self.lo, x), max(self.hi, x)
        return {"x": 0.5 if hi <= lo else (x - lo) / (hi - lo)}

    def score_one(self, x: float) -> float:
        """Return the HST score of the scaled value."""
        return self.hst.score_one(self._scale(x))

    def learn_one(self, x: float) -> None:
        """Learn the scaled value and widen the range."""
        self.hst.learn_one(self._scale(x))
        self.lo, self.hi = min(self.lo, x), max(self.hi, x)

    def to_state(self) -> State:
        """Return the forest and range as a JSON-able dict."""
        return {"kind": "scaled_hst", "hst": self.hst.to_state(), "lo": self.lo, "hi": self.hi}


Factory = Callable[[int], BenchDetector]

DETECTORS: dict[str, Factory] = {
    "default": lambda seed: DefaultDetector(),
    "windowed_gaussian": lambda seed: WindowedGaussian(),
    "hst": lambda seed: ScaledHST(seed=seed),
    "random": lambda seed: RandomDetector(seed=seed),
    "cad_ose": lambda seed: CadOseDetector(),
    "relative_entropy": lambda seed: RelativeEntropyDetector(),
}


def _default(**changes: object) -> Factory:
    cfg = replace(DefaultConfig(), **changes)  # type: ignore[arg-type]
    return lambda seed: DefaultDetector(cfg=cfg)


# Pre-declared candidate configurations per detector for the leave-one-set-out
# cross-validation (label → factory, the shipped configuration first). The
# default's grid varies each label-fitted constant one step either way (the
# silence after an alarm, the likelihood warm-up, the recurring-move gate) and
# the seasonal evidence (off, hour of day only); the cross-validation picks
# among them per fold on the other sets' labels only.
GRIDS: dict[str, dict[str, Factory]] = {
    "default": {
        "shipped": DETECTORS["default"],
        "season=off": _default(season="off"),
        "season=day": _default(season="day"),
        "refractory=75": _default(refractory=75),
        "refractory=300": _default(refractory=300),
        "lik_warmup=150": _default(lik_warmup=150),
        "known_after=0": _default(known_after=0),
    },
}
