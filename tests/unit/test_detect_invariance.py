"""The default detector does not notice a change of unit or of clock.

The NAB perturbation check (``runwatch.bench.perturb``: ``scale``, ``tshift``)
relies on it: its figures for those two copies equal the unperturbed ones.
"""

import math
import random

import pytest

from runwatch.core.detect import DefaultDetector

T0 = 1_400_000_000_000
STEP = 300_000  # 5 minutes


def _series(n: int = 3000) -> tuple[list[float], list[int]]:
    rng = random.Random(1)
    xs = [10 + 3 * math.sin(2 * math.pi * i / 288) + rng.gauss(0, 0.5) for i in range(n)]
    xs[2500] += 15.0
    return xs, [T0 + i * STEP for i in range(n)]


def _scores(xs: list[float], ts: list[int] | None) -> list[float]:
    det = DefaultDetector()
    out = []
    for i, x in enumerate(xs):
        t = None if ts is None else ts[i]
        out.append(det.score_one(x, t))
        det.learn_one(x, t)
    return out


def test_scores_do_not_depend_on_unit_or_offset() -> None:
    xs, ts = _series()
    base = _scores(xs, ts)
    assert max(base) > 0.5  # something to be invariant about
    for a, b in [(1000.0, 1e6), (0.001, -3.0)]:
        assert _scores([a * x + b for x in xs], ts) == pytest.approx(base, abs=1e-8)


@pytest.mark.parametrize("hours", [7, 3 * 24 + 7, 7 * 24])
def test_scores_do_not_depend_on_the_clock_origin(hours: int) -> None:
    xs, ts = _series()
    shifted = [t + hours * 3_600_000 for t in ts]
    assert _scores(xs, shifted) == _scores(xs, ts)
