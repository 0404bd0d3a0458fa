"""Range checks for Avro ``int`` (32-bit) and ``long`` (64-bit) values.

fastavro's schemaless writer does not validate: it writes any Python int into
an ``int`` field as a longer varint, which Java's decoder and cavro wrap to 32
bits while fastavro reads it back in full. The codec therefore refuses such
values on encode and dead-letters them on decode, with a checker built once
per record schema: nested closures that visit only the paths holding ``int``
(and, on request, ``long``) values (a generic validator walks every value). A
schema without such values gets no checker.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1

Check = Callable[[Any], None]
"""A compiled checker: returns None, or raises :class:`OutOfRange`."""

_BOUNDS = {"int": (INT_MIN, INT_MAX), "long": (LONG_MIN, LONG_MAX)}
_BITS = {"int": 32, "long": 64}


class OutOfRange(Exception):
    """An ``int``/``long`` value outside its Avro range.

    Attributes:
        path: Field path inside the record, e.g. ``gpus[].index``.
        kind: ``int`` or ``long``.
        value: The offending value.

    """

    def __init__(self, path: str, kind: str, value: Any) -> None:
        super().__init__(f"{kind} field {path} out of {_BITS[kind]}-bit range ({_show(value)})")
        self.path = path
        self.kind = kind
        self.value = value


def _show(value: Any) -> str:
    if isinstance(value, int) and value.bit_length() > 128:
        return f"a {value.bit_length()}-bit integer"
    return repr(value)[:40]


def _kind(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    if isinstance(schema, dict) and not schema.get("logicalType"):
        kind = schema.get("type")
        return kind if isinstance(kind, str) else ""
    return ""


def _union(value: Any, branches: tuple[Check, ...]) -> None:
    """Check a value against the complex branches of a union: it must fit one."""
    failure: OutOfRange | None = None
    for check in branches:
        try:
            check(value)
        except OutOfRange as exc:
            failure = failure or exc
        except (TypeError, KeyError, AttributeError):
            continue
        else:
            return
    if failure is not None:
        raise failure


def _scalar(kind: str, path: str, nullable: bool) -> Check:
    lo, hi = _BOUNDS[kind]

    def check(v: Any) -> None:
        if not lo <= v <= hi:
            raise OutOfRange(path, kind, v)

    def check_nullable(v: Any) -> None:
        if v is not None and not lo <= v <= hi:
            raise OutOfRange(path, kind, v)

    return check_nullable if nullable else check


class _Builder:
    """Builds a checker as nested closures that visit only ``int`` (and ``long``) paths."""

    def __init__(self, kinds: frozenset[str], tolerant: bool) -> None:
        self.kinds = kinds
        self.tolerant = tolerant
        self.named: dict[str, Any] = {}
        self.building: dict[str, list[Check]] = {}  # record name -> cell for recursion

    def build(self, schema: Any, path: str) -> Check | None:
        kind = _kind(schema)
        if kind in self.kinds:
            return _scalar(kind, path, nullable=self.tolerant)
        if isinstance(schema, list):
            return self.union(schema, path)
        if isinstance(schema, str):
            return self.reference(schema, path)
        if not isinstance(schema, dict):
            return None
        if kind == "record":
            return self.record(schema, path)
        if kind in ("array", "map"):
            return self.container(schema, kind, path)
        if isinstance(schema.get("type"), dict | list):
            return self.build(schema["type"], path)
        if "name" in schema:  # enum, fixed
            self.named[str(schema["name"])] = schema
        return None

    def reference(self, name: str, path: str) -> Check | None:
        cell = self.building.get(name)
        if cell is not None:  # a recursive record: check through its (later) checker
            def recurse(v: Any) -> None:
                if cell:
                    cell[0](v)

            return recurse
        schema = self.named.get(name)
        return None if schema is None else self.build(schema, path)

    def scalar_field(self, schema: Any) -> tuple[str, bool] | None:
        """(kind, None allowed) of a field that is a checked scalar or such a scalar or null."""
        kind = _kind(schema)
        if kind in self.kinds:
            return kind, self.tolerant
        if isinstance(schema, list):
            kinds = {_kind(b) for b in schema}
            if kinds <= {*_BOUNDS, "null"} and "null" in kinds:
                wide = "long" if "long" in kinds else "int"
                return (wide, True) if wide in self.kinds else None
        return None

    def record(self, schema: dict[str, Any], path: str) -> Check | None:
        name = str(schema.get("name", ""))
        self.named[name] = schema
        cell: list[Check] = []
        self.building[name] = cell
        prefix = f"{path}." if path else ""
        scalars = []  # checked inline: one call per record, not per field
        subs = []
        for field in schema["fields"]:
            fname, fpath = str(field["name"]), prefix + str(field["name"])
            plain = self.scalar_field(field["type"])
            if plain is not None:
                kind, nullable = plain
                scalars.append((fname, *_BOUNDS[kind], kind, fpath, nullable))
                continue
            sub = self.build(field["type"], fpath)
            if sub is not None:
                subs.append((fname, sub))
        del self.building[name]
        if not scalars and not subs:
            return None

        def check(d: Any) -> None:
            for fname, lo, hi, kind, fpath, nullable in scalars:
                v = d[fname]
                if (v is not None or not nullable) and not lo <= v <= hi:
                    raise OutOfRange(fpath, kind, v)
            for fname, sub in subs:
                sub(d[fname])

        def check_tolerant(d: Any) -> None:  # missing fields: fastavro writes their defaults
            for fname, lo, hi, kind, fpath, nullable in scalars:
                v = d.get(fname)
                if (v is not None or not nullable) and not lo <= v <= hi:
                    raise OutOfRange(fpath, kind, v)
            for fname, sub in subs:
                sub(d.get(fname))

        if self.tolerant:
            check = check_tolerant

        cell.append(check)
        return check

    def container(self, schema: dict[str, Any], kind: str, path: str) -> Check | None:
        sub = self.build(schema["items" if kind == "array" else "values"],
                         path + ("[]" if kind == "array" else "{}"))
        if sub is None:
            return None
        array, tolerant = kind == "array", self.tolerant

        def check(v: Any) -> None:
            if v is None and tolerant:
                return  # a missing field: fastavro writes its default
            for item in v if array else v.values():
                sub(item)

        return check

    def union(self, branches: list[Any], path: str) -> Check | None:
        kinds = [_kind(b) for b in branches]
        scalars = [k for k in kinds if k in _BOUNDS]
        wide = "long" if "long" in scalars else "int" if "int" in scalars else ""
        scalar = _scalar(wide, path, nullable=True) if wide in self.kinds else None
        others = [c for b, k in zip(branches, kinds, strict=True)
                  if k not in _BOUNDS and k != "null" and (c := self.build(b, path)) is not None]
        if not others:
            return scalar
        complex_ = tuple(others)

        def check(v: Any) -> None:
            if v is None or isinstance(v, bool | float | str | bytes):
                return
            if isinstance(v, int):
                if scalar is not None:
                    scalar(v)
                return
            _union(v, complex_)

        return check


def range_checker(schema: Any, longs: bool = False, tolerant: bool = False) -> Check | None:
    """Build a checker of a record schema's ``int`` (and ``long``) values.

    Args:
        schema: A record schema, JSON form or fastavro's parsed form (named
            types referenced by full name after their first definition).
        longs: Check ``long`` values against the signed 64-bit range too.
        tolerant: Read fields with ``dict.get`` and let every value be None
            (for data to encode, where fastavro fills in missing fields'
            defaults); otherwise the datum must be complete (decoded data).

    Returns:
        A function that takes a datum (the record as fastavro reads and writes
        it: nested records as dicts) and raises :class:`OutOfRange` for the
        first value outside its range; None when the schema holds no such
        values. A datum of the wrong shape may raise ``TypeError``,
        ``KeyError`` or ``AttributeError`` instead (a value of the wrong type,
        which fastavro's writer refuses anyway).

    """
    return _Builder(frozenset({"int", "long"} if longs else {"int"}), tolerant).build(schema, "")


def widen_ints(schema: Any) -> Any:
    """Return a copy of a (plain, JSON-form) schema with every ``int`` read as ``long``.

    ``int`` and ``long`` share the zig-zag varint encoding, so a body decodes the
    same under either, except that an ``int`` reader may wrap a value outside 32
    bits where the ``long`` reader returns it whole, for the range check to see.

    Args:
        schema: A schema in JSON form (no fastavro-private keys).

    Returns:
        The widened schema.

    """
    if schema == "int":
        return "long"
    if isinstance(schema, list):
        return [widen_ints(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    kind = schema.get("type")
    if kind == "int" and not schema.get("logicalType"):
        return {**schema, "type": "long"}
    if kind == "record":
        return {**schema, "fields": [{**f, "type": widen_ints(f["type"])}
                                     for f in schema["fields"]]}
    if kind == "array":
        return {**schema, "items": widen_ints(schema["items"])}
    if kind == "map":
        return {**schema, "values": widen_ints(schema["values"])}
    if isinstance(kind, list | dict):
        return {**schema, "type": widen_ints(kind)}
    return schema
