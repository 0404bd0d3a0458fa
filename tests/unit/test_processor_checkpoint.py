"""Deferred state saves of the runs agent: a checkpoint writes them, then acks their events."""

import asyncio
import time

import pytest
from faust.types import TP

from runwatch.adapters.settings import KafkaSettings
from runwatch.core.records import JobEvent, StepTiming
from runwatch.core.stream import runstate
from runwatch.processor.app import Processor
from runwatch.processor.runs import RunFolder
from runwatch.processor.settings import ProcessorSettings
from runwatch.testing import scenarios

T0 = 1_700_000_000_000


class Msg:
    def __init__(self, partition: int) -> None:
        self.tp = TP("rw.exec.job", partition)
        self.topic, self.partition, self.offset = "rw.exec.job", partition, 0
        self.refs = 1

    def incref(self) -> None:
        self.refs += 1


class Event:
    """What the runs agent touches of a faust event (weak-referenceable, like faust's)."""

    def __init__(self, partition: int, value: bytes = b"x") -> None:
        self.message = Msg(partition)
        self.value, self.key = value, b"k"
        self.acked = 0

    def ack(self) -> bool:
        self.acked += 1
        self.message.refs -= 1
        return self.message.refs == 0


@pytest.fixture
def proc(tmp_path):
    p = Processor(ProcessorSettings(data_dir=tmp_path, save_interval_s=2.0, partitions=4),
                  KafkaSettings(bootstrap_servers="127.0.0.1:1"),
                  table=lambda name, glob=False: {})  # the changelog-backed tables, as dicts
    return p.runs


def step(run: str, n: int) -> StepTiming:
    return StepTiming(event_id=f"{run}-{n}", run_id=run, emitted_at_ms=T0 + n,
                      source=scenarios.SOURCE, seq=n, step=n, loader_wait_ms=10.0,
                      compute_ms=90.0, step_ms=100.0, samples=32, effective_batch_size=32,
                      worker_restarts=0)


def job(run: str) -> JobEvent:
    return JobEvent(event_id=f"{run}-job", run_id=run, emitted_at_ms=T0,
                    source=scenarios.SOURCE, seq=0, state="queued", attempt=1)


def flush(p: RunFolder, items: dict) -> None:
    asyncio.run(p._flush({k.encode(): [(rec, ev, b"x") for rec, ev in v]
                          for k, v in items.items()}))


def test_telemetry_only_state_waits_for_the_checkpoint_and_acks_follow_it(proc) -> None:
    ev = Event(proc.out.partition(b"r1"))
    ev.message.incref()  # as the agent does: the stream's own ack is not the final one
    flush(proc, {"r1": [(step("r1", 1), ev)]})
    assert b"r1" in proc.dirty and b"r1" not in proc.runstate
    assert proc.load(b"r1") is proc.dirty[b"r1"][0]  # later batches fold into the live state
    proc.unacked.append(ev)
    asyncio.run(proc.checkpoint())  # not due yet
    assert ev.acked == 0 and b"r1" not in proc.runstate
    proc.checkpoint_at = time.monotonic() - 2.5
    asyncio.run(proc.checkpoint())
    assert b"r1" in proc.runstate and not proc.dirty
    assert ev.acked == 1 and proc.unacked == []
    saved = runstate.loads(proc.runstate[b"r1"])  # the table holds the folded state
    assert len(saved.pending) == 1 and saved.pending == proc.load(b"r1").pending


@pytest.mark.parametrize(("interval", "records", "deferred"), [
    (2.0, ["step"], True),
    (2.0, ["step", "job"], False),  # a job event is saved at once
    (0.0, ["step"], False),  # interval 0: every batch saves
])
def test_what_is_deferred(tmp_path, interval, records, deferred) -> None:
    p = Processor(ProcessorSettings(data_dir=tmp_path, save_interval_s=interval),
                  KafkaSettings(bootstrap_servers="127.0.0.1:1"),
                  table=lambda name, glob=False: {}).runs
    make = {"step": lambda: step("r", 1), "job": lambda: job("r")}
    flush(p, {"r": [(make[r](), Event(0)) for r in records]})
    assert (b"r" in p.dirty) is deferred
    assert (b"r" in p.runstate) is not deferred


def test_forced_checkpoint_and_revocation(proc) -> None:
    keys = [f"run-{i}" for i in range(12)]
    events = {k: Event(proc.out.partition(k.encode())) for k in keys}
    flush(proc, {k: [(step(k, 1), events[k])] for k in keys})
    proc.unacked.extend(events.values())
    lost = proc.out.partition(keys[0].encode())
    revoked = {TP("rw.exec.job", lost)}
    proc.revoked(revoked)
    gone = [k for k in keys if proc.out.partition(k.encode()) == lost]
    kept = [k for k in keys if k not in gone]
    assert gone and kept
    assert all(k.encode() not in proc.dirty and k.encode() not in proc.cache for k in gone)
    assert {ev.message.tp for ev in proc.unacked} == {events[k].message.tp for k in kept}
    asyncio.run(proc.checkpoint(force=True))
    assert sorted(proc.runstate) == sorted(k.encode() for k in kept)
    assert all(events[k].acked == 1 for k in kept) and all(events[k].acked == 0 for k in gone)
