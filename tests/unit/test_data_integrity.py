"""Data-integrity signals of data-quality reports: schema conformance, freshness, volume,
duplicates, nulls and feature ranges, each judged against the dataset's own history.

The user path: batches reported with ``runwatch.client.data.report`` (no run id,
as the README shows) for a run started with ``runwatch.init``, through a real
processor worker driven in memory. The history band itself is pure and tested
directly (river's protocol: scoring does not learn, state round-trips through
JSON, NaN is ignored).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import runwatch
from runwatch.adapters.publisher import CaptureTransport, Publisher
from runwatch.client import data
from runwatch.core.records import Alert, DatasetRef
from runwatch.core.signals import datachecks
from runwatch.core.signals.datachecks import Band
from runwatch.processor.memory import MemoryProcessor
from runwatch.processor.settings import ProcessorSettings

DAY_MS = 86_400_000
Batch = Callable[[np.random.Generator, int], dict[str, Any]]


def clean(rng: np.random.Generator, i: int, rows: int = 1000) -> dict[str, Any]:
    return {"id": [i * 100_000 + j for j in range(rows)],
            "x": rng.uniform(0.0, 1.0, rows).round(6).tolist(),
            "sparse": [None if v < 0.4 else float(v) for v in rng.uniform(0, 1, rows)]}


def rows(n: int) -> Batch:
    return lambda rng, i: clean(rng, i, n)


def duplicated(share: float) -> Batch:
    def make(rng: np.random.Generator, i: int) -> dict[str, Any]:
        cols = clean(rng, i)
        k = int(share * len(cols["id"]))
        for name in cols:  # the last k rows repeat the first k
            cols[name][len(cols[name]) - k:] = cols[name][:k]
        return cols
    return make


def nulls_in_x(share: float) -> Batch:
    def make(rng: np.random.Generator, i: int) -> dict[str, Any]:
        cols = clean(rng, i)
        cols["x"][: int(share * len(cols["x"]))] = [None] * int(share * len(cols["x"]))
        return cols
    return make


def sentinel(rng: np.random.Generator, i: int) -> dict[str, Any]:
    cols = clean(rng, i)
    cols["x"][0] = -999.0
    return cols


def jitter(make: Callable[[int], Batch]) -> Batch:
    return lambda rng, i: make(int(rng.integers(900, 1100)))(rng, i)


def report_all(batches: list[Batch], *, schema: dict[str, str] | None = None,
               timestamp: str | None = None, tmp_path: Any) -> MemoryProcessor:
    t = CaptureTransport()
    runwatch.init("fam", run_id="A", transport=t, install_hooks=False, capture_lineage=False,
                  datasets=[DatasetRef(uri="s3://d", version="v1")])
    pub = Publisher(t, kind="sdk")
    rng = np.random.default_rng(7)
    for i, make in enumerate(batches):
        data.report("s3://d", "v1", f"p={i}", make(rng, i), schema=schema,
                    timestamp=timestamp, publisher=pub, baseline_directory=tmp_path)
    m = MemoryProcessor()
    m.feed(t.messages)
    return m


def firing(m: MemoryProcessor) -> set[tuple[str, str]]:
    return {(a.detector, a.probable_cause) for a in m.alerts
            if isinstance(a, Alert) and a.status == "firing"}


HISTORY = 8  # reports of the dataset before the one judged


@pytest.mark.parametrize(("usual", "last", "timestamp", "fires"), [
    (jitter(rows), rows(1000), None, None),
    (jitter(rows), rows(300), None, "watch:row_count"),
    (jitter(rows), rows(5000), None, "watch:row_count"),
    (duplicated(0.02), duplicated(0.02), None, None),
    (duplicated(0.0), duplicated(0.1), None, "watch:duplicate_share"),
    (nulls_in_x(0.0), nulls_in_x(0.005), None, None),  # a few nulls: sampling noise
    (nulls_in_x(0.0), nulls_in_x(0.2), None, "watch:null_share"),
    (clean, sentinel, None, "watch:feature_range"),
], ids=["volume", "volume-drop",
        "volume-spike", "dups-usual", "dups", "nulls-noise", "nulls", "range"])
def test_integrity_signals_fire_on_change_from_the_datasets_own_history(
        usual: Batch, last: Batch, timestamp: str | None, fires: str | None, tmp_path) -> None:
    m = report_all([usual] * HISTORY + [last], timestamp=timestamp, tmp_path=tmp_path)
    assert m.dead == []
    assert firing(m) == ({(fires, "data")} if fires else set())


def test_no_judgement_before_the_dataset_has_a_history(tmp_path) -> None:
    m = report_all([rows(1000)] * (datachecks.MIN_HISTORY - 1) + [rows(100)], tmp_path=tmp_path)
    assert firing(m) == set()


def mixed(bad: int) -> Batch:
    return lambda rng, i: {"n": [*(["oops"] * bad), *range(100 - bad)]}


@pytest.mark.parametrize(("bad", "fires"), [(0, False), (1, False), (2, True), (40, True)])
def test_schema_failures_past_the_tolerance_raise_a_data_alert(bad: int, fires: bool,
                                                               tmp_path) -> None:
    assert ProcessorSettings().schema_fail_share == 0.01
    m = report_all([mixed(bad)], schema={"n": "int"}, tmp_path=tmp_path)
    want = {("rule:schema_failures", "data")} if fires else set()
    assert firing(m) == want
    if fires:
        alert = next(a for a in m.alerts if a.detector == "rule:schema_failures")
        assert alert.observed == pytest.approx(bad / 100)


# ------------------------------------------------------------------ the band itself


def test_band_scoring_does_not_learn_and_state_round_trips() -> None:
    band = Band()
    for x in (10.0, 11.0, 9.0, 10.5, 9.5, 10.0):
        band.learn_one(x, 1.0)
    before = band.to_state()
    assert band.score_one(30.0, 1.0) == band.score_one(30.0, 1.0) > 1
    assert band.to_state() == before
    back = Band.from_state(json.loads(json.dumps(band.to_state())))
    assert back == band
    assert back.score_one(30.0, 1.0) == band.score_one(30.0, 1.0)


def test_band_ignores_nan_and_is_cold_before_min_history() -> None:
    band = Band()
    for _ in range(datachecks.MIN_HISTORY - 1):
        band.learn_one(1.0, 0.1)
    assert band.score_one(100.0, 0.1) == 0.0  # cold
    band.learn_one(math.nan, 0.1)
    assert band.n == datachecks.MIN_HISTORY - 1
    band.learn_one(1.0, 0.1)
    assert band.score_one(math.nan, 0.1) == 0.0
    assert band.score_one(100.0, 0.1) > 1


@pytest.mark.parametrize("direction", ["up", "both"])
def test_band_judges_falls_only_both_ways(direction) -> None:
    band = Band()
    for _ in range(8):
        band.learn_one(5.0, 1.0)
    assert (band.score_one(0.0, 1.0, direction) > 1) is (direction == "both")
    assert band.score_one(10.0, 1.0, direction) > 1


def test_one_outlier_barely_moves_the_band_and_a_lasting_change_becomes_normal() -> None:
    band = Band()
    for _ in range(10):
        band.learn_one(100.0, 10.0)
    band.learn_one(1e6, 10.0)  # learned clipped to the band
    assert band.mean < 100.0 + 10.0
    fired = []
    for _ in range(30):  # a new level
        fired.append(band.score_one(200.0, 10.0) > 1)
        band.learn_one(200.0, 10.0)
    assert fired[0] and not fired[-1]


def test_feature_range_widens_by_at_most_one_width_per_report() -> None:
    state = None
    for lo, hi in [(0.0, 1.0)] * datachecks.MIN_HISTORY:
        state = datachecks.range_learn(state, lo, hi)
    assert datachecks.range_score(state, 0.0, 1.9) < 1 < datachecks.range_score(state, 0.0, 2.5)
    state = datachecks.range_learn(state, -999.0, 1.0)
    assert state[1] == -1.0  # widened by one width, not to the sentinel


MIN_MS = 60_000


Batches = list[tuple[int, str | None, dict[str, Any], dict[str, Any]]]


def reported(batches: Batches, tmp_path: Any, *, t0: int | None = None,
             run_id: str = "A") -> MemoryProcessor:
    """A run reading ``s3://d@v1`` from ``t0`` (default four days ago) and its dataset's
    reports: (ms after ``t0``, partition, table, more ``data.report`` arguments) each,
    handed to a worker one message at a time, as they come (in one batch, a run that
    starts with the reports gets the dataset's first and latest 16 only)."""
    start = int(time.time() * 1000) - 4 * DAY_MS if t0 is None else t0
    t = CaptureTransport()
    runwatch.init("fam", run_id=run_id, transport=t, install_hooks=False,
                  capture_lineage=False, datasets=[DatasetRef(uri="s3://d", version="v1")],
                  clock=lambda: start)
    pub = Publisher(t, kind="sdk")
    for at, part, table, more in batches:
        data.report("s3://d", "v1", part, table, publisher=pub, baseline_directory=tmp_path,
                    now_ms=start + at, **more)
    m = MemoryProcessor()
    for message in t.messages:
        m.feed([message])
    assert m.dead == []
    return m


def report_plan(plan: list[tuple[int, str]], tmp_path: Any) -> MemoryProcessor:
    """Report small batches of ``s3://d@v1`` at (ms after the run's start, partition)."""
    rng = np.random.default_rng(7)
    return reported([(at, part, clean(rng, i, 20), {}) for i, (at, part)
                     in enumerate(sorted(plan))], tmp_path)


def regions(cycles: int, *, gone_from: int | None = None, outage_at: int | None = None,
            seed: int = 1) -> list[tuple[int, str]]:
    """Three regions reported every 10 minutes (each 0-4 minutes into its cycle)."""
    rng = np.random.default_rng(seed)
    plan, start = [], 0
    for c in range(cycles):
        start += 120 * MIN_MS if c == outage_at else 10 * MIN_MS
        for k, region in enumerate(("us", "eu", "apac")):
            if region == "eu" and gone_from is not None and c >= gone_from:
                continue
            plan.append((start + int(rng.uniform(0, 4) * MIN_MS) + k, f"region={region}"))
    return plan


def test_a_partition_that_stops_being_reported_while_the_others_go_on_is_missing(
        tmp_path) -> None:
    m = report_plan(regions(30, gone_from=20), tmp_path)
    assert firing(m) == {("watch:partition_missing", "data")}
    alert = next(a for a in m.alerts if isinstance(a, Alert) and a.status == "firing")
    assert "region=eu" in alert.title
    assert "region=us" not in alert.title and "region=apac" not in alert.title


def hourly_into_daily(days: int) -> list[tuple[int, str]]:
    """Hourly appends to the day's partition of two regions (the day's name changes)."""
    return [(h * 60 * MIN_MS + k * 5_000, f"region={r}/date=2026-11-{1 + h // 24:02d}")
            for h in range(24 * days) for k, r in enumerate(("us", "eu"))]


def shard_sample(cycles: int, seed: int) -> list[tuple[int, str]]:
    """A random sample of 4 to 8 of 12 shards reported every 5 minutes or so."""
    rng = np.random.default_rng(seed)
    plan, start = [], 0
    for _ in range(cycles):
        start += int(rng.uniform(4, 6) * MIN_MS)
        picked = sorted(rng.choice(12, size=int(rng.integers(4, 9)), replace=False))
        plan += [(start + j * 1000, f"shard={s:02d}") for j, s in enumerate(picked)]
    return plan


@pytest.mark.parametrize("plan", [
    regions(30),
    regions(30, outage_at=15),  # the pipeline was down 2 h: its first report finds no one late
    hourly_into_daily(3),  # yesterday's partition is replaced by today's
    shard_sample(150, seed=3),  # no shard has a cadence: a sample has nothing to miss
], ids=["steady", "outage", "daily-rotation", "random-shard-sample"])
def test_partitions_that_keep_their_cadence_or_are_replaced_are_not_missing(
        plan: list[tuple[int, str]], tmp_path) -> None:
    assert firing(report_plan(plan, tmp_path)) == set()


def feature_x(shift: float) -> Batch:
    def make(rng: np.random.Generator, i: int) -> dict[str, Any]:
        return {"id": [i * 100_000 + j for j in range(1000)],
                "x": rng.normal(shift, 1.0, 1000).round(6).tolist()}
    return make


def test_a_persistent_drift_is_evidence_not_a_page(tmp_path) -> None:
    """Drift from a fixed named baseline is evidence for a learning symptom's cause: daily
    and weekly cycles (an hourly basket value against a Monday baseline) and time-like
    columns mark features drifted for hours at a time, and paged every day."""
    rng = np.random.default_rng(11)
    m = reported([(i * MIN_MS, None, make(rng, i), {"baseline": "ref"}) for i, make
                  in enumerate([feature_x(0.0)] * 6 + [feature_x(0.5)] * 6)], tmp_path)
    assert firing(m) == set()
    stored = m.p.runs.load(b"A")
    assert stored is not None and any("indicator:drift" in key for key in stored.evidence)


@pytest.mark.parametrize(("stops", "fires"), [(False, set()), (True, {("watch:freshness_lag",
                                                                         "data")})])
def test_a_stream_whose_rows_always_land_late_is_not_stale(stops: bool, fires, tmp_path) -> None:
    """A micro-batch stream reported every 2 minutes whose rows land 10 minutes after they
    happen: that delay is its normal range (it paged as not refreshed for five intervals);
    the same stream stuck on its old rows after an hour is stale."""
    t0 = int(time.time() * 1000) - DAY_MS
    batches: Batches = []
    for i in range(90):
        at = (i + 1) * 2 * MIN_MS  # after t0
        newest = t0 + (min(at, 60 * MIN_MS) if stops else at)
        rows = {"x": list(range(50)), "ts": [newest - 10 * MIN_MS - j * 1000 for j in range(50)]}
        batches.append((at, None, rows, {"timestamp": "ts"}))
    assert firing(reported(batches, tmp_path, t0=t0)) == fires


def test_small_batches_of_a_skewed_feature_do_not_leave_its_range(tmp_path) -> None:
    """20-row batches of an unchanged lognormal amount, 200 reports in each of 10 runs:
    the largest of a batch passed one width of the range seen now and then (a run in
    20 paged)."""
    rng = np.random.default_rng(5)
    paged = 0
    for run in range(10):
        batches: Batches = [(k * 5 * MIN_MS, None,
                             {"amount": rng.lognormal(3.5, 0.6, 20).round(2).tolist()}, {})
                            for k in range(200)]
        paged += bool(firing(reported(batches, tmp_path / str(run), run_id=f"A{run}")))
    assert paged == 0


def lagged(plan: list[tuple[int, int]], part: str | None = None) -> Batches:
    """Reports of rows whose newest is ``lag`` old at their time: (ms after t0, lag ms)."""
    return [(at, part, {"x": list(range(50)), "ts": [-(lag + j * 1000) for j in range(50)]},
             {"timestamp": "ts"}) for at, lag in plan]


def daily(days: int, lag: int) -> list[tuple[int, int]]:
    return [((d + 1) * DAY_MS, lag) for d in range(days)]


HOUR_MS = 60 * MIN_MS
FRESHNESS_CASES = {
    # a weekly snapshot: rows days old on every report is its normal range
    "snapshot": (daily(9, 4 * DAY_MS), False),
    # the same snapshot not refreshed for five more days: its newest row 9 days old
    "snapshot-not-refreshed": (daily(8, 4 * DAY_MS) + [(13 * DAY_MS, 9 * DAY_MS)], True),
    # a stream reported every 2 minutes: seconds of lag are jitter; batches of rows an
    # hour old, ten minutes on, are stale
    "stream": ([((i + 1) * 2 * MIN_MS, 20_000) for i in range(8)] + [(18 * MIN_MS, 40_000)],
               False),
    "stream-stale": ([((i + 1) * 2 * MIN_MS, 20_000) for i in range(8)]
                     + [((i + 9) * 2 * MIN_MS, HOUR_MS) for i in range(5)], True),
    # an hourly table partitioned by event time: each hour's new partition 10 minutes old,
    # and the partitions of 2 and 6 hours before reported again with their late rows
    "late-rows-of-older-partitions": (sorted(
        [(h * HOUR_MS + 10 * MIN_MS, 10 * MIN_MS) for h in range(1, 25)]
        + [(h * HOUR_MS + 20 * MIN_MS, back * HOUR_MS) for h in range(7, 25)
           for back in (2, 6)]), False),
    # an idempotent retry re-sends an hourly batch 15 minutes later: its rows are no older
    "retry-of-the-same-batch": ([(h * HOUR_MS + 20 * MIN_MS, 20 * MIN_MS) for h in range(1, 9)]
                                + [(8 * HOUR_MS + 35 * MIN_MS, 35 * MIN_MS)], False),
    # a consumer falls further behind at every report (3 minutes late, then 4 more each
    # 10-minute report): it fired, learnt the rising lag as the new normal, and resolved
    "consumer-falling-behind": ([((i + 1) * 10 * MIN_MS, (3 + 4 * max(0, i - 24)) * MIN_MS)
                                 for i in range(60)], True),
    # hourly partitions reported 5 minutes after the hour: a quiet night hour's newest
    # event is older (up to 20 minutes before the hour), its partition was on time
    "quiet-hours": ([(h * HOUR_MS + 5 * MIN_MS, (5 + (15 if h % 24 < 6 else h % 3)) * MIN_MS)
                     for h in range(1, 73)], False),
    # an operator backfills six older days out of order
    "backfill": (daily(8, 2 * HOUR_MS) + [(8 * DAY_MS + 3 * HOUR_MS + k * MIN_MS,
                                           (d + 1) * DAY_MS + 2 * HOUR_MS)
                                          for k, d in enumerate((5, 2, 7, 3, 6, 4))], False),
}


@pytest.mark.parametrize("case", list(FRESHNESS_CASES))
def test_freshness_is_the_age_of_the_datasets_newest_rows(case: str, tmp_path) -> None:
    """The lag band judges the delay of new data; a report that brings no newer rows (late
    rows of an older partition, a retry of the same batch, a backfill) is judged by the
    age of the dataset's newest row against its refresh cadence: each of them paged as
    "staler than usual" although the dataset's freshest data was as fresh as ever."""
    plan, fires = FRESHNESS_CASES[case]
    t0 = int(time.time() * 1000) - 40 * DAY_MS
    batches = [(at, part, {**table, "ts": [t0 + at + v for v in table["ts"]]}, more)
               for at, part, table, more in lagged(plan)]
    expected = {("watch:freshness_lag", "data")} if fires else set()
    m = reported(batches, tmp_path, t0=t0)
    assert firing(m) == expected
    if fires:  # and still firing at the end: the data is still stale
        last = [a for a in m.alerts if isinstance(a, Alert) and a.detector == "watch:freshness_lag"]
        assert last[-1].status == "firing"


def dwell(scale: float, rows: int = 2000) -> Batch:
    """Click batches: a lognormal dwell time (ms, median about 4,900) and a block of
    user ids starting anywhere below a billion."""
    def make(rng: np.random.Generator, i: int) -> dict[str, Any]:
        start = int(rng.integers(0, 10**9))
        return {"user_id": list(range(start, start + rows)),
                "dwell_ms": (rng.lognormal(8.5, 0.6, rows) * scale).round(3).tolist()}
    return make


@pytest.mark.parametrize(("last", "fires"), [
    (dwell(0.001), True),  # milliseconds to seconds: the values shrink inside their range
    (dwell(1 / 60_000), True),  # to minutes
    (dwell(1.0), False),
    (dwell(1.0, rows=80), False),  # a small batch: narrower, same scale
], ids=["ms-to-s", "ms-to-min", "same", "small-batch"])
def test_a_unit_change_that_shrinks_the_values_leaves_the_features_scale(
        last: Batch, fires: bool, tmp_path) -> None:
    """A unit change (milliseconds to seconds) moves every value of the feature by the same
    factor: the batch's mean and width both fall a thousandfold while its min and max stay
    inside the range seen, so the range check never fired. An id block near zero (the
    mean alone moves) or a small batch (the width alone narrows) is not a unit change."""
    for seed in range(3):
        batches = [dwell(1.0)] * HISTORY + [last]
        rng = np.random.default_rng(seed)
        plan = [(k * 60 * MIN_MS, f"hour={k}", make(rng, k), {}) for k, make in enumerate(batches)]
        m = reported(plan, tmp_path / str(seed), run_id=f"A{seed}")
        # (the small batch is a volume change: watch:row_count's finding, not this one's)
        assert (("watch:feature_range", "data") in firing(m)) == fires


def length(scale: float, rows: int = 400) -> Batch:
    """Parts measured in millimetres (normal, 850 ± 120 mm) in 400-row batches."""
    def make(rng: np.random.Generator, i: int) -> dict[str, Any]:
        return {"length_mm": (np.clip(rng.normal(850, 120, rows), 0, None) * scale)
                .round(2).tolist()}
    return make


@pytest.mark.parametrize(("scale", "fires"), [(0.1, True), (1.0, False)],
                         ids=["mm-to-cm", "same"])
def test_a_tenfold_unit_change_pages_whatever_the_batch_noise(scale: float, fires: bool,
                                                             tmp_path) -> None:
    """Millimetres to centimetres, the coarsest unit step in use: at a factor of exactly 10
    the bound sat on the change itself, and the width of a batch (its extremes) fell short
    of it one time in two: mm to cm paged nothing."""
    for seed in range(6):
        batches = [length(1.0)] * HISTORY + [length(scale)]
        rng = np.random.default_rng(seed)
        plan = [(k * 10 * MIN_MS, "all", make(rng, k), {}) for k, make in enumerate(batches)]
        m = reported(plan, tmp_path / str(seed), run_id=f"L{seed}")
        assert (("watch:feature_range", "data") in firing(m)) == fires, seed


def test_the_scale_check_judges_a_shrinking_scale_only() -> None:
    """Both moving up together is one outlier of a heavy-tailed count in a small batch (a
    Pareto follower count paged "x243"); a unit change that grows is the range check's."""
    state, rng_state = None, [1, 0.0, 100.0, datachecks.RANGE_MIN_ROWS]
    for _ in range(datachecks.MIN_HISTORY):
        _, state = datachecks.scale_judge(state, 1.0, 11.0, 3.0, rng_state)
    up, _ = datachecks.scale_judge(state, 1.0, 16_000.0, 800.0, rng_state)
    down, _ = datachecks.scale_judge(state, 0.001, 0.011, 0.003, rng_state)
    assert up == 0.0 and down > 1.0
