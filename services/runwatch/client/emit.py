"""Records from scheduler hooks and scripts (``runwatch emit``).

JSON lines: one object per line with ``"type"`` (a record name such as
``JobEvent``, ``runwatch.v1.JobEvent`` or ``job-state``) and the record's
fields. ``event_id``, ``seq``, ``source`` and ``emitted_at_ms`` are filled in
when absent (giving ``event_id`` makes a re-run idempotent downstream).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from runwatch.adapters.publisher import Publisher, default_topics, record_key
from runwatch.core.records import RECORD_TYPES

logger = logging.getLogger(__name__)

ALIASES: dict[str, str] = {
    "job-state": "JobEvent",
    "job_state": "JobEvent",
    "job": "JobEvent",
    "step-timing": "StepTiming",
    "checkpoint": "CheckpointEvent",
    "node-sample": "NodeSample",
    "manifest": "RunManifest",
    "data-quality": "DataQualityReport",
    "artifact": "ArtifactEvent",
    "gate": "GateDecision",
    "validation": "ValidationResult",
    "learning-step": "LearningStep",
}
_STAMP = ("event_id", "seq", "source", "emitted_at_ms")


@dataclass
class EmitResult:
    """Outcome of a bulk emit."""

    published: int = 0
    errors: list[str] = field(default_factory=list)


def record_class(name: str) -> type[Any]:
    """Resolve a record type name.

    Args:
        name: ``JobEvent``, ``runwatch.v1.JobEvent`` or an alias like ``job-state``.

    Returns:
        The record class.

    Raises:
        ValueError: Unknown or not producible here.

    """
    short = ALIASES.get(name, name.rsplit(".", 1)[-1])
    if short not in default_topics():
        msg = f"unknown record type {name!r} (known: {', '.join(sorted(default_topics()))})"
        raise ValueError(msg)
    return RECORD_TYPES[f"runwatch.v1.{short}"]


def build_record(publisher: Publisher, obj: Mapping[str, Any]) -> Any:
    """Build a stamped record from a JSON object.

    Args:
        publisher: Gives the stamp fields.
        obj: ``{"type": ..., field: value, ...}``.

    Returns:
        The record.

    Raises:
        ValueError: Missing type, unknown fields, missing or bad values.

    """
    if not isinstance(obj, Mapping):
        msg = "a line must hold a JSON object"
        raise ValueError(msg)
    if "type" not in obj:
        msg = "missing 'type'"
        raise ValueError(msg)
    cls = record_class(str(obj["type"]))
    fields = {f.name for f in dataclasses.fields(cls)}
    data = {k: v for k, v in obj.items() if k != "type"}
    unknown = sorted(set(data) - fields)
    if unknown:
        msg = f"unknown field(s) for {cls.__name__}: {', '.join(unknown)}"
        raise ValueError(msg)
    meta = publisher.meta(data.get("emitted_at_ms"), seq=0)
    meta["source"] = meta["source"].to_dict()
    merged = {**meta, **{k: v for k, v in data.items() if v is not None or k not in _STAMP}}
    try:
        rec = cls.from_dict(merged)
    except KeyError as exc:
        msg = f"missing field {exc.args[0]!r} for {cls.__name__}"
        raise ValueError(msg) from exc
    except (TypeError, ValueError, AttributeError) as exc:
        msg = f"bad value for {cls.__name__}: {exc}"
        raise ValueError(msg) from exc
    return rec


def emit_records(publisher: Publisher, objs: Iterable[Mapping[str, Any]]) -> EmitResult:
    """Validate, encode and hand over records one by one.

    Args:
        publisher: Where they go.
        objs: JSON objects.

    Returns:
        Counts and per-record errors.

    """
    res = EmitResult()
    for n, obj in enumerate(objs, 1):
        _emit_one(publisher, obj, f"record {n}", res)
    return res


def _emit_one(publisher: Publisher, obj: Any, where: str, res: EmitResult) -> None:
    try:
        rec = build_record(publisher, obj)
        publisher.codec.encode(rec)  # validate before taking a sequence number
        rec = dataclasses.replace(rec, seq=publisher.next_seq())
        value = publisher.codec.encode(rec)
    except Exception as exc:
        reason = getattr(exc, "reason", None) or str(exc)
        res.errors.append(f"{where}: {reason}")
        return
    publisher.transport.produce(publisher.topic_for(rec), record_key(rec), value)
    res.published += 1


def emit_lines(publisher: Publisher, lines: Iterable[str]) -> EmitResult:
    """Emit JSON lines; bad lines are reported with their line number.

    Args:
        publisher: Where records go.
        lines: Text lines (blank lines and ``#`` comments are skipped).

    Returns:
        Counts and ``line N: reason`` errors.

    """
    res = EmitResult()
    for n, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            res.errors.append(f"line {n}: invalid JSON: {exc.msg} at column {exc.colno}")
            continue
        _emit_one(publisher, obj, f"line {n}", res)
    return res
