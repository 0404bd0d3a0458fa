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
from runwatch.sink.synth import mixed_events

pytestmark = pytest.mark.integration




def test_two_processes_exact_then_a_killed_child_fails_the_pool(stack, own_store, sink_topics):
    db = f"pool_{uuid.uuid4().hex[:8]}"
    client = migrate(own_store.url, db)
    events = mixed_events(3, 6, 300, int(time.time() * 1000) - 3_600_000)
    publish(stack.bootstrap_servers, sink_topics, events)
    expected = expected_counts(events)
    pool = SinkPool(
        2,
        SinkSettings(
            group_id=f"pool-{uuid.uuid4().hex[:6]}",
            topics=tuple(sink_topics.values()),
            batch_ms=300,
        ),
        KafkaSettings(bootstrap_servers=stack.bootstrap_servers),
        ClickHouseSettings(url=own_store.url, database=db),
        stop_timeout_s=30,
    )
    stop = threading.Event()
    result: list[int] = []
    runner = threading.Thread(target=lambda: result.append(pool.run(stop)))
    runner.start()
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
        stop.set()
        runner.join(60)
        for child in pool.children:
            if child.exitcode is None:
                child.kill()
