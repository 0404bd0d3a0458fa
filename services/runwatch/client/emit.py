"""Records from scheduler hooks and scripts (``runwatch emit``).

JSON lines: one object per line with ``"type"`` (a record name such as
``JobEvent``, ``runwatch.v1.JobEvent`` or ``job-state``) and the record's
fields. ``event_id``, ``seq``, ``source`` and ``emitted_at_ms`` are filled in
when absent (giving ``event_id`` makes a re-run idempotent downstream).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import typing
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from runwatch.adapters.publisher import Publisher, default_topics, record_key
from runwatch.core import lineage
from runwatch.core.records import RECORD_TYPES, DataQualityReport, NodeSample, RunManifest
from runwatch.core.signals import rules
from runwatch.core.topics import load_topics

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
    "stage": "StageEvent",
    "artifact": "ArtifactEvent",
    "gate": "GateDecision",
    "validation": "ValidationResult",
    "learning-step": "LearningStep",
}
_STAMP = ("event_id", "seq", "source", "emitted_at_ms")
MAX_LINE_BYTES = 4 * 1024 * 1024
"""Longest line ``runwatch emit --stdin`` parses (a record is at most 1 MB encoded)."""


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
    data = {k: v for k, v in obj.items() if k != "type"}
    _check_fields(publisher, cls, data)
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
    why = None
    if data.get("event_id") is not None and not str(data["event_id"]).strip():
        why = "an empty event_id (consumers deduplicate by it)"
    elif cls.__name__ in run_keyed() and not str(getattr(rec, "run_id", "") or "").strip():
        msg = (f"{cls.__name__} needs a run_id: its topic is keyed by run, and the processor "
               "dead-letters a record that names no run")
        raise ValueError(msg)
    elif isinstance(rec, NodeSample) and not rec.node.strip():
        why = f"a blank node name {json.dumps(rec.node)} (its topic's key, the samples' node)"
    elif isinstance(rec, DataQualityReport):
        why = rules.report_problem(rec.dataset_uri, rec.row_count, rec.schema_failures,
                                   rec.duplicate_rows)
    if why is not None:
        msg = f"bad value for {cls.__name__}: {why}"
        raise ValueError(msg)
    if isinstance(rec, RunManifest):  # the producer fills the lineage hashes it left out
        lh, rg = lineage.hashes(rec.to_dict())
        rec = dataclasses.replace(rec, lineage_hash=lh, repeat_group=rg)
    _check_storable(rec, _schema(publisher, cls))
    return rec


def _schema(publisher: Publisher, cls: type[Any]) -> Any:
    """The current parsed Avro schema of a record class."""
    codec = getattr(publisher.codec, "codec", publisher.codec)  # a registry codec wraps one
    return codec.schemas.current[cls.AVRO_NAME].parsed


def _check_fields(publisher: Publisher, cls: type[Any], data: Mapping[str, Any]) -> None:
    """Refuse an unknown field (nested too) or a value of the wrong kind, naming it.

    ``"allocation": 5`` failed in ``from_dict`` (``'int' object has no attribute 'get'``),
    and ``"allocation": {"gpus_typo": 8}`` lost the key without a word. Null stamps pass.
    """
    from runwatch.core.codec import shape  # the codec package loads numpy: not at import

    why = shape.key_problem(data)  # before sorting names: 1 and "run_id" do not compare
    if why is not None:
        msg = f"bad value for {cls.__name__}: {why}"
        raise ValueError(msg)
    unknown = sorted(set(data) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
        msg = f"unknown field(s) for {cls.__name__}: {', '.join(unknown)}"
        raise ValueError(msg)
    _check_symbols(cls, data)
    schema = _schema(publisher, cls)
    types = {f["name"]: f["type"] for f in schema["fields"]}
    named = schema.get("__named_schemas", {})
    for name, value in data.items():
        if name not in types or value is None and name in _STAMP:
            continue
        why = shape.misfit(types[name], value, name, named)
        if why is not None:
            msg = f"bad value for {cls.__name__}: {why}"
            raise ValueError(msg)


def _check_storable(rec: Any, schema: Any) -> None:
    """Refuse a record the store cannot hold (an unsigned column given -1, say).

    Avro's int and long are signed: ``"attempt": -1`` or a GPU index of 300 (``UInt8``) is a
    valid record that the sink dead-letters at insert, while emit said "published". The
    sink's rules for every column (:func:`~runwatch.core.storage.rows.column_problem`), and
    an epoch-ms field before 2000 (seconds) or past the store's 2299 (micro- or nanoseconds:
    :func:`~runwatch.core.codec.shape.epoch_problem`; a replay may run ahead of the clock).
    """
    from runwatch.core.codec import shape
    from runwatch.core.storage.rows import Origin, RowError, column_problem, rows_for
    from runwatch.core.stream.eventtime import MAX_STORE_MS, MIN_EVENT_MS

    why = shape.epoch_problem(schema, rec.to_dict(), MIN_EVENT_MS, MAX_STORE_MS)
    if why is None:
        try:
            rows = rows_for(type(rec).AVRO_NAME, rec.to_dict(), Origin("emit", 0, 0))
        except RowError:  # a record type the sink does not store
            rows = []
        why = next((w for t, row in rows if (w := column_problem(t, row)) is not None), None)
    if why is not None:
        msg = f"the store cannot hold this {type(rec).__name__}: {why}"
        raise ValueError(msg)


@functools.cache
def run_keyed() -> frozenset[str]:
    """Return the short names of the records whose public topic is keyed by ``run_id``."""
    return frozenset(full.rsplit(".", 1)[-1] for spec in load_topics().values()
                     if spec.key == "run_id" and not spec.internal for full in spec.records)


_KINDS = ((bool, "true or false"), (int, "an integer"), (float, "a number"), (str, "a string"),
          (tuple, "an array"), (list, "an array"), (dict, "an object"))


def _kind(value: Any) -> str:
    return next((k for t, k in _KINDS if isinstance(value, t)), type(value).__name__)


@functools.cache
def _symbols(cls: type[Any]) -> dict[str, tuple[str, ...]]:
    """The enum fields of a record class: field name -> its symbols."""
    out: dict[str, tuple[str, ...]] = {}
    for name, hint in typing.get_type_hints(cls).items():
        args = [hint] if typing.get_origin(hint) is typing.Literal else typing.get_args(hint)
        for a in args:
            if typing.get_origin(a) is typing.Literal:
                out[name] = tuple(str(v) for v in typing.get_args(a))
    return out


def _check_symbols(cls: type[Any], data: Mapping[str, Any]) -> None:
    """Refuse a value an enum field does not know, naming the ones it does."""
    for name, known in _symbols(cls).items():  # type: ignore[arg-type]  # classes hash
        value = data.get(name)
        if value is not None and value not in known:
            msg = (f"unknown {name} {json.dumps(value)[:80]} for {cls.__name__} "
                   f"(known: {', '.join(known)})")
            raise ValueError(msg)


def _check_taken(obj: Mapping[str, Any], rec: Any) -> None:
    """Refuse a line whose values the record did not take as written (decoded back).

    Raises:
        ValueError: Naming the first such field, its value and what the field holds.
    """
    where = _mismatch({k: v for k, v in obj.items() if k != "type"}, rec.to_dict())
    if where is not None:
        path, given, kind = where
        msg = (f"bad value for {type(rec).__name__}: field {path} is "
               f"{json.dumps(given)[:80]}, not {kind}")
        raise ValueError(msg)


def _mismatch(given: Any, got: Any, path: str = "") -> tuple[str, Any, str] | None:
    """The first value of a JSON object that the record did not take as written.

    Building and encoding coerce (``tuple("n1")`` is ``("n", "1")``, an int field takes
    ``1.5`` as 1, ``true`` as 1), so the decoded record is compared with the line: only an
    integer for a float field may widen; text may be repaired (not UTF-8).

    Returns:
        ``(field path, value given, what the field holds)``, or None when all match.
    """
    if isinstance(given, Mapping):
        if not isinstance(got, Mapping):
            return (path or "value", given, _kind(got))
        for k, v in given.items():
            if k in got:
                where = _mismatch(v, got[k], f"{path}.{k}" if path else str(k))
                if where is not None:
                    return where
        return None
    name = path or "value"
    if given is None or got is None:
        return None if given is got else (name, given, _kind(got))
    if isinstance(given, list):
        if not isinstance(got, tuple | list) or len(got) != len(given):
            return (name, given, _kind(got))
        for i, (a, b) in enumerate(zip(given, got, strict=True)):
            where = _mismatch(a, b, f"{name}[{i}]")
            if where is not None:
                return where
        return None
    if isinstance(given, bool) or isinstance(got, bool):
        return None if type(given) is type(got) else (name, given, _kind(got))
    if isinstance(given, int) and isinstance(got, int | float) or (
            isinstance(given, float) and isinstance(got, float)):
        return None  # the same number, or an integer widened; NaN stays NaN
    if isinstance(given, str) and isinstance(got, str):
        return None
    return (name, given, _kind(got))


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
        publisher.encode_one(rec)  # validate (text, size) before taking a sequence number
        rec, value = publisher.encode_one(dataclasses.replace(rec, seq=publisher.next_seq()))
        _check_taken(obj, publisher.codec.decode(value))
    except Exception as exc:
        reason = getattr(exc, "reason", None) or str(exc)
        res.errors.append(f"{where}: {reason}")
        return
    publisher.transport.produce(publisher.topic_for(rec), record_key(rec), value)
    res.published += 1


def read_lines(stream: BinaryIO, max_bytes: int = MAX_LINE_BYTES) -> Iterator[bytes | None]:
    """Yield the lines of a binary stream; ``None`` for a line over ``max_bytes``.

    A line over the bound is read through (in pieces, never held whole) and
    stands as ``None`` so its number is kept.
    """
    while True:
        line = stream.readline(max_bytes + 1)
        if not line:
            return
        if len(line) <= max_bytes or line.endswith(b"\n") and len(line) == max_bytes + 1:
            yield line
            continue
        while line and not line.endswith(b"\n"):  # the rest of the long line
            line = stream.readline(1 << 20)
        yield None


def _comment(line: Any) -> bool:
    """Whether a line that is not UTF-8 text is a ``#`` comment."""
    if isinstance(line, bytes | bytearray | memoryview):
        line = bytes(line).decode("utf-8", "replace")
    return isinstance(line, str) and line.strip().startswith("#")


def _text(line: Any, max_bytes: int) -> str:
    """Return a line as text, or raise ValueError naming why it is refused."""
    if line is None:
        msg = f"line over {max_bytes} bytes, not parsed"
        raise ValueError(msg)
    if isinstance(line, bytearray | memoryview):
        line = bytes(line)
    if not isinstance(line, str | bytes):
        msg = (f"a line must be text or bytes, not {type(line).__name__} "
               "(emit_records takes objects)")
        raise ValueError(msg)
    raw = line
    if isinstance(line, str):  # text read with surrogateescape keeps bad bytes as surrogates
        try:
            raw = line.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            raw = line.encode("utf-8", "surrogatepass")
    assert isinstance(raw, bytes)  # noqa: S101 - for the type checker
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        msg = f"not UTF-8: byte 0x{raw[exc.start]:02x} at column {exc.start + 1}"
        raise ValueError(msg) from None


def emit_lines(publisher: Publisher, lines: Iterable[str | bytes | None],
               max_bytes: int = MAX_LINE_BYTES) -> EmitResult:
    """Emit JSON lines; bad lines are reported with their line number.

    Args:
        publisher: Where records go.
        lines: Lines as text or bytes (blank lines and ``#`` comments are
            skipped); ``None`` stands for a line too long to read
            (:func:`read_lines`).
        max_bytes: The line bound named in the error for a ``None`` line.

    Returns:
        Counts and ``line N: reason`` errors: invalid JSON, not UTF-8, too long,
        not an object, an unknown record type or field, a missing or bad value,
        a record over the size limit.

    """
    res = EmitResult()
    for n, line in enumerate(lines, 1):
        try:
            text = _text(line, max_bytes).strip()
        except ValueError as exc:
            if not _comment(line):  # a comment is skipped whatever its bytes
                res.errors.append(f"line {n}: {exc}")
            continue
        if not text or text.startswith("#"):
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            res.errors.append(f"line {n}: invalid JSON: {exc.msg} at column {exc.colno}")
            continue
        except RecursionError:
            res.errors.append(f"line {n}: invalid JSON: nested too deeply")
            continue
        _emit_one(publisher, obj, f"line {n}", res)
    return res
