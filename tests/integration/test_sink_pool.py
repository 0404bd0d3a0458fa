"""`runwatch sink --processes 2`: exact counts from two processes; a dead child stops the pool."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid

import pytest
from sinkkit import (
    expected_counts,
    migrate,
    publish,
    table_counts,
)

from runwatch.adapters.settings import ClickHouseSettings, KafkaSettings
from runwatch.sink.pool import SinkPool
from runwatch.sink.settings import SinkSettings
from runwatch.testing.synth import mixed_events

pytestmark = pytest.mark.integration


def start_pool(stack, own_store, sink_topics, db: str, **settings):
    """Two sink processes on the test topics and database, run in a thread.

    Returns:
        (pool, stop event, runner thread, list that receives ``pool.run``'s result).
    """
    pool = SinkPool(
        2,
        SinkSettings(
            group_id=f"pool-{uuid.uuid4().hex[:6]}",
            topics=tuple(sink_topics.values()),
            batch_ms=300,
            **settings,
        ),
        KafkaSettings(bootstrap_servers=stack.bootstrap_servers),
        ClickHouseSettings(url=own_store.url, database=db),
        stop_timeout_s=30,
    )
    stop = threading.Event()
    result: list[int] = []
    runner = threading.Thread(target=lambda: result.append(pool.run(stop)))
    runner.start()
    return pool, stop, runner, result


def stop_pool(pool, stop, runner) -> None:
    """Stop the pool's thread; kill any child still running after a minute."""
    stop.set()
    runner.join(60)
    for child in pool.children:
        if child.exitcode is None:
            child.kill()


def test_two_processes_exact_then_a_killed_child_fails_the_pool(stack, own_store, sink_topics):
    db = f"pool_{uuid.uuid4().hex[:8]}"
    client = migrate(own_store.url, db)
    events = mixed_events(3, 6, 300, int(time.time() * 1000) - 3_600_000)
    publish(stack.bootstrap_servers, sink_topics, events)
    expected = expected_counts(events)
    pool, stop, runner, result = start_pool(stack, own_store, sink_topics, db)
    try:
        deadline = time.monotonic() + 40
        while table_counts(client, db, list(expected)) != dict(expected):
            assert runner.is_alive(), f"pool ended early: {pool.failed}"
            assert time.monotonic() < deadline, table_counts(client, db, list(expected))
            time.sleep(0.5)
        assert all(c.is_alive() for c in pool.children)
        victim = pool.children[1]
        assert victim.pid is not None
        os.kill(victim.pid, signal.SIGKILL)
        runner.join(40)
        assert not runner.is_alive()
        assert result == [1]
        assert pool.failed == [(1, -signal.SIGKILL)]
        assert all(c.exitcode is not None for c in pool.children)
        assert pool.children[0].exitcode == 0  # the survivor was stopped cleanly
        assert table_counts(client, db, list(expected)) == dict(expected)
    finally:
        stop_pool(pool, stop, runner)


def _gpu_hours(client, db: str) -> dict[str, float]:
    rows = client.query(
        f"SELECT run_id, gpu_hours FROM {db}.run_summaries FINAL ORDER BY run_id"
    ).result_rows
    return {str(r): float(g or 0.0) for r, g in rows}


def test_late_gpu_rows_stored_by_another_process_reach_the_summary(
    stack, own_store, sink_topics
):
    """A run's end and its late GPU samples land on different processes: the sweep counts them.

    The last 20 node samples of every run are published only after everything
    else is stored and summarised. Node samples are keyed by node and job events
    by run, so with two processes a run's late samples are often stored by the
    process that never saw its end; the periodic summary sweep (reading the
    store) must still add them to every run's GPU hours.
    """
    db = f"late_{uuid.uuid4().hex[:8]}"
    client = migrate(own_store.url, db)
    events = mixed_events(4, 6, 120, int(time.time() * 1000) - 3_600_000)
    samples = [i for i, e in enumerate(events) if e.kind == "NodeSample"]
    late_of: dict[str, list[int]] = {}
    for i in samples:
        late_of.setdefault(events[i].key, []).append(i)
    late = {i for idx in late_of.values() for i in idx[-20:]}
    early = [e for i, e in enumerate(events) if i not in late]
    pool, stop, runner, result = start_pool(
        stack, own_store, sink_topics, db,
        summary_sweep_s=1.0,
        summary_window_s=7_200.0,  # the synthetic runs ended about an hour ago
    )
    try:
        publish(stack.bootstrap_servers, sink_topics, early)
        want = expected_counts(early)
        deadline = time.monotonic() + 60
        while table_counts(client, db, list(want)) != dict(want) or len(
            _gpu_hours(client, db)
        ) < 6:
            assert runner.is_alive(), f"pool ended early: {pool.failed}"
            assert time.monotonic() < deadline, table_counts(client, db, list(want))
            time.sleep(0.5)
        time.sleep(3)  # a sweep or two after the early rows are all stored
        before = _gpu_hours(client, db)
        assert all(g > 0 for g in before.values()), before
        publish(stack.bootstrap_servers, sink_topics, [events[i] for i in sorted(late)])
        want = expected_counts(events)
        deadline = time.monotonic() + 60
        while True:
            after = _gpu_hours(client, db)
            done = table_counts(client, db, list(want)) == dict(want) and all(
                after[r] > before[r] for r in before
            )
            if done:
                break
            assert runner.is_alive(), f"pool ended early: {pool.failed}"
            assert time.monotonic() < deadline, (before, after)
            time.sleep(0.5)
    finally:
        stop_pool(pool, stop, runner)
    assert result == [0]
