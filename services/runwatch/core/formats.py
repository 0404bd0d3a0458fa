"""The internal JSON formats (``schemas/internal/<Name>.vN.json``): load and check them.

The processor's internal topics and tables carry JSON that runwatch writes
and reads itself. Each format is a JSON Schema document (the subset of
:mod:`runwatch.core.codec.jsonshape`) named ``<Name>.v<version>`` and holding
``x-version`` (the ``"v"`` its records carry, where they carry one) and
``examples``. The topic map names the format of each internal topic that does
not carry Avro records, and of each table. ``runwatch schemas check`` runs
:func:`check_formats`; ``tests/contract/test_internal_formats.py`` checks
what the processor actually writes against the same documents.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from runwatch.core.codec.jsonshape import check_schema, validate
from runwatch.core.topics import TableSpec, TopicSpec

_NAME = re.compile(r"^(?P<name>[A-Za-z][A-Za-z0-9]*)\.v(?P<version>[1-9][0-9]*)$")


class FormatError(Exception):
    """A format file cannot be read or parsed."""


def default_formats_dir() -> Path:
    """Return the packaged ``schemas/internal`` folder."""
    from runwatch.resources import internal_formats_dir

    return internal_formats_dir()


def load_formats(folder: Path | None = None) -> dict[str, dict[str, Any]]:
    """Read every ``*.json`` of the folder: format name (file stem) → schema.

    Raises:
        FormatError: A file is not JSON or not a JSON object.

    """
    root = folder if folder is not None else default_formats_dir()
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(root.glob("*.json")):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            msg = f"internal format {path}: {exc}"
            raise FormatError(msg) from exc
        if not isinstance(doc, dict):
            msg = f"internal format {path}: not a JSON object"
            raise FormatError(msg)
        out[path.stem] = doc
    return out


def conforms(value: Any, fmt: dict[str, Any]) -> list[str]:
    """Return how a parsed JSON value breaks a format (empty: it conforms)."""
    return validate(value, fmt)


def check_formats(formats: dict[str, dict[str, Any]], topics: dict[str, TopicSpec],
                  tables: dict[str, TableSpec]) -> list[str]:
    """Return every problem of the internal formats and the map's references to them.

    Checks: each name is ``<Name>.v<N>`` and its ``x-version`` is N; each schema
    uses only the supported keywords and has at least one example, and every
    example conforms; every internal topic carries Avro records or names a
    format; every named format exists; every format is used by a topic or table.
    """
    problems: list[str] = []
    for name, fmt in formats.items():
        m = _NAME.match(name)
        if m is None:
            problems.append(f"format {name}: file name must be <Name>.v<N>.json")
        elif fmt.get("x-version") != int(m["version"]):
            problems.append(f"format {name}: x-version {fmt.get('x-version')!r} is not "
                            f"{m['version']} (the name's version)")
        problems += [f"format {name}: {e}" for e in check_schema(fmt)]
        examples = fmt.get("examples")
        if not isinstance(examples, list) or not examples:
            problems.append(f"format {name}: needs at least one example")
            continue
        for i, ex in enumerate(examples):
            problems += [f"format {name}: example {i}: {e}" for e in validate(ex, fmt)]
    used: set[str] = set()
    for spec in topics.values():
        if spec.format is not None:
            used.add(spec.format)
            if spec.format not in formats:
                problems.append(f"topic {spec.name}: format {spec.format} not found")
        elif spec.internal and not spec.records:
            problems.append(f"topic {spec.name}: internal topic with neither records nor format")
    for table in tables.values():
        used.add(table.format)
        if table.format not in formats:
            problems.append(f"table {table.name}: format {table.format} not found")
    problems += [f"format {name}: used by no topic or table" for name in formats
                 if name not in used]
    return problems
