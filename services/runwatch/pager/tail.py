"""``runwatch alerts tail``: follow rw.alerts and print alerts as they come.

Uses a throw-away consumer group that never commits, so tailing never moves
anyone else's offsets. Undecodable records are reported on stderr (they are
dead-lettered by the pager, not here).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from runwatch.adapters.kafka import BatchConsumer
from runwatch.adapters.settings import KafkaSettings
from runwatch.core.paging.payloads import alert_dict, iso_ms, json_bytes

log = logging.getLogger(__name__)

_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}


@dataclass(frozen=True, slots=True)
class TailFilter:
    """Which alerts to show (None: any)."""

    run_id: str | None = None
    severity: str | None = None
    cause: str | None = None

    def accepts(self, alert: object) -> bool:
        """Say whether an alert passes the filter.

        Args:
            alert: The Alert record.

        Returns:
            True when every set criterion matches.

        """
        return (
            (self.run_id is None or getattr(alert, "run_id", None) == self.run_id)
            and (self.severity is None or getattr(alert, "severity", None) == self.severity)
            and (self.cause is None or getattr(alert, "probable_cause", None) == self.cause)
        )


def json_line(alert: object) -> str:
    """Render an alert as one JSON line.

    Args:
        alert: The Alert record.

    Returns:
        Compact JSON.

    """
    return json_bytes(alert_dict(alert), sort_keys=True).decode()


def rich_line(alert: object) -> str:
    """Render an alert as one line of rich markup.

    Args:
        alert: The Alert record.

    Returns:
        Markup text (escape-safe for the alert's own strings).

    """
    from rich.markup import escape

    a = alert_dict(alert)
    sev = str(a.get("severity"))
    style = "green" if a.get("status") == "resolved" else _STYLE.get(sev, "white")
    state = "RESOLVED" if a.get("status") == "resolved" else sev.upper()
    return (
        f"{iso_ms(int(a.get('emitted_at_ms') or 0))} [{style}]{state:<8}[/{style}] "
        f"run={escape(str(a.get('run_id')))} cause={escape(str(a.get('probable_cause')))} "
        f"{escape(str(a.get('title')))} "
        f"[dim]({escape(str(a.get('indicator')))} {a.get('observed')} vs {a.get('expected')}; "
        f"key={escape(str(a.get('dedup_key')))})[/dim]"
    )


def tail(
    kafka: KafkaSettings,
    topic: str,
    flt: TailFilter,
    emit: Callable[[object], None],
    *,
    from_beginning: bool = False,
    stop: threading.Event | None = None,
    max_alerts: int | None = None,
) -> int:
    """Follow a topic and call ``emit`` for each matching alert.

    Args:
        kafka: Kafka settings.
        topic: The alerts topic.
        flt: The filter.
        emit: Called with each matching Alert.
        from_beginning: Start at the earliest offset instead of the latest.
        stop: Set it to stop.
        max_alerts: Stop after this many alerts (None: never).

    Returns:
        How many alerts were emitted.

    """
    from runwatch.core.codec import DecodeError, load_codec

    codec = load_codec()
    stop = stop or threading.Event()
    consumer = BatchConsumer(
        kafka, f"runwatch-tail-{uuid.uuid4().hex[:12]}", [topic],
        extra={"auto.offset.reset": "earliest" if from_beginning else "latest"},
    )
    shown = 0
    try:
        while not stop.is_set():
            for msg in consumer.poll_batch(max_records=100, timeout=0.5):
                try:
                    alert = codec.decode(msg.value() or b"")
                except DecodeError as exc:
                    log.warning("offset %d: undecodable record: %s", msg.offset(), exc)
                    continue
                if flt.accepts(alert):
                    emit(alert)
                    shown += 1
                    if max_alerts is not None and shown >= max_alerts:
                        return shown
    finally:
        consumer.close()
    return shown
