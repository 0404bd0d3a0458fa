"""`runwatch sink` end to end: real Kafka, chDB behind the HTTP store, exact counts.

The issue asks for 1M mixed events; on this 2-core CI machine the test uses
RUNWATCH_SINK_TEST_EVENTS (default 60k events ≈ 200k rows);
RUNWATCH_SINK_TEST_EVENTS=1000000 runs the 1M (≈270 s here).
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition
from sinkkit import (
    SinkProc,
    expected_counts,
    migrate,
    publish,
    table_counts,
)

from runwatch.adapters.kafka import CommitFailed, plain_producer
from runwatch.adapters.settings import ClickHouseSettings, KafkaSettings
from runwatch.core.codec import load_codec
from runwatch.core.records import DeadLetter, Source
from runwatch.sink.service import Sink
from runwatch.sink.settings import SinkSettings
from runwatch.testing.synth import Event, mixed_events

pytestmark = pytest.mark.integration
EVENTS = int(os.environ.get("RUNWATCH_SINK_TEST_EVENTS", "60000"))




def _wait(cond, timeout: float, what: str, step: float = 1.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(step)
    raise AssertionError(f"timed out waiting for {what}")


def _sink_until(stack, sink_topics, store, db: str,
                waits: list[tuple[Any, float, str]]) -> Sink:
    """Run a sink of its own group into ``db`` until each wait's condition holds, then stop it.

    Returns:
        The stopped sink (for its stats).
    """
    stop = threading.Event()
    sink = Sink(
        SinkSettings(group_id=f"sink-{uuid.uuid4().hex[:8]}", topics=tuple(sink_topics.values())),
        KafkaSettings(bootstrap_servers=stack.bootstrap_servers),
        ClickHouseSettings(url=store.url, database=db),
        stop,
    )
    worker = threading.Thread(target=sink.run)
    worker.start()
    try:
        for cond, timeout, what in waits:
            _wait(cond, timeout, what, step=0.5)
    finally:
        stop.set()
        worker.join(60)
    assert not worker.is_alive()
    return sink


def test_sink_exact_counts_through_kill9_and_store_outage(
    stack, sink_topics, own_store, tmp_path: Path
) -> None:
    db = f"t_{uuid.uuid4().hex[:10]}"
    client = migrate(own_store.url, db)
    topics = sink_topics
    runs = 20
    ticks = max(10, EVENTS // (runs * 3))
    events = mixed_events(
        seed=7, runs=runs, ticks=ticks, start_ms=int(time.time() * 1000) - 3_600_000
    )
    expected = expected_counts(events)
    publish(stack.bootstrap_servers, topics, events, garbage=5, duplicates=200)
    tables = sorted(expected)
    total = sum(expected.values())

    sink = SinkProc(stack.bootstrap_servers, topics, own_store.url, db, tmp_path / "sink.log")
    stored = lambda: sum(table_counts(client, db, ["gpu_samples", "step_timings"]).values())  # noqa: E731
    target = expected["gpu_samples"] + expected["step_timings"]
    try:
        sink.start()
        _wait(lambda: stored() >= target * 0.3, 300, "30% stored")
        sink.kill9()  # halfway: rows inserted but offsets not committed are replayed
        sink.start()
        _wait(lambda: stored() >= target * 0.6, 300, "60% stored")
        own_store.stop()  # ClickHouse away for 12 s: the sink pauses and retries
        time.sleep(12)
        assert sink.alive(), (tmp_path / "sink.log").read_text()[-3000:]
        own_store.start()
        client = migrate(own_store.url, db)
        _wait(
            lambda: table_counts(client, db, tables) == dict(expected),
            300,
            f"all {total} rows",
            step=2.0,
        )
        # Run summaries, rewritten as runs end and again when rows of an ended run
        # land later (other topics, the replay after the kill -9, also for runs that
        # ended before the restart), converge right after the last rows are stored.
        def summaries() -> list[tuple]:
            return client.query(
                f"SELECT outcome, count(), min(steps), min(gpu_hours) FROM {db}.run_summaries "
                "FINAL GROUP BY outcome ORDER BY outcome"
            ).result_rows

        def complete() -> bool:
            rows = summaries()
            return ({o: c for o, c, _s, _g in rows} == {"failed": 7, "succeeded": 13}
                    and all(s == ticks - 1 and g > 0 for _o, _c, s, g in rows))

        try:
            _wait(complete, 30, "every run's summary complete", step=1.0)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; ticks {ticks}; summaries {summaries()}") from None
    finally:
        sink.stop()
    log = (tmp_path / "sink.log").read_text()
    assert "unavailable" in log  # it did see the outage and waited
    # Exact: no table holds a row twice even before merges.
    for table in tables:
        raw = client.query(f"SELECT count(), uniqExact(event_id) FROM {db}.{table}").result_rows[0]
        per_event = 8 if table == "gpu_samples" else 1
        assert raw[0] == expected[table] and raw[1] * per_event == expected[table], table
    dead = client.query(f"SELECT stage, count() FROM {db}.dead_letters GROUP BY stage").result_rows
    assert dict(dead) == {"decode": 5}
    # Rollups agree with aggregates over raw rows.
    got = client.query(f"""
        SELECT r.run_id, r.n, r.mx, r.avg, r.p90, u.n, u.mx, u.avg, u.p90 FROM
        (SELECT run_id, count() n, max(util_pct) mx, avg(util_pct) avg, quantile(0.9)(util_pct) p90
           FROM {db}.gpu_samples GROUP BY run_id) r
        JOIN (SELECT run_id, countMerge(samples) n, maxMerge(util_pct_max) mx,
                     avgMerge(util_pct_avg) avg,
                     quantilesMerge(0.5, 0.9, 0.99)(util_pct_q)[2] p90
              FROM {db}.gpu_samples_1m GROUP BY run_id) u USING run_id
        ORDER BY run_id""").result_rows
    assert len(got) == runs
    for _run, n, mx, avg, p90, un, umx, uavg, up90 in got:
        assert (n, mx) == (un, umx)
        assert uavg == pytest.approx(avg, rel=1e-9)
        assert up90 == pytest.approx(p90, abs=2.0)
    hourly = client.query(f"SELECT countMerge(samples) FROM {db}.gpu_samples_1h").result_rows[0][0]
    assert hourly == expected["gpu_samples"]


@pytest.mark.parametrize("bad_at", [(3,), (0, 1, 17)])
def test_rows_clickhouse_rejects_are_dead_lettered_and_the_rest_stored(
    stack, sink_topics, own_store, bad_at: tuple[int, ...]
) -> None:
    """step_ms < 0 passes the sink's own checks but violates a CONSTRAINT (code 469).

    Uses its own store: a store process started before the chDB insert fix
    drops such a block silently instead of raising.
    """
    db = f"t_{uuid.uuid4().hex[:10]}"
    client = migrate(own_store.url, db)
    events = mixed_events(seed=5, runs=2, ticks=12, start_ms=int(time.time() * 1000) - 600_000)
    steps = [i for i, e in enumerate(events) if e.kind == "StepTiming"]
    bad = {steps[i] for i in bad_at}
    events = [
        Event(e.kind, e.key, dataclasses.replace(e.record, step_ms=-5.0)) if i in bad else e
        for i, e in enumerate(events)
    ]
    expected = expected_counts(events)
    encoded = publish(stack.bootstrap_servers, sink_topics, events)
    want = dict(expected, step_timings=expected["step_timings"] - len(bad))
    sink = _sink_until(stack, sink_topics, own_store, db, [
        (lambda: table_counts(client, db, sorted(want)) == want, 40, f"rows {want}"),
        (lambda: table_counts(client, db, ["dead_letters"])["dead_letters"] == len(bad), 60,
         "dead letters"),
    ])
    dead = client.query(
        f"SELECT stage, target_table, reason, hex(original), event_id FROM {db}.dead_letters"
    ).result_rows
    assert {(stage, table) for stage, table, *_ in dead} == {("insert", "step_timings")}
    assert all("469" in reason and "step_ms_sane" in reason for _s, _t, reason, *_ in dead)
    originals = {bytes.fromhex(original) for *_x, original, _e in dead}
    assert originals == {encoded[i] for i in bad}
    stored = {r[0] for r in client.query(f"SELECT event_id FROM {db}.step_timings").result_rows}
    assert stored.isdisjoint({events[i].record.event_id for i in bad})
    assert sink.stats["dead_letters"] == len(bad)


def test_dead_letters_store_the_original_bytes_byte_for_byte(
    stack, sink_topics, own_store
) -> None:
    """A dead letter's original (and key) is stored as the bytes it was, not as latin-1 text.

    The processor's DeadLetter on rw.dlq carries a LearningStep it rejected, and the sink
    dead-letters bytes it cannot decode itself. Both were stored with every byte >= 0x80
    as two (latin-1 text written as UTF-8): the stored LearningStep failed to decode
    (``wrong magic bytes c383``), so a dead letter could not be inspected or replayed.
    """
    codec = load_codec()
    db = f"t_{uuid.uuid4().hex[:10]}"
    client = migrate(own_store.url, db)
    now = int(time.time() * 1000)
    events = mixed_events(seed=3, runs=1, ticks=4, start_ms=now - 600_000)
    step = next(e for e in events if e.kind == "LearningStep").record
    rejected = codec.encode(step)
    assert max(rejected) >= 0x80
    letter = DeadLetter(event_id=str(uuid.uuid4()), emitted_at_ms=now,
                        source=Source(kind="processor", host="h", runwatch_version="0"),
                        seq=0, topic="rw.learning", partition=3, offset=42,
                        reason="late event", original=rejected, key=b"run-\xe9\xff",
                        failed_at_ms=now)
    garbage, garbage_key = b"\xc3\x01\xff\x80\x00not avro \xe9", b"k\xc3\xa9\x80"
    producer = plain_producer(KafkaSettings(bootstrap_servers=stack.bootstrap_servers))
    producer.produce(sink_topics["rw.dlq"], value=codec.encode(letter))
    producer.produce(sink_topics["rw.exec.job"], value=garbage, key=garbage_key)
    assert producer.flush(30) == 0
    _sink_until(stack, sink_topics, own_store, db, [
        (lambda: table_counts(client, db, ["dead_letters"])["dead_letters"] == 2, 60,
         "two dead letters"),
    ])
    rows = client.query(
        f"SELECT stage, hex(original), length(original), hex(key) FROM {db}.dead_letters"
    ).result_rows
    stored = {stage: (bytes.fromhex(o), n, bytes.fromhex(k)) for stage, o, n, k in rows}
    assert stored == {"upstream": (rejected, len(rejected), b"run-\xe9\xff"),
                      "decode": (garbage, len(garbage), garbage_key)}
    assert codec.decode(stored["upstream"][0]) == step


def test_one_rejected_gpu_row_of_a_sample_loses_no_other_gpus_row(
    stack, sink_topics, own_store
) -> None:
    """A sample's GPUs are rows of one record: one GPU row ClickHouse rejects split the
    batch down to single rows, and two single rows of one record (GPU 6's and GPU 7's)
    got the same insert deduplication token, so ClickHouse dropped the second as a
    retry. 4 of 21 good rows were lost with one dead letter for 3 bad ones."""
    db = f"t_{uuid.uuid4().hex[:10]}"
    client = migrate(own_store.url, db)
    events = mixed_events(seed=7, runs=2, ticks=6, start_ms=int(time.time() * 1000) - 600_000)
    events = [e for e in events if e.kind == "NodeSample"][:3]  # one batch of 3 x 8 rows
    bad = {0, 1, 2}  # GPU 0 of each: a clock the column cannot hold (a custom agent's bug)

    def broken(rec):  # type: ignore[no-untyped-def]
        gpus = list(rec.gpus)
        gpus[0] = dataclasses.replace(gpus[0], sm_clock_mhz=-1)
        return dataclasses.replace(rec, gpus=tuple(gpus))

    events = [Event(e.kind, e.key, broken(e.record)) if i in bad else e
              for i, e in enumerate(events)]
    expected = expected_counts(events)
    assert all(len(events[i].record.gpus) > 2 for i in bad)
    publish(stack.bootstrap_servers, sink_topics, events)
    want = dict(expected, gpu_samples=expected["gpu_samples"] - len(bad))
    _sink_until(stack, sink_topics, own_store, db, [
        (lambda: table_counts(client, db, ["dead_letters"])["dead_letters"] == len(bad), 60,
         "dead letters"),
        (lambda: table_counts(client, db, sorted(want)) == want, 40, f"rows {want}"),
    ])
    kept = client.query(f"SELECT count() FROM {db}.gpu_samples WHERE gpu_index = 0").result_rows
    assert kept == [(0,)]


def test_rows_of_a_run_that_ended_before_a_restart_rewrite_its_summary(
    stack, sink_topics, own_store, tmp_path: Path
) -> None:
    """A run's end is stored, the sink restarts, then the run's last samples arrive.

    The restarted process never saw the end event, and the sweep (off here) only
    looks at recent event times; it starts its memory of ended runs from the
    store, so the late samples still reach the run's GPU hours.
    """
    db = f"t_{uuid.uuid4().hex[:10]}"
    client = migrate(own_store.url, db)
    events = mixed_events(seed=11, runs=3, ticks=60, start_ms=int(time.time() * 1000) - 3_600_000)
    late = {i for i, e in enumerate(events) if e.kind == "NodeSample"}
    late = set(sorted(late)[-30:])
    early = [e for i, e in enumerate(events) if i not in late]

    def gpu_hours() -> dict[str, float]:
        rows = client.query(f"SELECT run_id, gpu_hours FROM {db}.run_summaries FINAL").result_rows
        return {str(r): float(g or 0.0) for r, g in rows}

    # the copies below must land, as copies older than the restarted process's memory of
    # stored ids do (DEDUP_SEED_S=0: none; the next test has the shipped memory)
    sink = SinkProc(stack.bootstrap_servers, sink_topics, own_store.url, db,
                    tmp_path / "sink.log", RUNWATCH_SINK_SUMMARY_SWEEP_S="0",
                    RUNWATCH_SINK_DEDUP_SEED_S="0")
    publish(stack.bootstrap_servers, sink_topics, early)
    want = expected_counts(early)
    try:
        sink.start()
        _wait(lambda: table_counts(client, db, list(want)) == dict(want) and len(gpu_hours()) == 3,
              120, "the early rows and three summaries")
        time.sleep(2)  # the summaries of the batch that ended the runs are written
        before = gpu_hours()
        sink.stop()
        sink.start()
        publish(stack.bootstrap_servers, sink_topics, [events[i] for i in sorted(late)])
        want = expected_counts(events)
        _wait(lambda: table_counts(client, db, list(want)) == dict(want), 120, "the late rows")
        late_runs = {p.run_id for i in late for g in events[i].record.gpus
                     for p in g.processes or () if p.run_id}
        assert late_runs
        try:
            _wait(lambda: all(gpu_hours()[r] > before[r] for r in late_runs), 30,
                  "the late samples in their runs' summaries")
        except AssertionError as exc:
            raise AssertionError(f"{exc}: before {before}, after {gpu_hours()}") from None
        # A producer replays its spool after the restart: copies of records stored before it
        # (same event ids, later offsets) that the new process's duplicate window never saw.
        # The rows land, but a summary is the same as without them (it once counted every copy
        # of a GPU sample, checkpoint and step record).
        figures = ("gpu_hours, idle_gpu_hours, wasted_gpu_hours, checkpoints, step_records, "
                   "observed_gpu_hours, noproc_gpu_hours, arraySum(mapValues(busy_util_hours)), "
                   "updated_at")

        def summary(run: str) -> tuple:
            return client.query(f"SELECT {figures} FROM {db}.run_summaries FINAL "  # noqa: S608
                                f"WHERE run_id = '{run}'").result_rows[0]

        run = sorted(late_runs)[0]
        first = summary(run)
        replayed = [e for e in early if e.kind in ("NodeSample", "CheckpointEvent", "StepTiming")
                    and (e.record.run_id == run or e.kind == "NodeSample")]
        raw = f"SELECT count() FROM {db}.gpu_samples WHERE run_id = '{run}'"  # noqa: S608
        stored = client.query(raw).result_rows[0][0]
        publish(stack.bootstrap_servers, sink_topics, replayed)
        _wait(lambda: client.query(raw).result_rows[0][0] > stored, 60, "the copies stored")
        _wait(lambda: summary(run)[-1] > first[-1], 60, "the summary rewritten")
        again = summary(run)
        print(f"\n{run} before the replay {first[:-1]}, after {again[:-1]}")
        assert again[:-1] == pytest.approx(first[:-1])
    finally:
        sink.stop()


def test_a_producer_copy_after_a_restart_is_dropped_and_counted_once(
    stack, sink_topics, own_store, tmp_path: Path
) -> None:
    """A producer replays its spool after the sink restarted: copies of stored records.

    The restarted process starts its memory of event ids from the ids stored in the
    last hour, so the copies (same event ids, later offsets) are dropped as
    duplicates: the raw tables hold each record once before any merge, and the
    rollups, which no merge corrects, count each sample once.
    """
    db = f"t_{uuid.uuid4().hex[:10]}"
    client = migrate(own_store.url, db)
    events = mixed_events(seed=13, runs=3, ticks=30, start_ms=int(time.time() * 1000) - 600_000)
    log = tmp_path / "sink.log"
    sink = SinkProc(stack.bootstrap_servers, sink_topics, own_store.url, db, log)
    publish(stack.bootstrap_servers, sink_topics, events)
    want = expected_counts(events)
    copied = [e for e in events if e.kind in ("NodeSample", "StepTiming", "LearningStep")][:40]
    # After the copies, fresh records under the same keys (so in the same partitions, at
    # later offsets): once they are stored, every copy before them has been read.
    fresh = [dataclasses.replace(e, record=dataclasses.replace(
        e.record, event_id=str(uuid.uuid4()), emitted_at_ms=e.record.emitted_at_ms + 500))
        for e in copied]
    try:
        sink.start()
        _wait(lambda: table_counts(client, db, list(want)) == dict(want), 120, "every row")
        sink.stop()
        sink.start()
        publish(stack.bootstrap_servers, sink_topics, copied + fresh)
        want = expected_counts(events + fresh)
        _wait(lambda: table_counts(client, db, list(want)) == dict(want), 120, "the fresh rows")
    finally:
        sink.stop()
    for table in ("gpu_samples", "step_timings", "learning_steps"):
        sql = f"SELECT count(), uniqExact(event_id) FROM {db}.{table}"  # noqa: S608
        n, ids = client.query(sql).result_rows[0]
        per_event = 8 if table == "gpu_samples" else 1
        assert n == want[table] and ids * per_event == n, (table, n, ids, want[table])
    rolled = client.query(f"SELECT countMerge(samples) FROM {db}.gpu_samples_1m").result_rows[0][0]
    assert rolled == want["gpu_samples"]
    text = log.read_text()
    assert "remembering" in text and "event ids stored in the last 3600 s" in text, text[-2000:]
    last = text.rsplit("sink stopped: ", 1)[-1]
    assert f"'duplicates': {len(copied)}" in last, last[:300]


def _caught_up(bootstrap: str, group: str, topics: list[str]) -> bool:
    """Whether ``group`` has committed the end of every partition of ``topics``."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{group}-probe"})
    try:
        meta = consumer.list_topics(timeout=10).topics
        parts = [TopicPartition(t, p) for t in topics for p in meta[t].partitions]
        probe = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
        try:
            committed = {(tp.topic, tp.partition): tp.offset
                         for tp in probe.committed(parts, timeout=10)}
        finally:
            probe.close()
        for tp in parts:
            _low, high = consumer.get_watermark_offsets(tp, timeout=10)
            if high > 0 and committed[(tp.topic, tp.partition)] != high:
                return False
        return True
    except KafkaException:  # the coordinator is still loading after the restart
        return False
    finally:
        consumer.close()


def test_records_read_again_after_a_failed_commit_are_not_stored_twice(
    stack, sink_topics, own_store
) -> None:
    """A commit fails and the consumer reads again from the committed offsets: no row twice.

    After a broker restart (the sink process itself went on) the sink's commits failed
    (``_WAIT_COORD``) and its consumer read again, from the last committed offsets,
    records the process had stored: 519 rows for 500 steps per run, each copy with the
    same partition and offset. The insert deduplication token names the first batch's
    offset ranges, which the re-read batch does not repeat, and the high-water marks the
    sink skips by were those read when its partitions were assigned. Here the commit
    fails as it did then, and the consumer is put back at the committed offsets as it
    was then, while the producers go on (so the re-read batch ends elsewhere than the
    stored one, as under live traffic); the sink must skip what it had read.
    """
    bootstrap = stack.bootstrap_servers
    db = f"t_{uuid.uuid4().hex[:10]}"
    client = migrate(own_store.url, db)
    events = mixed_events(seed=17, runs=2, ticks=30, start_ms=int(time.time() * 1000) - 600_000)
    third = len(events) // 3
    group = f"sink-{uuid.uuid4().hex[:8]}"
    stop = threading.Event()
    sink = Sink(
        SinkSettings(group_id=group, topics=tuple(sink_topics.values()), summary_sweep_s=0),
        KafkaSettings(bootstrap_servers=bootstrap),
        ClickHouseSettings(url=own_store.url, database=db),
        stop,
    )
    commit = sink.consumer.commit_offsets
    failing = threading.Event()
    failed: list[dict[tuple[str, int], int]] = []

    def coordinator_away(offsets: dict[tuple[str, int], int], **kw: Any) -> None:
        if not failing.is_set() or failed:
            commit(offsets, **kw)
            return
        failed.append(dict(offsets))
        publish(bootstrap, sink_topics, events[2 * third:])  # the producers go on
        consumer = sink.consumer._consumer  # on the sink's consuming thread, as commits are
        parts = consumer.committed(consumer.assignment(), timeout=10)
        for tp in parts:  # back to where the group stands, as after the broker's restart
            consumer.seek(TopicPartition(tp.topic, tp.partition,
                                         tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))
        msg = "Commit failed: Local: Waiting for coordinator"
        raise CommitFailed(msg)

    sink.consumer.commit_offsets = coordinator_away  # type: ignore[method-assign]
    worker = threading.Thread(target=sink.run)
    worker.start()
    want = expected_counts(events)
    tables = sorted(want)
    topics = list(sink_topics.values())
    try:
        publish(bootstrap, sink_topics, events[:third])
        first = expected_counts(events[:third])
        _wait(lambda: table_counts(client, db, sorted(first)) == dict(first), 60, "first third")
        _wait(lambda: _caught_up(bootstrap, group, topics), 30, "first third committed")
        failing.set()
        publish(bootstrap, sink_topics, events[third:2 * third])
        _wait(lambda: bool(failed), 30, "a failed commit")
        _wait(lambda: _caught_up(bootstrap, group, topics), 60, "every offset committed")
        _wait(lambda: table_counts(client, db, tables) == dict(want), 30, "every row")
    finally:
        stop.set()
        worker.join(60)
    assert not worker.is_alive()
    for table in tables:
        sql = (f"SELECT count(), uniqExact(event_id), "  # noqa: S608
               f"uniqExact(kafka_topic, kafka_partition, kafka_offset) FROM {db}.{table}")
        n, ids, positions = client.query(sql).result_rows[0]
        per_event = 8 if table == "gpu_samples" else 1
        assert (n, ids * per_event, positions * per_event) == (want[table],) * 3, table
    rolled = client.query(f"SELECT countMerge(samples) FROM {db}.gpu_samples_1m").result_rows[0][0]
    assert rolled == want["gpu_samples"]
    assert sink.stats["reread"] > 0, sink.stats  # the re-read did happen


def test_a_sink_stopped_during_a_store_outage_exits_cleanly(stack, sink_topics, tmp_path) -> None:
    """SIGTERM while the sink waits for ClickHouse to read its stored offsets: exit 0.

    It ended in a ClickHouseUnavailable traceback and status 1, as if it had crashed
    (a supervisor restarting it, or an operator reading the log, took it for one).
    """
    log = tmp_path / "sink.log"
    sink = SinkProc(stack.bootstrap_servers, sink_topics, "http://127.0.0.1:9", "t_outage", log)
    sink.start()
    try:
        _wait(lambda: "ClickHouse unavailable during read watermarks" in log.read_text(), 60,
              "the sink to wait for the store", step=0.5)
    finally:
        sink.stop()
    text = log.read_text()
    assert sink.proc is not None and sink.proc.returncode == 0, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    assert "stopped during a ClickHouse outage, before the stored offsets were read" in text
