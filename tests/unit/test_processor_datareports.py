"""Data-quality reports from the SDK reach their runs through the processor's own agents.

Records are published the way users publish them (``runwatch.init``/``run.*``,
``runwatch.client.data.report``, ``runwatch.client.emit``) to a capture
transport and handed to a real processor worker driven in memory
(:class:`~runwatch.processor.memory.MemoryProcessor`): the data agent's
dataset join, the re-keyed ``rw.internal.data-by-run`` topic and the runs agent.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from typing import Any

import pytest
from sdk_kit import Clock, deliver_live, timed

import runwatch
from runwatch.adapters.publisher import CaptureTransport, Publisher
from runwatch.client import data
from runwatch.client.emit import emit_records
from runwatch.core.records import Alert, DataQualityReport, DatasetRef
from runwatch.processor.memory import MemoryProcessor
from runwatch.processor.settings import ProcessorSettings

DATA_WAIT_MS = ProcessorSettings().data_wait_ms
HOLD_MS = ProcessorSettings().hold_ms


def start(transport: CaptureTransport, run_id: str, *datasets: tuple[str, str],
          clock_ms: int | None = None):
    """Start a run and wait for its opening records (manifest, running) in the transport.

    The SDK publishes from a background thread: a control run that is never finished
    would otherwise be fed to the processor before its manifest was published.
    """
    clock = None if clock_ms is None else (lambda: clock_ms)
    run = runwatch.init("fam", run_id=run_id, transport=transport, install_hooks=False,
                        capture_lineage=False, clock=clock,
                        datasets=[DatasetRef(uri=u, version=v) for u, v in datasets])
    deadline = time.monotonic() + 10
    while sum(1 for _, k, _ in transport.messages if k == run_id) < 2:
        assert time.monotonic() < deadline, f"run {run_id}: its opening records never came"
        time.sleep(0.005)
    return run


def firing(m: MemoryProcessor) -> set[tuple[str, str, str]]:
    return {(a.run_id, a.detector, a.probable_cause) for a in m.alerts
            if isinstance(a, Alert) and a.status == "firing"}


def publisher(transport: CaptureTransport) -> Publisher:
    return Publisher(transport, kind="sdk")


def forwarded(m: MemoryProcessor) -> Counter[str]:
    return Counter((k or b"").decode() for t, k, v, _ in m.internal
                   if t == "rw.internal.data-by-run" and v[:1] != b"{")  # reports, not acks


@pytest.mark.parametrize("own_run", [None, "A", "C"])
def test_a_report_reaches_every_run_of_its_dataset_once(own_run: str | None, tmp_path) -> None:
    t = CaptureTransport()
    runs = [start(t, r, ("s3://shared", "v1")) for r in ("A", "B")]
    others = [start(t, "C", ("s3://other", "v1"))]
    rec = data.report("s3://shared", "v1", None, {"x": []}, run_id=own_run,
                      publisher=publisher(t), baseline_directory=tmp_path)  # zero rows
    m = MemoryProcessor()
    m.feed(t.messages)
    want = {("A", "rule:zero_rows", "data"), ("B", "rule:zero_rows", "data")}
    if own_run == "C":  # the report names its run: it reaches it too
        want.add(("C", "rule:zero_rows", "data"))
    assert firing(m) == want
    assert m.dead == []
    got = {r for r, _, _ in want}
    assert set(forwarded(m)) == got
    for r in got:  # each run folded it once, whatever number of copies reached it
        assert m.p.runs.load(r.encode()).reports["s3://shared@v1"]["ids"] == [rec.event_id]
    for r in runs + others:
        r.finish()


@pytest.mark.parametrize("run_first", [True, False])
def test_a_report_without_run_id_is_not_dead_lettered_whatever_the_order(run_first: bool,
                                                                        tmp_path) -> None:
    t = CaptureTransport()
    pub = publisher(t)
    if run_first:
        run = start(t, "A", ("s3://d", "v1"))
    data.report("s3://d", "v1", None, {"x": [1, 2, 3]}, publisher=pub,
                baseline_directory=tmp_path)
    if not run_first:
        run = start(t, "A", ("s3://d", "v1"))
    start(t, "Z", ("s3://never", "v1"))  # control: a dataset nobody reports
    later = int(time.time() * 1000) + DATA_WAIT_MS + 120_000
    run.step(1, loss=1.0, now_ms=later, step_ms=100.0, loader_wait_ms=1.0)
    run.finish()
    m = MemoryProcessor()
    m.feed(t.messages)
    m.tick(later)
    assert m.dead == []
    # reported: no rule:missing_data_report for A (the control shows the rule was evaluated)
    assert firing(m) == {("Z", "rule:missing_data_report", "data")}


def test_a_label_shift_makes_a_validation_decline_a_data_problem(tmp_path) -> None:
    t = CaptureTransport()
    pub = publisher(t)
    wall = int(time.time() * 1000)
    run = start(t, "A", ("s3://d", "v1"), clock_ms=wall)
    labels = {"x": list(range(100))}
    data.report("s3://d", "v1", "p=1", {**labels, "y": [0, 1] * 50}, label="y",
                publisher=pub, baseline_directory=tmp_path)
    data.report("s3://d", "v1", "p=2", {**labels, "y": [0] * 90 + [1] * 10}, label="y",
                publisher=pub, baseline_directory=tmp_path)
    later = wall + 600_000  # validations after the reports, within the correlation window
    for i, acc in enumerate((0.90, 0.70, 0.60)):
        run.validation(100 * (i + 1), {"val_acc": acc}, now_ms=later + i * 60_000)
    run.finish()
    m = MemoryProcessor()
    m.feed(t.messages)
    assert ("A", "rule:validation_decline", "data") in firing(m)


@pytest.mark.parametrize(("healed", "cause"), [(False, "data"), (True, "learning")])
def test_a_lasting_label_shift_explains_a_decline_long_after_the_last_report(
        healed: bool, cause: str, tmp_path) -> None:
    """Hourly reports land a quarter past the hour; from hour 4 every one of them is
    shifted; the evaluations come on the hour, three quarters of an hour after the latest
    report (past the 30-minute window), delivered in time order: the decline was called
    learning. A dataset whose latest reports are healthy again no longer explains it."""
    t = CaptureTransport()
    pub = publisher(t)
    hour = 3_600_000
    wall = int(time.time() * 1000) - 12 * hour
    run = start(t, "L", ("s3://d", "v1"), clock_ms=wall)
    accs = [0.91] * 6 + [0.86, 0.81, 0.76]
    for h in range(9):
        shifted = h >= 4 and not (healed and h >= 6)
        ys = [0] * 60 + [1] * 40 if shifted else [0] * 80 + [1] * 20
        data.report("s3://d", "v1", f"hour={h}", {"x": list(range(100)), "y": ys}, label="y",
                    publisher=pub, baseline_directory=tmp_path,
                    now_ms=wall + h * hour + hour // 4)
        run.validation(100 * (h + 1), {"val_acc": accs[h]}, now_ms=wall + (h + 1) * hour)
    run.finish(now_ms=wall + 10 * hour)
    assert ("L", "rule:validation_decline", cause) in firing(live(t, wall))


def live(t: CaptureTransport, wall: int) -> MemoryProcessor:
    """Deliver what was published as it comes (the SDK's thread publishes the run's records
    after the reports in the capture), the timer every minute."""
    clock = Clock(wall)
    m = MemoryProcessor(clock=clock)
    deliver_live(m, clock, timed(t.messages), tick_ms=60_000)
    return m


def test_a_lasting_shift_of_one_region_explains_a_decline_after_the_others_report(
        tmp_path) -> None:
    """Two regions reported hourly (eu at :02, us at :32); eu's label mix shifts for good
    from hour 2, us stays clean; the decline comes after a us report: it went out as
    learning, because the dataset's latest report (us) did not say shift."""
    t = CaptureTransport()
    pub = publisher(t)
    hour = 3_600_000
    wall = int(time.time() * 1000) - 12 * hour
    run = start(t, "R2", ("s3://d", "v1"), clock_ms=wall)
    for h in range(6):
        for region, minute in (("eu", 2), ("us", 32)):
            shifted = region == "eu" and h >= 2
            ys = [0] * 60 + [1] * 40 if shifted else [0] * 80 + [1] * 20
            data.report("s3://d", "v1", f"region={region}", {"x": list(range(100)), "y": ys},
                        label="y", publisher=pub, baseline_directory=tmp_path,
                        now_ms=wall + h * hour + minute * 60_000)
    # every 30 min from 0:10: the decline is judged at 4:40, after us's 4:32 report and 38
    # minutes after eu's (past the 30-minute window)
    for i, acc in enumerate([0.91] * 8 + [0.85, 0.80, 0.75]):
        run.validation(100 * (i + 1), {"val_acc": acc}, now_ms=wall + 10 * 60_000 + i * hour // 2)
    run.finish(now_ms=wall + 7 * hour)
    declines = [a for a in live(t, wall).alerts if isinstance(a, Alert)
                and a.detector == "rule:validation_decline" and a.status == "firing"]
    assert declines and declines[0].probable_cause == "data"


@pytest.mark.parametrize("older_first", [True, False])
def test_stored_reports_of_two_datasets_replay_in_either_order(older_first: bool) -> None:
    t = CaptureTransport()
    wall = int(time.time() * 1000)
    uris = ["s3://a", "s3://b"] if older_first else ["s3://b", "s3://a"]
    res = emit_records(publisher(t), [
        {"type": "data-quality", "dataset_uri": uri, "dataset_version": "v1",
         "emitted_at_ms": at, "window_start_ms": at, "window_end_ms": at, "row_count": 10,
         "schema_failures": 0, "duplicate_rows": 0}
        for uri, at in zip(uris, (wall - 901_000, wall), strict=True)])
    assert res.errors == []
    run = start(t, "A", ("s3://a", "v1"), ("s3://b", "v1"))  # both replayed as the run starts
    start(t, "Z", ("s3://never", "v1"))  # control: a dataset nobody reports
    later = wall + DATA_WAIT_MS + 120_000  # past the wait, in event time and on the wall clock
    run.step(1, loss=1.0, now_ms=later, step_ms=100.0, loader_wait_ms=1.0)
    run.finish()
    m = MemoryProcessor()
    m.feed(t.messages)
    m.tick(later)
    assert [d.reason for d in m.dead] == []
    assert firing(m) == {("Z", "rule:missing_data_report", "data")}


@pytest.mark.parametrize(("late_rows", "want"), [
    (0, {("A", "rule:zero_rows", "data")}),  # an empty partition paged however late it came
    (10, set()),
])
def test_an_empty_partition_reported_late_still_pages(late_rows: int, want: set,
                                                      tmp_path) -> None:
    """Two pipeline workers report partitions of one dataset; worker B's report of an
    empty partition reaches Kafka 7.5 minutes late (spooled): past the dataset's
    lateness, so it is dead-lettered for the history watches, and the zero-row page was
    lost with it."""
    t = CaptureTransport()
    wall = int(time.time() * 1000)
    run = start(t, "A", ("s3://d", "v1"), clock_ms=wall - 3_600_000)
    pub = publisher(t)
    for i in range(20):  # worker A: a partition a minute
        data.report("s3://d", "v1", f"a-{i}", {"x": list(range(50))}, publisher=pub,
                    baseline_directory=tmp_path, now_ms=wall - 1_800_000 + i * 60_000)
    data.report("s3://d", "v1", "b-7", {"x": list(range(late_rows))}, publisher=pub,
                baseline_directory=tmp_path, now_ms=wall - 1_800_000 + 7 * 60_000 - 450_000)
    run.step(1, loss=1.0, now_ms=wall - 60_000, step_ms=100.0, loader_wait_ms=1.0)
    run.finish(now_ms=wall)
    m = MemoryProcessor()
    m.feed(t.messages)
    m.tick(wall + 60_000)
    assert [d.reason.split(":")[0] for d in m.dead] == ["late event"]  # still dead-lettered
    assert firing(m) == want


def test_reports_of_unseen_runs_are_held_then_dead_lettered_with_a_summary(tmp_path) -> None:
    t = CaptureTransport()
    data.report("s3://d", "v1", None, {"x": [1]}, run_id="ghost", publisher=publisher(t),
                baseline_directory=tmp_path)
    data.report("s3://nobody", "v1", None, {"x": [1]}, publisher=publisher(t),
                baseline_directory=tmp_path)
    m = MemoryProcessor()
    m.feed(t.messages)
    assert m.dead == []  # held while the run may still appear
    m.tick(int(time.time() * 1000) + HOLD_MS + 1_000)
    assert [d.reason.split(":")[0] for d in m.dead] == ["unseen run ghost"]
    assert firing(m) == set()


def test_a_report_for_a_run_that_starts_after_the_hold_reaches_it_when_it_starts(
        tmp_path) -> None:
    t = CaptureTransport()
    data.report("s3://d", "v1", None, {"x": [1]}, run_id="late", publisher=publisher(t),
                baseline_directory=tmp_path)
    m = MemoryProcessor()
    m.feed(t.messages)
    wall = int(time.time() * 1000)
    m.tick(wall + HOLD_MS + 1_000)
    assert [d.reason.split(":")[0] for d in m.dead] == ["unseen run late"]
    t.messages.clear()
    run = start(t, "late", ("s3://d", "v1"))  # its manifest names the dataset: stored reports
    start(t, "Z", ("s3://never", "v1"))
    later = wall + DATA_WAIT_MS + 120_000
    run.step(1, loss=1.0, now_ms=later, step_ms=100.0, loader_wait_ms=1.0)
    run.finish()
    m.feed(t.messages)
    m.tick(later)
    assert len(m.dead) == 1
    assert firing(m) == {("Z", "rule:missing_data_report", "data")}


def test_a_dataset_a_resumed_run_names_waits_from_that_manifest(tmp_path) -> None:
    """A run re-initialised 30 min in with a new dataset version (a resume) gets the
    version's wait from its own manifest: the pipeline reports v2 a minute later, so
    nothing is missing (it was paged at once: the wait ran from the first manifest)."""
    t = CaptureTransport()
    pub = publisher(t)
    t0 = int(time.time() * 1000)
    clock = {"t": t0}
    d1 = DatasetRef(uri="s3://clicks", version="v1")
    d2 = DatasetRef(uri="s3://clicks", version="v2")
    run = runwatch.init("fam", run_id="A", transport=t, install_hooks=False, capture_lineage=False,
                        clock=lambda: clock["t"], datasets=[d1])
    start(t, "Z", ("s3://never", "v1"), clock_ms=t0)  # control: a dataset nobody reports
    data.report("s3://clicks", "v1", None, {"x": [1, 2]}, publisher=pub, now_ms=t0 + 60_000,
                baseline_directory=tmp_path)
    for i in range(30):
        run.step(i, loss=1.0, now_ms=t0 + (i + 1) * 60_000, step_ms=100.0, loader_wait_ms=1.0)
    run.finish("preempted", now_ms=t0 + 30 * 60_000 + 1)
    clock["t"] = t0 + 31 * 60_000  # resumed with the next version
    again = runwatch.init("fam", run_id="A", transport=t, install_hooks=False, attempt=2,
                          capture_lineage=False, clock=lambda: clock["t"], datasets=[d2])
    data.report("s3://clicks", "v2", None, {"x": [1, 2]}, publisher=pub, now_ms=t0 + 32 * 60_000,
                baseline_directory=tmp_path)
    for i in range(30, 45):
        again.step(i, loss=1.0, now_ms=t0 + (i + 2) * 60_000, step_ms=100.0, loader_wait_ms=1.0)
    again.finish()
    m = MemoryProcessor()
    for topic, key, value in t.messages:  # in publishing order, the timer after each message
        m.feed([(topic, key, value)])
        m.tick(m.codec.decode(value).emitted_at_ms)
    assert firing(m) - {("A", "rule:lineage_mutated", "data")} == {
        ("Z", "rule:missing_data_report", "data")}


@pytest.mark.parametrize("stored", [True, False])
def test_a_backfill_burst_waits_for_the_data_agents_answer(stored: bool, tmp_path) -> None:
    """A burst of backdated telemetry (a backfill) moves the input's event time 20 min past
    A's manifest while the data agent's answer (A's dataset's stored report) is still on its
    way: A is not paged for a missing report; once the answer comes, it is paged only if the
    dataset really had none (the control: the rule still judges the dataset)."""
    t = CaptureTransport()
    t0 = int(time.time() * 1000) - 3_600_000  # a backfill: an hour ago
    if stored:
        data.report("s3://d", "v1", None, {"x": [1, 2, 3]}, publisher=publisher(t),
                    now_ms=t0 - 60_000, baseline_directory=tmp_path)
    start(t, "A", ("s3://d", "v1"), clock_ms=t0)
    m = MemoryProcessor(ProcessorSettings(partitions=1))  # every input on A's partition
    m.park("rw.internal.data-by-run")  # the answer to A's subscription is slow
    m.feed(t.messages)
    burst = CaptureTransport()
    later = t0 + 2 * DATA_WAIT_MS
    b = start(burst, "B", clock_ms=later)  # a later run's backdated start and steps
    for i in range(5):
        b.step(i, loss=1.0, now_ms=later + i * 1_000, step_ms=100.0, loader_wait_ms=1.0)
    b.finish(now_ms=later + 5_000)
    m.feed(burst.messages)
    m.tick(later + 6_000)
    assert m.p.runs.horizon.at(int(time.time() * 1000)) > t0 + DATA_WAIT_MS  # past A's wait
    assert firing(m) == set()  # before: ("A", "rule:missing_data_report", "data")
    m.release("rw.internal.data-by-run")
    m.tick(later + 7_000)
    assert firing(m) == (set() if stored else {("A", "rule:missing_data_report", "data")})
    assert m.dead == []


def test_without_the_data_agents_answer_the_rule_judges_after_a_minute(tmp_path) -> None:
    """A data agent of an older release sends no answer: a minute of the processor's clock
    after the subscription, the rule judges the dataset as before."""
    t = CaptureTransport()
    t0 = int(time.time() * 1000) - 3_600_000
    run = start(t, "A", ("s3://d", "v1"), clock_ms=t0)
    clock = {"now": int(time.time() * 1000)}
    m = MemoryProcessor(ProcessorSettings(partitions=1), clock=lambda: clock["now"])
    m.park("rw.internal.data-by-run")  # never released: no answer comes
    m.feed(t.messages)
    n = len(t.messages)
    for i in range(3):  # a backfill of A's steps: event time runs past its wait at once
        run.step(i, loss=1.0, now_ms=t0 + DATA_WAIT_MS + i * 1_000, step_ms=100.0,
                 loader_wait_ms=1.0)
    run.finish(now_ms=t0 + DATA_WAIT_MS + 5_000)  # flushes what the SDK publishes
    assert len(t.messages) == n + 7  # 3 learning steps, 3 step timings, the end
    m.feed(t.messages[n:])
    m.tick(t0 + DATA_WAIT_MS + 6_000)
    assert firing(m) == set()  # waiting for the answer
    clock["now"] += 61_000
    m.tick(t0 + DATA_WAIT_MS + 6_000)
    assert firing(m) == {("A", "rule:missing_data_report", "data")}


def _hourly(tmp_path, rows_at, hours: int = 7 * 24, *, steps: int = 1,
            detectors: str = "watch:", **report: Any) -> list[tuple[str, str]]:
    """A run stepping while its dataset is reported every hour, live (records as they are
    made, the timer ticking); ``rows_at(h, at)`` gives the hour's columns, ``steps`` the
    run's steps an hour (they move the processor's horizon between reports). Steps an hour
    apart page stalls: only alerts of ``detectors`` (a prefix) are returned."""
    t0 = int(time.time() * 1000) - (hours + 2) * 3_600_000
    clock = {"t": t0}
    m = MemoryProcessor(clock=lambda: clock["t"])
    t = CaptureTransport()
    run = start(t, "A", ("s3://d", "v1"), clock_ms=t0)
    pub = publisher(t)
    seen = 0
    for slot in range(hours * steps):
        at = t0 + (slot + 1) * 3_600_000 // steps
        run.step(slot, loss=1.0, now_ms=at, step_ms=1000.0, loader_wait_ms=10.0)
        if slot % steps == steps - 1:
            h = slot // steps
            data.report("s3://d", "v1", f"h{h}", rows_at(h, at), publisher=pub,
                        baseline_directory=tmp_path, now_ms=at, **report)
        deadline = time.monotonic() + 5
        while len(t.messages) == seen and time.monotonic() < deadline:
            time.sleep(0.001)  # the SDK publishes from its thread
        m.feed(t.messages[seen:])
        seen = len(t.messages)
        clock["t"] = at + 1_000
        m.tick(clock["t"])
        clock["t"] = at + 1_800_000 // steps  # and later (quiet-time resolution)
        m.tick(clock["t"])
    assert [d.reason for d in m.dead] == []
    return [(a.detector, a.status) for a in m.alerts if a.detector.startswith(detectors)]


def test_schema_failures_that_persist_page_once_and_resolve_after_healthy_reports(
        tmp_path) -> None:
    """Hourly reports, 2 % of rows failing their schema from the 10th report on, healthy
    again from the 30th, while the run trains: it fired and resolved every hour (15
    minutes without a repeat), and after twenty alerts the run's cap muted everything else
    it might raise."""
    def cols(h: int, _at: int) -> dict:
        rows: list = list(range(1000))
        if 10 <= h < 30:  # 20 of 1,000 rows are not integers
            rows[:20] = ["n/a"] * 20
        return {"x": rows}

    got = _hourly(tmp_path, cols, 40, steps=12, detectors="rule:schema_failures",
                  schema={"x": "int"})
    assert got == [("rule:schema_failures", "firing"), ("rule:schema_failures", "resolved")]


DAY = 86_400_000


@pytest.mark.parametrize(("case", "want"), [
    # a daily partition, reported every hour: the lag climbs from 1 to 24 hours every day
    ("daily", []),
    # the same ETL stops after day 6: the lag climbs on past a day, hour after hour (the lag
    # band followed the climb, as it does every day)
    ("daily_stops", [("watch:freshness_lag", "firing")]),
    ("stream", []),  # rows of the last minutes in every report
])
def test_a_pipeline_that_stops_refreshing_is_paged_once(case: str, want: list,
                                                        tmp_path) -> None:
    def cols(h: int, at: int) -> dict:
        if case == "stream":
            newest = at - 120_000
        else:  # the partition of a day lands as the next day begins
            t0 = at - (h + 1) * 3_600_000
            day = min(h // 24, 6) if case == "daily_stops" else h // 24
            newest = t0 + day * DAY - 60_000
        return {"x": list(range(100)), "event_ms": [newest - i * 1000 for i in range(100)]}

    assert _hourly(tmp_path, cols, 10 * 24, timestamp="event_ms") == want


def test_a_null_share_that_jumps_and_stays_pages_once(tmp_path) -> None:
    """2 % nulls, then 30 % from the third day on: one page, resolved once the dataset's
    history has learnt the new level (healthy reports), not paged again."""
    def cols(h: int, at: int) -> dict:
        share = 0.30 if h >= 48 else 0.02
        n = 1000
        nulls = int(share * n)
        return {"x": [None] * nulls + list(range(n - nulls)),
                "event_ms": [at - 60_000 - i for i in range(n)]}

    got = _hourly(tmp_path, cols, 96, timestamp="event_ms")
    assert got == [("watch:null_share", "firing"), ("watch:null_share", "resolved")]


def test_a_run_that_ended_before_its_report_was_due_is_not_missing_it() -> None:
    # a three-minute job reading an hourly dataset: it succeeds before any report is due;
    # the control names the same dataset and is still running when the wait is over
    t = CaptureTransport()
    wall = int(time.time() * 1000)
    short = start(t, "S", ("s3://hourly", "v1"), clock_ms=wall)
    control = start(t, "C", ("s3://hourly", "v1"), clock_ms=wall)
    short.step(1, loss=1.0, now_ms=wall + 60_000, step_ms=100.0, loader_wait_ms=1.0)
    short.finish(now_ms=wall + 180_000)
    later = wall + DATA_WAIT_MS + 30 * 60_000  # half an hour past the report's wait
    control.step(1, loss=1.0, now_ms=later, step_ms=100.0, loader_wait_ms=1.0)
    control.finish(now_ms=later + 1_000)  # it ran past the wait: its report is missing
    m = MemoryProcessor()
    m.feed(t.messages)
    m.tick(later + 60_000)
    assert firing(m) == {("C", "rule:missing_data_report", "data")}


@pytest.mark.parametrize("named", ["s3://ev@v1", {"uri": "s3://ev", "version": "v1"},
                                   ("s3://ev", "v1")])
def test_a_dataset_named_with_its_version_any_way_is_the_version_reported(named,
                                                                         tmp_path) -> None:
    t = CaptureTransport()
    wall = int(time.time() * 1000)
    run = runwatch.init("fam", run_id="V", transport=t, install_hooks=False,
                        capture_lineage=False, clock=lambda: wall, strict=True,
                        datasets=[named])
    data.report("s3://ev", "v1", None, {"x": [1, 2, 3]}, publisher=publisher(t),
                baseline_directory=tmp_path, now_ms=wall + 1_000)
    later = wall + DATA_WAIT_MS + 120_000
    run.step(1, loss=1.0, now_ms=later, step_ms=100.0, loader_wait_ms=1.0)
    run.finish(now_ms=later + 1_000)
    m = MemoryProcessor()
    m.feed(t.messages)
    m.tick(later + 60_000)
    assert m.p.runs.load(b"V").datasets == ["s3://ev@v1"]
    assert firing(m) == set()  # the report of v1 is the report of the dataset it named


@pytest.mark.parametrize(("fields", "why"), [
    ({"row_count": 100, "schema_failures": 500}, "schema_failures 500 above row_count 100"),
    ({"row_count": 10, "duplicate_rows": 11}, "duplicate_rows 11 above row_count 10"),
    ({"row_count": 10, "dataset_uri": " "}, "without a dataset_uri"),
])
@pytest.mark.parametrize("run_id", ["A", None])
def test_a_report_that_cannot_be_true_is_refused_by_emit_and_dead_lettered(
        fields, why, run_id: str | None) -> None:
    """Without a run_id, a report without a dataset_uri reached no run and was never
    dead-lettered: the data agent says why now, once, whether it names a run or not."""
    t = CaptureTransport()
    wall = int(time.time() * 1000)
    run = start(t, "A", ("s3://e", "v1"), clock_ms=wall)
    obj = {"type": "data-quality", "dataset_uri": "s3://e", "dataset_version": "v1",
           "run_id": run_id, "schema_failures": 0, "duplicate_rows": 0,
           "window_start_ms": wall, "window_end_ms": wall, **fields}
    res = emit_records(publisher(t), [obj])
    assert len(res.errors) == 1 and why in res.errors[0], res.errors
    # a producer that skips emit's checks (its own Avro encoder): the processor says why
    pub = publisher(t)
    rec = DataQualityReport(**pub.meta(wall + 1_000, seq=1), run_id=run_id,
                            dataset_version="v1", partition=None, window_start_ms=wall,
                            window_end_ms=wall, **{"dataset_uri": "s3://e", "schema_failures": 0,
                                                   "duplicate_rows": 0, **fields})
    pub.publish([rec])
    run.finish(now_ms=wall + 2_000)
    m = MemoryProcessor()
    m.feed(t.messages)
    assert not any(a.detector == "rule:schema_failures" for a in m.alerts
                   if isinstance(a, Alert))
    assert [why in d.reason for d in m.dead] == [True], [d.reason for d in m.dead]


@pytest.mark.parametrize(("later", "pages"), [(0.03, False), (0.4, True)])
def test_small_batches_page_a_rejection_rise_not_their_noise(later: float, pages: bool,
                                                               tmp_path) -> None:
    # ten-row batches rejecting 3 % (one rejected row is a tenth of a batch), then `later`
    t = CaptureTransport()
    wall = int(time.time() * 1000)
    run = start(t, "R", ("s3://clicks", "v1"), clock_ms=wall)
    import random
    rng = random.Random(7)
    for k in range(40):
        at = wall + (k + 1) * 300_000
        run.step(k, loss=1.0, now_ms=at - 1_000, step_ms=1000.0, loader_wait_ms=10.0)
        share = 0.03 if k < 20 else later
        data.report("s3://clicks", "v1", f"p{k}", {"x": [rng.gauss(0, 1) for _ in range(10)]},
                    rejected_samples=sum(rng.random() < share for _ in range(10)),
                    publisher=publisher(t), baseline_directory=tmp_path, now_ms=at)
    run.finish(now_ms=wall + 41 * 300_000)
    m = MemoryProcessor()
    m.feed(t.messages)
    fired = {d for _, d, _ in firing(m)}
    assert ("watch:rejected_sample_rate" in fired) is pages, fired


def test_a_label_mix_that_changed_before_the_run_started_explains_nothing(tmp_path) -> None:
    # 50/50 labels for 20 reports, then 20/80 for good; a run starts on the 20/80 mix and
    # its loss goes NaN: no data fault (the dataset's oldest report was its reference)
    import random
    rng = random.Random(2)
    t = CaptureTransport()
    pub = publisher(t)
    wall = int(time.time() * 1000) - 100 * 300_000

    def rep(k: int, p1: float) -> None:
        data.report("s3://ev", "v1", f"p{k}", {"x": [rng.gauss(0, 1) for _ in range(500)],
                                               "y": [int(rng.random() < p1) for _ in range(500)]},
                    label="y", publisher=pub, baseline_directory=tmp_path,
                    now_ms=wall + k * 300_000)

    for k in range(40):
        rep(k, 0.5 if k < 20 else 0.8)
    run = start(t, "A", ("s3://ev", "v1"), clock_ms=wall + 40 * 300_000)
    for k in range(40, 50):
        rep(k, 0.8)
        run.step(k, loss=math.nan if k == 49 else 1.0, now_ms=wall + k * 300_000 + 1_000,
                 step_ms=1000.0, loader_wait_ms=10.0)
    run.finish(now_ms=wall + 50 * 300_000)
    m = MemoryProcessor()
    m.feed(t.messages)
    m.tick(int(time.time() * 1000) + 60_000)
    assert firing(m) == {("A", "rule:non_finite", "learning")}


def test_a_dataset_without_a_uri_is_left_out_not_raised() -> None:
    t = CaptureTransport()
    run = runwatch.init("fam", run_id="E", transport=t, install_hooks=False,
                        capture_lineage=False, datasets=["", {"version": "v1"}, "s3://ok@v2"])
    c = run.finish()
    assert c["datasets_dropped"] == 2
    from runwatch.core.codec import load_codec
    manifests = [r for r in (load_codec().decode(v) for _, _, v in t.messages)
                 if type(r).__name__ == "RunManifest"]
    assert [(d.uri, d.version) for d in manifests[0].datasets] == [("s3://ok", "v2")]
    with pytest.raises(ValueError, match="no dataset uri"):
        runwatch.init("fam", run_id="F", transport=CaptureTransport(), install_hooks=False,
                      capture_lineage=False, strict=True, datasets=[""])
