"""Data signals through the public path (checked 2026-12-06 with independent cases): a dataset
that stops being reported, a consumer falling behind with jitter, empty versions of a dataset
read unversioned, a failed stage of a stage-only pipeline.

Everything is published the way users publish it (``runwatch.init`` with an explicit clock,
``run.step``, ``runwatch.client.data.report``, ``data.stage``) and delivered live, each
message as its event time comes, to :class:`~runwatch.processor.memory.MemoryProcessor`,
whose timer ticks in between.
"""

from __future__ import annotations

import random
import time
from typing import Any

import pytest
from sdk_kit import Clock, deliver_live, timed

import runwatch
from runwatch.adapters.publisher import CaptureTransport, Publisher
from runwatch.client import data
from runwatch.core.records import Alert, DatasetRef
from runwatch.processor.memory import MemoryProcessor

MIN = 60_000
HOUR = 60 * MIN
DAY = 24 * HOUR
T0 = (int(time.time() * 1000) // DAY - 60) * DAY  # midnight, 60 days ago


def run_of(t: CaptureTransport, run_id: str, datasets: list[Any], start: int) -> Any:
    return runwatch.init("fam", run_id=run_id, transport=t, install_hooks=False,
                         capture_lineage=False, clock=lambda: start, datasets=datasets)


def steps(run: Any, start: int, end: int, every: int = MIN, *, finish: bool = True) -> None:
    at, step = start + every, 0
    while at <= end:
        step += 1
        run.step(step, loss=1.0, lr=1e-3, samples=64, step_ms=1000.0, now_ms=at)
        at += every
    if finish:
        run.finish("succeeded", now_ms=end + 1_000)


def report(pub: Publisher, uri: str, version: str, at: int, newest: int, rows: int = 50,
           tmp_path: Any = None, part: str = "all") -> None:
    """A batch of ``rows`` rows whose newest row is ``newest`` (event time), reported at ``at``."""
    ts = [newest - (rows - 1 - j) * 1_000 for j in range(rows)]
    data.report(uri, version, part, {"x": [float(j % 7) for j in range(rows)], "ts": ts},
                timestamp="ts", publisher=pub, baseline_directory=tmp_path, now_ms=at)


def live(t: CaptureTransport, tick_ms: int = MIN) -> MemoryProcessor:
    msgs = timed(t.messages)
    clock = Clock(msgs[0][0])
    m = MemoryProcessor(clock=clock)
    deliver_live(m, clock, msgs, tick_ms=tick_ms)
    return m


def alerts(m: MemoryProcessor, detector: str, run_id: str | None = None) -> list[Alert]:
    return [a for a in m.alerts if isinstance(a, Alert) and a.detector == detector
            and (run_id is None or a.run_id == run_id)]


# --- a dataset that stops being reported -------------------------------------------------

STOP_CASES = {
    # reported every 10 minutes (rows 3-5 minutes old); from +3 h no more reports, the run
    # trains on to +6 h: no report ever judged it
    "stops": dict(until=3 * HOUR, run_end=6 * HOUR, resume=None, fires=True),
    # reports come back at +4 h: the page resolves with the first report of newer rows
    "resumes": dict(until=3 * HOUR, run_end=6 * HOUR, resume=4 * HOUR, fires=True),
    # the run ended a quarter of an hour after the feed (under 3 intervals of silence):
    # nothing of it reads the dataset any more
    "run-ended": dict(until=3 * HOUR, run_end=3 * HOUR + 15 * MIN, resume=None, fires=False),
    # four reports, then none: no refresh cadence learned yet
    "no-cadence": dict(until=42 * MIN, run_end=4 * HOUR, resume=None, fires=False),
}


@pytest.mark.parametrize("case", list(STOP_CASES))
def test_a_dataset_that_stops_being_reported_pages_while_its_run_reads_it(
        case: str, tmp_path) -> None:
    """Freshness was judged only when a report arrived: a dataset reported every 10
    minutes that stopped at +3 h paged nothing while its run trained 3 more hours."""
    c = STOP_CASES[case]
    rng = random.Random(3)
    t = CaptureTransport()
    pub = Publisher(t, kind="sdk")
    run = run_of(t, "A", [DatasetRef(uri="s3://d", version="v1")], T0)
    steps(run, T0, T0 + c["run_end"], every=2 * MIN)
    other = run_of(t, "B", [], T0)  # another run moves the processor's horizon on
    steps(other, T0, T0 + 7 * HOUR, every=2 * MIN)
    at, resumed = T0 + 2 * MIN, []
    while at < T0 + 7 * HOUR:
        if at < T0 + c["until"] or (c["resume"] and at >= T0 + c["resume"]):
            report(pub, "s3://d", "v1", at, int(at - rng.uniform(3, 5) * MIN),
                   tmp_path=tmp_path)
            resumed += [at] if at > T0 + c["until"] else []
        at += 10 * MIN + rng.randint(-20_000, 20_000)
    m = live(t, tick_ms=2 * MIN)
    fresh = alerts(m, "watch:freshness_lag", "A")
    assert bool(fresh) == c["fires"], [(a.status, a.title) for a in fresh]
    if not c["fires"]:
        return
    first = fresh[0]
    assert first.status == "firing" and "not being refreshed" in first.title
    # its usual delay (4 min) and three refresh intervals after its newest row
    assert T0 + c["until"] < first.first_seen_ms < T0 + c["until"] + 45 * MIN
    if c["resume"]:
        assert [a.status for a in fresh] == ["firing", "resolved"]
        assert fresh[-1].last_seen_ms < resumed[0] <= fresh[-1].emitted_at_ms < resumed[1]
    else:
        assert [a.status for a in fresh] == ["firing"]


def test_hourly_partitions_with_quiet_night_hours_are_not_silent(tmp_path) -> None:
    """Hourly partitions reported 5 minutes after the hour (give or take a minute) for
    three days; at night three hours hold a few rows each, the newest of them up to 55
    minutes before the hour: the dataset is 2 hours old before the next report at worst,
    never silent."""
    rng = random.Random(5)
    t = CaptureTransport()
    pub = Publisher(t, kind="sdk")
    run = run_of(t, "N", [DatasetRef(uri="s3://h", version="v1")], T0)
    steps(run, T0, T0 + 3 * DAY, every=10 * MIN)
    for h in range(1, 72):
        quiet = (h - 1) % 24 in (0, 1, 2)
        newest = T0 + h * HOUR - (rng.randint(10, 55) * MIN if quiet else rng.randint(1, 30) * 1000)
        report(pub, "s3://h", "v1", T0 + h * HOUR + 5 * MIN + rng.randint(-MIN, MIN), newest,
               rows=5 if quiet else 200, tmp_path=tmp_path, part=f"hour={(h - 1) % 24}")
    m = live(t, tick_ms=10 * MIN)
    assert alerts(m, "watch:freshness_lag") == []


@pytest.mark.parametrize("daily", [False, True], ids=["reported-weekly", "reported-daily"])
def test_a_weekly_snapshot_on_its_schedule_is_not_silent(daily: bool, tmp_path) -> None:
    """A weekly snapshot (its rows 4 days old when it lands), reported weekly or daily, read
    by a run for seven weeks: a week without a report is its cadence."""
    t = CaptureTransport()
    pub = Publisher(t, kind="sdk")
    run = run_of(t, "W", [DatasetRef(uri="s3://w", version="v1")], T0)
    steps(run, T0, T0 + 7 * 7 * DAY, every=6 * HOUR)
    for d in range(1, 7 * 7):
        if daily or d % 7 == 0:
            landed = T0 + (d - d % 7) * DAY  # the snapshot of the week before
            report(pub, "s3://w", "v1", T0 + d * DAY + HOUR, landed - 4 * DAY, tmp_path=tmp_path)
    m = live(t, tick_ms=6 * HOUR)
    assert alerts(m, "watch:freshness_lag") == []


# --- a consumer falling behind with jitter ---------------------------------------------

@pytest.mark.parametrize("pattern", [(3.5, 0.5), (3.0, 1.0), (4.0, 0.0, 0.0, 0.0)])
def test_a_consumer_falling_behind_with_jitter_keeps_its_page(pattern, tmp_path) -> None:
    """A report every 5 minutes, rows 3 minutes old for 2 hours; then the lag rises by
    3.5, 0.5, 3.5, 0.5 ... minutes per report: each small rise was learnt (under the
    band's noise), the band followed the fall, and the page resolved with the rows 19
    minutes old."""
    t = CaptureTransport()
    pub = Publisher(t, kind="sdk")
    run = run_of(t, "J", [DatasetRef(uri="s3://lag", version="v1")], T0)
    steps(run, T0, T0 + 4 * HOUR, every=5 * MIN)
    lag, k, at = 3.0 * MIN, 0, T0 + 2 * MIN
    while at < T0 + 4 * HOUR:
        if at >= T0 + 2 * HOUR:
            lag += pattern[k % len(pattern)] * MIN
            k += 1
        report(pub, "s3://lag", "v1", at, int(at - lag), tmp_path=tmp_path)
        at += 5 * MIN
    fresh = alerts(live(t, tick_ms=5 * MIN), "watch:freshness_lag")
    assert [a.status for a in fresh] == ["firing"]


@pytest.mark.parametrize("seed", [1, 2])
def test_a_jittery_consumer_that_keeps_up_is_not_paged(seed: int, tmp_path) -> None:
    """Rows 2 to 6 minutes old at random, every 5 minutes for 8 hours: a lag that rises
    over a few reports by chance and falls back is jitter, not a consumer falling behind."""
    rng = random.Random(seed)
    t = CaptureTransport()
    pub = Publisher(t, kind="sdk")
    run = run_of(t, "K", [DatasetRef(uri="s3://j", version="v1")], T0)
    steps(run, T0, T0 + 8 * HOUR, every=5 * MIN)
    at = T0 + 2 * MIN
    while at < T0 + 8 * HOUR:
        report(pub, "s3://j", "v1", at, int(at - rng.uniform(2, 6) * MIN), tmp_path=tmp_path)
        at += 5 * MIN
    assert alerts(live(t, tick_ms=5 * MIN), "watch:freshness_lag") == []


# --- empty versions of a dataset read unversioned --------------------------------------

@pytest.mark.parametrize("mode", ["report", "stage"])
def test_empty_versions_resolve_with_the_later_versions_healthy_outputs(
        mode: str, tmp_path) -> None:
    """A run reads ``s3://sessions`` unversioned; the pipeline writes a new version every
    20 minutes (``@2026-12-07T1004``); two come out empty, the next eight are healthy: the
    two critical alerts stayed firing for hours, for no version is reported twice."""
    t = CaptureTransport()
    pub = Publisher(t, kind="sdk")
    run = run_of(t, "U", [DatasetRef(uri="s3://sessions", version=None)], T0)
    steps(run, T0, T0 + 5 * HOUR, every=2 * MIN)
    for k in range(14):
        at = T0 + 4 * MIN + k * 20 * MIN
        rows = 0 if k in (6, 7) else 500
        ver = f"2026-12-07T{(at // HOUR) % 24:02d}{(at // MIN) % 60:02d}"
        if mode == "stage":
            with data.stage("sessionize", code_version="git:77aa01", output=f"s3://sessions@{ver}",
                            inputs=[f"s3://raw@{ver}"], publisher=pub, now_ms=at) as st:
                st.rows_in, st.rows_out = rows, rows
        else:
            cols = {"dwell_s": [float(j % 40) for j in range(rows)],
                    "ts": [at - MIN + j for j in range(rows)]}
            data.report("s3://sessions", ver, "all", cols, timestamp="ts", publisher=pub,
                        baseline_directory=tmp_path, now_ms=at)
    zero = alerts(live(t, tick_ms=2 * MIN), "rule:zero_rows")
    fired = {a.alert_id for a in zero if a.status == "firing"}
    resolved = [a for a in zero if a.status == "resolved"]
    assert len(fired) == 2 and {a.alert_id for a in resolved} == fired
    # after five healthy outputs spanning five minutes: the fifth healthy version's
    assert min(a.emitted_at_ms for a in resolved) >= T0 + 4 * MIN + 12 * 20 * MIN


def test_a_versioned_read_is_not_cleared_by_other_versions(tmp_path) -> None:
    """A run that reads ``s3://d@v1`` is told about an empty v1; healthy reports of v2
    (which another run reads) are not its data."""
    t = CaptureTransport()
    pub = Publisher(t, kind="sdk")
    run = run_of(t, "V", [DatasetRef(uri="s3://d", version="v1")], T0)
    other = run_of(t, "V2", [DatasetRef(uri="s3://d", version="v2")], T0)
    steps(run, T0, T0 + 2 * HOUR)
    steps(other, T0, T0 + 2 * HOUR)
    data.report("s3://d", "v1", "all", {"x": []}, publisher=pub, baseline_directory=tmp_path,
                now_ms=T0 + 5 * MIN)
    for k in range(8):
        data.report("s3://d", "v2", "all", {"x": [1.0, 2.0]}, publisher=pub,
                    baseline_directory=tmp_path, now_ms=T0 + (10 + 5 * k) * MIN)
    assert [a.status for a in alerts(live(t), "rule:zero_rows", "V")] == ["firing"]


# --- a failed stage of a stage-only pipeline -------------------------------------------

def test_a_failed_stage_pages_as_the_stage_that_failed() -> None:
    """The version's only stage (``build_features``) fails with a KeyError: the page said
    "No data-quality report for s3://...", not that the stage failed."""
    t = CaptureTransport()
    pub = Publisher(t, kind="sdk")
    run = run_of(t, "F", [DatasetRef(uri="s3://feat", version="2026-12-07")], T0)
    with pytest.raises(KeyError), data.stage(
            "build_features", code_version="git:9f3e21a", output="s3://feat@2026-12-07",
            inputs=["s3://raw@2026-12-07"], publisher=pub, now_ms=T0 + 3 * MIN):
        raise KeyError("user_id")
    steps(run, T0, T0 + HOUR)
    missing = [a for a in alerts(live(t), "rule:missing_data_report") if a.status == "firing"]
    assert len(missing) == 1
    title = missing[0].title
    assert "build_features" in title and "git:9f3e21a" in title and "failed" in title
    assert "KeyError" in title and "s3://feat@2026-12-07" in title
