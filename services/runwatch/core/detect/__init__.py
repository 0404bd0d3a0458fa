"""Streaming detectors: river semantics (score before learn), JSON-able state.

Scalar detectors for one series, vectorized numpy versions that update many
series at once, river ADWIN / HalfSpaceTrees wrappers, a slow-trend CUSUM,
warm starts from finished runs, and :class:`DefaultDetector`, the ensemble
benchmarked on NAB (``runwatch bench nab``'s ``default``).
"""

from runwatch.core.detect.base import Detector, State
from runwatch.core.detect.ensemble import DefaultConfig, DefaultDetector
from runwatch.core.detect.ewstats import EWZScore, VecEWStats
from runwatch.core.detect.pagehinkley import PageHinkleyDetector, VecPageHinkley
from runwatch.core.detect.river_models import AdwinDetector, HalfSpaceTreesDetector
from runwatch.core.detect.trend import TrendDetector
from runwatch.core.detect.warmstart import BaselineStats, pool, warm_start

__all__ = [
    "AdwinDetector",
    "BaselineStats",
    "DefaultConfig",
    "DefaultDetector",
    "Detector",
    "EWZScore",
    "HalfSpaceTreesDetector",
    "PageHinkleyDetector",
    "State",
    "TrendDetector",
    "VecEWStats",
    "VecPageHinkley",
    "pool",
    "warm_start",
]
