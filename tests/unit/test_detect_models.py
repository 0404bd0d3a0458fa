import json
import math
import random

import pytest

from runwatch.core.detect import (
    AdwinDetector,
    BaselineStats,
    DefaultDetector,
    EWZScore,
    HalfSpaceTreesDetector,
    TrendDetector,
    pool,
    warm_start,
)


def _json(state: dict) -> dict:
    return json.loads(json.dumps(state))


def test_hst_round_trip_is_exact() -> None:
    rng = random.Random(3)
    det = HalfSpaceTreesDetector(n_trees=5, height=6, window_size=40, seed=11)
    for _ in range(95):
        det.learn_one({"a": rng.random(), "b": rng.random()})
    back = HalfSpaceTreesDetector.from_state(_json(det.to_state()))
    for _ in range(100):
        x = {"a": rng.random(), "b": rng.random()}
        assert back.score_one(x) == det.score_one(x)
        det.learn_one(x)
        back.learn_one(x)


def test_adwin_detects_shift_and_restores_estimate() -> None:
    rng = random.Random(5)
    det = AdwinDetector()
    for i in range(2000):
        det.learn_one(rng.gauss(0.0 if i < 1000 else 4.0, 1.0))
    assert det.n_detections >= 1
    back = AdwinDetector.from_state(_json(det.to_state()))
    assert back.estimation == pytest.approx(det.estimation, abs=0.1)


def _creep(n: int, slope: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [10.0 + slope * i + rng.gauss(0, 1.0) for i in range(n)]


@pytest.mark.parametrize(
    ("slope", "expect_alarm"),
    [(0.0, False), (0.002, True), (0.01, True), (-0.01, True)],
)
def test_trend_detector_flags_slow_creep_not_noise(slope: float, expect_alarm: bool) -> None:
    det = TrendDetector()
    spikes = EWZScore(fading_factor=0.05)
    peak = peak_spike = 0.0
    for x in _creep(3000, slope, seed=1):
        peak = max(peak, det.score_one(x))
        peak_spike = max(peak_spike, spikes.score_one(x))
        det.learn_one(x)
        spikes.learn_one(x)
    assert (peak >= 1.0) is expect_alarm
    if slope:
        assert math.copysign(1, det.slope) == math.copysign(1, slope)


def test_trend_state_round_trip() -> None:
    det = TrendDetector()
    for x in _creep(200, 0.01, seed=2):
        det.learn_one(x)
    back = TrendDetector.from_state(_json(det.to_state()))
    assert back.score_one(14.0) == det.score_one(14.0)


@pytest.mark.parametrize(
    ("runs", "expected"),
    [
        ([[1.0, 2.0, 3.0], [10.0, 11.0]], [1.0, 2.0, 3.0, 10.0, 11.0]),
        ([[5.0] * 4, [7.0] * 4], [5.0] * 4 + [7.0] * 4),
    ],
)
def test_pool_matches_concatenated_statistics(
    runs: list[list[float]], expected: list[float]
) -> None:
    def stats_of(xs: list[float]) -> BaselineStats:
        m = sum(xs) / len(xs)
        return BaselineStats(m, sum((x - m) ** 2 for x in xs) / len(xs), len(xs))

    pooled = pool(stats_of(r) for r in runs)
    ref = stats_of(expected)
    assert pooled is not None
    assert pooled.mean == pytest.approx(ref.mean)
    assert pooled.var == pytest.approx(ref.var)
    assert pooled.n == ref.n


def test_warm_start_seeds_a_detector_that_then_scores_immediately() -> None:
    det = EWZScore(fading_factor=0.05)
    assert det.score_one(20.0) == 0.0  # cold
    assert warm_start(det, [BaselineStats(10.0, 1.0, 500), BaselineStats(10.0, 1.0, 500)])
    assert det.score_one(20.0) > 0.999
    assert det.score_one(10.0) < 0.1
    assert not warm_start(EWZScore(), [])


def test_default_detector_scores_spike_high_and_round_trips() -> None:
    rng = random.Random(9)
    det = DefaultDetector()
    scores = []
    for i in range(1500):
        x = 50.0 + 5 * math.sin(i / 20) + rng.gauss(0, 0.5)
        if i == 1200:
            x += 40.0
        scores.append(det.score_one(x))
        det.learn_one(x)
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert scores[1200] == max(scores)
    assert scores[1200] > 0.5
    back = DefaultDetector.from_state(_json(det.to_state()))
    for x in [50.0, 55.0, 120.0]:
        assert back.score_one(x) == det.score_one(x)
        back.learn_one(x)
        det.learn_one(x)


def test_default_detector_score_does_not_change_state() -> None:
    det = DefaultDetector()
    for i in range(400):
        det.learn_one(float(i % 7))
    before = det.to_state()
    det.score_one(1000.0)
    after = det.to_state()
    after.pop("cache"), before.pop("cache")
    assert after == before


def _wave(i: int, rng: random.Random) -> float:
    return 50.0 + 5 * math.sin(i / 20) + rng.gauss(0, 0.5)


@pytest.mark.parametrize(
    ("gap", "second_fires"),
    [(20, False), (100, False), (400, True)],
)
def test_default_detector_refractory_silences_repeats(gap: int, second_fires: bool) -> None:
    rng = random.Random(4)
    det = DefaultDetector()
    first, second = 1000, 1000 + gap
    scores = {}
    for i in range(first + gap + 50):
        x = _wave(i, rng) + (60.0 if i in (first, second) else 0.0)
        scores[i] = det.score_one(x)
        det.learn_one(x)
    assert scores[first] >= det.cfg.fire_level
    assert (scores[second] >= det.cfg.fire_level) is second_fires
    if not second_fires:
        assert scores[second] == 0.0


@pytest.mark.parametrize("shift", [8.0, -8.0])
def test_default_detector_flags_level_shift(shift: float) -> None:
    rng = random.Random(6)
    det = DefaultDetector()
    peak_before = peak_after = 0.0
    for i in range(2000):
        x = _wave(i, rng) + (shift if i >= 1500 else 0.0)
        s = det.score_one(x)
        det.learn_one(x)
        if 400 <= i < 1500:
            peak_before = max(peak_before, s)
        elif i >= 1500:
            peak_after = max(peak_after, s)
    assert peak_after >= det.cfg.fire_level
    assert peak_after > peak_before


def test_default_detector_state_round_trip_is_exact_mid_refractory() -> None:
    rng = random.Random(8)
    det = DefaultDetector()
    for i in range(900):
        x = _wave(i, rng) + (50.0 if i == 850 else 0.0)
        det.score_one(x)
        det.learn_one(x)
    assert det.quiet > 0
    state = det.to_state()
    assert json.loads(json.dumps(state)) == state
    back = DefaultDetector.from_state(_json(state))
    assert back.to_state() == state
    for i in range(900, 1400):
        x = _wave(i, rng)
        assert back.score_one(x) == det.score_one(x)
        back.learn_one(x)
        det.learn_one(x)
    assert back.to_state() == det.to_state()


def test_default_detector_refuses_other_kind_and_non_finite() -> None:
    with pytest.raises(ValueError, match="kind"):
        DefaultDetector.from_state({"kind": "ewz"})
    with pytest.raises(ValueError, match="finite"):
        DefaultDetector().score_one(float("nan"))


def _square(i: int, rng: random.Random) -> float:
    return 10.0 if (i // 150) % 2 == 0 else 50.0


@pytest.mark.parametrize(("known_after", "late_jumps_fire"), [(0, True), (3, False)])
def test_default_detector_stops_alarming_on_recurring_moves(
    known_after: int, late_jumps_fire: bool
) -> None:
    from runwatch.core.detect import DefaultConfig

    rng = random.Random(12)
    det = DefaultDetector(cfg=DefaultConfig(known_after=known_after))
    late_peak = 0.0
    for i in range(3070):
        x = _square(i, rng)
        s = det.score_one(x)
        det.learn_one(x)
        if i >= 2000:
            late_peak = max(late_peak, s)
    assert (late_peak >= det.cfg.fire_level) is late_jumps_fire
    # a move never seen before still alarms
    assert det.score_one(200.0) >= det.cfg.fire_level


def test_default_detector_move_counts_survive_range_growth() -> None:
    rng = random.Random(13)
    det = DefaultDetector()
    for i in range(1200):
        x = _square(i, rng) * (1.0 if i < 900 else 3.0) + rng.gauss(0, 0.3)
        det.learn_one(x)
    assert sum(det.trans.values()) == det.n - 1
    assert DefaultDetector.from_state(_json(det.to_state())).trans == det.trans
