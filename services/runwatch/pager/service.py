"""The pager service: rw.alerts → routing → silences → receivers; failures → rw.dlq.

Size: one service loop over one state (notification log, held alerts, silences,
breakers): delivery, the refresh of firing alerts and the release of held ones,
and dead letters all read and write it; split, each part would need all of it.

One message at a time: decode, route, check silences, deliver to each
receiver (dedup, a quick in-line retry, breaker), defer durably what must wait
longer (``deferred.jsonl``, retried from the loop when due), dead-letter what cannot
be delivered, then commit the offset. A crash before the commit replays the message
on restart; receivers already notified are skipped thanks to the durable notification
log, so nothing is lost and nothing pages twice within the repeat interval.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from runwatch._version import __version__
from runwatch.adapters.kafka import (
    BatchConsumer,
    CommitFailed,
    GroupNotPlaced,
    KafkaTransport,
    ProducerSettings,
    start_new_group,
)
from runwatch.adapters.receivers import (
    HttpReceiver,
    ReceiverOptions,
    build_client,
    build_receivers,
)
from runwatch.adapters.settings import KafkaSettings
from runwatch.core.paging.delivery import (
    BreakerPolicy,
    Notification,
    RetryPolicy,
    is_update,
)
from runwatch.core.paging.payloads import AM_LABEL_FIELDS
from runwatch.core.paging.routes import (
    Rules,
    alert_attributes,
    parse_duration_ms,
    parse_rules,
    receivers_for,
)
from runwatch.core.paging.silencing import find_silence
from runwatch.pager import redact
from runwatch.pager.deliver import Deliverer, Interrupted, Origin
from runwatch.pager.state import HELD_FILE, NotificationLog, SilenceStore, default_state_dir
from runwatch.resources import pager_routes_file, read_config

log = logging.getLogger(__name__)


class PagerSettings(BaseSettings):
    """Pager settings (env prefix ``RUNWATCH_PAGER_``)."""

    model_config = SettingsConfigDict(env_prefix="RUNWATCH_PAGER_", extra="ignore")

    rules_file: Path = Field(default_factory=pager_routes_file)
    state_dir: Path = default_state_dir()
    alerts_topic: str = "rw.alerts"
    dlq_topic: str = "rw.dlq"
    group_id: str = "runwatch-pager"
    start: str = "15m"
    """Where a new consumer group (no committed offset) starts: ``earliest`` (the whole
    history of rw.alerts), ``latest`` (only alerts published from now on), or a lookback
    (``15m``, ``2h``, ``1d``: alerts published that long ago and since). A group with
    committed offsets always goes on from them."""
    max_attempts: int = 20
    backoff_base_ms: int = 500
    backoff_cap_ms: int = 60_000
    max_retry_after_ms: int = 300_000
    breaker_failures: int = 5
    breaker_open_ms: int = 30_000
    delivery_deadline_ms: int = 600_000
    inline_wait_ms: int = 2_000
    """Longest total in-line wait of one delivery (quick retries); a later attempt is
    deferred (kept in the state dir, retried from the loop) so no receiver holds another's
    pages."""
    http_timeout_s: float = 10.0
    tls_verify: bool = True
    ca_bundle: Path | None = None
    investigate_url_template: str = "http://127.0.0.1:8123/play?user=analyst#{query_b64}"
    clickhouse_database: str = "runwatch"
    dlq_flush_timeout_s: float = 30.0

    @field_validator("start")
    @classmethod
    def _start(cls, value: str) -> str:
        start_since_ms(value, 0)  # raises ValueError naming the setting
        return value.strip()


def start_since_ms(start: str, now_ms: int) -> int | None:
    """Return the record time a new consumer group starts at (None: the earliest offset).

    Raises:
        ValueError: When ``start`` is not ``earliest``, ``latest`` or a duration.

    """
    text = start.strip().lower()
    if text == "earliest":
        return None
    if text == "latest":
        return now_ms
    try:
        return now_ms - parse_duration_ms(text)
    except ValueError as exc:
        msg = (f"RUNWATCH_PAGER_START={start!r}: use earliest, latest or a lookback such as "
               "15m, 2h, 1d")
        raise ValueError(msg) from exc


HELD = "silenced"
"""The receiver name of the held-back alerts' log (``held.jsonl``)."""
REFRESH_EVERY_S = 60.0
"""How often the pager looks for firing alerts to send Alertmanager again (``Pager.refresh``)."""


def load_rules(path: Path) -> Rules:
    """Read and validate a rules file.

    Args:
        path: The YAML file.

    Returns:
        The rules.

    Raises:
        RulesError: With the file and line of the problem.
        OSError: When the file cannot be read.

    """
    return parse_rules(read_config(path), str(path))


MAX_POLL_INTERVAL_MS = 86_400_000
"""librdkafka's upper bound of ``max.poll.interval.ms`` (24 h)."""


def poll_interval_ms(delivery_deadline_ms: int, receivers: int) -> int:
    """Return the consumer's ``max.poll.interval.ms`` for one alert's deliveries.

    Every receiver's delivery deadline one after the other, plus two minutes, at most 24 h.
    """
    return min(delivery_deadline_ms * max(receivers, 1) + 120_000, MAX_POLL_INTERVAL_MS)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Pager:
    """Wires the consumer, receivers, deliverer and dead-letter producer."""

    def __init__(
        self,
        settings: PagerSettings,
        kafka: KafkaSettings,
        *,
        stop: threading.Event | None = None,
    ) -> None:
        """Load rules, resolve receivers and open the state (no Kafka yet).

        Args:
            settings: Pager settings.
            kafka: Kafka settings.
            stop: Set it to stop the loop.

        """
        from runwatch.core.codec import load_codec

        self.settings = settings
        self.kafka = kafka
        self.stop = stop or threading.Event()
        self.rules = load_rules(settings.rules_file)
        verify: bool | str = str(settings.ca_bundle) if settings.ca_bundle else settings.tls_verify
        self.http = build_client(settings.http_timeout_s, verify)
        self.receivers: dict[str, HttpReceiver] = build_receivers(
            self.rules.receivers,
            self.http,
            ReceiverOptions(settings.investigate_url_template, settings.clickhouse_database),
        )
        # a Slack URL is its secret, and httpx logs every request's URL (at INFO)
        self._redact = redact.install({
            text: label for name, rx in self.receivers.items()
            for fld, value in rx.secret_settings().items()
            for text, label in redact.secret_texts(name, fld, value).items()})
        self.codec = load_codec()
        self.notifications = NotificationLog(settings.state_dir)
        self.silences = SilenceStore(settings.state_dir)
        self.held = NotificationLog(settings.state_dir, file_name=HELD_FILE)
        self.deliverer = Deliverer(
            self.notifications,
            RetryPolicy(
                settings.max_attempts, settings.backoff_base_ms, settings.backoff_cap_ms,
                settings.max_retry_after_ms,
            ),
            BreakerPolicy(settings.breaker_failures, settings.breaker_open_ms),
            settings.delivery_deadline_ms,
            self.stop,
            inline_wait_ms=settings.inline_wait_ms,
        )
        self._seq = 0
        self._host = socket.gethostname()
        self.dlq: KafkaTransport | None = None
        self.counters = {"received": 0, "sent": 0, "skipped": 0, "silenced": 0, "dead": 0,
                         "deferred": 0}

    def run(self) -> int:
        """Consume until stopped.

        Returns:
            The exit code: 0 on a clean stop.

        """
        s = self.settings
        try:
            self.start_group(_now_ms())
        except GroupNotPlaced as exc:  # stopped while the broker did not answer
            log.info("%s", exc)
            self.close()
            return 0
        # one alert is delivered to its receivers one after the other, each up to the
        # delivery deadline: the group must wait for all of them before it thinks this
        # member dead (with one deadline, two receivers answering 503 + Retry-After made
        # the commit fail, the pager exit, and the same alert stall it again on restart)
        consumer = BatchConsumer(
            self.kafka, s.group_id, [s.alerts_topic],
            extra={"max.poll.interval.ms": poll_interval_ms(s.delivery_deadline_ms,
                                                            len(self.receivers))},
        )
        self.dlq = KafkaTransport(
            self.kafka,
            ProducerSettings(spool_dir=s.state_dir / "spool", spool_fsync="always"),
            name="pager-dlq",
        )
        log.info(
            "pager consuming %s (group %s), %d receivers, state in %s",
            s.alerts_topic, s.group_id, len(self.receivers), s.state_dir,
        )
        next_refresh = 0.0
        try:
            while not self.stop.is_set():
                try:
                    if time.monotonic() >= next_refresh:
                        # a held alert's release retries in-line: a stop during it is a
                        # stop (it raised out of run: a traceback, exit 1); it stays held
                        self.refresh(_now_ms())
                        next_refresh = time.monotonic() + REFRESH_EVERY_S
                    # every turn (at most 0.5 s apart): a deferred delivery goes when due
                    self.retry_deferred()
                except Interrupted:
                    log.info("stopping; %d deferred deliveries kept in %s",
                             len(self.deliverer.pending), s.state_dir)
                    return 0
                for msg in consumer.poll_batch(max_records=1, timeout=0.5):
                    try:
                        self.handle(
                            str(msg.topic()), int(msg.partition() or 0), int(msg.offset() or 0),
                            msg.key(), msg.value(),
                        )
                    except Interrupted:
                        log.info("stopping mid-delivery; offset %d not committed", msg.offset())
                        return 0
                    try:
                        consumer.commit([msg])
                    except CommitFailed as exc:
                        # the group moved on without this member (a delivery that outlasted
                        # max.poll.interval.ms): the next poll rejoins, the alert comes again,
                        # and the notification log keeps it from paging twice
                        log.warning("could not commit offset %d of %s[%d] (%s); the alert "
                                    "will be read again and not paged twice",
                                    msg.offset(), msg.topic(), msg.partition(), exc)
        finally:
            consumer.close()
            self.close()
        return 0

    def start_group(self, now_ms: int) -> dict[int, int]:
        """Place a new consumer group (no committed offset) per ``RUNWATCH_PAGER_START``.

        A new group used to start at offset 0 and page the whole history of rw.alerts
        (alerts resolved long ago paged as firing, then as resolved). A group with
        committed offsets goes on from them: nothing it has not delivered is skipped.
        While the broker or the group's coordinator does not answer, this waits for it
        (until stopped): it used to give up on the first error and leave the group to
        ``auto.offset.reset`` (earliest), which paged the whole history all the same.

        Returns:
            Partition -> start offset, for the partitions that had no committed offset.

        Raises:
            GroupNotPlaced: The pager was stopped before the broker answered.

        """
        s = self.settings
        since = start_since_ms(s.start, now_ms)
        started = start_new_group(self.kafka, s.group_id, s.alerts_topic, since, stop=self.stop)
        if started:
            log.info("new consumer group %s: starting %s at %s (RUNWATCH_PAGER_START=%s), "
                     "partition -> offset %s", s.group_id, s.alerts_topic,
                     "the end" if since == now_ms else "alerts published since "
                     f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(since / 1000))}"
                     if since is not None else "the earliest offset", s.start, started)
        return started

    def handle(
        self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None
    ) -> None:
        """Process one rw.alerts message fully (the caller commits afterwards).

        Args:
            topic: Source topic.
            partition: Source partition.
            offset: Source offset.
            key: Message key.
            value: Message value (encoded Alert).

        Raises:
            Interrupted: When stopping mid-delivery (do not commit).

        """
        from runwatch.core.codec import DecodeError
        from runwatch.core.records import Alert

        self.counters["received"] += 1
        raw = value or b""
        try:
            alert = self.codec.decode(raw)
        except DecodeError as exc:
            self.dead_letter(topic, partition, offset, key, raw, f"undecodable alert: {exc}", None)
            return
        if not isinstance(alert, Alert):
            reason = f"not an Alert record on {topic}: {type(alert).__name__}"
            self.dead_letter(topic, partition, offset, key, raw, reason, None)
            return
        now = _now_ms()
        attrs = alert_attributes(alert)
        silence = find_silence(self.silences.current(), attrs, now)
        if silence is not None and alert.status == "firing":
            self.counters["silenced"] += 1
            log.info(
                "alert %s silenced by %s (%s)", alert.dedup_key, silence.silence_id,
                silence.reason,
            )
            self._hold(alert, "firing", now, raw)
            return
        self._hold(alert, "released", now)
        self._deliver(topic, partition, offset, key, raw, alert, attrs)

    def _hold(self, alert: Any, status: str, now_ms: int, raw: bytes = b"") -> None:
        """Keep a silenced firing alert (``firing``), or forget it (``released``)."""
        last = self.held.last(HELD, alert.dedup_key)
        if status == "firing" or (last is not None and last.status == "firing"):
            self.held.record(Notification(HELD, alert.dedup_key, status, now_ms,
                                          alert.alert_id, raw))

    def _deliver(self, topic: str, partition: int, offset: int, key: bytes | None, raw: bytes,
                 alert: Any, attrs: dict[str, str]) -> None:
        names = [spec.name for spec in receivers_for(self.rules, attrs)]
        if alert.status == "resolved":
            # every receiver paged for it and not told it resolved, wherever the resolve's
            # own (maybe changed) cause routes: a PagerDuty incident opened for the first
            # cause was never closed when the cause changed before the resolve
            # (and every receiver holding its firing deferred: the resolve drops it)
            names += [n for n in self.receivers if n not in names
                      and ((last := self.notifications.last(n, alert.dedup_key)) is not None
                           and last.status == "firing"
                           or self.deliverer.pending.get(n, alert.dedup_key) is not None)]
        origin = Origin(topic, partition, offset, key)
        for name in names:
            receiver = self.receivers[name]
            am = receiver.kind == "alertmanager"
            known = self._known(name, alert.dedup_key)
            a, r = self._as_known(known, alert, raw) if am else (alert, raw)
            # a re-sent alert with a new probable cause updates what the receiver shows
            update = (alert.status == "firing" and known is not None
                      and is_update(known, a, alertmanager=am))
            if update:
                log.info("receiver %s: %s was re-sent with probable cause %s, owner %s (sent "
                         "as %s, %s): sending the update", name, alert.dedup_key,
                         alert.probable_cause, alert.owner, known.probable_cause, known.owner)
            outcome = self.deliverer.deliver(a, receiver, r, origin, update=update)
            if outcome.result == "dead":
                self.dead_letter(
                    topic, partition, offset, key, raw, outcome.reason, alert.run_id,
                    alert=alert,
                )
                if alert.status == "resolved":
                    self._resolve_failed(name, alert)
            else:
                self.counters[outcome.result] += 1

    def retry_deferred(self) -> int:
        """Try the deferred deliveries that are due; dead-letter those out of attempts or time.

        A deferred delivery (a receiver that failed, asked for a long ``Retry-After`` or has
        its breaker open) is in ``deferred.jsonl``; the loop calls this every turn, so it is
        tried again when due, also after a restart.

        Returns:
            How many deferred deliveries were tried.

        Raises:
            Interrupted: When stopping.

        """
        from runwatch.core.codec import DecodeError

        self._silence_deferred()
        done = self.deliverer.retry_due(self.receivers, self.codec.decode)
        for entry, outcome in done:
            if outcome.result == "sent":
                self.counters["sent"] += 1
            elif outcome.result == "dead":
                try:
                    alert: Any = self.codec.decode(entry.raw)
                except DecodeError:
                    alert = None
                self.dead_letter(entry.topic or self.settings.alerts_topic, entry.partition,
                                 entry.offset, entry.key, entry.raw, outcome.reason,
                                 getattr(alert, "run_id", None), alert=alert)
                if alert is not None and entry.status == "resolved":
                    self._resolve_failed(entry.receiver, alert)
                self.deliverer.pending.remove(entry.receiver, entry.dedup_key)
        return len(done)

    def _silence_deferred(self) -> None:
        """Hold the due deferred firings that a silence added since now mutes.

        A silence is checked when a delivery is made, as Alertmanager does: an alert
        deferred while its receiver was down, then silenced by an on-call engineer (the
        maintenance that took the receiver down, say), was delivered once the receiver came
        back. It is held instead (``held.jsonl``), and :meth:`refresh` delivers it if it
        still fires when the silence ends.
        """
        from runwatch.core.codec import DecodeError

        silences = self.silences.current()
        if not silences:
            return
        now = _now_ms()
        for entry in self.deliverer.pending.due(self.deliverer.clock()):
            if entry.status != "firing":
                continue
            try:
                alert = self.codec.decode(entry.raw)
            except DecodeError:
                continue  # retry_due dead-letters it with the reason
            silence = find_silence(silences, alert_attributes(alert), now)
            if silence is None:
                continue
            self.counters["silenced"] += 1
            log.info("receiver %s: deferred alert %s silenced by %s (%s); held until the "
                     "silence ends", entry.receiver, entry.dedup_key, silence.silence_id,
                     silence.reason)
            self._hold(alert, "firing", now, entry.raw)
            self.deliverer.pending.remove(entry.receiver, entry.dedup_key)

    def _known(self, receiver: str, dedup_key: str) -> Any:
        """Return the alert last sent firing to ``receiver`` for ``dedup_key`` (None: none)."""
        last = self.notifications.last(receiver, dedup_key)
        if last is None or last.status != "firing" or not last.raw:
            return None
        try:
            return self.codec.decode(last.raw)
        except Exception:  # noqa: BLE001 - an unreadable log entry: as if none
            return None

    def _as_known(self, known: Any, alert: Any, raw: bytes) -> tuple[Any, bytes]:
        """Return the alert with the labels an Alertmanager that has ``known`` firing knows.

        Alertmanager identifies an alert by its label set. The processor re-sends an
        alert when its probable cause changes, with a new cause and owner; sent as it
        is, the update made a second alert beside the first, and the resolve (carrying
        the new labels) matched nothing: the first stayed active until its ``endsAt``.
        While the alert fires at this receiver, its label fields stay those first sent;
        the rest (title, summary, evidence) is the latest.
        """
        if known is None:
            return alert, raw
        changed = {f: getattr(known, f) for f in AM_LABEL_FIELDS + ("labels",)
                   if getattr(known, f, None) != getattr(alert, f, None)}
        if not changed:
            return alert, raw
        kept = dataclasses.replace(alert, **changed)
        return kept, self.codec.encode(kept)

    def _resolve_failed(self, receiver: str, alert: Any) -> None:
        """Stop refreshing a firing alert whose resolve this receiver did not take.

        The resolve is in the dead letters with its reason (and can be sent again from
        there: a ``resolve_failed`` entry does not count as resolved). Without this entry
        :meth:`refresh` would keep the alert firing in Alertmanager for ever; with it, the
        alert ends there at the ``endsAt`` it was last given.
        """
        last = self.notifications.last(receiver, alert.dedup_key)
        if last is not None and last.status == "firing":
            self.notifications.record(Notification(
                receiver, alert.dedup_key, "resolve_failed", _now_ms(), alert.alert_id))

    def refresh(self, now_ms: int) -> int:
        """Send still-firing alerts to Alertmanager again before their ``endsAt`` passes.

        A firing alert reaches Alertmanager with ``endsAt = now + repeat interval``,
        and the processor publishes it once, not again while it keeps firing: without
        a refresh Alertmanager resolved (and notified as resolved) every alert firing
        longer than the repeat interval. Like Prometheus, the pager re-sends each firing
        alert it delivered to an Alertmanager receiver once half its repeat interval has
        passed, until its resolve is delivered; one attempt per round (a failure is
        tried again next round, well before ``endsAt``), a silenced alert is left to end.

        It also delivers the firing alerts a silence held back once no silence mutes
        them any more and their resolve has not come (``held.jsonl``): a silence for a
        maintenance window ends, and what still fires pages, as in Alertmanager.

        Args:
            now_ms: The pager's clock.

        Returns:
            How many alerts were refreshed or released.

        """
        from runwatch.core.codec import DecodeError
        from runwatch.core.paging.delivery import classify_status

        done = 0
        silences = self.silences.current()
        for held in list(self.held.entries()):
            if held.status != "firing" or not held.raw:
                continue
            try:
                alert = self.codec.decode(held.raw)
            except DecodeError:
                continue
            attrs = alert_attributes(alert)
            if find_silence(silences, attrs, now_ms) is not None:
                continue
            log.info("alert %s: its silence ended while it fires; delivering it", held.dedup_key)
            self._deliver(self.settings.alerts_topic, -1, -1, held.dedup_key.encode(), held.raw,
                          alert, attrs)
            self._hold(alert, "released", now_ms)
            done += 1
        for entry in list(self.notifications.entries()):
            receiver = self.receivers.get(entry.receiver)
            if (receiver is None or receiver.kind != "alertmanager" or not entry.raw
                    or entry.status != "firing"
                    or now_ms - entry.sent_at_ms < receiver.repeat_interval_ms // 2
                    # its resolve (or a newer firing) is deferred: leave it to that
                    or self.deliverer.pending.get(entry.receiver, entry.dedup_key) is not None):
                continue
            try:
                alert = self.codec.decode(entry.raw)
            except DecodeError:
                continue
            if find_silence(silences, alert_attributes(alert), now_ms) is not None:
                continue
            res = receiver.send(alert, now_ms)
            if classify_status(res.status) != "ok":
                log.warning("receiver %s: refresh of %s failed (%s); next round",
                            entry.receiver, entry.dedup_key, res.body[:200])
                continue
            self.notifications.record(Notification(
                entry.receiver, entry.dedup_key, "firing", now_ms, entry.alert_id, entry.raw))
            done += 1
        if done:
            self.counters["refreshed"] = self.counters.get("refreshed", 0) + done
        return done

    def dead_letter(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        raw: bytes,
        reason: str,
        run_id: str | None,
        *,
        alert: Any = None,
    ) -> None:
        """Publish a DeadLetter to rw.dlq and wait until Kafka has it.

        The log line names the alert (firing or resolved, run, dedup key) and where it came
        from: its topic position, or, for an alert a silence held back and the pager
        delivered when the silence ended (no position), that.

        Args:
            topic: Source topic.
            partition: Source partition.
            offset: Source offset.
            key: Source key.
            raw: Original bytes.
            reason: Why.
            run_id: The run, when known.
            alert: The decoded alert, when there is one.

        Raises:
            RuntimeError: When the dead letter cannot be confirmed (the offset
                must then stay uncommitted).

        """
        from runwatch.core.records import DeadLetter, Source

        self.counters["dead"] += 1
        self._seq += 1
        now = _now_ms()
        record = DeadLetter(
            event_id=str(uuid.uuid4()), run_id=run_id, emitted_at_ms=now,
            source=Source(kind="pager", host=self._host, runwatch_version=__version__),
            seq=self._seq, topic=topic, partition=partition, offset=offset, reason=reason,
            original=raw, key=key, failed_at_ms=now,
        )
        where = (f"{topic}[{partition}]@{offset}" if partition >= 0 and offset >= 0
                 else "held by a silence, delivered when it ended")
        what = ("record" if alert is None else
                f"{alert.status} alert of run {alert.run_id} (dedup key {alert.dedup_key})")
        log.error("dead-lettering %s (%s): %s", what, where, reason[:500])
        if self.dlq is None:
            msg = "dead-letter producer not started"
            raise RuntimeError(msg)
        self.dlq.produce(self.settings.dlq_topic, key, self.codec.encode(record))
        left = self.dlq.flush(self.settings.dlq_flush_timeout_s)
        if left:
            msg = f"dead letter not confirmed by Kafka within {self.settings.dlq_flush_timeout_s}s"
            raise RuntimeError(msg)

    def close(self) -> None:
        """Close the producer, HTTP client and log."""
        if self.dlq is not None:
            self.dlq.close()
            self.dlq = None
        self.http.close()
        self.notifications.close()
        self.held.close()
        self.deliverer.pending.close()
        log.info("pager stopped: %s", self.counters)
        redact.uninstall(self._redact)


def describe(settings: PagerSettings) -> dict[str, Any]:
    """Return a summary of the configuration (no secrets) for ``pager check``.

    Args:
        settings: Pager settings.

    Returns:
        Receivers and their kinds and repeat intervals.

    """
    rules = load_rules(settings.rules_file)
    return {
        name: {"kind": spec.kind, "repeat_interval_ms": spec.repeat_interval_ms,
               "settings": {k: f"{r.kind}:{r.value}" if r.kind != "literal" else r.value
                            for k, r in spec.settings.items()}}
        for name, spec in rules.receivers.items()
    }
