"""Where a value does not fit an Avro schema, named by its field path.

fastavro's writer says what went wrong but not always where (``must be real
number, not str on field metrics on field metrics``), and the records'
``from_dict`` fails before it on a value of the wrong kind (``'int' object has
no attribute 'get'`` for an ``"allocation": 5``). :func:`misfit` walks a value
(a JSON object given to ``runwatch emit``, or a record's ``to_dict()``) against
its schema and names the first field that does not fit, an unknown key of a
nested record, or a key that is not text. :func:`epoch_problem` names an
instant given in epoch seconds, or micro- or nanoseconds, where the schema says
milliseconds.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

_KINDS = {"int": "an integer", "long": "an integer", "float": "a number", "double": "a number",
          "string": "a string", "boolean": "true or false", "bytes": "bytes", "fixed": "bytes",
          "array": "an array", "map": "an object", "record": "an object", "null": "null",
          "enum": "a string"}
EPOCH_MS_DOC = "UTC epoch milliseconds"
"""What a schema field's doc says of an instant in epoch milliseconds (``deadline_ms``)."""


def show(value: Any) -> str:
    """Return a value as JSON (80 characters at most), else its repr."""
    try:
        return json.dumps(value)[:80]
    except (TypeError, ValueError):
        return repr(value)[:80]


def _resolve(schema: Any, named: Mapping[str, Any]) -> Any:
    if isinstance(schema, str) and schema in named:
        return named[schema]
    return schema


def _type(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    if isinstance(schema, list):
        return "union"
    kind = schema.get("type")
    return kind if isinstance(kind, str) else "union"


def kind_of(schema: Any, named: Mapping[str, Any]) -> str:
    """Say what a schema holds: ``an integer``, ``an object``, ``null or a string``..."""
    schema = _resolve(schema, named)
    if isinstance(schema, list):
        return " or ".join(kind_of(b, named) for b in schema)
    t = _type(schema)
    if isinstance(schema, dict) and isinstance(schema.get("type"), dict | list):
        return kind_of(schema["type"], named)
    return _KINDS.get(t, t)


def _name(path: str) -> str:
    return path or "value"


def key_problem(value: Mapping[Any, Any], path: str = "") -> str | None:
    """Return why an object's keys cannot be field names or map keys (one is no text)."""
    for k in value:
        if not isinstance(k, str):
            where = f" in {path}" if path else ""
            return f"a field name{where} is {show(k)}, not a string"
    return None


def misfit(schema: Any, value: Any, path: str = "", named: Mapping[str, Any] | None = None,
           ) -> str | None:
    """Return why ``value`` does not fit ``schema`` (naming the field path), or None.

    Only the kind of each value is judged (an integer where ``int`` is due, an
    object where a record or map is): ranges are the range checker's, and a
    number for an ``int`` field passes (whether it is whole is said where it is
    taken). A record's absent fields pass (defaults, or a missing-field error
    elsewhere); its unknown keys do not.

    Args:
        schema: A parsed Avro schema (or a part of one).
        value: The value: JSON-like (dicts, lists, text, numbers, None).
        path: The value's field path, e.g. ``allocation.nodes``.
        named: Named types (the parsed schema's ``__named_schemas``).

    Returns:
        ``field allocation is 5, not an object``, ``unknown field(s) in
        allocation: gpus``, ``a field name is 1, not a string``..., or None.
    """
    named = named if named is not None else (
        schema.get("__named_schemas", {}) if isinstance(schema, dict) else {})
    schema = _resolve(schema, named)
    if isinstance(schema, dict) and isinstance(schema.get("type"), dict | list):
        schema = schema["type"]  # {"type": {...}}
    t = _type(schema)
    if t == "union":
        branches = [_resolve(b, named) for b in schema]
        if value is None and "null" in branches:
            return None
        live = [b for b in branches if b != "null"]
        if len(live) == 1:
            return misfit(live[0], value, path, named)
        if any(misfit(b, value, path, named) is None for b in live):
            return None
        return f"field {_name(path)} is {show(value)}, not {kind_of(schema, named)}"
    fits = _SCALARS.get(t)
    if fits is not None:
        if fits(value):
            return None
        return f"field {_name(path)} is {show(value)}, not {_KINDS[t]}"
    if t == "enum":
        if isinstance(value, str) and value in schema.get("symbols", ()):
            return None
        return (f"field {_name(path)} is {show(value)}, not one of "
                f"{', '.join(schema.get('symbols', ()))}")
    if t == "array":
        if not isinstance(value, list | tuple):
            return f"field {_name(path)} is {show(value)}, not an array"
        for i, item in enumerate(value):
            why = misfit(schema["items"], item, f"{_name(path)}[{i}]", named)
            if why is not None:
                return why
        return None
    if t in ("map", "record"):
        if not isinstance(value, Mapping):
            return f"field {_name(path)} is {show(value)}, not an object"
        bad_key = key_problem(value, path)
        if bad_key is not None:
            return bad_key
        if t == "map":
            for k, v in value.items():
                why = misfit(schema["values"], v, f"{path}.{k}" if path else k, named)
                if why is not None:
                    return why
            return None
        fields = {f["name"]: f["type"] for f in schema["fields"]}
        unknown = sorted(set(value) - set(fields))
        if unknown:
            return f"unknown field(s) in {_name(path)}: {', '.join(unknown)}"
        for k, v in value.items():
            why = misfit(fields[k], v, f"{path}.{k}" if path else k, named)
            if why is not None:
                return why
    return None


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


_SCALARS = {
    "null": lambda v: v is None,
    "boolean": lambda v: isinstance(v, bool),
    "int": _number,
    "long": _number,
    "float": _number,
    "double": _number,
    "string": lambda v: isinstance(v, str),
    "bytes": lambda v: isinstance(v, bytes | bytearray | str),
    "fixed": lambda v: isinstance(v, bytes | bytearray),
}


def _year(ms: int) -> int:
    return datetime.fromtimestamp(ms / 1000, UTC).year


def epoch_problem(schema: Any, datum: Mapping[str, Any], floor_ms: int, ceiling_ms: int,
                  named: Mapping[str, Any] | None = None, path: str = "") -> str | None:
    """Return why an instant of a record cannot be epoch milliseconds, or None.

    The instants are the fields whose doc says ``UTC epoch milliseconds``
    (``emitted_at_ms``, ``deadline_ms``, ``window_start_ms``...), in nested
    records (and arrays of them) too. One before ``floor_ms`` (2000) is epoch
    seconds (or garbage): a deadline in seconds is in January 1970, and the queue
    rule paged a job that started two minutes after it was queued. One after
    ``ceiling_ms`` (the store's last instant, in 2299) is micro- or nanoseconds:
    the store kept such a deadline and every query of its table failed. 0 stands
    for "unknown" (a ``deadline_ms`` of 0 disables the queue rule), except in
    ``emitted_at_ms``.

    Args:
        schema: The record's parsed schema.
        datum: The record as a dict (``to_dict()``).
        floor_ms: The earliest plausible instant.
        ceiling_ms: The latest instant that can be stored.
        named: Named types (default: the schema's own).
        path: The record's field path.

    Returns:
        ``deadline_ms 1800003600 is before 2000 (epoch seconds? give milliseconds)``,
        ``deadline_ms 1800003600000000 is after 2299, past what the store holds (micro-
        or nanoseconds? give milliseconds)``, or None.
    """
    named = named if named is not None else schema.get("__named_schemas", {})
    schema = _resolve(schema, named)
    for f in schema.get("fields", ()):
        name, value = f["name"], datum.get(f["name"])
        where = f"{path}.{name}" if path else name
        if EPOCH_MS_DOC in (f.get("doc") or ""):
            if not isinstance(value, int) or isinstance(value, bool):
                continue
            if value < floor_ms and (value != 0 or name == "emitted_at_ms"):
                return (f"{where} {value} is before {_year(floor_ms)} "
                        "(epoch seconds? give milliseconds)")
            if value > ceiling_ms:
                return (f"{where} {value} is after {_year(ceiling_ms)}, past what the store "
                        "holds (micro- or nanoseconds? give milliseconds)")
            continue
        for s in (f["type"] if isinstance(f["type"], list) else [f["type"]]):
            why = _nested_epoch(_resolve(s, named), value, floor_ms, ceiling_ms, named, where)
            if why is not None:
                return why
    return None


def _nested_epoch(schema: Any, value: Any, floor_ms: int, ceiling_ms: int,
                  named: Mapping[str, Any], where: str) -> str | None:
    """:func:`epoch_problem` of a record, or of each record of an array, held by a field."""
    if not isinstance(schema, dict):
        return None
    if schema.get("type") == "record" and isinstance(value, Mapping):
        return epoch_problem(schema, value, floor_ms, ceiling_ms, named, where)
    if schema.get("type") == "array" and isinstance(value, list | tuple):
        items = _resolve(schema["items"], named)
        for i, item in enumerate(value):
            why = _nested_epoch(items, item, floor_ms, ceiling_ms, named, f"{where}[{i}]")
            if why is not None:
                return why
    return None
