"""Indicator watches: the detector library applied to one run's leading indicators.

Each watched indicator of a run has an :class:`IndicatorWatch` that combines

* a level gate (:class:`~runwatch.core.signals.workload.Watch`): the recent EW level
  against a baseline frozen after warm-up, with an effect-size bound and
  persistence — this decides how big a move must be before anyone is paged;
* :class:`~runwatch.core.detect.EWZScore`: the spike score of each value;
* :class:`~runwatch.core.detect.TrendDetector` (trend indicators): a CUSUM on
  residuals, so a slow creep is caught as a trend before the level gate's
  persistence would see it;
* :class:`~runwatch.core.detect.AdwinDetector` (key metrics): drift in the
  metric's mean, kept as evidence.

All three statistical detectors start from the workload baseline (finished runs
of the same family and hardware) through :func:`~runwatch.core.detect.warm_start`
when it has enough samples. Watches are live objects while a worker owns the
run and JSON dicts in the changelog (:meth:`IndicatorWatch.to_state`).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from runwatch.core.detect import AdwinDetector, BaselineStats, EWZScore, TrendDetector, warm_start
from runwatch.core.jsontext import compact
from runwatch.core.signals.workload import RunningStats, Watch, WatchSpec, seeded_watch

Baseline = dict[str, list[float]]


def default_specs() -> dict[str, WatchSpec]:
    """Return the watch spec of every watched indicator."""
    return {
        # settles: a cold start (a streaming dataset's cache filling, the first epoch read
        # from remote storage) can fill the whole warm-up; frozen there, the baseline hid
        # a later creep of the loader (test_controls_sdk.py)
        "loader_share": WatchSpec("up", warmup=20, alpha=0.1, k=4.0, min_effect=0.1, persist=5,
                                  trend=True, adwin=True, settles=True),
        "checkpoint_share": WatchSpec("up", warmup=5, alpha=0.3, k=4.0, min_effect=0.1,
                                      persist=3, trend=True),
        # smoothed: k counts the recent level's deviations (a run whose steps scatter by
        # 10 % hid a slowdown to two thirds behind 4 single-step deviations)
        "throughput": WatchSpec("down", warmup=20, alpha=0.1, k=4.0, rel_effect=0.2, persist=5,
                                adwin=True, settles=True, smoothed=True),
        # a step's tokens per second, where its StepTiming counts them (instead of samples)
        "token_throughput": WatchSpec("down", warmup=20, alpha=0.1, k=4.0, rel_effect=0.2,
                                      persist=5, adwin=True, settles=True, smoothed=True),
        "effective_batch_size": WatchSpec("down", warmup=10, alpha=0.5, k=3.0, rel_effect=0.1,
                                          persist=2),
        "gpu_utilization": WatchSpec("down", warmup=5, alpha=0.3, k=4.0, min_effect=0.2,
                                     persist=3, adwin=True),
        "gpu_occupancy": WatchSpec("down", warmup=5, alpha=0.3, k=4.0, min_effect=0.15,
                                   persist=3, trend=True),
        # NVLink bytes/s per GPU while the GPUs are busy: evidence for a slower run's cause.
        # Half the run's own level is a lost link set or a fallback to PCIe, not burstiness.
        "interconnect": WatchSpec("down", warmup=20, alpha=0.3, k=4.0, rel_effect=0.5,
                                  persist=5),
        # an exploding norm: ten times the run's own level, held (a loss spike's few large
        # norms move the smoothed level less; a warm restart's 2-3 times is by design)
        # norms of fresh weights settle far lower: the baseline follows them down
        "grad_norm": WatchSpec("up", warmup=30, alpha=0.1, k=6.0, rel_effect=9.0, persist=5,
                               settles=True),
        # relative (log) step-to-step variance: at least 0.25 (the norms swinging by about
        # half from step to step) and 5 times the run's own; the stationary noise of a
        # healthy run (15 % per step: 0.02) and a clipped norm (0) stay far below it. Its
        # own level is learnt from 50 windows of 20 norms: 15 windows of 10 (the first 24
        # norms) came out half the run's level by chance, and a PPO or GAN run's noise paged
        "grad_norm_variance": WatchSpec("up", warmup=50, alpha=0.2, k=6.0, rel_effect=4.0,
                                        min_effect=0.25, persist=5, trend=True),
        "rejected_sample_rate": WatchSpec("up", warmup=2, alpha=0.5, k=4.0, min_effect=0.05,
                                          persist=1),
    }


# Watches that raise alerts on their own; the rest only feed evidence.
ALERTING_WATCHES = frozenset({"loader_share", "checkpoint_share", "gpu_occupancy",
                              "grad_norm", "grad_norm_variance", "rejected_sample_rate",
                              "throughput",
                              "token_throughput"})
WATCH_SIGNAL = {
    "loader_share": "execution", "checkpoint_share": "execution", "throughput": "execution",
    "token_throughput": "execution",
    "effective_batch_size": "execution", "gpu_utilization": "infrastructure",
    "gpu_occupancy": "infrastructure", "interconnect": "infrastructure",
    "grad_norm": "learning",
    "grad_norm_variance": "learning", "rejected_sample_rate": "data",
}
ADWIN_REPLAY = 64  # values kept in the changelog to rebuild ADWIN (small JSON state)
HEAVY_EVERY = 20
"""Updates between refreshes of a watch's detector snapshot (z-score, trend, ADWIN) in the
changelog. The level gate and the trend latch are written on every save; a worker that
recovers a run from the changelog resumes its detectors from a snapshot at most this many
updates old."""


class Reading(NamedTuple):
    """What one update of a watch says.

    A named tuple: immutable, and built on every indicator update at a fraction
    of a frozen dataclass's cost.

    Attributes:
        firing: The indicator is beyond its bound (level gate or trend).
        kind: ``level`` or ``trend`` (what made it fire), ``""`` when not firing.
        score: Strength in [0, 1]: the largest of the gate, spike and trend scores.
        z: Spike z-score of the value against its EW baseline (0 in warm-up).
        drift: ADWIN detected a drift in the bad direction on this update.
        level: The recent level.
        expected: The baseline mean.
        slope: EW slope per update (trend indicators; 0 otherwise).
        beyond: The level is outside its normal range on this update (past the
            bound, or a latched trend), whether or not it has persisted long
            enough to fire; a healthy evaluation is one where it is not.

    """

    firing: bool
    kind: str
    score: float
    z: float
    drift: bool
    level: float
    expected: float
    slope: float
    beyond: bool = False


def _stats(baseline: Baseline | None, name: str, min_n: int) -> BaselineStats | None:
    raw = (baseline or {}).get(name)
    if raw is None or raw[0] < min_n:
        return None
    st = RunningStats.from_state(raw)
    return BaselineStats(mean=st.mean, var=st.std ** 2, n=st.n)


class IndicatorWatch:
    """Level gate, spike z-score, trend CUSUM and ADWIN of one indicator of one run."""

    __slots__ = ("gate", "z", "trend", "adwin", "latched", "rising", "_heavy", "_since")

    def __init__(self, gate: Watch, z: EWZScore, trend: TrendDetector | None,
                 adwin: AdwinDetector | None, latched: bool = False, rising: int = 0) -> None:
        """Assemble a watch from its parts (see :meth:`new` and :meth:`from_state`)."""
        self.gate, self.z, self.trend, self.adwin, self.latched = gate, z, trend, adwin, latched
        self.rising = rising  # updates in a row the trend has held past the effect bound
        self._heavy: str | None = None  # JSON members of the last detector snapshot
        self._since = 0  # updates since that snapshot

    @classmethod
    def new(cls, name: str, spec: WatchSpec, baseline: Baseline | None,
            min_n: int) -> IndicatorWatch:
        """Return a watch for a run's indicator, warm-started from its workload baseline.

        Args:
            name: The indicator.
            spec: How it is watched.
            baseline: Indicator → ``[n, mean, m2]`` of finished runs of the workload.
            min_n: Least finished-run samples for the baseline to seed the detectors.

        Returns:
            The watch (seeded when the baseline has at least ``min_n`` samples).

        """
        z = EWZScore(fading_factor=0.05, min_n=max(spec.warmup, 5))
        trend = TrendDetector(warmup=max(spec.warmup, 10)) if spec.trend else None
        adwin = AdwinDetector(replay=ADWIN_REPLAY) if spec.adwin else None
        stats = _stats(baseline, name, min_n)
        if stats is not None:
            warm_start(z, [stats])
            if trend is not None:
                warm_start(trend, [stats])
        return cls(seeded_watch(baseline or {}, name, min_n), z, trend, adwin)

    def update(self, x: float, spec: WatchSpec) -> Reading:
        """Score ``x`` with every detector, then learn it (river semantics).

        Args:
            x: A finite indicator value.
            spec: How the indicator is watched.

        Returns:
            The reading.

        """
        sign = 1.0 if spec.direction == "up" else -1.0
        self._since += 1
        warm = self.z.n >= self.z.min_n
        zscore = self.z.zscore(x) if warm else 0.0
        spike = self.z.score_one(x) if sign * zscore > 0 else 0.0
        self.z.learn_one(x)
        level_firing, level_score = self.gate.update(x, spec)
        base = self.gate.base.mean
        effect = self.beyond_effect(spec)
        trend_score, slope = 0.0, 0.0
        if self.trend is not None:
            trend_score = self.trend.score_one(x) if sign * (x - self.trend.mean) > 0 else 0.0
            self.trend.learn_one(x)
            slope = self.trend.slope
            # a trend latches once the values past the effect bound from its crossing on
            # have held as long as the level must (``persist`` in a row): a few slow loader
            # batches at an epoch's start cross the CUSUM too, and are no creep
            if self.rising or (trend_score >= 1.0 and effect):
                past = sign * (x - base) > self.effect_bound(spec)
                self.rising = self.rising + 1 if past else 0
            if self.rising >= spec.persist:
                self.latched = True
        if not effect:
            self.latched = False
        drift = False
        if self.adwin is not None:
            before = self.adwin.estimation
            self.adwin.learn_one(x)
            drift = self.adwin.drift_detected and sign * (self.adwin.estimation - before) > 0
        firing = level_firing or self.latched
        kind = ("level" if level_firing else "trend") if firing else ""
        score = max(level_score, spike if firing else 0.0, trend_score)
        return Reading(firing, kind, min(score, 1.0), zscore, drift, self.gate.level, base,
                       slope, firing or self.gate.streak > 0)

    def beyond_effect(self, spec: WatchSpec) -> bool:
        """Whether the recent level sits past the baseline by the effect bound.

        In the bad direction, by ``min_effect`` or ``rel_effect`` × baseline,
        whether the watch fires yet or not.
        """
        if not math.isfinite(self.gate.level):
            return False
        gap = (self.gate.level - self.gate.base.mean) * (1.0 if spec.direction == "up" else -1.0)
        return gap > self.effect_bound(spec)

    def effect_bound(self, spec: WatchSpec) -> float:
        """Return the effect bound: ``min_effect``, or ``rel_effect`` × the baseline if larger."""
        return max(spec.min_effect, spec.rel_effect * abs(self.gate.base.mean))

    def to_state(self) -> dict[str, Any]:
        """Return the watch as a JSON-able dict."""
        out: dict[str, Any] = {"w": self.gate.to_state(), "z": self.z.to_state()}
        if self.trend is not None:
            out["t"] = self.trend.to_state()
        if self.adwin is not None:
            out["a"] = self.adwin.to_state()
        if self.latched:
            out["l"] = True
        if self.rising:
            out["r"] = self.rising
        return out

    def to_json(self, every: int = HEAVY_EVERY) -> str:
        """Return the watch as JSON text for the changelog, cheaply.

        The level gate and the latch are always current; the detector part
        (z-score, trend, ADWIN with its replay tail: most of the bytes) is the
        snapshot taken at most ``every`` updates ago. :meth:`from_state` reads
        it like :meth:`to_state` output.

        Args:
            every: Refresh the detector snapshot after this many updates (1: always).

        Returns:
            A JSON object.

        """
        if self._heavy is None or self._since >= every:
            heavy: dict[str, Any] = {"z": self.z.to_state()}
            if self.trend is not None:
                heavy["t"] = self.trend.to_state()
            if self.adwin is not None:
                heavy["a"] = self.adwin.to_state()
            self._heavy = compact(heavy)[1:-1]
            self._since = 0
        light = '{"w":' + compact(self.gate.to_state())
        if self.rising:
            light += f',"r":{self.rising}'
        return light + (',"l":true,' if self.latched else ",") + self._heavy + "}"

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> IndicatorWatch:
        """Rebuild from :meth:`to_state` output."""
        return cls(
            Watch.from_state(state["w"]), EWZScore.from_state(state["z"]),
            TrendDetector.from_state(state["t"]) if "t" in state else None,
            AdwinDetector.from_state(state["a"]) if "a" in state else None,
            bool(state.get("l", False)), int(state.get("r", 0)),
        )


HST_FEATURES = ("loader_share", "checkpoint_share", "throughput", "effective_batch_size",
                "gpu_utilization", "gpu_occupancy", "grad_norm_variance", "rejected_sample_rate")
_FRACTIONS = frozenset({"loader_share", "checkpoint_share", "gpu_utilization", "gpu_occupancy",
                        "rejected_sample_rate"})
HST_WARMUP = 100  # updates before HST scores count (two of its windows)
HST_LEVEL = 0.9  # HST score that counts as anomalous
HST_MIN_Z = 3.0  # ...when the most deviating indicator also sits this many sigmas out


def normalized_vector(watches: dict[str, IndicatorWatch]) -> dict[str, float]:
    """Return the run's indicator vector scaled to [0, 1] for HalfSpaceTrees.

    Fractions are used as they are; other indicators are scaled by twice their
    baseline mean. Indicators not seen yet sit at 0.5.

    Args:
        watches: The run's live indicator watches.

    Returns:
        Feature → value in [0, 1], one entry per :data:`HST_FEATURES`.

    """
    out = {}
    for name in HST_FEATURES:
        w = watches.get(name)
        v = 0.5
        if w is not None and math.isfinite(w.gate.level):
            if name in _FRACTIONS:
                v = w.gate.level
            else:
                base = abs(w.gate.base.mean)
                v = w.gate.level / (2 * base) if base > 0 else 0.5
        out[name] = min(max(v, 0.0), 1.0)
    return out


def most_deviating(watches: dict[str, IndicatorWatch], specs: dict[str, WatchSpec]) -> tuple[
        str, float]:
    """Return the indicator whose current level sits furthest out (bad way), and its z.

    Args:
        watches: The run's live indicator watches.
        specs: Indicator → spec (for the bad direction).

    Returns:
        ``(name, z)``; ``("", 0.0)`` when nothing is warm.

    """
    best, best_z = "", 0.0
    for name, w in watches.items():
        if w.z.n < w.z.min_n or not math.isfinite(w.gate.level):
            continue
        z = w.z.zscore(w.gate.level)
        if specs[name].direction == "down":
            z = -z
        if z > best_z:
            best, best_z = name, z
    return best, best_z
