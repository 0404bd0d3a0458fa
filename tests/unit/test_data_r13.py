"""Data-integrity signals through the public path (checked 2026-12-07 with independent cases):
duplicates in tables with list, array or dict cells; the scale of a zero-inflated feature; a
business-day feed's weekend; a dataset of more than 16 shards.

Everything is published the way users publish it (``runwatch.init`` with an explicit clock,
``run.step``, ``runwatch.client.data.report``) and handed to
:class:`~runwatch.processor.memory.MemoryProcessor`: one message at a time, or delivered
live (each message as its event time comes, the timer ticking in between) where a timer
rule is judged.
"""

from __future__ import annotations

import random
import time
import zlib
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sdk_kit import Clock, deliver_live, timed

import runwatch
from runwatch.adapters.publisher import CaptureTransport, Publisher
from runwatch.client import data
from runwatch.core.records import Alert, DatasetRef
from runwatch.core.signals import datachecks
from runwatch.processor.memory import MemoryProcessor

MIN = 60_000
HOUR = 60 * MIN
DAY = 24 * HOUR
T0 = (int(time.time() * 1000) // DAY - 60) * DAY  # midnight, 60 days ago


def run_of(t: CaptureTransport, run_id: str, start: int, uri: str = "s3://d") -> Any:
    return runwatch.init("fam", run_id=run_id, transport=t, install_hooks=False,
                         capture_lineage=False, clock=lambda: start,
                         datasets=[DatasetRef(uri=uri, version="v1")])


def steps(run: Any, start: int, end: int, every: int) -> None:
    """The run's steps and its end, sent before the dataset's reports (as ``test_data_r12``
    does): interleaved with the reports, the run's manifest reached the capture after some
    of them in some runs, and the run then read no dataset."""
    at, step = start + every, 0
    while at <= end:
        step += 1
        run.step(step, loss=1.0, lr=1e-3, samples=64, step_ms=1000.0, now_ms=at)
        at += every
    run.finish("succeeded", now_ms=end + 1_000)


def live(t: CaptureTransport, tick_ms: int = MIN) -> MemoryProcessor:
    """Deliver the messages as their event times come, on a clock the test moves."""
    msgs = timed(t.messages)
    clock = Clock(msgs[0][0])
    m = MemoryProcessor(clock=clock)
    deliver_live(m, clock, msgs, tick_ms=tick_ms)
    assert m.dead == []
    return m


def firing(m: MemoryProcessor) -> list[Alert]:
    return [a for a in m.alerts if isinstance(a, Alert) and a.status == "firing"]


# --- duplicates in a table with list, array or dict cells -------------------------------

def tagged(rng: random.Random, i: int, n: int) -> dict[str, list[Any]]:
    """Rows with a list of tags, a dict of attributes and an embedding (numpy) per row."""
    return {"id": [i * 10_000 + j for j in range(n)],
            "x": [round(rng.uniform(0, 1), 6) for _ in range(n)],
            "tags": [[rng.choice("abc") for _ in range(3)] for _ in range(n)],
            "attrs": [{"src": rng.choice("uv"), "w": [rng.randint(0, 9)]} for _ in range(n)],
            "emb": list(np.array([[rng.gauss(0, 1) for _ in range(8)] for _ in range(n)],
                                 dtype="float32"))}


def retried(cols: dict[str, list[Any]], share: float) -> dict[str, list[Any]]:
    """A retry appends the batch's first ``share`` of rows again (copies: equal, not same)."""
    k = int(share * len(cols["id"]))
    out = {}
    for name, values in cols.items():
        again = [v.copy() if hasattr(v, "copy") else v for v in values[:k]]
        out[name] = values + again
    return out


@pytest.mark.parametrize("column", ["tags", "attrs", "emb"])
@pytest.mark.parametrize("form", ["lists", "pandas"])
def test_duplicates_count_in_tables_with_list_array_or_dict_cells(
        column: str, form: str, tmp_path) -> None:
    """One list (tags), dict or numpy-array (embedding) column turned duplicate detection
    off: its rows were unhashable and skipped, so a retry that appended a quarter of the
    batch again reported no duplicate row and paged nothing."""
    rng = random.Random(1)
    t = CaptureTransport()
    pub = Publisher(t, kind="sdk")
    steps(run_of(t, "D", T0), T0, T0 + 15 * 10 * MIN, every=MIN)  # (sent before the reports)
    counts = []
    for i in range(14):
        cols = tagged(rng, i, 400)
        cols = {k: v for k, v in cols.items() if k in ("id", "x", column)}
        if i >= 10:
            cols = retried(cols, 0.25)
        table: Any = pd.DataFrame(cols) if form == "pandas" else cols
        r = data.report("s3://d", "v1", "all", table, publisher=pub,
                        baseline_directory=tmp_path, now_ms=T0 + (i + 1) * 10 * MIN)
        counts.append(r.duplicate_rows)
    assert counts == [0] * 10 + [100] * 4
    pages = {a.detector for a in firing(live(t))}
    assert "watch:duplicate_share" in pages


# --- the scale of a zero-inflated feature ------------------------------------------------

def refunds(rng: random.Random, i: int, n: int, share: float, scale: float = 1.0
            ) -> dict[str, list[Any]]:
    """An amount non-zero in ``share`` of the rows (lognormal when it is): refunds."""
    return {"order_id": [i * 100_000 + j for j in range(n)],
            "refund_amount": [round(rng.lognormvariate(3.0, 1.0) * scale, 2)
                              if rng.random() < share else 0.0 for _ in range(n)]}


def scale_pages(seed: int, n: int, share: float, batches: int, change_at: int | None,
                tmp_path: Any) -> set[str]:
    rng = random.Random(seed)
    t = CaptureTransport()
    pub = Publisher(t, kind="sdk")
    steps(run_of(t, f"Z{seed}", T0), T0, T0 + (batches + 1) * 10 * MIN, every=MIN)
    for k in range(batches):
        scale = 0.01 if change_at is not None and k >= change_at else 1.0  # cents to dollars
        data.report("s3://d", "v1", "all", refunds(rng, k, n, share, scale), publisher=pub,
                    baseline_directory=tmp_path / str(seed), now_ms=T0 + (k + 1) * 10 * MIN)
    return {a.title for a in firing(live(t)) if a.detector == "watch:feature_range"}


@pytest.mark.parametrize("seed", [3, 5, 9, 11, 13, 14, 21, 22])
def test_a_steady_zero_inflated_feature_keeps_its_scale(seed: int, tmp_path) -> None:
    """About 3 % of 150-row batches non-zero (0 to 10 values a batch), nothing changing for
    12 hours: a batch whose only non-zero value was small moved its mean and width below
    their bands together, and paged "changed scale" in 6 runs of 14."""
    assert scale_pages(seed, 150, 0.03, 72, None, tmp_path) == set()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_zero_inflated_feature_whose_unit_changes_still_pages(seed: int, tmp_path) -> None:
    """The same kind of feature with enough non-zero values a batch (5 % of 800 rows) goes
    from cents to dollars: every non-zero value falls a hundredfold, the batch's spread
    (its mass above its minimum, in widths) stays what it was, and it pages."""
    titles = scale_pages(seed, 800, 0.05, 24, 16, tmp_path)
    assert any("changed scale" in title for title in titles), titles


# --- a business-day feed's weekend -------------------------------------------------------

def daily_feed(seed: int, weekdays_only: bool, stop_day: int | None) -> MemoryProcessor:
    """A feed landing the night's batch at 06:00 and up to an hour late (rows up to 05:00),
    read by a run for three weeks; ``T0`` counts as a Monday."""
    rng = random.Random(seed)
    t = CaptureTransport()
    pub = Publisher(t, kind="sdk")
    run = run_of(t, "W", T0)
    steps(run, T0, T0 + 22 * DAY, every=10 * MIN)
    for d in range(22):
        if (weekdays_only and d % 7 in (5, 6)) or (stop_day is not None and d >= stop_day):
            continue
        newest = T0 + d * DAY + 5 * HOUR
        at = newest + HOUR + int(rng.uniform(0, 60) * MIN)
        n = rng.randint(90, 110)
        data.report("s3://d", "v1", "all",
                    {"ts": [newest - rng.randint(0, 20 * HOUR) for _ in range(n - 1)] + [newest],
                     "x": [rng.gauss(0, 1) for _ in range(n)]},
                    timestamp="ts", publisher=pub, now_ms=at)
    return live(t, tick_ms=10 * MIN)


def freshness_pages(m: MemoryProcessor) -> list[Alert]:
    return [a for a in firing(m) if a.detector == "watch:freshness_lag"]


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6])
def test_a_business_day_feed_is_not_silent_over_its_weekends(seed: int) -> None:
    """Monday to Friday, nothing on weekends: the weekend and a late Monday passed 3 usual
    (daily) intervals and paged "not being refreshed"; the three-day gap among its latest
    refresh intervals is its normal range."""
    assert freshness_pages(daily_feed(seed, weekdays_only=True, stop_day=None)) == []


@pytest.mark.parametrize(("weekdays_only", "stop_day", "within"), [
    (True, 9, 4 * DAY + 3 * HOUR),  # stops after Tuesday: past its longest gap and a day
    (False, 9, 3 * DAY + 3 * HOUR),  # a daily feed without gaps: three intervals, as before
], ids=["business-days", "every-day"])
def test_a_feed_that_stops_still_pages(weekdays_only: bool, stop_day: int, within: int) -> None:
    pages = freshness_pages(daily_feed(1, weekdays_only=weekdays_only, stop_day=stop_day))
    assert pages and "not being refreshed" in pages[0].title
    newest = T0 + (stop_day - 1) * DAY + 5 * HOUR
    assert newest + within - 3 * HOUR < pages[0].first_seen_ms <= newest + within


# --- a dataset of more shards than partitions followed ----------------------------------

def shards(count: int, stop: str | None, cycles: int = 30) -> MemoryProcessor:
    """``count`` shards reported every 10 minutes (each 0-3 minutes into its cycle); shard
    ``stop`` stops at cycle 15 while the others go on."""
    rng = random.Random(5)
    t = CaptureTransport()
    pub = Publisher(t, kind="sdk")
    steps(run_of(t, f"P{count}", T0), T0, T0 + (cycles + 1) * 10 * MIN, every=MIN)
    plan = sorted((T0 + 2 * MIN + c * 10 * MIN + int(rng.uniform(0, 3) * MIN) + s, f"shard={s:02d}")
                  for c in range(cycles) for s in range(count)
                  if not (f"shard={s:02d}" == stop and c >= 15))
    for at, part in plan:
        data.report("s3://d", "v1", part, {"x": [rng.random() for _ in range(20)]},
                    publisher=pub, now_ms=at)
    return live(t)


def missing(m: MemoryProcessor) -> list[str]:
    return [a.title for a in firing(m) if a.detector == "watch:partition_missing"]


@pytest.mark.parametrize("count", [17, 24, 40])
def test_a_shard_that_stops_pages_among_more_than_16(count: int) -> None:
    """Only the 16 most recently reported partitions were followed: with 17 shards or more
    reported round-robin, each report evicted the shard reported next, none built a
    cadence, and a shard that stopped paged nothing."""
    titles = missing(shards(count, "shard=07"))
    assert len(titles) == 1 and "shard=07" in titles[0]
    assert missing(shards(count, None)) == []


def test_past_the_cap_the_followed_shards_stay_put(monkeypatch) -> None:
    """Past the cap (8 here, for speed; 128 in use) the shards followed are the same each
    cycle, so one of them that stops still pages, and the shards not followed never do."""
    monkeypatch.setattr(datachecks, "MAX_PARTITIONS", 8)
    names = [f"shard={s:02d}" for s in range(12)]
    followed = min(names, key=lambda n: zlib.crc32(n.encode()))
    unfollowed = max(names, key=lambda n: zlib.crc32(n.encode()))
    titles = missing(shards(12, followed))
    assert len(titles) == 1 and followed in titles[0]
    assert missing(shards(12, unfollowed)) == []
    assert missing(shards(12, None)) == []
