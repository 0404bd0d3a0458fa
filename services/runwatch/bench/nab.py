"""``runwatch bench nab``: detect (data only), then score against the labels.

The two phases are separate calls: :func:`~runwatch.bench.runner.detect_corpus`
never touches ``labels/``; :func:`score_runs` reads the labels only after
every detector has produced all its scores.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from runwatch.bench.corpus import parse_timestamp, read_series, read_windows
from runwatch.bench.runner import BenchDetector, DetectorRun, Progress, detect_corpus
from runwatch.bench.scorer import (
    PROFILES,
    LabeledScores,
    ProfileResult,
    score_corpus,
    window_indices,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DetectorReport:
    """One row of the NAB table."""

    name: str
    results: dict[str, ProfileResult]
    us_per_update: float
    state_bytes_median: float
    state_bytes_max: int

    @property
    def updates_per_s(self) -> float:
        """Updates (score + learn) per second."""
        return 1e6 / self.us_per_update if self.us_per_update > 0 else float("nan")


def score_runs(root: Path, runs: Mapping[str, DetectorRun]) -> list[DetectorReport]:
    """Pair each detector's scores with the corpus labels and score every profile.

    Args:
        root: Corpus folder (``labels/combined_windows.json`` is read here).
        runs: Output of :func:`detect_corpus`.

    Returns:
        One report per detector, in the given order.

    Raises:
        ValueError: If a scored file has no entry in the labels.

    """
    windows = read_windows(root)
    first = next(iter(runs.values()))
    index: dict[str, tuple[tuple[int, int], ...]] = {}
    for key in first.scores:
        if key not in windows:
            msg = f"labels/combined_windows.json has no entry for {key}"
            raise ValueError(msg)
        stamps = [parse_timestamp(t) for t in read_series(root, key).timestamps]
        index[key] = window_indices(stamps, windows[key])
    reports = []
    for name, run in runs.items():
        files = [
            LabeledScores(key=k, scores=np.asarray(v, dtype=np.float64), windows=index[k])
            for k, v in run.scores.items()
        ]
        reports.append(
            DetectorReport(
                name=name,
                results=score_corpus(files),
                us_per_update=run.us_per_update,
                state_bytes_median=statistics.median(run.state_bytes),
                state_bytes_max=max(run.state_bytes),
            )
        )
    return reports


def run_benchmark(
    root: Path,
    detectors: Mapping[str, Callable[[int], BenchDetector]],
    out_dir: Path | None,
    progress: Progress | None = None,
    time_every: Mapping[str, int] | None = None,
) -> list[DetectorReport]:
    """Detect over the corpus (data only), then score (labels).

    Args:
        root: Corpus folder.
        detectors: Name → factory taking a seed.
        out_dir: Folder for per-row score files (None: do not write).
        progress: Progress callback for the detection phase.
        time_every: Per detector, time every k-th file only.

    Returns:
        One report per detector.

    """
    runs = detect_corpus(root, detectors, out_dir, progress=progress, time_every=time_every)
    return score_runs(root, runs)


def format_table(reports: Sequence[DetectorReport]) -> str:
    """Format the reports as a markdown table."""
    names = list(PROFILES)
    head = ["detector", *names, "updates/s", "µs/update", "state bytes/series (median, max)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in reports:
        cells = [r.name]
        cells += [f"{r.results[p].normalized:.1f}" for p in names]
        cells += [
            f"{r.updates_per_s:,.0f}",
            f"{r.us_per_update:.1f}",
            f"{r.state_bytes_median:,.0f}, {r.state_bytes_max:,}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def format_thresholds(reports: Sequence[DetectorReport]) -> str:
    """Format the chosen thresholds and outcome counts per detector and profile."""
    lines = []
    for r in reports:
        for p, res in r.results.items():
            lines.append(
                f"{r.name:>18} {p:>19}: threshold={res.threshold:.6g} raw={res.raw:.2f} "
                f"null={res.null:.2f} perfect={res.perfect:.2f} windows missed={res.fn} "
                f"fp rows={res.fp}"
            )
    return "\n".join(lines)
