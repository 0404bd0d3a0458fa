import math

import numpy as np
import pytest

from runwatch.bench.scorer import (
    PROFILES,
    CostMatrix,
    LabeledScores,
    optimize_threshold,
    probation_length,
    scaled_sigmoid,
    sweep_scores,
)

STD = PROFILES["standard"]


def _file(n: int, windows: tuple[tuple[int, int], ...], fire: list[int], key: str = "s/f.csv"):
    scores = np.zeros(n)
    scores[fire] = 1.0
    return LabeledScores(key=key, scores=scores, windows=windows)


@pytest.mark.parametrize(
    ("x", "expected"),
    # values quoted in NAB's docstring: -1 -> 0.98661, -0.5 -> 0.84828, 0 -> 0, 1 -> -0.98661
    [(-1.0, 0.98661), (-0.5, 0.84828), (0.0, 0.0), (1.0, -0.98661), (3.0, -1.0), (5.0, -1.0)],
)
def test_scaled_sigmoid(x: float, expected: float) -> None:
    assert scaled_sigmoid(x) == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize(("n", "expected"), [(100, 15), (1000, 150), (10_000, 750), (7, 1)])
def test_probation_length(n: int, expected: int) -> None:
    assert probation_length(n) == expected


CORPUS = [
    (200, ((100, 119),), "one window"),
    (400, ((100, 119), (300, 339)), "two windows"),
]


@pytest.mark.parametrize(("n", "windows", "label"), CORPUS)
@pytest.mark.parametrize("profile", list(PROFILES))
def test_perfect_detector_scores_100_and_null_0(n, windows, label, profile) -> None:
    perfect = _file(n, windows, [w[0] for w in windows])
    null = _file(n, windows, [])
    assert optimize_threshold([perfect], profile).normalized == pytest.approx(100.0)
    assert optimize_threshold([null], profile).normalized == pytest.approx(0.0)


def test_hand_computed_mid_window_detection_and_fps() -> None:
    # 100 rows, probation 15 rows, one window rows 50..59 (width 10).
    # Detections: row 55 (in window), row 30 (FP before any window: -fp),
    # row 62 (FP 3 rows after the window's right edge 59: sigmoid(3/9) * fp).
    f = _file(100, ((50, 59),), [30, 55, 62])
    res = optimize_threshold([f], "standard")
    tp = scaled_sigmoid(-(59 - 55 + 1) / 10) / scaled_sigmoid(-1.0)
    fp_before = -STD.fp
    fp_after = scaled_sigmoid(3 / 9) * STD.fp
    raw_all = tp + fp_before + fp_after
    assert res.raw == pytest.approx(max(raw_all, -1.0))
    assert res.null == -1.0 and res.perfect == 1.0
    assert res.normalized == pytest.approx(100 * (raw_all + 1) / 2)


def test_detections_in_probation_are_ignored() -> None:
    f = _file(100, ((50, 59),), [3, 50])
    assert optimize_threshold([f], "standard").raw == pytest.approx(1.0)


def test_only_earliest_detection_in_window_counts() -> None:
    one = optimize_threshold([_file(100, ((50, 59),), [52])], "standard").raw
    many = optimize_threshold([_file(100, ((50, 59),), [52, 55, 58])], "standard").raw
    assert one == pytest.approx(many)
    assert one == pytest.approx(scaled_sigmoid(-8 / 10) / scaled_sigmoid(-1.0))


def test_threshold_is_optimised_across_files_not_per_file() -> None:
    # File A rewards a low threshold (its window hit scores 0.5), file B punishes
    # it (many 0.5 false positives): one shared threshold must trade them off.
    a = LabeledScores("s/a.csv", np.where(np.arange(100) == 50, 0.5, 0.0), ((50, 59),))
    b_scores = np.zeros(100)
    b_scores[20:40] = 0.5
    b_scores[70] = 0.9
    b = LabeledScores("s/b.csv", b_scores, ((70, 79),))
    res = optimize_threshold([a, b], "standard")
    assert res.threshold == 0.9
    assert res.raw == pytest.approx(1.0 - 1.0)


def test_custom_cost_matrix_changes_fp_penalty() -> None:
    f = _file(100, ((50, 59),), [30, 50])
    heavy = optimize_threshold([f], "x", cost=CostMatrix(tp=1.0, fp=2.0, fn=1.0))
    assert heavy.threshold == math.inf  # firing costs more than it earns
    sweep, wid = sweep_scores(100, ((50, 59),), CostMatrix(1.0, 2.0, 1.0))
    assert wid[50] == 0 and wid[30] == -1 and sweep[30] == -2.0
