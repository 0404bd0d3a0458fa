"""Detection phase: run detectors causally over every series of a corpus.

This module reads only the corpus's ``data/`` folder (through
:func:`~runwatch.bench.corpus.list_series` / ``read_series``) and never its
labels: the scoring phase (:mod:`runwatch.bench.nab`) pairs the written scores
with the labels afterwards. Each row is scored before the detector learns it.

A detector with a true ``uses_time`` attribute also gets each row's timestamp
(``score_one(x, t_ms)`` / ``learn_one(x, t_ms)``, UTC epoch milliseconds; NAB's
naive timestamps are read as UTC), so it can use time of day and day of week.
"""

from __future__ import annotations

import csv
import json
import logging
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC
from pathlib import Path
from typing import Any, Protocol

from runwatch.bench.corpus import list_series, parse_timestamp, read_series
from runwatch.core.detect.base import State

logger = logging.getLogger(__name__)


class BenchDetector(Protocol):
    """What the harness needs of a detector: score, learn, and a JSON-able state."""

    def score_one(self, x: float) -> float:
        """Return a score in [0, 1] for ``x`` without learning it."""
        ...

    def learn_one(self, x: float) -> None:
        """Learn ``x``."""
        ...

    def to_state(self) -> State:
        """Return the state as a JSON-able dict (its size is the memory figure)."""
        ...


@dataclass(slots=True)
class DetectorRun:
    """What one detector produced over a corpus.

    Attributes:
        name: Detector name.
        scores: Per-file scores (key → one score per row).
        updates: Rows processed (score + learn) in timed files.
        seconds: CPU time of this process in score + learn over timed files (CPU,
            not wall, time: on a shared machine other jobs' turns are not counted).
        state_bytes: Serialized JSON state size per series, at the end of each file.

    """

    name: str
    scores: dict[str, list[float]] = field(default_factory=dict)
    updates: int = 0
    seconds: float = 0.0
    state_bytes: list[int] = field(default_factory=list)

    @property
    def us_per_update(self) -> float:
        """Mean microseconds per score + learn."""
        return 1e6 * self.seconds / self.updates if self.updates else float("nan")


Progress = Callable[[str, str, int], None]


def _seed_for(key: str) -> int:
    return zlib.crc32(key.encode())


def epoch_ms(stamps: Sequence[str]) -> list[int]:
    """Convert NAB timestamps (naive, read as UTC) to epoch milliseconds."""
    return [round(parse_timestamp(t).replace(tzinfo=UTC).timestamp() * 1000.0) for t in stamps]


def run_file(
    make: Callable[[int], BenchDetector],
    key: str,
    values: list[float],
    times_ms: Sequence[int] | None = None,
) -> tuple[list[float], BenchDetector]:
    """Score then learn every value of one series with a fresh detector.

    Args:
        make: Detector factory taking a seed.
        key: File key (the seed is derived from it, so runs are reproducible).
        values: The series.
        times_ms: Row timestamps (epoch ms), passed to detectors that use time.

    Returns:
        One score per row, each computed before the row was learned, and the
        detector at the end of the series.

    """
    det = make(_seed_for(key))
    out = []
    if times_ms is not None and getattr(det, "uses_time", False):
        timed: Any = det
        for x, t in zip(values, times_ms, strict=True):
            out.append(float(timed.score_one(x, t)))
            timed.learn_one(x, t)
        return out, det
    for x in values:
        out.append(float(det.score_one(x)))
        det.learn_one(x)
    return out, det


def detect_corpus(
    root: Path,
    detectors: Mapping[str, Callable[[int], BenchDetector]],
    out_dir: Path | None = None,
    progress: Progress | None = None,
    time_every: Mapping[str, int] | None = None,
) -> dict[str, DetectorRun]:
    """Run every detector over every series of the corpus at ``root``.

    Args:
        root: Corpus folder (only ``data/`` is read).
        detectors: Name → factory taking a seed.
        out_dir: Where to write ``<detector>/<set>/<detector>_<name>.csv``; None skips writing.
        progress: Called with ``(detector, key, rows)`` after each file.
        time_every: Per detector, time only every k-th file (cost report subsample);
            all files are always scored.

    Returns:
        Per detector, its scores and cost figures.

    """
    keys = list_series(root)
    runs = {name: DetectorRun(name=name) for name in detectors}
    for file_no, key in enumerate(keys):
        series = read_series(root, key)
        values = list(series.values)
        times = epoch_ms(series.timestamps)
        for name, make in detectors.items():
            run = runs[name]
            every = (time_every or {}).get(name, 1)
            t0 = time.process_time()
            scores, det = run_file(make, key, values, times)
            elapsed = time.process_time() - t0
            if file_no % every == 0:
                run.seconds += elapsed
                run.updates += len(values)
            run.scores[key] = scores
            run.state_bytes.append(len(json.dumps(det.to_state(), separators=(",", ":"))))
            if out_dir is not None:
                _write_scores(out_dir, name, key, series.timestamps, values, scores)
            if progress is not None:
                progress(name, key, len(values))
    return runs


def _write_scores(
    out_dir: Path,
    name: str,
    key: str,
    stamps: tuple[str, ...],
    values: list[float],
    scores: list[float],
) -> None:
    set_name, file_name = key.split("/", 1)
    path = out_dir / name / set_name / f"{name}_{file_name}"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["timestamp", "value", "anomaly_score"])
        writer.writerows(zip(stamps, values, scores, strict=True))
