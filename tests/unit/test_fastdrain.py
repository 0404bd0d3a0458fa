"""The processor's inline message delivery (runwatch.processor.fastdrain); no broker."""

from __future__ import annotations

import asyncio
import hashlib
import inspect
from typing import Any

import faust.transport.consumer as faust_consumer
import pytest
from mode import Service

from runwatch.processor.fastdrain import FAUST_DRAIN_SHA256, FastDrainConsumer, finish


def test_copied_loop_follows_the_installed_faust() -> None:
    src = inspect.getsource(faust_consumer.Consumer._drain_messages)
    assert hashlib.sha256(src.encode()).hexdigest() == FAUST_DRAIN_SHA256, (
        "faust's Consumer._drain_messages changed: re-copy it into "
        "runwatch/processor/fastdrain.py and update FAUST_DRAIN_SHA256"
    )
    ours = inspect.getsource(FastDrainConsumer._drain_messages)
    assert "wait_first" not in ours and "await deliver(callback, message)" in ours


async def _drive(make: Any) -> tuple[Any, list[str]]:
    """Start ``make(log)``'s coroutine by hand, then let ``finish`` complete it."""
    log: list[str] = []
    coro = make(log)
    try:
        yielded = coro.send(None)
    except StopIteration as stop:
        return stop.value, log
    return await finish(coro, yielded), log


async def _now(log):
    log.append("ran")
    return 1


async def _sleeps(log):
    for i in range(3):
        await asyncio.sleep(0)
        log.append(f"turn{i}")
    return 2


async def _waits(log):
    fut = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_later(0.01, fut.set_result, 41)
    v = await fut
    log.append("woke")
    return v + 1


async def _raises(log):
    fut = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_later(0.01, fut.set_exception, ValueError("bad"))
    try:
        await fut
    finally:
        log.append("cleanup")


@pytest.mark.parametrize(
    ("make", "result", "log"),
    [
        (_now, 1, ["ran"]),
        (_sleeps, 2, ["turn0", "turn1", "turn2"]),
        (_waits, 42, ["woke"]),
    ],
)
def test_finish_completes_like_a_task(make, result, log) -> None:
    assert asyncio.run(_drive(make)) == (result, log)


def test_finish_propagates_the_coroutines_exception() -> None:
    log: list[str] = []

    async def go():
        coro = _raises(log)
        return await finish(coro, coro.send(None))

    with pytest.raises(ValueError, match="bad"):
        asyncio.run(go())
    assert log == ["cleanup"]


def test_cancelling_finish_cancels_what_the_coroutine_waits_on() -> None:
    seen: list[str] = []

    async def blocked():
        fut = asyncio.get_running_loop().create_future()
        seen.append("waiting")
        try:
            await fut
        except asyncio.CancelledError:
            seen.append(f"cancelled, future cancelled={fut.cancelled()}")
            raise

    async def go():
        coro = blocked()
        task = asyncio.ensure_future(finish(coro, coro.send(None)))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert seen == ["waiting", "cancelled, future cancelled=True"]


class Drainer(Service):
    """A mode Service with the consumer's delivery method and its suspend-flow event."""

    _deliver = FastDrainConsumer._deliver

    def __init__(self) -> None:
        super().__init__()
        self.suspend_flow = asyncio.Event()


def _count_tasks(loop: asyncio.AbstractEventLoop) -> list[int]:
    made = [0]
    factory = loop.get_task_factory()

    def counting(lp, coro, **kw):
        made[0] += 1
        return factory(lp, coro, **kw) if factory else asyncio.Task(coro, loop=lp, **kw)

    loop.set_task_factory(counting)
    return made


def test_deliver_inline_makes_no_task() -> None:
    got: list[int] = []

    async def callback(m):
        got.append(m)

    async def go():
        d = Drainer()
        made = _count_tasks(asyncio.get_running_loop())
        for m in range(5):
            await d._deliver(callback, m)
        return made[0]

    assert asyncio.run(go()) == 0
    assert got == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("suspend", [False, True])
def test_deliver_that_waits_finishes_or_is_abandoned_on_suspend(suspend: bool) -> None:
    events: list[str] = []

    async def go():
        d = Drainer()
        gate = asyncio.Event()  # stands for flow control / a full stream buffer

        async def callback(m):
            events.append(f"start {m}")
            try:
                await gate.wait()
            except asyncio.CancelledError:
                events.append(f"abandoned {m}")
                raise
            events.append(f"delivered {m}")

        loop = asyncio.get_running_loop()
        loop.call_later(0.02, d.suspend_flow.set if suspend else gate.set)
        await asyncio.wait_for(d._deliver(callback, 7), 2.0)
        await asyncio.sleep(0.01)

    asyncio.run(go())
    assert events == ["start 7", "abandoned 7" if suspend else "delivered 7"]


def test_deliver_while_suspended_takes_faust_path() -> None:
    async def go():
        d = Drainer()
        d.suspend_flow.set()
        made = _count_tasks(asyncio.get_running_loop())
        got: list[int] = []

        async def callback(m):
            got.append(m)

        await d._deliver(callback, 1)
        return made[0], got

    made, got = asyncio.run(go())
    assert made >= 2  # wait_first's tasks, as faust does it
    assert got in ([], [1])  # the suspend may win the race, as in faust


@pytest.mark.parametrize(("asked", "used"), [("uvloop", "uvloop"), ("asyncio", "asyncio")])
def test_event_loop_setting(asked: str, used: str) -> None:
    from runwatch.processor.__main__ import use_event_loop

    before = asyncio.get_event_loop_policy()
    try:
        assert use_event_loop(asked) == used
        loop = asyncio.new_event_loop()
        assert type(loop).__module__.split(".")[0] == used
        loop.close()
    finally:
        asyncio.set_event_loop_policy(before)


@pytest.mark.parametrize("value", [b"\x00\x01avro", None, b""])
def test_raw_schema_makes_events_of_the_messages_own_bytes(value: bytes | None) -> None:
    import faust
    from faust.types import TP
    from faust.types.tuples import Message

    from runwatch.processor.fastdrain import RawSchema

    app = faust.App("t-raw", broker="kafka://127.0.0.1:9")  # nothing connects
    msg = Message(topic="t", partition=3, offset=7, timestamp=0.0, timestamp_type=0,
                  headers=[("h", b"1")], key=b"run-1", value=value, checksum=None,
                  tp=TP("t", 3))
    event = asyncio.run(RawSchema().compile(app)(msg))
    assert isinstance(event, faust.Event)
    assert (event.key, event.value, event.message) == (b"run-1", value, msg)
    assert event.headers == {"h": b"1"}
    # faust's own schema for the same topic types gives the same key and value
    theirs = asyncio.run(faust.Schema(key_type=bytes, value_type=bytes, key_serializer="raw",
                                      value_serializer="raw").compile(app)(msg))
    assert (theirs.key, theirs.value) == (event.key, event.value)


@pytest.mark.parametrize("keep", [True, False])
def test_monitor_sensor_is_left_out_unless_kept(keep: bool) -> None:
    from runwatch.processor.app import App

    app = App("t-monitor", broker="kafka://127.0.0.1:9")  # nothing connects
    app.monitor_sensor = keep
    app.on_init_dependencies()
    assert (app.monitor in set(app.sensors)) is keep


def test_tune_gc_raises_generation_0_and_freezes() -> None:
    import gc

    from runwatch.processor.__main__ import tune_gc

    before = gc.get_threshold()
    try:
        assert tune_gc(50_000) == (50_000, *before[1:])
        assert gc.get_freeze_count() > 0
        assert tune_gc(0)[0] == 50_000  # 0 leaves the threshold as it is
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_sections_count_garbage_collector_pauses() -> None:
    import gc

    from runwatch.processor.timing import Sections

    s = Sections()
    n = len(gc.callbacks)
    s.track_gc()
    try:
        gc.collect()
        gc.collect(0)
    finally:
        del gc.callbacks[n:]
    assert s.counts["gc"] == 2 and s.secs["gc"] > 0
    assert "gc " in s.summary()


def test_prepared_worker_names_a_bad_ownership_file_and_tracks_gc(tmp_path) -> None:
    import gc

    from runwatch.core.paging.ownership import load_ownership
    from runwatch.processor.__main__ import prepared
    from runwatch.processor.settings import ProcessorSettings
    from runwatch.processor.timing import Sections

    bad = tmp_path / "ownership.yaml"
    bad.write_text("owners:\n  - cause: [data\n")
    settings = ProcessorSettings(gc_threshold=0)
    with pytest.raises(SystemExit, match=r"^error: .*ownership.yaml:3: invalid YAML"):
        prepared(lambda: load_ownership(bad), settings)

    class Worker:
        sections = Sections()

    n = len(gc.callbacks)
    try:
        assert isinstance(prepared(Worker, settings), Worker)
        assert len(gc.callbacks) == n + 1  # the worker's log shows the collector's pauses
    finally:
        del gc.callbacks[n:]
        gc.unfreeze()
