import csv
import json
import shutil
from pathlib import Path

import pytest

from runwatch.bench.baselines import DETECTORS
from runwatch.bench.nab import run_benchmark, score_runs
from runwatch.bench.runner import detect_corpus, run_file
from runwatch.cli import main


def _corpus(root: Path, n: int = 300) -> Path:
    (root / "data" / "setA").mkdir(parents=True)
    (root / "labels").mkdir()
    stamps = [f"2020-01-01 {i // 60:02d}:{i % 60:02d}:00" for i in range(n)]
    for name, spike in [("flat.csv", None), ("spiky.csv", 200)]:
        with (root / "data" / "setA" / name).open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["timestamp", "value"])
            for i, t in enumerate(stamps):
                w.writerow([t, 100.0 if i == spike else 10.0 + (i % 5) * 0.1])
    windows = {
        "setA/flat.csv": [],
        "setA/spiky.csv": [[stamps[190] + ".000000", stamps[215] + ".000000"]],
    }
    (root / "labels" / "combined_windows.json").write_text(json.dumps(windows))
    return root


class Recorder:
    """A detector that records the order of calls."""

    def __init__(self, log: list) -> None:
        self.log = log
        self.seen = 0

    def score_one(self, x: float) -> float:
        self.log.append(("score", x, self.seen))
        return 0.0

    def learn_one(self, x: float) -> None:
        self.seen += 1
        self.log.append(("learn", x, self.seen))

    def to_state(self) -> dict:
        return {"seen": self.seen}


def test_each_row_is_scored_before_it_is_learned() -> None:
    log: list = []
    run_file(lambda seed: Recorder(log), "s/x.csv", [1.0, 2.0, 3.0])
    assert log == [
        ("score", 1.0, 0),
        ("learn", 1.0, 1),
        ("score", 2.0, 1),
        ("learn", 2.0, 2),
        ("score", 3.0, 2),
        ("learn", 3.0, 3),
    ]


def test_detection_phase_never_needs_labels(tmp_path: Path) -> None:
    root = _corpus(tmp_path / "c")
    hidden = tmp_path / "labels-away"
    shutil.move(str(root / "labels"), hidden)  # labels absent while detecting
    runs = detect_corpus(root, {"default": DETECTORS["default"]}, tmp_path / "out")
    assert set(runs["default"].scores) == {"setA/flat.csv", "setA/spiky.csv"}
    with pytest.raises(FileNotFoundError):
        score_runs(root, runs)
    shutil.move(str(hidden), root / "labels")
    reports = score_runs(root, runs)
    assert reports[0].results["standard"].perfect == 1.0


@pytest.mark.parametrize("name", sorted(DETECTORS))
def test_every_detector_runs_and_writes_scores(tmp_path: Path, name: str) -> None:
    root = _corpus(tmp_path / "c")
    out = tmp_path / "out"
    (report,) = run_benchmark(root, {name: DETECTORS[name]}, out)
    path = out / name / "setA" / f"{name}_spiky.csv"
    rows = list(csv.DictReader(path.open()))
    assert len(rows) == 300
    assert all(0.0 <= float(r["anomaly_score"]) <= 1.0 for r in rows)
    assert -100.0 <= report.results["standard"].normalized <= 100.0
    assert report.us_per_update > 0 and report.state_bytes_max > 0


def test_default_detector_finds_the_spike(tmp_path: Path) -> None:
    root = _corpus(tmp_path / "c")
    (report,) = run_benchmark(root, {"default": DETECTORS["default"]}, None)
    assert report.results["standard"].normalized > 50.0


def test_cli_prints_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _corpus(tmp_path / "c")
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
    assert "| default |" in out and "| random |" in out and "reward_low_FN_rate" in out


def test_cli_rejects_unknown_detector_and_missing_data(tmp_path: Path) -> None:
    assert main(["bench", "nab", "--data", str(tmp_path), "--detectors", "nope"]) == 2
    assert main(["bench", "nab", "--data", str(tmp_path / "missing")]) == 2


def test_bad_value_is_a_clear_error(tmp_path: Path) -> None:
    root = _corpus(tmp_path / "c")
    (root / "data" / "setA" / "bad.csv").write_text("timestamp,value\n2020-01-01 00:00:00,abc\n")
    with pytest.raises(ValueError, match="bad.csv:2: bad value"):
        detect_corpus(root, {"random": DETECTORS["random"]})
