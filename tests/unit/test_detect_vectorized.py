import json

import numpy as np
import pytest
from river import drift, stats

from runwatch.core.detect import EWZScore, PageHinkleyDetector, VecEWStats, VecPageHinkley


def _streams(seed: int, n_series: int, length: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    base = rng.normal(0, 1, size=(length, n_series)) * rng.uniform(0.1, 5, n_series)
    shift = np.where(np.arange(length)[:, None] > length // 2, rng.uniform(-3, 3, n_series), 0)
    return base + shift + rng.uniform(-10, 10, n_series)


@pytest.mark.parametrize("fading", [0.01, 0.1, 0.5, 0.9])
@pytest.mark.parametrize("seed", [0, 1])
def test_vec_ew_equals_river(fading: float, seed: int) -> None:
    data = _streams(seed, 7, 400)
    vec = VecEWStats.zeros(7, fading)
    means = [stats.EWMean(fading) for _ in range(7)]
    variances = [stats.EWVar(fading) for _ in range(7)]
    for row in data:
        vec.learn(row)
        for j, x in enumerate(row):
            means[j].update(float(x))
            variances[j].update(float(x))
        assert np.allclose(vec.mean, [m.get() for m in means], rtol=1e-12, atol=1e-12)
        assert np.allclose(vec.var, [v.get() for v in variances], rtol=1e-9, atol=1e-9)


def test_vec_ew_subset_update_only_touches_selected() -> None:
    vec = VecEWStats.zeros(3, 0.5)
    vec.learn(np.array([1.0, 2.0]), idx=np.array([0, 2]))
    assert vec.n.tolist() == [1, 0, 1]
    assert vec.mean.tolist() == [1.0, 0.0, 2.0]


def test_scalar_ewz_matches_river_and_round_trips() -> None:
    det = EWZScore(fading_factor=0.1)
    ref_m, ref_v = stats.EWMean(0.1), stats.EWVar(0.1)
    for x in _streams(3, 1, 200)[:, 0]:
        det.learn_one(float(x))
        ref_m.update(float(x))
        ref_v.update(float(x))
    assert det.mean == pytest.approx(ref_m.get(), rel=1e-12)
    assert det.var == pytest.approx(ref_v.get(), rel=1e-9)
    back = EWZScore.from_state(json.loads(json.dumps(det.to_state())))
    assert back.score_one(100.0) == det.score_one(100.0) > 0.99


@pytest.mark.parametrize(
    ("mode", "threshold", "min_instances", "delta"),
    [
        ("both", 50.0, 30, 0.005),
        ("up", 10.0, 30, 0.005),
        ("down", 10.0, 5, 0.05),
        ("both", 3.0, 1, 0.0),
    ],
)
def test_vec_page_hinkley_equals_river(
    mode: str, threshold: float, min_instances: int, delta: float
) -> None:
    data = _streams(7, 5, 600)
    params = dict(min_instances=min_instances, delta=delta, threshold=threshold, mode=mode)
    vec = VecPageHinkley(**params)  # type: ignore[arg-type]
    vec.grow(5)
    refs = [drift.PageHinkley(**params) for _ in range(5)]  # type: ignore[arg-type]
    fired = 0
    for row in data:
        flags = vec.update(row)
        for j, x in enumerate(row):
            refs[j].update(float(x))
        assert flags.tolist() == [r.drift_detected for r in refs]
        assert np.allclose(vec.sum_inc, [r._sum_increase for r in refs], rtol=1e-9, atol=1e-9)
        assert np.allclose(vec.sum_dec, [r._sum_decrease for r in refs], rtol=1e-9, atol=1e-9)
        fired += int(flags.sum())
    assert fired > 0  # the test exercises detection and the reset that follows it


def test_page_hinkley_state_round_trip_is_json() -> None:
    det = PageHinkleyDetector(threshold=5.0, min_instances=5)
    for x in [0.0] * 20 + [5.0] * 5:
        det.learn_one(x)
    state = json.loads(json.dumps(det.to_state()))
    back = PageHinkleyDetector.from_state(state)
    assert back.to_state() == det.to_state()
    assert back.score_one(5.0) == det.score_one(5.0)


def test_non_finite_input_is_refused() -> None:
    vec = VecEWStats.zeros(2, 0.5)
    with pytest.raises(ValueError, match="non-finite"):
        vec.learn(np.array([1.0, np.nan]))
    with pytest.raises(ValueError, match="finite"):
        EWZScore().learn_one(float("inf"))
