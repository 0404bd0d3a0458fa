"""Schema walking for the generator: named types, their modules, Python types and conversions."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from fastavro.schema import expand_schema

from runwatch.recordgen.layout import COMMON, MODULES

__all__ = [
    "GenerateError",
    "Named",
    "children",
    "collect",
    "default_text",
    "from_expr",
    "hint",
    "place",
    "short",
    "strip_null",
    "to_expr",
]

_PRIM = {"string": "str", "long": "int", "int": "int", "double": "float", "float": "float",
         "boolean": "bool", "bytes": "bytes"}


class GenerateError(Exception):
    """The schemas cannot be turned into record classes (unsupported shape, unplaced record)."""


@dataclass(frozen=True, slots=True)
class Named:
    """One record or enum found in the schemas."""

    name: str  # short name, the Python name
    full: str
    schema: dict[str, Any]
    files: tuple[str, ...]  # .avsc file names that define it


def short(full: str) -> str:
    """Return the last component of an Avro full name (the Python name)."""
    return full.rsplit(".", 1)[-1]


def children(t: Any) -> Iterable[dict[str, Any]]:
    """Yield the named types directly inside type ``t`` (through unions, arrays, maps)."""
    if isinstance(t, list):
        for b in t:
            yield from children(b)
    elif isinstance(t, dict):
        if t["type"] == "array":
            yield from children(t["items"])
        elif t["type"] == "map":
            yield from children(t["values"])
        elif t["type"] in ("record", "enum"):
            yield t


def collect(
    schemas: Mapping[str, dict[str, Any]],
) -> tuple[dict[str, Named], dict[str, list[str]]]:
    """Return every named type by short name, and each top-level record's post-order walk."""
    found: dict[str, Named] = {}
    walks: dict[str, list[str]] = {}
    for file, raw in sorted(schemas.items()):
        top: dict[str, Any] = cast("dict[str, Any]", expand_schema(raw))
        order: list[str] = []

        def visit(s: dict[str, Any], file: str = file, order: list[str] = order) -> None:
            name = short(s["name"])
            prev = found.get(name)
            if prev is not None and prev.schema != s:
                msg = f"{s['name']} is defined differently in {prev.files[0]} and {file}"
                raise GenerateError(msg)
            if prev is not None and prev.full != s["name"]:
                msg = f"two named types share the Python name {name}: {prev.full}, {s['name']}"
                raise GenerateError(msg)
            files = (*prev.files, file) if prev is not None else (file,)
            found[name] = Named(name, s["name"], s, tuple(sorted(set(files))))
            if name in order:
                return
            for f in s.get("fields", ()):
                for child in children(f["type"]):
                    visit(child)
            order.append(name)

        visit(top)
        walks[short(top["name"])] = order
    return found, walks


def place(found: dict[str, Named], walks: dict[str, list[str]]) -> dict[str, list[str]]:
    """Return module -> named types it defines, in definition order."""
    top_module = {rec: mod for mod, (_, recs) in MODULES.items() for rec in recs}
    missing = sorted(set(walks) - set(top_module))
    if missing:
        msg = (f"no module for record(s) {', '.join(missing)}: add them to MODULES in "
               "services/runwatch/recordgen/layout.py")
        raise GenerateError(msg)
    gone = sorted(set(top_module) - set(walks))
    if gone:
        msg = f"MODULES names record(s) with no schema: {', '.join(gone)}"
        raise GenerateError(msg)
    users: dict[str, set[str]] = {}
    for rec, order in walks.items():
        for name in order:
            users.setdefault(name, set()).add(top_module[rec])
    home = {n: (COMMON if len(m) > 1 else next(iter(m))) for n, m in users.items()}
    out: dict[str, list[str]] = {mod: [] for mod in MODULES}
    for _, recs in MODULES.values():
        for rec in recs:
            for name in walks[rec]:
                if name not in out[home[name]]:
                    out[home[name]].append(name)
    return out


# -- types, defaults, conversions -------------------------------------------------


def hint(t: Any) -> str:
    """Return the Python annotation of an Avro type, as text."""
    if isinstance(t, str):
        if t not in _PRIM:
            msg = f"unsupported Avro type {t!r}"
            raise GenerateError(msg)
        return _PRIM[t]
    if isinstance(t, list):
        if len(t) != 2 or t[0] != "null":
            msg = f"only [\"null\", T] unions are supported, not {t}"
            raise GenerateError(msg)
        return f"{hint(t[1])} | None"
    kind = t["type"]
    if kind == "array":
        return f"tuple[{hint(t['items'])}, ...]"
    if kind == "map":
        if not isinstance(t["values"], str):
            msg = f"only maps of primitives are supported, not {t}"
            raise GenerateError(msg)
        return f"dict[str, {hint(t['values'])}]"
    if kind in ("record", "enum"):
        return short(t["name"])
    if kind in _PRIM:  # {"type": "long"}
        return _PRIM[kind]
    msg = f"unsupported Avro type {t}"
    raise GenerateError(msg)


def strip_null(t: Any) -> Any:
    """Return a type without its ``null`` branch, and a plain ``{"type": prim}`` as ``prim``."""
    if isinstance(t, list):
        t = t[1]
    if isinstance(t, dict) and t["type"] in _PRIM:
        return t["type"]
    return t


def default_text(f: dict[str, Any]) -> str:
    """Return the Python default of a field (the text after ``= ``)."""
    value, base = f["default"], strip_null(f["type"])
    if value is None:
        return "None"
    if isinstance(base, dict) and base["type"] == "array":
        if value:
            msg = f"field {f['name']}: only [] is supported as an array default"
            raise GenerateError(msg)
        return "()"
    if isinstance(base, dict) and base["type"] == "map":
        if value:
            msg = f"field {f['name']}: only {{}} is supported as a map default"
            raise GenerateError(msg)
        return "field(default_factory=dict)"
    if isinstance(base, dict) and base["type"] == "record":
        msg = f"field {f['name']}: record defaults are not supported"
        raise GenerateError(msg)
    if base in ("double", "float"):
        return repr(float(value))
    if isinstance(value, bool) or isinstance(value, int):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    msg = f"field {f['name']}: unsupported default {value!r}"
    raise GenerateError(msg)


def from_expr(f: dict[str, Any]) -> str:
    """Return the ``from_dict`` expression of one field."""
    name, t = f["name"], f["type"]
    base = strip_null(t)
    if "default" in f:
        d = default_text(f)
        got = f'd.get("{name}", {"{}" if d.startswith("field(") else d})'
    else:
        got = f'd["{name}"]'
    if isinstance(base, dict) and base["type"] == "record":
        cls = short(base["name"])
        if isinstance(t, list):
            src = got if "default" in f else f'd["{name}"]'
            return f"None if (v := {src}) is None else {cls}.from_dict(v)"
        return f"{cls}.from_dict({got})"
    if isinstance(base, dict) and base["type"] == "array":
        item = strip_null(base["items"])
        conv = ""
        if isinstance(item, dict) and item["type"] == "record":
            conv = f"[{short(item['name'])}.from_dict(x) for x in {got}]"
        elif not isinstance(item, str) and item["type"] != "enum":
            msg = f"field {name}: arrays of {item['type']} are not supported"
            raise GenerateError(msg)
        expr = f"tuple({conv or got})"
        return f"None if (v := {got}) is None else tuple(v)" if isinstance(t, list) else expr
    return got


def to_expr(f: dict[str, Any]) -> str:
    """Return the ``to_dict`` expression of one field."""
    name, t = f["name"], f["type"]
    base = strip_null(t)
    if isinstance(base, dict) and base["type"] == "record":
        if isinstance(t, list):
            return f"None if self.{name} is None else self.{name}.to_dict()"
        return f"self.{name}.to_dict()"
    if isinstance(base, dict) and base["type"] == "array":
        item = strip_null(base["items"])
        if isinstance(item, dict) and item["type"] == "record":
            if isinstance(t, list):
                msg = f"field {name}: nullable arrays of records are not supported"
                raise GenerateError(msg)
            return f"[x.to_dict() for x in self.{name}]"
    return f"self.{name}"
