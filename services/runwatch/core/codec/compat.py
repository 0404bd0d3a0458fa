"""FULL_TRANSITIVE compatibility checks between schema versions.

Every version of a record must be readable by every other version, both ways:
a new reader must resolve data from any old writer and an old reader data from
any new writer. Within ``runwatch.v1`` that means fields are only added, and
only with defaults; fields are never removed; enum symbols are only added when
the enum has a default; field types only change along Avro's promotions.

Three checks run per pair of versions: a structural walk (removals, defaults,
enum symbols); a walk of each field's types by the Avro specification's
resolution rules, which visits every union branch, array item and map value
(:func:`_type_problems`); and a resolution test that writes sample data for each
field with one version and reads it with the other through fastavro. Each
violation names its field. Samples alone pick one union branch each (the first
and the last), so a change to a middle branch went through them.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import combinations
from typing import Any, Literal

from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.schema import expand_schema

from runwatch.core.codec.schemas import SchemaSet, SchemaVersion

Variant = Literal["min", "max"]
_PRIMITIVE_SAMPLES: dict[str, Any] = {
    "null": None,
    "boolean": True,
    "int": 7,
    "long": 7,
    "float": 1.5,
    "double": 1.5,
    "string": "s",
    "bytes": b"b",
}


@dataclass(frozen=True, slots=True)
class Violation:
    """One compatibility violation.

    Attributes:
        record: Avro full name of the top-level record.
        field: Dotted path of the offending field.
        writer_version: Version that wrote the data.
        reader_version: Version that read it.
        message: What is wrong.

    """

    record: str
    field: str
    writer_version: int
    reader_version: int
    message: str

    def __str__(self) -> str:
        """Return a one-line description naming the field."""
        return (
            f"{self.record} v{self.writer_version} writer -> v{self.reader_version} reader: "
            f"field {self.field!r}: {self.message}"
        )


def sample_datum(schema: Any, variant: Variant = "max") -> Any:
    """Build a datum that fits an expanded schema.

    Args:
        schema: Schema in JSON form with named types inlined (see ``expand_schema``).
        variant: ``min`` picks null branches, empty arrays and maps and the first
            enum symbol; ``max`` picks non-null branches, one element per
            collection and the last enum symbol.

    Returns:
        The datum.

    """
    if isinstance(schema, str):
        return _PRIMITIVE_SAMPLES[schema]
    if isinstance(schema, list):
        branch = schema[0] if variant == "min" else schema[-1]
        return sample_datum(branch, variant)
    kind = schema["type"]
    if kind == "array":
        return [] if variant == "min" else [sample_datum(schema["items"], variant)]
    if kind == "map":
        return {} if variant == "min" else {"k": sample_datum(schema["values"], variant)}
    if kind == "enum":
        return schema["symbols"][0 if variant == "min" else -1]
    if kind == "fixed":
        return b"\x00" * int(schema["size"])
    if kind == "record":
        return {f["name"]: sample_datum(f["type"], variant) for f in schema["fields"]}
    return sample_datum(kind, variant)


def _named(schema: Any, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield (path, schema) for every record and enum in an expanded schema."""
    if isinstance(schema, list):
        for branch in schema:
            yield from _named(branch, path)
    elif isinstance(schema, dict):
        kind = schema["type"]
        if kind == "array":
            yield from _named(schema["items"], path)
        elif kind == "map":
            yield from _named(schema["values"], path)
        elif kind in ("record", "enum"):
            yield path, schema
            for f in schema.get("fields", []):
                yield from _named(f["type"], f"{path}.{f['name']}" if path else f["name"])


def _structural(writer: Any, reader: Any, upgrade: bool) -> Iterator[tuple[str, str]]:
    """Yield (field path, message) for structural problems reading writer data.

    Field additions and removals are judged on the upgrade direction (older
    writer, newer reader) only, so each is reported once; enums both ways.
    """
    reader_types = {s["name"]: s for _, s in _named(reader, "")}
    for path, w in _named(writer, ""):
        r = reader_types.get(w["name"])
        if r is None:
            continue
        if w["type"] == "enum" and r["type"] == "enum":
            missing = [s for s in w["symbols"] if s not in r["symbols"]]
            if missing and "default" not in r:
                yield path or w["name"], f"enum symbols {missing} unknown to reader without default"
            continue
        if w["type"] != "record" or r["type"] != "record" or not upgrade:
            continue
        w_fields = {f["name"] for f in w["fields"]}
        r_fields = {f["name"]: f for f in r["fields"]}
        for name in sorted(w_fields - set(r_fields)):
            yield _join(path, name), "field removed (removals are not allowed in v1)"
        for name, f in r_fields.items():
            if name not in w_fields and "default" not in f:
                yield _join(path, name), "field added without a default"


_PROMOTIONS: dict[str, frozenset[str]] = {
    "int": frozenset({"long", "float", "double"}),
    "long": frozenset({"float", "double"}),
    "float": frozenset({"double"}),
    "string": frozenset({"bytes"}),
    "bytes": frozenset({"string"}),
}
"""Writer primitive -> the other reader primitives it resolves to (Avro's promotions)."""


def _kind(schema: Any) -> str:
    return schema if isinstance(schema, str) else "union" if isinstance(schema, list) \
        else str(schema["type"])


def _short(schema: Any) -> str:
    """Name a type in a message: a primitive, ``array``/``map``, or a named type's name."""
    if isinstance(schema, list):
        return "[" + ", ".join(_short(b) for b in schema) + "]"
    if isinstance(schema, dict) and "name" in schema:
        return f"{schema['type']} {str(schema['name']).rsplit('.', 1)[-1]}"
    return _kind(schema)


def _matches(writer: Any, reader: Any) -> bool:
    """Whether Avro picks this reader union branch for a writer type (kind, name, promotion)."""
    w, r = _kind(writer), _kind(reader)
    if w in ("record", "enum", "fixed"):
        return w == r and str(writer["name"]).rsplit(".", 1)[-1] \
            == str(reader["name"]).rsplit(".", 1)[-1]
    return w == r or r in _PROMOTIONS.get(w, ())


def _type_problems(writer: Any, reader: Any, path: str) -> Iterator[tuple[str, str]]:
    """Yield (field path, message) where data of ``writer`` cannot resolve to ``reader``.

    Avro's resolution rules over expanded schemas, every branch of every union
    included: a writer union resolves when each of its branches does; a reader
    union takes a writer type through its first matching branch. Enum symbols
    and field defaults are the structural walk's (:func:`_structural`).
    """
    if isinstance(writer, list):
        for branch in writer:
            yield from _type_problems(branch, reader, path)
        return
    if isinstance(reader, list):
        branch = next((b for b in reader if _matches(writer, b)), None)
        if branch is None:
            yield path, (f"writer type {_short(writer)} has no branch in the reader's union "
                         f"{_short(reader)}")
        else:
            yield from _type_problems(writer, branch, path)
        return
    if not _matches(writer, reader):
        yield path, f"writer type {_short(writer)} does not resolve to {_short(reader)}"
        return
    kind = _kind(writer)
    if kind == "array":
        yield from _type_problems(writer["items"], reader["items"], path)
    elif kind == "map":
        yield from _type_problems(writer["values"], reader["values"], path)
    elif kind == "fixed" and writer["size"] != reader["size"]:
        yield path, f"fixed size {writer['size']} read as size {reader['size']}"
    elif kind == "record":
        w_fields = {f["name"]: f for f in writer["fields"]}
        for f in reader["fields"]:
            if f["name"] in w_fields:
                yield from _type_problems(w_fields[f["name"]]["type"], f["type"],
                                          _join(path, f["name"]))


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _resolves(field_w: dict[str, Any], field_r: dict[str, Any], name: str) -> str | None:
    """Return why data of one field does not resolve, or None when it does."""
    w = parse_schema({"type": "record", "name": name, "fields": [field_w]}, named_schemas={})
    r = parse_schema({"type": "record", "name": name, "fields": [field_r]}, named_schemas={})
    for variant in ("min", "max"):
        datum = {field_w["name"]: sample_datum(field_w["type"], variant)}
        buf = io.BytesIO()
        try:
            schemaless_writer(buf, w, datum)
            buf.seek(0)
            schemaless_reader(buf, w, r)
        except Exception as exc:
            return f"{variant} sample does not resolve: {exc}"
    return None


def check_pair(writer: SchemaVersion, reader: SchemaVersion) -> list[Violation]:
    """Check that data written with ``writer`` reads with ``reader``.

    Args:
        writer: Version that writes.
        reader: Version that reads.

    Returns:
        The violations, empty when compatible.

    """
    w_exp: Any = expand_schema(writer.schema)
    r_exp: Any = expand_schema(reader.schema)

    def violation(field: str, message: str) -> Violation:
        return Violation(writer.name, field, writer.version, reader.version, message)

    upgrade = writer.version < reader.version
    out = [violation(f, m) for f, m in _structural(w_exp, r_exp, upgrade)]
    if w_exp.get("name") != r_exp.get("name"):
        out.append(violation("<record>", "record names differ"))
        return out
    r_fields = {f["name"]: f for f in r_exp["fields"]}
    for f in w_exp["fields"]:
        rf = r_fields.get(f["name"])
        if rf is None:
            continue
        typed = [violation(p, m) for p, m in _type_problems(f["type"], rf["type"], f["name"])]
        problem = None if typed else _resolves(f, rf, str(w_exp["name"]))
        out += typed if problem is None else [violation(f["name"], problem)]
    return out


def check_schema_set(schemas: SchemaSet) -> list[Violation]:
    """Check every pair of versions of every record, both ways (FULL_TRANSITIVE).

    Args:
        schemas: The schema set.

    Returns:
        Every violation found, empty when all versions are mutually compatible.

    """
    out: list[Violation] = []
    for name in sorted(schemas.current):
        for old, new in combinations(schemas.versions(name), 2):
            out.extend(check_pair(old, new))
            out.extend(check_pair(new, old))
    return out
