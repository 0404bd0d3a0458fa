"""Kafka transport shared by every producer, and a small manual-commit consumer.

Size: the one module around confluent_kafka: the producer transport, the
manual-commit consumer and the admin helpers share its settings, TLS/SASL
wiring and error mapping.

Producer side (:class:`KafkaTransport`): confluent-kafka with compression, a
small linger, ``acks=all`` and idempotence. :meth:`KafkaTransport.produce`
never blocks and never raises.

How records reach the spool (the design choice):

* In *direct* mode every record is handed to librdkafka and remembered, with a
  transport sequence number, until its delivery report arrives.
* The transport *trips* into *spool* mode when the local queue is full
  (``BufferError``), when librdkafka reports that all brokers are down, when a
  delivery fails with a retriable error (after ``message.timeout.ms``, kept
  short) or on a fatal producer error. Tripping moves every record still
  awaiting its report into the durable spool in sequence order and purges
  librdkafka's queue, so the spool holds one ordered tail of everything not
  known to be delivered; every later ``produce`` appends behind it.
* A record that was already on the wire when the transport tripped may still
  be delivered; its success report then counts it as a ``duplicate`` (it is
  also replayed). Consumers deduplicate by ``event_id``. So every record is
  delivered at least once, and every extra copy is counted.
* A background thread serves delivery reports, probes the broker while in
  spool mode, and replays the spool in order (after every earlier record has
  been resolved) in batches; a batch commits only its delivered prefix.
  When the spool is empty again the transport returns to direct mode.
* A missing topic is not an outage. A topic the broker does not have
  (auto-create off) is refused for good, counted in ``missing_topic`` (and
  ``failed``) and logged as an error naming it, instead of blocking the
  ordered spool, once two of the broker's answers at least a second apart
  lack it: ``runwatch emit`` sets librdkafka's ``topic.metadata.propagation.max.ms``
  to that second, so such a record fails with ``UNKNOWN_TOPIC_OR_PART`` within a
  hook's few seconds (by the default of 30 s it timed out first, as in an outage,
  and ``emit --timeout 5`` spooled it); the SDK and the agent keep the default
  (``ProducerSettings.missing_topic_fail_ms``), and their spooled record's topic
  is looked up by the replay's probe, in the
  cluster's metadata from a broker that answered. Later records to that
  topic are refused at once, until a metadata check (every
  ``missing_topic_recheck_s``) lists the topic again.

Consumer side (:class:`BatchConsumer`): subscribe, poll batches, commit the
offsets you processed explicitly, pause/resume for backpressure, rebalance
callbacks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import logging
import os
import re
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from pydantic_settings import BaseSettings, SettingsConfigDict

from runwatch.adapters.kafka_security import (
    AUTHORIZATION_ERRORS,
    KafkaAuthError,
    KafkaAuthorizationError,
    auth_failure_message,
    authorization_message,
    check_credentials,
    is_auth_error,
)
from runwatch.adapters.settings import KafkaSettings
from runwatch.adapters.spool import FsyncPolicy, Spool, SpoolRecord, in_use, orphaned

logger = logging.getLogger(__name__)

Compression = Literal["lz4", "zstd", "gzip", "snappy", "none"]

_NON_RETRIABLE = {
    KafkaError.MSG_SIZE_TOO_LARGE,
    KafkaError.INVALID_RECORD,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError._INVALID_ARG,
    KafkaError.RECORD_LIST_TOO_LARGE,
}
_PURGED = {KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT}
#: How librdkafka fails a record whose topic the broker said it lacks.
_UNKNOWN_TOPIC = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC}
#: A topic is declared missing only when two metadata answers at least this far
#: apart lack it (a broker that has just started may answer before it knows all).
MISSING_CONFIRM_S = 1.0
MISSING_TOPIC_WAIT_S = 3.0
"""About how long a producer needs to tell a topic the broker lacks from an outage (two
answers :data:`MISSING_CONFIRM_S` apart, the requests and retries around them): a record
still waiting when a shorter wait ends is spooled as in an outage."""



class CommitFailed(RuntimeError):
    """The consumer group refused an offset commit.

    For example this member outlasted ``max.poll.interval.ms`` and was dropped; its
    next poll rejoins.
    """

class ProducerSettings(BaseSettings):
    """Producer transport settings (env prefix ``RUNWATCH_PRODUCER_``)."""

    model_config = SettingsConfigDict(env_prefix="RUNWATCH_PRODUCER_", extra="ignore")

    spool_dir: Path | None = Path.home() / ".cache" / "runwatch" / "spool"
    spool_max_bytes: int = 512 * 1024 * 1024
    spool_segment_bytes: int = 8 * 1024 * 1024
    spool_fsync: FsyncPolicy = "batch"
    compression: Compression = "lz4"
    linger_ms: int = 5
    message_timeout_ms: int = 10_000
    queue_max_messages: int = 100_000
    replay_batch: int = 1000
    probe_timeout_s: float = 1.0
    missing_topic_recheck_s: float = 30.0
    missing_topic_fail_ms: int | None = None
    """librdkafka's ``topic.metadata.propagation.max.ms``: a record to a topic the broker
    lacks fails (``UNKNOWN_TOPIC_OR_PART``) once its answers this far apart say so. None keeps
    librdkafka's 30 s, past the message timeout: a long-lived producer (the SDK, the agent)
    then spools it as in an outage and the replay's probe tells a missing topic, so a broker
    of a busy cluster that briefly answers without a topic refuses nothing. ``runwatch emit``
    sets one second: a hook's ``--timeout 5`` had spooled a record to a missing topic."""


@dataclasses.dataclass(slots=True)
class TransportCounters:
    """What happened to the records handed to a transport.

    Attributes:
        sent: Delivered directly.
        spooled: Written to the spool (disk or memory).
        replayed: Delivered from the spool.
        evicted: Dropped from a full spool (oldest first).
        failed: Rejected for good (non-retriable error) or lost from memory at close.
        duplicates: Delivered more than once (in flight when the transport tripped,
            or delivered after an earlier record of a replay batch failed).
        in_doubt: Sent again after a delivery error that does not say whether the
            broker stored them (a broker that stopped before acknowledging), or
            spooled when the transport tripped and then purged from librdkafka's
            queue (where a record goes back for a retry after an attempt the broker
            may have stored); each may be one more duplicate that no client can see.
        in_spool: Still in the spool now.
        missing_topic: Refused because their topic does not exist on a broker
            that answered (also counted in ``failed``).

    """

    sent: int = 0
    spooled: int = 0
    replayed: int = 0
    evicted: int = 0
    failed: int = 0
    duplicates: int = 0
    in_doubt: int = 0
    in_spool: int = 0
    missing_topic: int = 0


ProducerFactory = Callable[[dict[str, Any]], Any]


_FOLDER_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def spool_folder_name(name: str) -> str:
    """Return a transport name as one safe folder name under the spool directory.

    A name is made of what producers were given (an SDK run id): a ``/`` would
    nest folders (``../`` leave the spool directory), and a 165-character id
    passes the file-name limit. A name that is already one short plain folder
    name is kept; any other is cleaned and given a hash of itself (distinct
    names stay distinct).

    Args:
        name: The transport's name.

    Returns:
        A folder name of letters, digits, ``.``, ``_`` and ``-`` (at most 100).

    """
    if _FOLDER_SAFE.fullmatch(name):
        return name
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    clean = re.sub(r"[^A-Za-z0-9._-]+", "_", name).lstrip("._-")[:80]
    return f"{clean}-{digest}" if clean else digest


class KafkaTransport:
    """Non-blocking, spool-backed Kafka producer shared by every producer."""

    def __init__(
        self,
        kafka: KafkaSettings | None = None,
        settings: ProducerSettings | None = None,
        *,
        name: str = "producer",
        producer_factory: ProducerFactory | None = None,
        start: bool = True,
    ) -> None:
        """Create the transport and start its background thread.

        Args:
            kafka: Where Kafka is.
            settings: Spool and producer tuning.
            name: A name for logs and the spool sub-directory.
            producer_factory: Builds the producer from a config (tests).
            start: Start the background thread now.

        """
        self.kafka = kafka or KafkaSettings()
        self.settings = settings or ProducerSettings()
        self.name = name
        self._factory: ProducerFactory = producer_factory or Producer
        self._lock = threading.RLock()
        s = self.settings
        folder = spool_folder_name(name)
        spool_dir = s.spool_dir / folder if s.spool_dir is not None else None
        if spool_dir is not None and in_use(spool_dir):
            # another process of this name (a concurrent emit, a job restarted on the node):
            # a spool of its own, which a later producer of the kind replays (adopt_orphans)
            busy, spool_dir = spool_dir, spool_dir.with_name(f"{folder}-{os.getpid()}")
            logger.info("spool %s is in use by another process: spooling to %s", busy, spool_dir)
        self._spool = Spool(
            spool_dir,
            max_bytes=s.spool_max_bytes,
            segment_bytes=s.spool_segment_bytes,
            fsync=s.spool_fsync,
        )
        self._c = TransportCounters()
        self._unacked: dict[int, SpoolRecord] = {}
        self._seq = 0
        self._mode: Literal["direct", "spool"] = "spool" if len(self._spool) else "direct"
        self._purge_pending = False
        self._recreate_pending = False
        self._backoff_s = 0.0
        self._next_try = 0.0
        self._last_sync = time.monotonic()
        self._missing: dict[str, int] = {}  # topic -> records refused since found missing
        self._missing_checked = time.monotonic()
        self._suspects: dict[str, float] = {}  # topic -> when a metadata answer first lacked it
        self._stop = threading.Event()
        self._closed = False
        self._auth_error: str | None = None
        self._producer = self._new_producer()
        self._thread = threading.Thread(target=self._loop, name=f"runwatch-{name}", daemon=True)
        self._forked = False
        os.register_at_fork(after_in_child=functools.partial(_after_fork, weakref.ref(self)))
        if start:
            self._thread.start()

    # ---------------------------------------------------------------- public
    def produce(self, topic: str, key: bytes | str | None, value: bytes) -> None:
        """Hand a record over; never blocks, never raises.

        Args:
            topic: Kafka topic.
            key: Partitioning key.
            value: Encoded record.

        """
        kb = key.encode("utf-8") if isinstance(key, str) else key
        rec = SpoolRecord(topic, kb, value)
        with self._lock:
            if self._forked:
                self._c.failed += 1
                if self._c.failed == 1:
                    logger.error("transport %s belongs to the process this one was forked from: "
                                 "record to %s dropped (counted in failed)", self.name, topic)
                return
            if self._closed:
                self._c.failed += 1
                if self._c.failed == 1:
                    logger.error("transport %s is closed: record to %s dropped", self.name, topic)
                return
            if topic in self._missing:
                self._refuse_missing(topic, 1)
                return
            if self._mode == "spool":
                self._to_spool(rec)
                return
            self._seq += 1
            seq = self._seq
            self._unacked[seq] = rec
            try:
                self._producer.produce(
                    topic, value, kb, on_delivery=functools.partial(self._on_direct, seq)
                )
            except BufferError:
                self._unacked.pop(seq, None)
                self._trip("local producer queue is full")
                self._to_spool(rec)
            except (KafkaException, RuntimeError) as exc:
                self._unacked.pop(seq, None)
                self._trip(f"produce failed: {exc}")
                self._to_spool(rec)

    @property
    def mode(self) -> str:
        """``direct`` or ``spool``."""
        return self._mode

    @property
    def auth_error(self) -> str | None:
        """Why the broker refused this transport's login or any write (None: it did not).

        While it is set, records are kept in the spool and :meth:`flush`
        returns at once: no retry fixes wrong credentials.
        """
        return self._auth_error

    def counters(self) -> TransportCounters:
        """Return a snapshot of the counters."""
        with self._lock:
            self._c.evicted = self._spool.evicted
            self._c.in_spool = len(self._spool)
            return dataclasses.replace(self._c)

    def flush(self, timeout: float = 10.0) -> int:
        """Wait until everything handed over is delivered, or the timeout.

        Args:
            timeout: Seconds to wait at most.

        Returns:
            How many records are not yet delivered (awaiting a report or spooled).

        """
        if self._forked:  # the parent's records: the parent delivers them
            return 0
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                pending = len(self._unacked) + len(self._spool)
            if pending == 0 or time.monotonic() >= deadline or self._auth_error:
                return pending
            if not self._thread.is_alive():
                self._serve(0.05)
            else:
                time.sleep(0.02)

    def close(self, timeout: float = 10.0) -> TransportCounters:
        """Flush with a timeout, stop the thread and log the counters.

        Records still on disk stay in the spool for the next start.

        Args:
            timeout: Seconds to wait for delivery.

        Returns:
            The final counters.

        """
        if self._forked:  # never touch the parent's librdkafka client or spool files
            self._closed = True
            return self.counters()
        left = self.flush(timeout)
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5.0)
        with self._lock:
            if self._unacked:
                # never confirmed: keep them for the next start
                for _, rec in sorted(self._unacked.items()):
                    self._to_spool(rec)
                self._unacked.clear()
            self._spool.sync()
            self._c.failed += self._spool.close()
            with contextlib.suppress(Exception):
                self._producer.purge(in_queue=True, in_flight=True, blocking=False)
                self._producer.flush(0)
            self._producer = _Closed()
            self._closed = True
        c = self.counters()
        level = logging.WARNING if left or c.failed or c.evicted else logging.INFO
        logger.log(
            level,
            "transport %s closed: sent=%d spooled=%d replayed=%d evicted=%d failed=%d "
            "duplicates=%d in_doubt=%d left_in_spool=%d missing_topic=%d%s",
            self.name,
            c.sent,
            c.spooled,
            c.replayed,
            c.evicted,
            c.failed,
            c.duplicates,
            c.in_doubt,
            c.in_spool,
            c.missing_topic,
            f" (missing topics: {', '.join(sorted(self._missing))})" if self._missing else "",
        )
        return c

    # -------------------------------------------------------------- internal
    def _new_producer(self) -> Any:
        s = self.settings
        conf: dict[str, Any] = dict(self.kafka.client_config())
        conf.update(
            {
                "acks": "all",
                "enable.idempotence": True,
                "compression.type": s.compression,
                "linger.ms": s.linger_ms,
                "message.timeout.ms": s.message_timeout_ms,
                # a topic the broker lacks fails its records (UNKNOWN_TOPIC_OR_PART) once
                # answers this far apart say so (emit: before its timeout ends)
                **({"topic.metadata.propagation.max.ms": s.missing_topic_fail_ms}
                   if s.missing_topic_fail_ms is not None else {}),
                "queue.buffering.max.messages": s.queue_max_messages,
                "error_cb": self._on_error,
                "logger": _LibrdkafkaLog(),
                "client.id": f"runwatch-{self.name}",
            }
        )
        return self._factory(conf)

    def _to_spool(self, rec: SpoolRecord) -> None:
        self._spool.append(rec)
        self._c.spooled += 1
        if self._spool.fsync == "batch" and time.monotonic() - self._last_sync > 1.0:
            self._spool.sync()
            self._last_sync = time.monotonic()

    def _refuse_missing(self, topic: str, n: int) -> None:
        """Count records refused because their topic is missing (lock held)."""
        if topic not in self._missing:
            self._missing[topic] = 0
            logger.error(
                "transport %s: topic %r does not exist on the broker (topic auto-creation is "
                "off there): its records are refused and counted in missing_topic, not "
                "spooled. Check the topic name, or create the topic; it is checked again "
                "every %gs",
                self.name,
                topic,
                self.settings.missing_topic_recheck_s,
            )
        self._missing[topic] += n
        self._c.missing_topic += n
        self._c.failed += n

    def _recheck_missing(self) -> None:
        """Forget missing topics the broker lists again (background thread)."""
        if not self._missing or (
            time.monotonic() - self._missing_checked < self.settings.missing_topic_recheck_s
        ):
            return
        self._missing_checked = time.monotonic()
        try:
            listed = _listed(self._producer.list_topics(timeout=self.settings.probe_timeout_s))
        except KafkaException:
            return
        if listed is None:
            return
        with self._lock:
            for topic in [t for t in self._missing if t in listed]:
                n = self._missing.pop(topic)
                logger.warning(
                    "transport %s: topic %r exists now; its records are sent again "
                    "(%d were refused while it was missing)", self.name, topic, n,
                )

    def _trip(self, reason: str) -> None:
        """Move everything unconfirmed to the spool, in order (lock held)."""
        if self._mode == "direct":
            logger.warning("transport %s spooling locally: %s", self.name, reason)
        self._mode = "spool"
        for _, rec in sorted(self._unacked.items()):
            self._to_spool(rec)
        self._unacked.clear()
        self._purge_pending = True
        self._backoff_s = max(self._backoff_s, 0.5)
        self._next_try = time.monotonic() + self._backoff_s

    def _on_direct(self, seq: int, err: KafkaError | None, msg: Message) -> None:
        with self._lock:
            rec = self._unacked.pop(seq, None)
            if err is None:
                self._auth_error = None
                if rec is None:
                    self._c.duplicates += 1
                else:
                    self._c.sent += 1
                return
            if err.code() in _PURGED:  # taken back by the trip's purge: spooled already
                if rec is None:  # librdkafka may have queued it again after an attempt the
                    self._c.in_doubt += 1  # broker stored (a dropped connection): no one knows
                return
            if rec is None:  # in flight when the transport tripped: spooled already
                self._c.in_doubt += 1
                return
            if err.code() in _UNKNOWN_TOPIC:  # the broker's answers lacked it for a second
                self._refuse_missing(rec.topic, 1)
                return
            if err.code() in _NON_RETRIABLE:
                self._c.failed += 1
                logger.error("record to %s rejected for good: %s", rec.topic, err)
                return
            self._c.in_doubt += 1
            self._unacked[seq] = rec
            self._trip(f"delivery failed: {err}")

    def _on_error(self, err: KafkaError) -> None:
        refused = err.code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED  # no write ACL at all
        if is_auth_error(err) or refused:
            with self._lock:
                if self._auth_error is None:
                    conf = self.kafka.client_config()
                    self._auth_error = (authorization_message(conf, err.str()) if refused
                                        else auth_failure_message(conf, err.str()))
                    logger.error("transport %s: %s; records are kept in the spool",
                                 self.name, self._auth_error)
                self._trip("the broker refused this client")
        elif err.fatal():
            logger.error("transport %s fatal producer error: %s", self.name, err)
            with self._lock:
                self._trip(f"fatal producer error: {err}")
                self._recreate_pending = True
        elif err.code() == KafkaError._ALL_BROKERS_DOWN:
            with self._lock:
                self._trip("all brokers are down")
        else:
            logger.debug("transport %s: %s", self.name, err)

    def _serve(self, timeout: float) -> None:
        try:
            self._producer.poll(timeout)
        except KafkaException as exc:  # a fatal error raised from poll itself
            self._on_error(exc.args[0])
        if self._purge_pending:
            self._purge_pending = False
            with contextlib.suppress(KafkaException, NotImplementedError):
                self._producer.purge(in_queue=True, in_flight=False, blocking=True)
            self._producer.poll(0)
        if self._recreate_pending:
            self._recreate_pending = False
            with contextlib.suppress(Exception):
                self._producer.purge(in_queue=True, in_flight=True, blocking=False)
                self._producer.flush(0)
            self._producer = self._new_producer()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._serve(0.05)
                self._recheck_missing()
                if self._mode == "spool":
                    self._maybe_replay()
                    if self._spool.fsync == "batch" and time.monotonic() - self._last_sync > 1:
                        with self._lock:
                            self._spool.sync()
                        self._last_sync = time.monotonic()
            except Exception:  # never let the thread die
                logger.exception("transport %s background error", self.name)
                time.sleep(0.5)

    def _maybe_replay(self) -> None:
        if time.monotonic() < self._next_try or len(self._producer) > 0:
            return
        try:
            listed = _listed(self._producer.list_topics(timeout=self.settings.probe_timeout_s))
        except KafkaException:
            self._bump_backoff()
            return
        if listed is not None:
            for topic in [t for t in self._suspects if t in listed]:
                del self._suspects[topic]
        with self._lock:
            batch = self._spool.peek(self.settings.replay_batch)
            if not batch:
                self._mode = "direct"
                self._backoff_s = 0.0
                logger.warning("transport %s: spool drained, back to direct delivery", self.name)
                return
        results: list[KafkaError | None | bool | str] = [False] * len(batch)

        def done(i: int, err: KafkaError | None, msg: Message) -> None:
            results[i] = err

        sent = 0
        for i, rec in enumerate(batch):
            if listed is not None and rec.topic not in listed:
                first = self._suspects.setdefault(rec.topic, time.monotonic())
                if time.monotonic() - first < MISSING_CONFIRM_S:
                    break  # absent once: ask the broker again before refusing anything
                results[i] = rec.topic  # confirmed missing: refused below, never produced
                sent += 1
                continue
            try:
                self._producer.produce(
                    rec.topic, rec.value, rec.key, on_delivery=functools.partial(done, i)
                )
            except (BufferError, KafkaException):
                break
            sent += 1
        deadline = time.monotonic() + self.settings.message_timeout_ms / 1000 + 5
        while time.monotonic() < deadline and any(r is False for r in results[:sent]):
            self._producer.poll(0.05)
        ok = 0
        failed_for_good = 0
        missing: dict[str, int] = {}
        for r in results[:sent]:
            if r is None:
                ok += 1
            elif isinstance(r, str):
                missing[r] = missing.get(r, 0) + 1
                ok += 1
            elif isinstance(r, KafkaError) and r.code() in _NON_RETRIABLE:
                failed_for_good += 1
                ok += 1
            else:
                break
        later = sum(1 for r in results[ok:sent] if r is None)
        doubt = sum(1 for r in results[ok:sent]  # no answer by the deadline, or an error
                    if r is False or (isinstance(r, KafkaError)  # that does not say: sent again
                                      and r.code() not in _NON_RETRIABLE | _PURGED))
        with self._lock:
            self._spool.ack(ok)
            self._c.replayed += ok - failed_for_good - sum(missing.values())
            self._c.failed += failed_for_good
            for topic, n in missing.items():
                self._refuse_missing(topic, n)
            self._c.duplicates += later
            self._c.in_doubt += doubt
            if ok < sent or sent == 0:
                self._bump_backoff()
            else:
                self._backoff_s = 0.0
                if len(self._spool) == 0:
                    self._mode = "direct"
                    logger.warning(
                        "transport %s: spool drained, back to direct delivery", self.name
                    )

    def _bump_backoff(self) -> None:
        self._backoff_s = min(max(self._backoff_s * 2, 0.5), 5.0)
        self._next_try = time.monotonic() + self._backoff_s


def adopt_orphans(kafka: KafkaSettings, settings: ProducerSettings, *, prefix: str,
                  exclude: str, limit: int = 4) -> list[KafkaTransport]:
    """Transports replaying the spools that exited producers left behind.

    Each SDK process spools under a name of its own (its run id and rank), so
    what a job left on disk when it exited during an outage would otherwise
    never be sent, and the spool directory would stay for ever. A transport
    opened on such a directory replays it in the background like its own.
    Empty leftovers are removed.

    Args:
        kafka: Where Kafka is.
        settings: The producer settings (their ``spool_dir`` is searched).
        prefix: Names of the producers' kind (``sdk-``).
        exclude: The caller's own name.
        limit: At most this many at once (the rest wait for a later start).

    Returns:
        The transports (close them when done).

    """
    if settings.spool_dir is None:
        return []
    dirs, removed = orphaned(settings.spool_dir, prefix, spool_folder_name(exclude))
    if removed:
        logger.info("removed %d empty spool directories of exited producers", removed)
    out = []
    for d in dirs[:limit]:
        t = KafkaTransport(kafka, settings, name=d.name)
        n = len(t._spool)
        if n == 0:
            t.close(0)
            continue
        logger.warning("spool %s holds %d records of a producer that has exited: replaying "
                       "them (counted in orphans_replayed)", d, n)
        out.append(t)
    return out


def _after_fork(ref: weakref.ReferenceType[KafkaTransport]) -> None:
    """Mark a transport inherited by a forked child: it is the parent's, left untouched.

    librdkafka is not fork-safe (a child that purged or flushed the inherited
    producer at exit hung for ever), and the spool's files are the parent's.
    """
    transport = ref()
    if transport is not None:
        transport._forked = True
        transport._lock = threading.RLock()  # the parent's may have been held at the fork
        transport._unacked = {}
        transport._c = TransportCounters()


def _listed(metadata: Any) -> set[str] | None:
    """Topics in a cluster metadata answer; None when it cannot tell (no broker, a double)."""
    topics = getattr(metadata, "topics", None)
    if not isinstance(topics, Mapping) or not getattr(metadata, "brokers", None):
        return None
    return set(topics)


class _LibrdkafkaLog:
    """Routes librdkafka's own log lines to DEBUG (the transport logs state changes itself)."""

    _log = logging.getLogger("runwatch.librdkafka")

    def log(self, level: int, msg: str, *args: Any) -> None:
        self._log.debug(msg, *args)


class _Closed:
    """Stands in for the producer after close: every produce fails over to the spool."""

    def produce(self, *args: Any, **kwargs: Any) -> None:
        msg = "transport is closed"
        raise RuntimeError(msg)

    def poll(self, timeout: float = 0) -> int:
        return 0

    def flush(self, timeout: float = 0) -> int:
        return 0

    def __len__(self) -> int:
        return 0


def delivery_wait_s(settings: ProducerSettings) -> float:
    """Return how long a producer that stops waits for its records' delivery.

    Past the message timeout and the missing-topic check after it (two metadata answers a
    second apart): a record to a topic the broker lacks is then refused, counted in
    ``missing_topic`` and named, instead of being left in the spool as if the broker were
    away.
    """
    return settings.message_timeout_ms / 1000 + 10.0


Partitions = list[TopicPartition]
RebalanceCallback = Callable[[Partitions], None]


class BatchConsumer:
    """A generic Kafka consumer with explicit commits.

    ``enable.auto.commit`` is off: call :meth:`commit` with the messages you
    have processed (their offsets + 1 are committed per partition), or
    :meth:`commit_offsets` with the next offsets to read. :meth:`pause` and
    :meth:`resume` stop and restart fetching on every assigned partition
    (backpressure; polling a paused consumer keeps its group membership), and
    ``on_assign``/``on_revoke`` are called on rebalances from inside
    :meth:`poll_batch`, on the polling thread.
    """

    def __init__(
        self,
        kafka: KafkaSettings,
        group_id: str,
        topics: Sequence[str],
        *,
        extra: dict[str, Any] | None = None,
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
    ) -> None:
        """Create the consumer and subscribe.

        Args:
            kafka: Where Kafka is.
            group_id: Consumer group.
            topics: Topics to subscribe to.
            extra: More librdkafka settings (override the defaults).
            on_assign: Called with the partitions assigned by a rebalance.
            on_revoke: Called with the partitions revoked (or lost) by a
                rebalance, before they go to another member.

        Raises:
            KafkaAuthError: A SASL/TLS client whose login the broker refuses.

        """
        conf = group_config(kafka, group_id)
        conf.update(
            {
                "auto.offset.reset": "earliest",
                "enable.partition.eof": False,
                # librdkafka's default session (45 s): a member killed with SIGKILL holds
                # its partitions that long. A 10 s session made a restarted sink store
                # rows twice after a kill -9 (tests/integration/test_sink.py, 450 of 400
                # rows); shorten it only once that race is understood and fixed.
                "session.timeout.ms": 45_000,
                "heartbeat.interval.ms": 3_000,
            }
        )
        conf.update(extra or {})
        check_credentials(conf)  # librdkafka would retry a refused login forever
        self._conf = {k: conf.get(k) for k in ("bootstrap.servers", "sasl.username",
                                               "security.protocol", "sasl.mechanism")}
        conf.setdefault("error_cb", self._on_error)
        self._unreachable_logged = False
        self._consumer = Consumer(conf)
        self._paused = False
        self._user_assign = on_assign
        self._user_revoke = on_revoke
        if on_assign is None and on_revoke is None:
            self._consumer.subscribe(list(topics))
        else:
            self._consumer.subscribe(
                list(topics),
                on_assign=self._on_assign,
                on_revoke=self._on_revoke,
                on_lost=self._on_revoke,
            )

    def _on_error(self, err: KafkaError) -> None:
        """Log a broker that does not answer once (until it answers again), anything else."""
        if err.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT,
                          KafkaError._RESOLVE):
            if not self._unreachable_logged:
                self._unreachable_logged = True
                logger.warning(
                    "Kafka at %s does not answer (%s); still trying "
                    "(KAFKA_BOOTSTRAP_SERVERS sets where it is)",
                    self._conf.get("bootstrap.servers"), err.str(),
                )
            return
        logger.warning("consumer error: %s", err)

    def _on_assign(self, consumer: Consumer, parts: Partitions) -> None:
        self._unreachable_logged = False  # the group answered: say so again if it goes away
        if parts:
            if self._paused:
                consumer.pause(parts)  # stay paused across a rebalance
            else:
                # librdkafka keeps a partition's pause flag across assignments: a
                # resume() while nothing was assigned (between revoke and assign)
                # would otherwise leave these partitions paused for good.
                consumer.resume(parts)
        if self._user_assign is not None:
            self._user_assign(list(parts))

    def _on_revoke(self, _consumer: Consumer, parts: Partitions) -> None:
        if self._user_revoke is not None:
            self._user_revoke(list(parts))

    def poll_batch(self, max_records: int = 500, timeout: float = 1.0) -> list[Message]:
        """Return up to ``max_records`` messages (errors are logged and skipped).

        Args:
            max_records: Batch size bound.
            timeout: Seconds to wait for the first message.

        Returns:
            The messages, possibly none.

        Raises:
            KafkaAuthError: The broker refused the login.
            KafkaAuthorizationError: Its ACLs refuse a topic or the group.
            KafkaException: A fatal consumer error.

        """
        msgs = self._consumer.consume(num_messages=max_records, timeout=timeout)
        out = []
        for m in msgs:
            err = m.error()
            if err is not None:
                if is_auth_error(err):
                    raise KafkaAuthError(auth_failure_message(self._conf, err.str()))
                if err.code() in AUTHORIZATION_ERRORS:
                    raise KafkaAuthorizationError(authorization_message(self._conf, err.str()))
                if err.fatal():
                    msg = f"fatal consumer error: {err}"
                    raise KafkaException(err) from RuntimeError(msg)
                if err.code() != KafkaError._PARTITION_EOF:
                    logger.warning("consumer error: %s", err)
                continue
            out.append(m)
        return out

    def commit(self, messages: Iterable[Message], *, asynchronous: bool = False) -> None:
        """Commit the offsets following the given messages.

        Args:
            messages: Processed messages.
            asynchronous: Do not wait for the broker's answer.

        Raises:
            CommitFailed: The group refused the commit (this member was dropped).

        """
        best: dict[tuple[str, int], int] = {}
        for m in messages:
            topic, part, off = m.topic(), m.partition(), m.offset()
            if topic is None or part is None or off is None:
                continue
            best[(topic, part)] = max(best.get((topic, part), -1), off + 1)
        self.commit_offsets(best, asynchronous=asynchronous)

    def commit_offsets(
        self, offsets: Mapping[tuple[str, int], int], *, asynchronous: bool = False
    ) -> None:
        """Commit explicit positions.

        Args:
            offsets: ``{(topic, partition): next offset to read}`` (the last
                processed offset + 1, Kafka's convention).
            asynchronous: Do not wait for the broker's answer.

        """
        if not offsets:
            return
        parts = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
        consumer: Any = self._consumer
        try:
            consumer.commit(offsets=parts, asynchronous=asynchronous)
        except KafkaException as exc:
            raise CommitFailed(str(exc)) from exc

    def assignment(self) -> Partitions:
        """Return the partitions currently assigned to this member."""
        return list(self._consumer.assignment())

    @property
    def paused(self) -> bool:
        """Whether :meth:`pause` is in effect."""
        return self._paused

    def pause(self) -> None:
        """Stop fetching from every assigned partition (also those assigned later).

        Keep calling :meth:`poll_batch` meanwhile: it returns nothing new but
        serves rebalances and keeps the membership.
        """
        if not self._paused:
            self._paused = True
            parts = self._consumer.assignment()
            if parts:
                self._consumer.pause(parts)

    def resume(self) -> None:
        """Resume fetching on every assigned partition, from the consumed position."""
        if self._paused:
            self._paused = False
            parts = self._consumer.assignment()
            if parts:
                self._consumer.resume(parts)

    def close(self) -> None:
        """Leave the group and close."""
        self._consumer.close()


def group_config(kafka: KafkaSettings, group_id: str) -> dict[str, Any]:
    """Return a consumer's settings in ``group_id``: offsets committed by hand.

    librdkafka's own lines go to DEBUG, as the producer's do: without a logger it printed
    a FAIL line to stderr per connection attempt (about 19 a second against a broker that
    is not there) and nothing said which setting to fix.
    """
    return {**kafka.client_config(), "group.id": group_id, "enable.auto.commit": False,
            "logger": _LibrdkafkaLog()}


#: Errors of a consumer-group placement that mean the group already has members (another
#: instance placed it and joined first): placement is tried again a few times (the committed
#: offsets it made are then found), then left to those members.
_GROUP_HAS_MEMBERS = frozenset({KafkaError.UNKNOWN_MEMBER_ID, KafkaError.ILLEGAL_GENERATION,
                                KafkaError.REBALANCE_IN_PROGRESS, KafkaError.FENCED_INSTANCE_ID})
_MEMBER_TRIES = 5


class GroupNotPlaced(RuntimeError):
    """A new consumer group could not be placed before the caller's deadline (or stop)."""


def start_new_group(kafka: KafkaSettings, group_id: str, topic: str, since_ms: int | None,
                    *, timeout: float = 10.0, stop: threading.Event | None = None,
                    wait_s: float | None = None, backoff_s: tuple[float, float] = (0.5, 30.0),
                    ) -> dict[int, int]:
    """Commit where a consumer group with no committed offset on ``topic`` starts.

    Each partition of ``topic`` the group has no committed offset on gets the offset of
    its first record written at or after ``since_ms`` (the end when none is), so a new
    group does not start at offset 0 and read the whole history; a partition with a
    committed offset keeps it (at least once). ``since_ms`` None leaves every partition to
    ``auto.offset.reset``.

    A broker or group coordinator that does not answer (down, restarting, ``NOT_COORDINATOR``,
    a timeout) is asked again, with exponential backoff from ``backoff_s[0]`` up to
    ``backoff_s[1]`` seconds, until it answers: logged once when it first fails, then about
    every five minutes, and once placed. Falling back to ``auto.offset.reset`` then (the
    ``earliest`` of a :class:`BatchConsumer`) read, and a pager paged, the whole history.
    A topic that does not exist is left to ``auto.offset.reset`` (it has no history yet);
    so is a group whose other members refuse the commit ``_MEMBER_TRIES`` times in a row
    (they hold the group and read from their own positions).

    Args:
        kafka: Where Kafka is.
        group_id: The consumer group.
        topic: The topic.
        since_ms: Record timestamp (UTC epoch ms) to start a new group's partitions at.
        timeout: Seconds for each broker round trip.
        stop: Set to give up waiting (raises :class:`GroupNotPlaced`).
        wait_s: Give up after this many seconds (raises :class:`GroupNotPlaced`); None:
            wait as long as it takes.
        backoff_s: First and longest pause between tries.

    Returns:
        Partition -> the offset committed for it (empty when the group had them all).

    Raises:
        GroupNotPlaced: ``stop`` was set or ``wait_s`` passed before the broker answered.
        KafkaAuthorizationError: The broker's ACLs refuse the topic or the group.

    """
    if since_ms is None:
        return {}
    conf = group_config(kafka, group_id)
    check_credentials(conf)
    started = time.monotonic()
    pause, tries, member_refusals, last_logged = backoff_s[0], 0, 0, -1.0
    while True:
        tries += 1
        try:
            placed = _place_group(conf, topic, since_ms, timeout)
        except KafkaException as exc:
            err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            code = err.code() if err is not None else None
            if code in AUTHORIZATION_ERRORS:
                raise KafkaAuthorizationError(authorization_message(conf, str(exc))) from exc
            if code in _GROUP_HAS_MEMBERS:
                member_refusals += 1
                if member_refusals >= _MEMBER_TRIES:
                    logger.warning("new consumer group %s on %s: its other members refuse the "
                                   "commit (%s); they hold the group, left to them", group_id,
                                   topic, exc)
                    return {}
            else:
                member_refusals = 0
            waited = time.monotonic() - started
            if last_logged < 0 or waited - last_logged >= 300:
                last_logged = waited
                logger.warning(
                    "could not place new consumer group %s on %s yet (%s); trying again until "
                    "the broker answers (try %d, %.0f s): nothing is read before that",
                    group_id, topic, exc, tries, waited)
            if wait_s is not None and waited + pause > wait_s:
                msg = (f"could not place new consumer group {group_id} on {topic} in "
                       f"{waited:.0f} s ({tries} tries): {exc}")
                raise GroupNotPlaced(msg) from exc
            if stop is not None and stop.wait(pause):
                msg = f"stopped before new consumer group {group_id} was placed on {topic}"
                raise GroupNotPlaced(msg) from exc
            if stop is None:
                time.sleep(pause)
            pause = min(pause * 2, backoff_s[1])
            continue
        if tries > 1:
            logger.info("placed new consumer group %s on %s after %d tries (%.0f s)", group_id,
                        topic, tries, time.monotonic() - started)
        return placed


def _place_group(conf: dict[str, Any], topic: str, since_ms: int,
                 timeout: float) -> dict[int, int]:
    """One try of :func:`start_new_group`.

    Raises:
        KafkaException: The broker did not answer, or answered with an error.

    """
    consumer = Consumer(conf)
    try:
        meta = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        if meta is None or (meta.error is not None
                            and meta.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
            return {}  # no such topic (yet): nothing to skip
        if meta.error is not None:
            raise KafkaException(meta.error)
        if not meta.partitions:
            raise KafkaException(KafkaError(KafkaError.LEADER_NOT_AVAILABLE,
                                            f"{topic} lists no partitions"))
        parts = [TopicPartition(topic, p) for p in sorted(meta.partitions)]
        fresh = []
        for tp in _checked(consumer.committed(parts, timeout=timeout)):
            if tp.offset < 0:
                fresh.append(TopicPartition(topic, tp.partition, since_ms))
        if not fresh:
            return {}
        starts: list[TopicPartition] = []
        for tp in _checked(consumer.offsets_for_times(fresh, timeout=timeout)):
            offset = tp.offset
            if offset < 0:  # nothing written since: start at the end
                offset = consumer.get_watermark_offsets(
                    TopicPartition(topic, tp.partition), timeout=timeout)[1]
            starts.append(TopicPartition(topic, tp.partition, offset))
        _checked(consumer.commit(offsets=starts, asynchronous=False) or [])
        return {tp.partition: tp.offset for tp in starts}
    finally:
        consumer.close()


def group_lag(kafka: KafkaSettings, group_id: str, topic: str, timeout: float = 10.0) -> int:
    """Return the messages of ``topic`` past ``group_id``'s committed offsets (its lag).

    A partition the group never committed counts from the start of the log.

    Raises:
        KafkaException: The broker did not answer, or the topic does not exist.

    """
    consumer = Consumer(group_config(kafka, group_id))
    try:
        meta = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        if meta is None or meta.error is not None:
            raise KafkaException(meta.error if meta is not None else KafkaError(
                KafkaError.UNKNOWN_TOPIC_OR_PART, f"no topic {topic}"))
        parts = [TopicPartition(topic, p) for p in sorted(meta.partitions)]
        lag = 0
        for tp in _checked(consumer.committed(parts, timeout=timeout)):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, tp.partition),
                                                       timeout=timeout)
            lag += max(0, high - (tp.offset if tp.offset >= 0 else low))
        return lag
    finally:
        consumer.close()


def _checked(parts: list[TopicPartition]) -> list[TopicPartition]:
    """Return ``parts``; raise the first per-partition error among them."""
    for tp in parts:
        if tp.error is not None:
            raise KafkaException(tp.error)
    return parts


def plain_producer(kafka: KafkaSettings, **extra: Any) -> Producer:
    """Return a bare confluent-kafka Producer (no spool): tests, benchmarks, tools.

    Services that must never block or lose a record use :class:`KafkaTransport`.

    Args:
        kafka: Where Kafka is.
        **extra: More librdkafka settings (dots spelled as dots, e.g. ``{"linger.ms": 5}``).

    Returns:
        The producer.

    """
    conf: dict[str, Any] = {**kafka.client_config(), "linger.ms": 5, **extra}
    return Producer(conf)


__all__ = [
    "BatchConsumer",
    "adopt_orphans",
    "group_lag",
    "KafkaException",
    "KafkaTransport",
    "Message",
    "ProducerSettings",
    "TopicPartition",
    "TransportCounters",
    "plain_producer",
]
