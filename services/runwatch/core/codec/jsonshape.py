"""A small JSON Schema subset for the processor's internal JSON formats.

The internal topics and tables carry compact JSON that runwatch writes itself
(node aggregates, allocation changes, manifest refs, the re-keyers' indices, run
states, workload baselines). Their contracts live in ``schemas/internal/*.json``
as JSON Schema documents restricted to the keywords below, so any JSON Schema
tool reads them too; this validator needs no dependency:

``type`` (a name or a list of names: object, array, string, integer, number,
boolean, null), ``properties``, ``required``, ``additionalProperties`` (bool or
schema), ``items`` (a schema), ``prefixItems`` (schemas by position),
``minItems``, ``maxItems``, ``const``, ``enum``, ``minimum``, ``minLength``.
Other keywords are documentation (``title``, ``description``, ``examples``,
``x-version``, ``x-carried-by``) and are ignored by :func:`validate`.
"""

from __future__ import annotations

from typing import Any

KNOWN = frozenset({
    "type", "properties", "required", "additionalProperties", "items", "prefixItems",
    "minItems", "maxItems", "const", "enum", "minimum", "minLength",
    "$schema", "$id", "title", "description", "examples", "x-version", "x-carried-by",
})
_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,), "array": (list,), "string": (str,), "boolean": (bool,),
    "null": (type(None),), "integer": (int,), "number": (int, float),
}


def _is(value: Any, name: str) -> bool:
    if name in ("integer", "number") and isinstance(value, bool):
        return False
    return isinstance(value, _TYPES[name])


def check_schema(schema: Any, path: str = "$") -> list[str]:
    """Return what is wrong with a schema itself (unknown keywords, bad types); empty if fine."""
    if not isinstance(schema, dict):
        return [f"{path}: a schema must be a JSON object"]
    errors = [f"{path}: unsupported keyword {k!r}" for k in schema if k not in KNOWN]
    types = schema.get("type", [])
    for t in [types] if isinstance(types, str) else types:
        if t not in _TYPES:
            errors.append(f"{path}: unknown type {t!r}")
    for name, sub in (schema.get("properties") or {}).items():
        errors += check_schema(sub, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            errors += check_schema(schema[key], f"{path}.{key}")
    for i, sub in enumerate(schema.get("prefixItems") or []):
        errors += check_schema(sub, f"{path}[{i}]")
    return errors


def validate(value: Any, schema: dict[str, Any], path: str = "$") -> list[str]:
    """Return every way ``value`` breaks ``schema``, with JSON paths; empty when it conforms.

    Args:
        value: Parsed JSON.
        schema: A schema in the subset above.
        path: Where ``value`` sits (for the messages).

    Returns:
        Error messages such as ``$.run: expected string, got int``.

    """
    errors: list[str] = []
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else list(types)
        if not any(_is(value, t) for t in names):
            return [f"{path}: expected {' or '.join(names)}, got {type(value).__name__}"]
    if "const" in schema and value != schema["const"]:
        errors.append(f"{path}: expected {schema['const']!r}, got {value!r}")
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} is not one of {schema['enum']!r}")
    if "minimum" in schema and _is(value, "number") and value < schema["minimum"]:
        errors.append(f"{path}: {value!r} is below {schema['minimum']!r}")
    if "minLength" in schema and isinstance(value, str) and len(value) < schema["minLength"]:
        errors.append(f"{path}: shorter than {schema['minLength']}")
    if isinstance(value, dict):
        errors += _object(value, schema, path)
    if isinstance(value, list):
        errors += _array(value, schema, path)
    return errors


def _object(value: dict[str, Any], schema: dict[str, Any], path: str) -> list[str]:
    errors = [f"{path}: missing {k!r}" for k in schema.get("required", ()) if k not in value]
    props = schema.get("properties") or {}
    extra = schema.get("additionalProperties", True)
    for k, v in value.items():
        if k in props:
            errors += validate(v, props[k], f"{path}.{k}")
        elif extra is False:
            errors.append(f"{path}: unexpected {k!r}")
        elif isinstance(extra, dict):
            errors += validate(v, extra, f"{path}.{k}")
    return errors


def _array(value: list[Any], schema: dict[str, Any], path: str) -> list[str]:
    errors = []
    if "minItems" in schema and len(value) < schema["minItems"]:
        errors.append(f"{path}: fewer than {schema['minItems']} items")
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        errors.append(f"{path}: more than {schema['maxItems']} items")
    prefix = schema.get("prefixItems") or []
    for i, v in enumerate(value):
        sub = prefix[i] if i < len(prefix) else schema.get("items")
        if isinstance(sub, dict):
            errors += validate(v, sub, f"{path}[{i}]")
    return errors
