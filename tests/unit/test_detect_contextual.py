import json
import math
import random

import pytest

from runwatch.core.detect.contextual import CadOse, CadOseDetector, causal_range, py2_tuple_hash
from runwatch.core.detect.relentropy import RelativeEntropyDetector


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        ((), 3527539),  # CPython 2.7, 64-bit: hash(())
        ((1, 2, 3), 2528502973977326415),  # hash((1, 2, 3))
    ],
)
def test_py2_tuple_hash_matches_cpython27(items: tuple[int, ...], expected: int) -> None:
    assert py2_tuple_hash(items) == expected


@pytest.mark.parametrize(
    ("x", "bits"),
    [(0.0, "000"), (5.0, "101"), (7.0, "111"), (3.9, "011"), (9.0, "1001")],
)
def test_sensor_facts_encode_bucket_bits(x: float, bits: str) -> None:
    cad = CadOse(0.0, 7.0)
    want = tuple(
        sorted(65536 + 2 * i + (1 if b == "1" else 0) for i, b in enumerate(reversed(bits)))
    )
    assert cad.sensor_facts(x) == want


def _periodic(n: int) -> list[float]:
    return [float((i % 6) if (i % 12) < 6 else 6 - (i % 6)) for i in range(n)]


def test_cad_learns_a_pattern_then_flags_a_break() -> None:
    cad = CadOse(0.0, 7.0, rest_period=5)
    scores = [cad.update(x) for x in _periodic(600)]
    assert max(scores[-100:]) == 0.0  # the pattern is predicted
    assert scores[0] == 0.0  # the first rest_period values rest
    assert cad.update(7.0) > 0.0  # an unseen value after a learned context


def test_cad_rests_after_a_hot_score() -> None:
    cad = CadOse(0.0, 7.0, rest_period=20)
    for x in _periodic(600):
        cad.update(x)
    out = [cad.update(x) for x in [7.0, 0.0, 7.0, 1.0, 7.0, 7.0, 2.0]]
    hot = [i for i, s in enumerate(out) if s >= cad.base_threshold]
    if hot:
        assert all(s == 0.0 for s in out[hot[0] + 1 :])
    assert cad.n_contexts > 0


@pytest.mark.parametrize(("prefix", "lo", "hi"), [([1.0, 3.0], 0.0, 4.0), ([2.0, 2.0], 1.0, 3.0)])
def test_causal_range_pads_the_prefix(prefix: list[float], lo: float, hi: float) -> None:
    assert causal_range(prefix) == (lo, hi)


def test_causal_range_rejects_empty_prefix() -> None:
    with pytest.raises(ValueError, match="at least one value"):
        causal_range([])


def test_cad_detector_warms_up_and_pairs_score_and_learn() -> None:
    det = CadOseDetector(warmup=30, rest_period=10)
    values = _periodic(400)
    scores = []
    for x in values:
        s = det.score_one(x)
        assert det.score_one(x) == s  # a second call returns the cached score
        scores.append(s)
        det.learn_one(x)
    assert scores[:30] == [0.0] * 30
    assert det.score_one(100.0) > 0.0
    with pytest.raises(ValueError, match="different values"):
        det.score_one(-100.0)
    json.dumps(det.to_state())


def test_relative_entropy_flags_new_distribution_only() -> None:
    rng = random.Random(4)
    det = RelativeEntropyDetector()
    base = [rng.gauss(0.0, 1.0) for _ in range(600)]
    first = []
    for x in base:
        assert det.score_one(x) == det.score_one(x)  # scoring does not learn
        first.append(det.score_one(x))
        det.learn_one(x)
    late_alarms = sum(first[300:])
    shifted = []
    for _ in range(60):
        x = rng.gauss(2.5, 0.3)
        shifted.append(det.score_one(x))
        det.learn_one(x)
    assert max(shifted) == 1.0
    assert late_alarms < sum(shifted) or late_alarms == 0
    assert all(s in (0.0, 1.0) for s in first + shifted)
    assert not math.isinf(len(json.dumps(det.to_state())))
