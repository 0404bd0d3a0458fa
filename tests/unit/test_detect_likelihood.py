import json
import math
import random

import pytest

from runwatch.core.detect import DefaultDetector
from runwatch.core.detect.likelihood import Likelihood, tail_score

FIVE_MIN = 300_000
START = 1_704_067_200_000  # 2024-01-01 00:00 UTC


def _fed(seed: int, n: int, warmup: int = 50) -> Likelihood:
    rng = random.Random(seed)
    layer = Likelihood(warmup=warmup)
    for _ in range(n):
        layer.learn(rng.betavariate(2.0, 5.0))
    return layer


def test_tail_score_is_non_decreasing_in_its_argument() -> None:
    args = [-math.inf, *(i / 100.0 for i in range(-1000, 1001)), math.inf]
    scores = [tail_score(a) for a in args]
    assert scores[0] == 0.0
    assert scores[-1] == 1.0
    assert all(a <= b for a, b in zip(scores, scores[1:], strict=False))
    assert len(set(scores)) > 100  # not a constant map


def test_score_is_tail_score_of_tail_arg_and_does_not_learn() -> None:
    layer = _fed(1, 400)
    before = json.dumps(layer.to_state())
    rng = random.Random(2)
    for _ in range(200):
        raw = rng.random()
        assert layer.score(raw) == tail_score(layer.tail_arg(raw))
    assert json.dumps(layer.to_state()) == before


def test_tail_arg_is_minus_infinity_in_warm_up() -> None:
    layer = _fed(3, 10, warmup=50)
    assert layer.tail_arg(1.0) == -math.inf
    assert layer.score(1.0) == 0.0


def test_max_of_layer_scores_is_tail_score_of_their_max_argument() -> None:
    layers = [_fed(seed, n) for seed, n in ((4, 400), (5, 900), (6, 30))]  # the last warms up
    rng = random.Random(7)
    for _ in range(500):
        raws = [rng.random() ** 3 for _ in layers]
        expected = max(layer.score(raw) for layer, raw in zip(layers, raws, strict=True))
        arg = max(layer.tail_arg(raw) for layer, raw in zip(layers, raws, strict=True))
        assert tail_score(arg) == expected


def test_likelihood_state_round_trips_through_json() -> None:
    layer = _fed(8, 333)
    back = Likelihood.from_state(json.loads(json.dumps(layer.to_state())))
    for raw in (0.0, 0.3, 0.99):
        assert back.score(raw) == layer.score(raw)
    back.learn(0.5)
    layer.learn(0.5)
    assert back.to_state() == layer.to_state()


def _reference(det: DefaultDetector) -> float:
    """The default's score from its cached raw evidence, one tail per layer (the plain max)."""
    cfg = det.cfg
    if det.quiet > 0:
        return 0.0
    r_val, r_diff, r_rare, z_val, x, r_season = det.cache[2:8]
    value_layer, diff_layer, rare_layer = det.layers
    score = max(value_layer.score(r_val), diff_layer.score(r_diff), rare_layer.score(r_rare))
    if z_val > cfg.spike_z and value_layer.n >= cfg.spike_min_n:
        score = max(score, 1.0 - 0.5 * cfg.spike_z / z_val)
    if score >= cfg.known_from and det._seen(x) >= cfg.known_after:  # noqa: SLF001
        score *= cfg.known_damp
    return max(score, det.slayer[0].score(r_season))


@pytest.mark.parametrize("seed", [11, 12])
def test_default_detector_combines_layers_as_the_max_of_their_scores(seed: int) -> None:
    rng = random.Random(seed)
    det = DefaultDetector()
    fired = 0
    for i in range(4000):
        t = START + i * FIVE_MIN
        hour = (i * FIVE_MIN // 3_600_000) % 24
        x = (5.0 if 8 <= hour < 18 else 1.0) + rng.gauss(0.0, 0.2)
        if rng.random() < 0.004:
            x += rng.choice((-1.0, 1.0)) * rng.uniform(1.0, 8.0)
        score = det.score_one(x, t)
        if det.n >= det.cfg.min_n:
            assert score == _reference(det)
            fired += score >= det.cfg.fire_level
        det.learn_one(x, t)
    assert fired > 0  # the spikes exercised the high end, not only quiet scores
