import csv
import json
import random
from pathlib import Path

import pytest

from runwatch.bench.corpus import parse_timestamp, read_series, read_windows
from runwatch.bench.perturb import PERTURBATIONS, SHIFT, gaps, main, poisson, write_perturbed
from runwatch.bench.scorer import window_indices


def _corpus(root: Path, n: int = 900) -> Path:
    (root / "data" / "s").mkdir(parents=True)
    (root / "labels").mkdir()
    stamps = [
        f"2020-01-{1 + i // 288:02d} {i % 288 // 12:02d}:{i % 12 * 5:02d}:00" for i in range(n)
    ]
    with (root / "data" / "s" / "f.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["timestamp", "value"])
        for i, t in enumerate(stamps):
            w.writerow([t, 5.0 + (i % 7) + (40.0 if i == 600 else 0.0)])
    windows = {"s/f.csv": [[stamps[580] + ".000000", stamps[620] + ".000000"]]}
    (root / "labels" / "combined_windows.json").write_text(json.dumps(windows))
    return root


def _window_rows(root: Path) -> list[tuple[int, int]]:
    stamps = [parse_timestamp(t) for t in read_series(root, "s/f.csv").timestamps]
    return list(window_indices(stamps, read_windows(root)["s/f.csv"]))


def test_every_kind_writes_a_scorable_copy_and_is_reproducible(tmp_path: Path) -> None:
    src = _corpus(tmp_path / "src")
    for kind in PERTURBATIONS:
        write_perturbed(src, tmp_path / "a" / kind, kind)
        write_perturbed(src, tmp_path / "b" / kind, kind)
        a = (tmp_path / "a" / kind / "data" / "s" / "f.csv").read_text()
        assert a == (tmp_path / "b" / kind / "data" / "s" / "f.csv").read_text(), kind
        rows = _window_rows(tmp_path / "a" / kind)
        assert len(rows) == 1, kind  # the window still covers rows of the copy


def test_labels_move_only_with_the_clock(tmp_path: Path) -> None:
    src = _corpus(tmp_path / "src")
    write_perturbed(src, tmp_path / "t", "tshift")
    write_perturbed(src, tmp_path / "d", "down3")
    assert _window_rows(tmp_path / "t") == _window_rows(src)  # same rows, moved clock
    first = parse_timestamp(read_series(tmp_path / "t", "s/f.csv").timestamps[0])
    assert first - parse_timestamp(read_series(src, "s/f.csv").timestamps[0]) == SHIFT
    ((left, right),) = _window_rows(tmp_path / "d")
    assert (left, right) == (194, 206)  # every third row: 582 // 3 ... 618 // 3
    assert read_windows(tmp_path / "d") == read_windows(src)


def test_gaps_keep_the_first_row_and_drop_about_a_tenth() -> None:
    rows = [(parse_timestamp("2020-01-01 00:00:00"), float(i)) for i in range(4000)]
    kept = gaps(rows, random.Random("x"))
    assert kept[0] == rows[0]
    assert 0.75 * len(rows) < len(kept) < 0.95 * len(rows)
    assert [v for _, v in kept] == sorted(v for _, v in kept)  # a subsequence, in order


def test_poisson_counts_have_the_declared_mean_rate() -> None:
    t = parse_timestamp("2020-01-01 00:00:00")
    rows = [(t, float(i % 2)) for i in range(4000)]  # min 0, mean 0.5: rates 0 and 20
    counts = [v for _, v in poisson(rows, random.Random("p"))]
    assert all(c == int(c) >= 0 for c in counts)
    assert sum(counts) / len(counts) == pytest.approx(10.0, rel=0.05)


def test_unknown_kind_and_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _corpus(tmp_path / "src")
    with pytest.raises(ValueError, match="unknown perturbation"):
        write_perturbed(src, tmp_path / "x", "nope")
    assert main(["--data", str(src), "--out", str(tmp_path / "o"), "--kinds", "scale,gaps"]) == 0
    assert "scale: 1 series" in capsys.readouterr().out
    assert (tmp_path / "o" / "gaps" / "labels" / "combined_windows.json").exists()
