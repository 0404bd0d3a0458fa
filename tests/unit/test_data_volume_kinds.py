"""The row-count band is kept per kind of partition (``datachecks.partition_kind``).

A dataset written by a streaming pipeline (about 55 rows every 30 minutes) and by a nightly
backfill (20,000 rows) into partitions of two kinds had one band: the backfill paged
``watch:row_count`` every night and the next micro-batch resolved it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from test_data_integrity import clean, reported

from runwatch.core.records import Alert
from runwatch.core.signals.datachecks import partition_kind

MIN = 60_000
DAY = 24 * 60 * MIN


def stream_and_backfill(days: int, *, nightly: int = 20_000, stream_from: int | None = None,
                        stream_rows: int = 55, seed: int = 5) -> list[tuple[int, str, Any, dict]]:
    """Micro-batches every 30 minutes (``src=stream``) and a backfill at 02:00
    (``src=batch``) into the day's partition; ``nightly`` rows from day 5 on, and the stream's
    rows become ``stream_rows`` from day ``stream_from`` on."""
    rng = np.random.default_rng(seed)
    out: list[tuple[int, str, Any, dict]] = []
    for d in range(days):
        day = f"dt=2026-11-{d + 1:02d}"
        for k in range(48):
            n = stream_rows if stream_from is not None and d >= stream_from else 55
            n = max(1, int(n * rng.uniform(0.8, 1.2)))
            out.append((d * DAY + k * 30 * MIN + 60_000, f"{day}/src=stream",
                        clean(rng, len(out), n), {}))
        rows = nightly if d >= 5 else 20_000
        out.append((d * DAY + 2 * 60 * MIN + 5 * MIN, f"{day}/src=batch",
                    clean(rng, len(out), int(rows * rng.uniform(0.95, 1.05))), {}))
    return sorted(out, key=lambda b: b[0])


def volume_pages(batches: list[tuple[int, str, Any, dict]], tmp_path: Any) -> list[str]:
    m = reported(batches, tmp_path)
    return [a.title for a in m.alerts if isinstance(a, Alert) and a.status == "firing"
            and a.detector == "watch:row_count"]


def test_a_nightly_backfill_beside_a_stream_is_their_normal_volume(tmp_path) -> None:
    assert volume_pages(stream_and_backfill(8), tmp_path) == []


def test_a_backfill_that_shrinks_tenfold_pages_naming_its_kind(tmp_path) -> None:
    pages = volume_pages(stream_and_backfill(8, nightly=2_000), tmp_path)
    assert pages and "src=batch" in pages[0], pages


def test_a_stream_that_shrinks_tenfold_pages(tmp_path) -> None:
    pages = volume_pages(stream_and_backfill(8, stream_from=6, stream_rows=5), tmp_path)
    assert pages and "src=stream" in pages[0], pages


@pytest.mark.parametrize(("partition", "kind"), [
    ("dt=2026-12-01/src=batch", "dt=*-*-*/src=batch"),
    ("part-00017", "part-*"),
    ("train", "train"),
    ("hour=13", "hour=*"),
    ("2026/12/01", "*/*/*"),
])
def test_the_kind_of_a_partition_masks_its_values(partition: str, kind: str) -> None:
    assert partition_kind(partition) == kind
