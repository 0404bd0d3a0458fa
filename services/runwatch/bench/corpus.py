"""Reading a NAB-format corpus: series under ``data/``, labels under ``labels/``.

The two halves are read by separate functions on purpose: the detection phase
only ever calls :func:`list_series` and :func:`read_series`, which look under
``data/`` alone; labels are read by :func:`read_windows` in the scoring phase.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Series:
    """One NAB data file.

    Attributes:
        key: Path relative to ``data/``, e.g. ``realKnownCause/nyc_taxi.csv``.
        timestamps: The raw timestamp strings, in file order.
        values: The values, in file order.

    """

    key: str
    timestamps: tuple[str, ...]
    values: tuple[float, ...]


def list_series(root: Path) -> list[str]:
    """List the data files of a corpus, sorted.

    Args:
        root: Corpus folder holding ``data/<set>/<name>.csv``.

    Returns:
        Keys relative to ``data/``.

    Raises:
        FileNotFoundError: If ``data/`` is missing or holds no csv file.

    """
    data = root / "data"
    keys = sorted(p.relative_to(data).as_posix() for p in data.glob("*/*.csv"))
    if not keys:
        msg = f"no NAB data files under {data} (expected data/<set>/<name>.csv)"
        raise FileNotFoundError(msg)
    return keys


def read_series(root: Path, key: str) -> Series:
    """Read one data file (``timestamp,value`` with a header).

    Args:
        root: Corpus folder.
        key: Key from :func:`list_series`.

    Returns:
        The series.

    Raises:
        ValueError: On a missing column, an unparsable or non-finite value.

    """
    path = root / "data" / key
    stamps: list[str] = []
    values: list[float] = []
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        if reader.fieldnames is None or not {"timestamp", "value"} <= set(reader.fieldnames):
            msg = f"{path}: header must contain timestamp,value (got {reader.fieldnames})"
            raise ValueError(msg)
        for line, row in enumerate(reader, start=2):
            try:
                value = float(row["value"])
            except (TypeError, ValueError) as exc:
                msg = f"{path}:{line}: bad value {row['value']!r}"
                raise ValueError(msg) from exc
            if not math.isfinite(value):
                msg = f"{path}:{line}: non-finite value {row['value']!r}"
                raise ValueError(msg)
            stamps.append(row["timestamp"])
            values.append(value)
    return Series(key=key, timestamps=tuple(stamps), values=tuple(values))


def parse_timestamp(text: str) -> datetime:
    """Parse a NAB timestamp (``YYYY-MM-DD HH:MM:SS[.ffffff]``), naive as NAB keeps it."""
    return datetime.fromisoformat(text.strip())


def read_windows(root: Path) -> dict[str, list[tuple[datetime, datetime]]]:
    """Read ``labels/combined_windows.json``: anomaly windows per data file.

    Args:
        root: Corpus folder.

    Returns:
        Window limits per key, sorted by start.

    Raises:
        FileNotFoundError: If the label file is missing.
        ValueError: If a window is malformed.

    """
    path = root / "labels" / "combined_windows.json"
    raw = json.loads(path.read_text())
    out: dict[str, list[tuple[datetime, datetime]]] = {}
    for key, windows in raw.items():
        limits = []
        for w in windows:
            if len(w) != 2:
                msg = f"{path}: window for {key} must be [start, end], got {w!r}"
                raise ValueError(msg)
            start, end = parse_timestamp(w[0]), parse_timestamp(w[1])
            if end < start:
                msg = f"{path}: window for {key} ends before it starts: {w!r}"
                raise ValueError(msg)
            limits.append((start, end))
        out[key] = sorted(limits)
    return out
