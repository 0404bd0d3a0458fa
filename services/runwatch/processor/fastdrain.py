"""faust's fetch loop without four asyncio tasks per message.

faust-streaming 0.15.3 hands every fetched message to the conductor through
``Service.wait_first(callback(message), suspend_flow.wait())``: four tasks and
an ``asyncio.wait`` per message, so that a rebalance (``suspend_flow``) can
abandon a delivery blocked on flow control. That is about half of what an idle
faust agent costs per event (``benchmarks/processor.py`` prints both).

:class:`FastDrainConsumer` runs the delivery inline first. It nearly always
completes without waiting (flow not suspended, stream buffers not full), and
then no task is made at all. When it does have to wait, the rest of it runs
under faust's own ``wait_first`` with the suspend-flow event, as before; while
the flow is suspended every message takes faust's original path.

``_drain_messages`` is faust's method (0.15.3, ``faust/transport/consumer.py``)
with that one call replaced; ``tests/unit/test_fastdrain.py`` fails when the
installed faust's method differs from the one this copy was made from.

:class:`RawSchema` is the other per-message saving: the processor's topics
carry raw bytes (it decodes Avro itself, in batches), so the event is made from
the message's key and value as they are, without faust's serializer registry
(two codec lookups and calls per message).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, cast

from faust import Schema
from faust.transport.consumer import CONSUMER_FETCHING
from faust.transport.drivers.aiokafka import Consumer as AIOKafkaConsumer
from mode import Service, ServiceT

FAUST_DRAIN_SHA256 = "44a2500309e83c630493f6828af50166ec8d96a0b3e4fb2bab735f704ae93417"
"""sha256 of faust's ``Consumer._drain_messages`` source this copy follows (see the test)."""


def _step(coro: Coroutine[Any, Any, Any], exc: BaseException | None = None) -> tuple[bool, Any]:
    """Advance a coroutine one step: (True, its result) when it returned, else (False, yield)."""
    try:
        return False, (coro.send(None) if exc is None else coro.throw(exc))
    except StopIteration as stop:
        return True, stop.value


async def finish(coro: Coroutine[Any, Any, Any], yielded: Any) -> Any:
    """Drive to completion a coroutine that has already yielded ``yielded`` to its runner.

    Does what an asyncio Task does for it: waits for the future it yielded
    (a bare ``yield`` is one turn of the loop), resumes it, and, when this
    coroutine is cancelled, cancels that future (or throws the cancellation
    into it when the future is already done).

    Args:
        coro: The started coroutine.
        yielded: What its last step yielded (an asyncio future or None).

    Returns:
        The coroutine's result; its exception propagates.

    """
    while True:
        exc: BaseException | None = None
        try:
            if yielded is None:
                await asyncio.sleep(0)
            elif not asyncio.isfuture(yielded):
                exc = RuntimeError(f"coroutine yielded {yielded!r}, not a future")
            else:
                yielded._asyncio_future_blocking = False
                if not yielded.done():
                    await asyncio.wait((yielded,))
        except asyncio.CancelledError as cancelled:
            if yielded is None or not asyncio.isfuture(yielded) or not yielded.cancel():
                exc = cancelled  # else the coroutine sees its future's cancellation
        done, yielded = _step(coro, exc)
        if done:
            return yielded


class FastDrainConsumer(AIOKafkaConsumer):  # type: ignore[misc]  # faust is untyped here
    """faust's aiokafka consumer whose fetch loop delivers messages inline."""

    async def _deliver(self, callback: Callable[[Any], Any], message: Any) -> None:
        """Hand one message to the conductor: inline, or under ``wait_first`` if it waits.

        A delivery that waits starts in this (the fetch loop's) task and ends in
        the one ``wait_first`` makes, so the callback must not keep
        ``asyncio.current_task()`` across an await (``asyncio.timeout`` does);
        faust 0.15.3's conductor and streams do not.
        """
        if self.suspend_flow.is_set():
            await self.wait_first(callback(message), self.suspend_flow.wait())
            return
        coro = cast(Coroutine[Any, Any, Any], callback(message))
        done, yielded = _step(coro)
        if not done:
            await self.wait_first(finish(coro, yielded), self.suspend_flow.wait())

    async def _drain_messages(self, fetcher: ServiceT) -> None:  # noqa: C901  # faust's shape
        # faust 0.15.3's loop, unchanged but for ``self._deliver`` (see the module docstring).
        callback = self.callback
        getmany = self.getmany
        consumer_should_stop = cast(Service, self)._stopped.is_set
        fetcher_should_stop = cast(Service, fetcher)._stopped.is_set

        get_read_offset = self._read_offset.__getitem__
        set_read_offset = self._read_offset.__setitem__
        flag_consumer_fetching = CONSUMER_FETCHING
        set_flag = self.diag.set_flag
        unset_flag = self.diag.unset_flag
        commit_every = self._commit_every
        acks_enabled_for = self.app.topics.acks_enabled_for
        deliver = self._deliver

        yield_every = 100
        num_since_yield = 0
        sleep = asyncio.sleep

        try:
            while not (consumer_should_stop() or fetcher_should_stop()):
                set_flag(flag_consumer_fetching)
                ait = cast(AsyncIterator[Any], getmany(timeout=1.0))

                # Sleeping because sometimes getmany is called in a loop
                # never releasing to the event loop
                await self.sleep(0)
                if not self.should_stop:
                    async for tp, message in ait:
                        num_since_yield += 1
                        if num_since_yield > yield_every:
                            await sleep(0)
                            num_since_yield = 0

                        offset = message.offset
                        r_offset = get_read_offset(tp)
                        if r_offset is None or offset >= r_offset:
                            gap = offset - (r_offset or 0)
                            # We have a gap in income messages
                            if gap > 1 and r_offset:
                                acks_enabled = acks_enabled_for(message.topic)
                                if acks_enabled:
                                    await self._add_gap(tp, r_offset + 1, offset)
                            if commit_every is not None:
                                if self._n_acked >= commit_every:
                                    self._n_acked = 0
                                    await self.commit()
                            await deliver(callback, message)
                            set_read_offset(tp, offset)
                        else:
                            self.log.dev(
                                "DROPPED MESSAGE ROFF %r: k=%r v=%r",
                                offset,
                                message.key,
                                message.value,
                            )
                    unset_flag(flag_consumer_fetching)

        except self.consumer_stopped_errors:
            if self.transport.app.should_stop:
                # we're already stopping so ignore
                self.log.info("Broker stopped consumer, shutting down...")
                return
            raise
        except asyncio.CancelledError:
            if self.transport.app.should_stop:
                # we're already stopping so ignore
                self.log.info("Consumer shutting down for user cancel.")
                return
            raise
        except Exception as exc:
            self.log.exception("Drain messages raised: %r", exc)
            raise
        finally:
            unset_flag(flag_consumer_fetching)


class RawSchema(Schema):  # type: ignore[misc]  # faust is untyped here
    """Key and value as the raw bytes of the message: no serializer is called.

    faust's default schema passes both through its serializer registry even
    for ``raw`` (``Schema.loads_key``/``loads_value``, then the codec chain);
    this one cannot fail to decode, so faust's decode-error callbacks never run.
    """

    def __init__(self) -> None:
        super().__init__(key_type=bytes, value_type=bytes, key_serializer="raw",
                         value_serializer="raw")

    def compile(self, app: Any, **_: Any) -> Callable[..., Coroutine[Any, Any, Any]]:
        """Return faust's per-message decode: an event of the message's own bytes."""
        event = app.conf.Event

        async def decode(message: Any, *, propagate: bool = False) -> Any:
            return event(app, message.key, message.value, message.headers, message)

        return decode
