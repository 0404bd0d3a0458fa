"""Request bodies for each receiver kind, built from an ``Alert`` record (pure).

Size: one body builder per receiver kind (five public APIs), each with the limits its API documents.

Shapes follow the public API documentation of each system:

- Alertmanager API v2 ``POST /api/v2/alerts``: a list of
  ``{labels, annotations, startsAt, endsAt, generatorURL}``.
- PagerDuty Events API v2 ``POST /v2/enqueue``: ``{routing_key, event_action,
  dedup_key, payload: {summary, source, severity, timestamp, component, group,
  class, custom_details}, links, client, client_url}``; a resolve carries only
  ``routing_key``, ``event_action`` and ``dedup_key``.
- Opsgenie Alert API: create ``POST /v2/alerts`` with ``{message, alias,
  description, tags, details, entity, source, priority}``; close
  ``POST /v2/alerts/{alias}/close?identifierType=alias`` with ``{source, note}``.
- Slack incoming webhook: ``{text, blocks}``.
- Generic webhook: ``{version, status, alert}``; the signature is added by the sender.

Every body is strict JSON (RFC 8259, :func:`json_bytes`): a non-finite number (the
``observed`` NaN of a ``rule:non_finite`` alert) is written as the string ``"NaN"``,
``"Infinity"`` or ``"-Infinity"``, as Protocol Buffers' JSON mapping does.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from runwatch.core.jsontext import json_text
from runwatch.core.paging.labels import bounded, label_set

ALERT_FIELDS = (
    "alert_id", "dedup_key", "status", "severity", "detector", "indicator", "observed",
    "expected", "score", "probable_cause", "evidence", "title", "summary", "team",
    "experiment_family", "node", "labels", "first_seen_ms", "last_seen_ms", "event_id",
    "run_id", "emitted_at_ms", "source", "seq", "owner",
)
PAGERDUTY_KEY_MAX = 255
"""PagerDuty's longest ``dedup_key`` (Events API v2)."""
OPSGENIE_ALIAS_MAX = 512
"""Opsgenie's longest alias and entity (Alert API)."""
OPSGENIE_TAG_MAX = 50
OPSGENIE_DETAILS_MAX = 8000
"""Opsgenie's limit on the details map, keys and values together (characters)."""
_PD_SEVERITY = {"critical": "critical", "warning": "warning", "info": "info", "error": "error"}
_OG_PRIORITY = {"critical": "P1", "error": "P2", "warning": "P3", "info": "P5"}
_SLACK_EMOJI = {
    "critical": ":red_circle:", "warning": ":large_orange_circle:", "info": ":information_source:"
}


def iso_ms(ms: int) -> str:
    """Format UTC epoch milliseconds as RFC 3339 with a ``Z``.

    Args:
        ms: UTC epoch milliseconds.

    Returns:
        e.g. ``2024-05-01T12:00:00.123Z``; a time past year 9999 (a silence stored
        for "99999999999d") is shown as ``9999-12-31T23:59:59.999Z``, one before
        year 1 as ``0001-01-01T00:00:00.000Z``.

    """
    try:
        when = datetime.fromtimestamp(ms / 1000, tz=UTC)
    except (ValueError, OverflowError, OSError):
        return "9999-12-31T23:59:59.999Z" if ms > 0 else "0001-01-01T00:00:00.000Z"
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def json_bytes(data: object, *, sort_keys: bool = False) -> bytes:
    """Serialise a request body (or a line of ``alerts tail --json``) as strict JSON.

    Args:
        data: JSON-ready data; other objects are written with ``str``.
        sort_keys: Sort object keys.

    Returns:
        Compact UTF-8 JSON with no NaN or Infinity literal (:mod:`runwatch.core.jsontext`).

    """
    return json_text(data, separators=(",", ":"), default=str, sort_keys=sort_keys).encode()


def alert_dict(alert: object) -> dict[str, Any]:
    """Turn an alert record into plain JSON-ready data.

    Args:
        alert: An ``Alert`` dataclass (or any object with its fields).

    Returns:
        Field name → value; evidence becomes a list of dicts.

    """
    if dataclasses.is_dataclass(alert) and not isinstance(alert, type):
        data = dataclasses.asdict(alert)
    else:
        data = {name: getattr(alert, name, None) for name in ALERT_FIELDS}
        data["evidence"] = [
            dataclasses.asdict(e) if dataclasses.is_dataclass(e) and not isinstance(e, type)
            else dict(vars(e))
            for e in (data.get("evidence") or [])
        ]
    for key, value in list(data.items()):
        if isinstance(value, bytes):
            data[key] = value.hex()
    return data


def investigation_query(run_id: str, database: str = "runwatch") -> str:
    """Return the SQL that starts an investigation of a run.

    Args:
        run_id: The run.
        database: The ClickHouse database.

    Returns:
        A SQL query over the run's alerts, newest first.

    """
    safe = run_id.replace("\\", "\\\\").replace("'", "\\'")
    return (
        f"SELECT * FROM {database}.alerts WHERE run_id = '{safe}' "  # noqa: S608 - escaped
        "ORDER BY ts DESC LIMIT 100"
    )


def investigation_url(template: str, run_id: str, database: str = "runwatch") -> str:
    """Fill the investigation URL template for a run.

    The template may use ``{run_id}``, ``{query}`` (URL-encoded SQL) and
    ``{query_b64}`` (base64 SQL, as ClickHouse's ``/play`` page reads after ``#``).

    Args:
        template: e.g. ``http://127.0.0.1:8123/play?user=analyst#{query_b64}``.
        run_id: The run.
        database: The ClickHouse database.

    Returns:
        The URL.

    """
    sql = investigation_query(run_id, database)
    return template.format(
        run_id=quote(run_id, safe=""),
        query=quote(sql, safe=""),
        query_b64=base64.b64encode(sql.encode()).decode(),
    )


def _evidence_lines(alert: Mapping[str, Any], limit: int = 5) -> list[str]:
    lines = []
    for ev in (alert.get("evidence") or [])[:limit]:
        line = (
            f"{ev.get('signal', '?')}/{ev.get('indicator', '?')}: observed {ev.get('observed')} "
            f"vs expected {ev.get('expected')} at {iso_ms(int(ev.get('at_ms') or 0))}"
        )
        if ev.get("detail"):
            line += f" ({ev['detail']})"
        lines.append(line)
    return lines


AM_LABEL_FIELDS = ("severity", "run_id", "probable_cause", "team", "experiment_family", "node",
                   "detector", "indicator", "dedup_key", "owner")
"""Alert fields that become Alertmanager labels (with ``labels`` and ``alertname``): the
identity Alertmanager knows an alert by. A pager keeps them as first sent while the alert
fires (``Pager._as_known``), so an update with a new cause and the resolve match it."""


AM_TTL_MIN_MS = 180_000
"""Least time a firing alert stays active in Alertmanager without a resend: three of the
pager's refresh rounds (one a minute). A receiver's ``repeat_interval`` of one minute gave
``endsAt = now + 1 min``, the refresh came a fraction of a second after it, and the alert
ended and started again in Alertmanager between refreshes."""


def alertmanager_alert(
    alert: object, now_ms: int, generator_url: str, ttl_ms: int
) -> dict[str, Any]:
    """Build one Alertmanager v2 alert.

    A firing alert gets ``endsAt = now + ttl`` (at least :data:`AM_TTL_MIN_MS`) so that
    Alertmanager keeps it active until the next repeat; a resolve sets ``endsAt = now``. See
    :func:`alertmanager_window` for ``startsAt`` and why both stamps always
    satisfy Alertmanager's ``startsAt <= endsAt``.

    Args:
        alert: The Alert record.
        now_ms: Current time.
        generator_url: Link to the investigation query.
        ttl_ms: How long a firing alert stays active without a resend.

    Returns:
        The alert object (post a list of these).

    """
    a = alert_dict(alert)
    labels: dict[str, str] = {
        str(k): str(v) for k, v in (a.get("labels") or {}).items() if v not in (None, "")
    }
    for key in AM_LABEL_FIELDS:
        if a.get(key) not in (None, ""):
            labels[key] = str(a[key])
    labels["alertname"] = str(a.get("detector") or a.get("indicator") or "runwatch")
    labels = label_set(labels)  # names and values Alertmanager takes, bounded (labels.py)
    starts, ends = alertmanager_window(
        int(a.get("first_seen_ms") or 0), a.get("status") == "resolved", now_ms,
        max(ttl_ms, AM_TTL_MIN_MS),
    )
    return {
        "labels": labels,
        "annotations": {
            "summary": str(a.get("title") or a.get("summary") or ""),
            "description": str(a.get("summary") or ""),
            "evidence": "\n".join(_evidence_lines(a)),
            "observed": str(a.get("observed")),
            "expected": str(a.get("expected")),
        },
        "startsAt": iso_ms(starts),
        "endsAt": iso_ms(ends),
        "generatorURL": generator_url,
    }


def alertmanager_window(
    first_seen_ms: int, resolved: bool, now_ms: int, ttl_ms: int
) -> tuple[int, int]:
    """Return ``(startsAt, endsAt)`` for an Alertmanager alert, in epoch ms.

    Alertmanager refuses (HTTP 400, "start time must be before end time") an
    alert whose ``endsAt`` precedes its ``startsAt``. ``first_seen_ms`` is the
    run's event time, ``now_ms`` the pager's clock: a replay, a backfill or a
    producer clock ahead of the pager puts the first on the far side of the
    second, and a resolve stamped ``now`` would then end before it started.
    So ``startsAt`` is the first sighting, but never later than now; a resolve
    ends now and a firing alert ``ttl_ms`` after now, both at or after
    ``startsAt`` whatever the two clocks say. Alertmanager identifies an alert
    by its labels alone, so a resolve (or a re-fire) whose ``startsAt`` differs
    from the one first sent still ends (or revives) the same alert.

    Args:
        first_seen_ms: The alert's first sighting (event time; 0 when unknown).
        resolved: Whether this is a resolve.
        now_ms: The pager's clock.
        ttl_ms: How long a firing alert stays active without a resend.

    Returns:
        ``(starts_ms, ends_ms)`` with ``starts_ms <= ends_ms``.

    """
    starts = min(first_seen_ms, now_ms) if first_seen_ms > 0 else now_ms
    return starts, (now_ms if resolved else now_ms + max(ttl_ms, 0))


def pagerduty_dedup_key(dedup_key: str) -> str:
    """Return the PagerDuty ``dedup_key`` of an alert: the same for its trigger and resolve.

    A key over 255 characters (a run id over 230) is shortened with
    :func:`~runwatch.core.paging.labels.bounded`, so it stays distinct per condition.

    Args:
        dedup_key: The alert's dedup key.

    Returns:
        At most 255 characters.

    """
    return bounded(dedup_key, PAGERDUTY_KEY_MAX)


def opsgenie_alias(dedup_key: str) -> str:
    """Return the Opsgenie alias of an alert: the same for its create and close.

    Args:
        dedup_key: The alert's dedup key.

    Returns:
        At most 512 characters (see :func:`pagerduty_dedup_key`).

    """
    return bounded(dedup_key, OPSGENIE_ALIAS_MAX)


def pagerduty_event(alert: object, routing_key: str, now_ms: int, link: str) -> dict[str, Any]:
    """Build a PagerDuty Events API v2 event (trigger or resolve).

    Args:
        alert: The Alert record.
        routing_key: The integration's routing key.
        now_ms: Current time.
        link: Link to the investigation query.

    Returns:
        The event body.

    """
    a = alert_dict(alert)
    key = pagerduty_dedup_key(str(a["dedup_key"]))
    if a.get("status") == "resolved":
        return {"routing_key": routing_key, "event_action": "resolve", "dedup_key": key}
    return {
        "routing_key": routing_key,
        "event_action": "trigger",
        "dedup_key": key,
        "payload": {
            "summary": str(a.get("title") or a.get("summary") or a["dedup_key"])[:1024],
            "source": str(a.get("node") or a.get("run_id") or "runwatch"),
            "severity": _PD_SEVERITY.get(str(a.get("severity")), "warning"),
            "timestamp": iso_ms(int(a.get("last_seen_ms") or now_ms)),
            "component": str(a.get("detector") or ""),
            "group": str(a.get("team") or ""),
            "class": str(a.get("probable_cause") or ""),
            "custom_details": {
                "run_id": a.get("run_id"),
                "probable_cause": a.get("probable_cause"),
                "owner": a.get("owner"),
                "indicator": a.get("indicator"),
                "observed": a.get("observed"),
                "expected": a.get("expected"),
                "score": a.get("score"),
                "summary": a.get("summary"),
                "evidence": _evidence_lines(a),
                "experiment_family": a.get("experiment_family"),
                "labels": a.get("labels") or {},
            },
        },
        "links": [{"href": link, "text": "Investigate the run"}],
        "client": "runwatch",
        "client_url": link,
    }


def opsgenie_create(alert: object) -> dict[str, Any]:
    """Build an Opsgenie create-alert body (alias = dedup key).

    Args:
        alert: The Alert record.

    Returns:
        The body for ``POST /v2/alerts``.

    """
    a = alert_dict(alert)
    tags = [bounded(f"{k}:{a[k]}", OPSGENIE_TAG_MAX)
            for k in ("severity", "probable_cause", "team", "owner") if a.get(k)]
    fields = [(k, str(a[k])) for k in ("run_id", "owner", "indicator", "detector", "observed",
                                        "expected", "score", "experiment_family", "node")
              if a.get(k) is not None]
    fields += [(f"label.{k}", str(v)) for k, v in (a.get("labels") or {}).items()]
    details: dict[str, str] = {}
    room = OPSGENIE_DETAILS_MAX
    for k, v in fields:  # in order, each value bounded, until the map's limit is reached
        key, value = bounded(k, 100), bounded(v, 1000)
        if len(key) + len(value) > room:
            break
        details[key] = value
        room -= len(key) + len(value)
    description = "\n".join([str(a.get("summary") or ""), "", *_evidence_lines(a)])
    return {
        "message": str(a.get("title") or a.get("summary") or a["dedup_key"])[:130],
        "alias": opsgenie_alias(str(a["dedup_key"])),
        "description": description[:15000],
        "tags": tags[:20],
        "details": details,
        "entity": bounded(str(a.get("run_id") or ""), OPSGENIE_ALIAS_MAX),
        "source": "runwatch",
        "priority": _OG_PRIORITY.get(str(a.get("severity")), "P3"),
    }


def opsgenie_close_path(alias: str) -> str:
    """Return the close path for an alias (query string included).

    Args:
        alias: The alert alias (:func:`opsgenie_alias` of the dedup key).

    Returns:
        ``/v2/alerts/<alias>/close?identifierType=alias`` with the alias escaped.

    """
    return f"/v2/alerts/{quote(alias, safe='')}/close?identifierType=alias"


def opsgenie_close(alert: object) -> dict[str, Any]:
    """Build an Opsgenie close body.

    Args:
        alert: The Alert record.

    Returns:
        The body for the close request.

    """
    a = alert_dict(alert)
    return {"source": "runwatch", "note": f"resolved: {a.get('summary') or a.get('title') or ''}"}


def slack_text(text: object) -> str:
    """Escape producer-written text for Slack's mrkdwn (``&``, ``<``, ``>``, as Slack asks).

    Unescaped, ``<!channel>`` or ``<@U123>`` in a run id or team would notify a whole
    channel or a person, and ``<http://x|y>`` would be a link.

    Args:
        text: The text.

    Returns:
        The escaped text.

    """
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_message(alert: object, link: str) -> dict[str, Any]:
    """Build a Slack incoming-webhook message (text fallback plus blocks).

    Every text that comes from the alert is escaped (:func:`slack_text`) and each block
    text kept within Slack's limits (header 150, field 2,000, section 3,000 characters).

    Args:
        alert: The Alert record.
        link: Link to the investigation query.

    Returns:
        The message body.

    """
    a = alert_dict(alert)
    e = slack_text
    resolved = a.get("status") == "resolved"
    icon = ":white_check_mark:" if resolved else _SLACK_EMOJI.get(str(a.get("severity")), "")
    state = "RESOLVED" if resolved else str(a.get("severity") or "").upper()
    raw_title = str(a.get("title") or a.get("dedup_key"))
    title = e(raw_title)
    run = a.get("run_id")
    detector = e(a.get("detector"))
    cause = e(a.get("probable_cause"))
    about = f"run {e(run)}" if run else f"objective {detector}"  # SLO alerts have no run
    text = f"{icon} [{state}] {title} ({about}, probable cause: {cause})"
    evidence = [e(line) for line in _evidence_lines(a)] or ["(no evidence attached)"]
    fields = [
        {"type": "mrkdwn", "text": f"*Probable cause*\n{cause}"[:2000]},
        {"type": "mrkdwn", "text": (f"*Run*\n`{e(run)}`" if run
                                    else f"*Objective*\n`{detector}`")[:2000]},
        {"type": "mrkdwn", "text": f"*Team*\n{e(a.get('team') or '-')}"[:2000]},
        {"type": "mrkdwn", "text": f"*Owner*\n{e(a.get('owner') or '-')}"[:2000]},
        {"type": "mrkdwn", "text": f"*Indicator*\n{e(a.get('indicator'))} "
                                   f"({a.get('observed')} vs {a.get('expected')})"[:2000]},
    ]
    context = (f"<{link}|Investigate the run> · `runwatch alerts tail --run {e(run)}`" if run
               else "`runwatch slo status`")
    return {
        "text": text,
        "blocks": [
            {"type": "header",
             "text": {"type": "plain_text", "text": f"[{state}] {raw_title}"[:150]}},
            {"type": "section", "text": {"type": "mrkdwn", "text": (
                e(a.get("summary") or "") or title)[:3000]}, "fields": fields},
            {"type": "section", "text": {"type": "mrkdwn", "text": (
                "*Evidence*\n" + "\n".join(f"• {line}" for line in evidence))[:3000]}},
            {"type": "context", "elements": [{"type": "mrkdwn", "text": context[:3000]}]},
        ],
    }


def webhook_body(alert: object) -> dict[str, Any]:
    """Build the generic webhook body.

    Args:
        alert: The Alert record.

    Returns:
        ``{"version": 1, "status": ..., "alert": {...}}``.

    """
    a = alert_dict(alert)
    return {"version": 1, "status": a.get("status"), "alert": a}
