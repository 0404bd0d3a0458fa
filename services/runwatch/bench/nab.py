"""``runwatch bench nab``: detect (data only), then score against the labels.

The two phases are separate calls: :func:`~runwatch.bench.runner.detect_corpus`
never touches ``labels/``; :func:`score_runs` reads the labels only after
every detector has produced all its scores. Each detector is scored in-sample
(NAB's way: one threshold per profile optimised on all files) and
cross-validated leave-one-set-out (:mod:`runwatch.bench.crossval`) over its
pre-declared grid of configurations, each configuration detected once.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from runwatch.bench.corpus import parse_timestamp, read_series, read_windows
from runwatch.bench.crossval import CrossValidation, leave_one_set_out, set_of
from runwatch.bench.runner import BenchDetector, DetectorRun, Progress, detect_corpus
from runwatch.bench.scorer import (
    PROFILES,
    LabeledScores,
    ProfileResult,
    score_corpus,
    window_indices,
)

logger = logging.getLogger(__name__)

Factory = Callable[[int], BenchDetector]
SHIPPED = "shipped"


@dataclass(frozen=True, slots=True)
class DetectorReport:
    """One row of the NAB table."""

    name: str
    results: dict[str, ProfileResult]
    us_per_update: float
    state_bytes_median: float
    state_bytes_max: int
    cv: dict[str, CrossValidation]  # empty when the corpus has fewer than two sets
    grid: tuple[str, ...] = (SHIPPED,)
    cv_shipped: dict[str, CrossValidation] | None = None  # threshold-only CV, grids only

    @property
    def updates_per_s(self) -> float:
        """Updates (score + learn) per second."""
        return 1e6 / self.us_per_update if self.us_per_update > 0 else float("nan")


def label_runs(root: Path, runs: Mapping[str, DetectorRun]) -> dict[str, list[LabeledScores]]:
    """Pair each run's scores with the corpus's anomaly windows (row indices).

    Args:
        root: Corpus folder (``labels/combined_windows.json`` is read here).
        runs: Detector runs over the same files.

    Returns:
        Per run name, one :class:`LabeledScores` per file.

    Raises:
        ValueError: If a scored file has no entry in the labels.

    """
    windows = read_windows(root)
    index: dict[str, tuple[tuple[int, int], ...]] = {}
    out: dict[str, list[LabeledScores]] = {}
    for name, run in runs.items():
        files = []
        for key, scores in run.scores.items():
            if key not in index:
                if key not in windows:
                    msg = f"labels/combined_windows.json has no entry for {key}"
                    raise ValueError(msg)
                stamps = [parse_timestamp(t) for t in read_series(root, key).timestamps]
                index[key] = window_indices(stamps, windows[key])
            files.append(
                LabeledScores(
                    key=key, scores=np.asarray(scores, dtype=np.float64), windows=index[key]
                )
            )
        out[name] = files
    return out


def score_runs(
    root: Path,
    runs: Mapping[str, DetectorRun],
    grid_runs: Mapping[str, Mapping[str, DetectorRun]] | None = None,
) -> list[DetectorReport]:
    """Score every detector in-sample and cross-validated, for every profile.

    Args:
        root: Corpus folder (``labels/combined_windows.json`` is read here).
        runs: Output of :func:`detect_corpus` (the shipped configurations).
        grid_runs: Per detector, the runs of its other declared configurations
            (in declared order); detectors without one are cross-validated on
            the threshold alone.

    Returns:
        One report per detector, in the given order.

    Raises:
        ValueError: If a scored file has no entry in the labels.

    """
    labeled = label_runs(root, runs)
    n_sets = len({set_of(f.key) for files in labeled.values() for f in files})
    reports = []
    for name, run in runs.items():
        extra = (grid_runs or {}).get(name, {})
        candidates = {SHIPPED: labeled[name], **label_runs(root, extra)}
        files = labeled[name]
        reports.append(
            DetectorReport(
                name=name,
                results=score_corpus(files),
                us_per_update=run.us_per_update,
                state_bytes_median=statistics.median(run.state_bytes),
                state_bytes_max=max(run.state_bytes),
                cv={p: leave_one_set_out(candidates, p) for p in PROFILES} if n_sets > 1 else {},
                grid=tuple(candidates),
                cv_shipped={p: leave_one_set_out({SHIPPED: files}, p) for p in PROFILES}
                if n_sets > 1 and len(candidates) > 1
                else None,
            )
        )
    return reports


def run_benchmark(
    root: Path,
    detectors: Mapping[str, Factory],
    out_dir: Path | None,
    progress: Progress | None = None,
    time_every: Mapping[str, int] | None = None,
    grids: Mapping[str, Mapping[str, Factory]] | None = None,
) -> list[DetectorReport]:
    """Detect over the corpus (data only), then score (labels).

    Args:
        root: Corpus folder.
        detectors: Name → factory taking a seed (the shipped configuration).
        out_dir: Folder for per-row score files of the shipped configurations
            (None: do not write).
        progress: Progress callback for the detection phase.
        time_every: Per detector, time every k-th file only.
        grids: Per detector, its other candidate configurations for the
            cross-validation (label → factory), in declared order.

    Returns:
        One report per detector.

    """
    runs = detect_corpus(root, detectors, out_dir, progress=progress, time_every=time_every)
    grid_runs: dict[str, dict[str, DetectorRun]] = {}
    for name in detectors:
        extra = {
            label: make for label, make in (grids or {}).get(name, {}).items() if label != SHIPPED
        }
        if extra:
            found = detect_corpus(root, extra, None, progress=progress)
            grid_runs[name] = dict(found)
    return score_runs(root, runs, grid_runs)


def _cell(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def format_table(reports: Sequence[DetectorReport]) -> str:
    """Format the reports as a markdown table: in-sample and cross-validated per profile."""
    names = list(PROFILES)
    head = ["detector"]
    for p in names:
        head += [p, f"{p} (CV)"]
    head += ["updates/s", "µs/update", "state bytes/series (median, max)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in reports:
        cells = [r.name]
        for p in names:
            cells += [f"{r.results[p].normalized:.1f}", _cell(r.cv[p].normalized if r.cv else None)]
        cells += [
            f"{r.updates_per_s:,.0f}",
            f"{r.us_per_update:.1f}",
            f"{r.state_bytes_median:,.0f}, {r.state_bytes_max:,}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    for r in reports:
        if r.cv_shipped:
            figures = ", ".join(f"{p} {cv.normalized:.1f}" for p, cv in r.cv_shipped.items())
            lines.append(f"\n{r.name}, shipped configuration alone (threshold-only CV): {figures}")
    return "\n".join(lines)


def format_folds(reports: Sequence[DetectorReport]) -> str:
    """Format the leave-one-set-out folds: chosen configuration, threshold, held-out score.

    A set without anomaly windows has no normalised score of its own (``n/a``);
    its raw score (the cost of its false positives) still counts in the pooled score.
    """
    head = ["detector", "profile", "held-out set", "config", "threshold", "train", "held-out raw"]
    head += ["held-out null", "held-out perfect", "held-out score"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in reports:
        for p, cv in r.cv.items():
            for f in cv.folds:
                cells = [r.name, p, f.held_out, f.config, f"{f.train.threshold:.6g}"]
                cells += [f"{f.train.normalized:.1f}", f"{f.test.raw:.2f}"]
                cells += [f"{f.test.null + 0.0:.0f}", f"{f.test.perfect:.0f}"]
                cells.append(_cell(f.held_out_score))
                lines.append("| " + " | ".join(cells) + " |")
            cells = [r.name, p, "pooled", "", "", "", f"{cv.raw:.2f}", f"{cv.null:.0f}"]
            cells += [f"{cv.perfect:.0f}", f"{cv.normalized:.1f}"]
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
