import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from runwatch.bench.crossval import leave_one_set_out, set_of
from runwatch.bench.nab import run_benchmark
from runwatch.bench.runner import epoch_ms, run_file
from runwatch.bench.scorer import (
    PROFILES,
    LabeledScores,
    optimize_threshold,
    score_at_threshold,
)
from runwatch.cli import main

WINDOW = ((50, 59),)


def _file(key: str, fire: dict[int, float], windows=WINDOW, n: int = 100) -> LabeledScores:
    scores = np.zeros(n)
    for row, value in fire.items():
        scores[row] = value
    return LabeledScores(key=key, scores=scores, windows=windows)


def _candidates() -> dict[str, list[LabeledScores]]:
    # X fires 0.8 at each window's first row and once (row 40) in the calm set;
    # Y fires 0.5 at a's window only. See the test for the folds worked by hand.
    return {
        "X": [
            _file("a/f.csv", {50: 0.8}),
            _file("b/f.csv", {50: 0.8}),
            _file("calm/f.csv", {40: 0.8}, windows=()),
        ],
        "Y": [
            _file("a/f.csv", {50: 0.5}),
            _file("b/f.csv", {}),
            _file("calm/f.csv", {}, windows=()),
        ],
    }


def test_folds_and_pooling_worked_by_hand() -> None:
    # held out a: trained on b + calm, X scores 1 - 0.11 = 0.89, Y -1 -> X at 0.8; a is hit: +1.
    # held out b: trained on a + calm, X 0.89, Y 1.0 -> Y at 0.5; b is missed: -1.
    # held out calm: trained on a + b, X 2.0, Y 0.0 -> X at 0.8; its FP costs -0.11 (no window).
    # pooled: raw 1 - 1 - 0.11, null -2, perfect 2 -> 100 * (1.89) / 4 = 47.25.
    cv = leave_one_set_out(_candidates(), "standard")
    got = [(f.held_out, f.config, f.train.threshold, round(f.test.raw, 6)) for f in cv.folds]
    assert got == [("a", "X", 0.8, 1.0), ("b", "Y", 0.5, -1.0), ("calm", "X", 0.8, -0.11)]
    assert [f.held_out_score for f in cv.folds] == [100.0, 0.0, None]
    assert (cv.null, cv.perfect) == (-2.0, 2.0)
    assert cv.raw == pytest.approx(-0.11)
    assert cv.normalized == pytest.approx(47.25)


def test_ties_keep_the_first_declared_configuration() -> None:
    files = _candidates()["X"]
    cv = leave_one_set_out({"shipped": files, "copy": files}, "standard")
    assert {f.config for f in cv.folds} == {"shipped"}


@pytest.mark.parametrize("held_out", ["a", "b", "calm"])
@pytest.mark.parametrize("profile", list(PROFILES))
def test_held_out_labels_never_choose_the_held_out_fold(held_out: str, profile: str) -> None:
    base = leave_one_set_out(_candidates(), profile)
    moved = {
        name: [
            LabeledScores(
                f.key, f.scores, ((10, 20), (70, 90)) if set_of(f.key) == held_out else f.windows
            )
            for f in files
        ]
        for name, files in _candidates().items()
    }
    other = leave_one_set_out(moved, profile)
    (before,) = [f for f in base.folds if f.held_out == held_out]
    (after,) = [f for f in other.folds if f.held_out == held_out]
    assert (after.config, after.train) == (before.config, before.train)
    assert after.test != before.test  # the held-out set is scored with its new labels


def test_cross_validation_refuses_a_single_set_and_mismatched_candidates() -> None:
    with pytest.raises(ValueError, match="at least two sets"):
        leave_one_set_out({"X": [_file("a/f.csv", {50: 1.0}), _file("a/g.csv", {})]}, "standard")
    with pytest.raises(ValueError, match="same files"):
        leave_one_set_out({"X": [_file("a/f.csv", {})], "Y": [_file("b/f.csv", {})]}, "standard")
    with pytest.raises(ValueError, match="at least one candidate"):
        leave_one_set_out({}, "standard")


@pytest.mark.parametrize("profile", list(PROFILES))
def test_score_at_threshold_agrees_with_the_optimiser(profile: str) -> None:
    rng = np.random.default_rng(7)
    files = [
        LabeledScores(f"s/{i}.csv", rng.random(400), ((100, 139), (300, 319))) for i in range(3)
    ]
    best = optimize_threshold(files, profile)
    again = score_at_threshold(files, profile, best.threshold)
    assert again.raw == pytest.approx(best.raw)
    assert (again.tp, again.fp, again.fn) == (best.tp, best.fp, best.fn)
    never = score_at_threshold(files, profile, math.inf)
    assert never.raw == never.null == best.null
    assert score_at_threshold(files, profile, 0.0).raw < best.raw


def _two_set_corpus(root: Path, n: int = 400) -> Path:
    (root / "labels").mkdir(parents=True)
    stamps = [
        f"2020-01-{1 + i // 288:02d} {i % 288 // 12:02d}:{i % 12 * 5:02d}:00" for i in range(n)
    ]
    windows = {}
    for set_name, spike in [("setA", 300), ("setB", 330), ("setC", None)]:
        (root / "data" / set_name).mkdir(parents=True)
        key = f"{set_name}/s.csv"
        with (root / "data" / key).open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["timestamp", "value"])
            for i, t in enumerate(stamps):
                w.writerow([t, 100.0 if i == spike else 10.0 + (i % 7) * 0.1])
        windows[key] = [] if spike is None else [[stamps[spike], stamps[spike + 25]]]
    (root / "labels" / "combined_windows.json").write_text(json.dumps(windows))
    return root


class Counting:
    """A detector that counts its constructions and records the times it is given."""

    made = 0
    times: list[int] = []
    uses_time = True

    def __init__(self, level: float) -> None:
        Counting.made += 1
        self.level = level
        self.last = 0.0

    def score_one(self, x: float, t_ms: int) -> float:
        Counting.times.append(t_ms)
        return self.level if x > 50.0 else 0.0

    def learn_one(self, x: float, t_ms: int) -> None:
        self.last = x

    def to_state(self) -> dict:
        return {"last": self.last}


def test_each_grid_configuration_is_detected_once_per_file(tmp_path: Path) -> None:
    root = _two_set_corpus(tmp_path / "c")
    Counting.made = 0
    grid = {"shipped": lambda seed: Counting(0.9), "other": lambda seed: Counting(0.7)}
    (report,) = run_benchmark(root, {"det": grid["shipped"]}, None, grids={"det": grid})
    assert Counting.made == 2 * 3  # two configurations x three files, not per fold or profile
    assert report.grid == ("shipped", "other")
    assert set(report.cv) == set(PROFILES)
    assert [f.held_out for f in report.cv["standard"].folds] == ["setA", "setB", "setC"]
    assert report.cv["standard"].normalized == pytest.approx(100.0)
    assert report.cv_shipped is not None
    assert {f.config for f in report.cv_shipped["standard"].folds} == {"shipped"}


def test_timestamps_reach_detectors_that_use_time() -> None:
    Counting.times = []
    stamps = ("2024-01-01 00:00:00", "2024-01-01 00:05:00")
    run_file(lambda seed: Counting(1.0), "s/f.csv", [1.0, 2.0], epoch_ms(stamps))
    assert Counting.times == [1704067200000, 1704067500000]


def test_cli_prints_in_sample_and_cross_validated(tmp_path: Path, capsys) -> None:
    root = _two_set_corpus(tmp_path / "c")
    rc = main(
        [
            "bench",
            "nab",
            "--data",
            str(root),
            "--out",
            str(tmp_path / "o"),
            "--detectors",
            "default,random",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert "| standard | standard (CV) |" in out
    assert "| default | standard | setC | " in out and "| default | standard | pooled |" in out
    assert "default, shipped configuration alone (threshold-only CV): standard" in out
