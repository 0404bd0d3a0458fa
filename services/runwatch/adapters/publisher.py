"""Record publishing shared by the SDK, the agent and ``runwatch emit``.

A :class:`Publisher` stamps records (event id, per-producer ``seq``, source),
encodes them with the Avro codec and hands them to a transport with the right
topic and key. It is used from one thread at a time (each producer's worker).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import itertools
import logging
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from runwatch._version import __version__
from runwatch.core.records import Source
from runwatch.core.topics import load_topics, record_topics, unknown_overrides

logger = logging.getLogger(__name__)

MAX_RECORD_BYTES = 1_000_000
"""Largest record a publisher hands over: librdkafka's default ``message.max.bytes``.

A larger one would be refused by the producer, and the transport would take
the refusal for an outage and spool everything behind it."""


class RecordTooLarge(ValueError):
    """A record's encoding is over the publisher's size limit."""


#: Components of the topic map that write through this publisher.
PRODUCER_WRITERS = frozenset({"sdk", "agent", "hook"})


@functools.cache
def topic_names() -> frozenset[str]:
    """Return every topic's name in ``schemas/topics.yaml``: what a ``topics=`` key may be.

    A map of all of them (``rw.alerts`` and the internal ones too) is a user's usual way to
    move every topic under a prefix.
    """
    return frozenset(load_topics())


@functools.cache
def default_topics() -> dict[str, str]:
    """Return record class name -> topic for what producers write.

    Returns:
        The map from ``schemas/topics.yaml``, topics written by the SDK, the
        agent or scheduler hooks (cached after the first call).
    """
    return record_topics(load_topics(), PRODUCER_WRITERS)


class Transport(Protocol):
    """What a publisher needs from a transport."""

    def produce(self, topic: str, key: bytes | str | None, value: bytes) -> None:
        """Hand over one record."""

    def flush(self, timeout: float = 10.0) -> int:
        """Wait for delivery; return how many are pending."""

    def close(self, timeout: float = 10.0) -> Any:
        """Flush, stop and return counters."""


class CaptureTransport:
    """A transport that keeps ``(topic, key, value)`` in memory."""

    def __init__(self) -> None:
        """Start empty."""
        self.messages: list[tuple[str, bytes | str | None, bytes]] = []

    def produce(self, topic: str, key: bytes | str | None, value: bytes) -> None:
        """Keep one record."""
        self.messages.append((topic, key, value))

    def flush(self, timeout: float = 10.0) -> int:
        """Nothing is pending."""
        return 0

    def close(self, timeout: float = 10.0) -> None:
        """Nothing to close."""


def record_key(record: Any) -> str | None:
    """Return the partitioning key of a record (run id, node or dataset).

    Args:
        record: A runwatch record.

    Returns:
        The key, or None.

    """
    name = type(record).__name__
    if name == "NodeSample":
        return str(record.node)
    if name in ("DataQualityReport", "StageEvent"):  # a stage: its output dataset
        return str(record.dataset_uri)
    return record.run_id


def _configured_topics() -> dict[str, str]:
    """Logical topic name -> actual name from schemas/topics.yaml when available."""
    try:
        mod = importlib.import_module("runwatch.core.topics")
        loaded = mod.load_topics()
    except Exception:  # the loader is optional; defaults apply
        return {}
    out: dict[str, str] = {}
    items = loaded.items() if isinstance(loaded, Mapping) else []
    for logical, spec in items:
        name = getattr(spec, "name", None) or (spec.get("name") if isinstance(spec, dict) else None)
        if isinstance(name, str):
            out[str(logical)] = name
    return out


def make_source(kind: str) -> Source:
    """Build the Source of this process.

    Args:
        kind: sdk, agent, hook or cli.

    Returns:
        The Source record.

    """
    return Source(kind=kind, host=socket.gethostname(), runwatch_version=__version__)


class Publisher:
    """Stamps, encodes and hands records to a transport."""

    def __init__(
        self,
        transport: Transport,
        *,
        kind: str,
        topics: Mapping[str, str] | None = None,
        codec: Any = None,
        clock: Callable[[], int] | None = None,
        max_record_bytes: int = MAX_RECORD_BYTES,
    ) -> None:
        """Create a publisher.

        Args:
            transport: Where encoded records go.
            kind: Source kind (sdk, agent, hook, cli).
            topics: Overrides: a topic's name in the map (``rw.learning``) -> the topic
                to write instead.
            codec: An Avro codec (default: :func:`runwatch.core.codec.load_codec`).
            clock: Epoch milliseconds used when a caller gives no time (default:
                the wall clock); replays and simulators pass their own.
            max_record_bytes: Largest encoded record handed to the transport.

        Raises:
            ValueError: A key of ``topics`` names no topic of ``schemas/topics.yaml``.

        """
        problem = unknown_overrides(topics or {}, topic_names())
        if problem is not None:  # it would be ignored: the records went to the default topic
            raise ValueError(problem)
        self.clock = clock
        if codec is None:
            from runwatch.core.codec import load_codec

            codec = load_codec()
        self.codec = codec
        self.transport = transport
        self.source = make_source(kind)
        self._topics = {**_configured_topics(), **dict(topics or {})}
        self._seq = itertools.count(1)
        self.max_record_bytes = max_record_bytes
        self.encode_errors = 0  # records that could not be encoded (dropped, logged)
        self.sanitised = 0  # records whose text was repaired to encode (core.codec.text)
        self.oversize = 0  # records refused for their size (dropped, logged)
        self._refusals: dict[tuple[str, str], int] = {}  # (counter, record type) -> refused

    def topic_for(self, record: Any) -> str:
        """Return the actual topic of a record.

        Args:
            record: A runwatch record.

        Returns:
            The topic name.

        """
        logical = default_topics()[type(record).__name__]
        return self._topics.get(logical, logical)

    def meta(self, now_ms: int | None = None, *, seq: int | None = None) -> dict[str, Any]:
        """Return fresh stamp fields (event_id, seq, source, emitted_at_ms).

        Args:
            now_ms: Emission time; the clock when None.
            seq: A fixed sequence number instead of the next one.

        Returns:
            Keyword arguments for a record constructor.

        """
        return {
            "event_id": uuid.uuid4().hex,
            "seq": next(self._seq) if seq is None else seq,
            "source": self.source,
            "emitted_at_ms": now_ms if now_ms is not None else self.now_ms(),
        }

    def now_ms(self) -> int:
        """Return the publisher's clock now (epoch ms): ``clock`` or the wall clock."""
        return self.clock() if self.clock is not None else int(time.time() * 1000)

    def next_seq(self) -> int:
        """Return the next per-producer sequence number."""
        return next(self._seq)

    def stamp(self, record: Any, now_ms: int | None = None) -> Any:
        """Fill event_id, seq, source and emitted_at_ms of a record.

        Args:
            record: A record whose stamp fields are placeholders.
            now_ms: Emission time; the clock when None.

        Returns:
            The stamped copy.

        """
        return dataclasses.replace(
            record,
            event_id=uuid.uuid4().hex,
            seq=next(self._seq),
            source=self.source,
            emitted_at_ms=now_ms if now_ms is not None else self.now_ms(),
        )

    def encode_one(self, record: Any) -> tuple[Any, bytes]:
        """Encode one record, repairing text that is not UTF-8, within the size limit.

        Args:
            record: A stamped record.

        Returns:
            The record as encoded (its text repaired if it had to be) and its bytes.

        Raises:
            EncodeError: It cannot be encoded, even with its text repaired.
            RecordTooLarge: Its encoding is over :attr:`max_record_bytes`.

        """
        try:
            value = self.codec.encode(record)
        except Exception as first:
            from runwatch.core.codec.text import clean_record  # the codec package imports numpy

            cleaned = clean_record(record)
            try:
                value = self.codec.encode(cleaned)
            except Exception:
                raise first from None
            self.sanitised += 1
            logger.warning("%s: text that is not UTF-8 replaced by U+FFFD (counted in "
                           "sanitised)", type(record).__name__)
            record = cleaned
        self.check_size(record, value)
        return record, value

    def check_size(self, record: Any, value: bytes) -> None:
        """Refuse an encoding over :attr:`max_record_bytes` (the broker would refuse it).

        Raises:
            RecordTooLarge: Naming the record, its size, the limit and its largest field.

        """
        if len(value) <= self.max_record_bytes:
            return
        sizes = {f.name: len(repr(getattr(record, f.name))) for f in dataclasses.fields(record)}
        big = max(sizes, key=sizes.__getitem__)
        msg = (f"{type(record).__name__} is {len(value)} bytes encoded, over the "
               f"{self.max_record_bytes}-byte record limit (largest field: {big})")
        raise RecordTooLarge(msg)

    def _log_refusal(self, what: str, rec: Any, exc: Exception) -> None:
        """Log a refused record: each record type's first, then every 1000th.

        A loop's every step would otherwise be one more error line.
        """
        name = type(rec).__name__
        n = self._refusals[(what, name)] = self._refusals.get((what, name), 0) + 1
        if n == 1 or n % 1000 == 0:
            logger.error("%s %s: %s (%d %s record(s) so far; logged at the first and every "
                         "1000th)", what, name, exc, n, name)

    def publish(self, records: Iterable[Any]) -> int:
        """Encode and hand over records that are already stamped.

        A batch that fails to encode is retried one record at a time so one bad
        record costs only itself (counted in ``encode_errors`` and logged).

        Args:
            records: Stamped records.

        Returns:
            How many were handed to the transport.

        """
        batch = list(records)
        if not batch:
            return 0
        try:
            encoded = self.codec.encode_many(batch)
            pairs = list(zip(batch, encoded, strict=True))
            limit = self.max_record_bytes
            if any(len(v) > limit for v in encoded):
                raise RecordTooLarge  # noqa: TRY301 - one by one: each oversize is refused
        except Exception:
            pairs = []
            for rec in batch:
                try:
                    pairs.append(self.encode_one(rec))
                except RecordTooLarge as exc:
                    self.oversize += 1
                    self._log_refusal("refused (counted in oversize)", rec, exc)
                except Exception as exc:
                    self.encode_errors += 1
                    self._log_refusal("cannot encode (counted in encode_errors)", rec, exc)
        for rec, value in pairs:
            self.transport.produce(self.topic_for(rec), record_key(rec), value)
        return len(pairs)
