"""Loading the Avro schema set: every current schema plus every historical version.

Layout: ``<schema_dir>/<Name>.avsc`` holds the current version of each record;
``<schema_dir>/history/<Name>.v<N>.avsc`` holds earlier versions (oldest first by
``N``). Each file is one self-contained top-level record schema.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastavro import parse_schema
from fastavro.schema import to_parsing_canonical_form

from runwatch.core.codec.crc64 import fingerprint_bytes

SCHEMA_DIR_ENV = "RUNWATCH_SCHEMA_DIR"
_HISTORY_NAME = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)\.v(?P<version>\d+)\.avsc$")


class SchemaLoadError(Exception):
    """A schema file is missing, malformed or inconsistent with the others."""


@dataclass(frozen=True, slots=True)
class SchemaVersion:
    """One version of one record schema.

    Attributes:
        name: Avro full name, e.g. ``runwatch.v1.LearningStep``.
        version: Version number; historical files carry it in their name, the
            current schema is one above the newest historical version.
        current: True for the schema in ``schemas/avro/`` itself.
        path: File the schema was read from.
        schema: The schema as JSON (dict), unparsed.
        canonical: Parsing Canonical Form.
        fingerprint: CRC-64-AVRO of ``canonical``, 8 bytes little-endian.
        parsed: fastavro's parsed schema, ready for the schemaless reader/writer.

    """

    name: str
    version: int
    current: bool
    path: Path
    schema: dict[str, Any]
    canonical: str
    fingerprint: bytes
    parsed: Any


@dataclass(frozen=True, slots=True)
class SchemaSet:
    """Every known schema version, by name and by fingerprint.

    Attributes:
        current: Avro full name -> current version.
        history: Avro full name -> earlier versions, oldest first.

    """

    current: dict[str, SchemaVersion]
    history: dict[str, tuple[SchemaVersion, ...]]

    def versions(self, name: str) -> tuple[SchemaVersion, ...]:
        """Return every version of a record, oldest first, current last.

        Args:
            name: Avro full name.

        Returns:
            The versions.

        """
        return (*self.history.get(name, ()), self.current[name])

    def all_versions(self) -> list[SchemaVersion]:
        """Return every version of every record.

        Returns:
            Historical and current versions, grouped by record name.

        """
        return [v for name in sorted(self.current) for v in self.versions(name)]


def default_schema_dir() -> Path:
    """Return the schema directory: ``$RUNWATCH_SCHEMA_DIR`` or the packaged one.

    Returns:
        ``$RUNWATCH_SCHEMA_DIR`` when set, else the ``schemas/avro`` folder shipped
        in the package (see :mod:`runwatch.resources`).

    """
    from runwatch.resources import avro_schema_dir

    return avro_schema_dir()


def _read(path: Path, version: int, current: bool) -> SchemaVersion:
    try:
        schema = json.loads(path.read_text(encoding="utf-8"))
        parsed: Any = parse_schema(schema)
        canonical = to_parsing_canonical_form(schema)
    except Exception as exc:
        msg = f"cannot load schema {path}: {exc}"
        raise SchemaLoadError(msg) from exc
    if not isinstance(schema, dict) or schema.get("type") != "record":
        msg = f"{path}: top-level schema must be a record"
        raise SchemaLoadError(msg)
    name = str(parsed["name"])
    return SchemaVersion(
        name=name,
        version=version,
        current=current,
        path=path,
        schema=schema,
        canonical=canonical,
        fingerprint=fingerprint_bytes(canonical),
        parsed=parsed,
    )


def load_schema_set(schema_dir: Path | None = None) -> SchemaSet:
    """Read every current and historical schema.

    Args:
        schema_dir: Directory with the ``.avsc`` files; default
            :func:`default_schema_dir`.

    Returns:
        The schema set.

    Raises:
        SchemaLoadError: A file is malformed, a name is defined twice, a
            historical schema has no current version, or the directory holds none.

    """
    root = schema_dir if schema_dir is not None else default_schema_dir()
    if not root.is_dir():
        msg = f"schema directory {root} does not exist (set {SCHEMA_DIR_ENV})"
        raise SchemaLoadError(msg)
    history: dict[str, list[SchemaVersion]] = {}
    hist_dir = root / "history"
    for path in sorted(hist_dir.glob("*.avsc")) if hist_dir.is_dir() else []:
        match = _HISTORY_NAME.match(path.name)
        if match is None:
            msg = f"{path}: history files are named <Name>.v<N>.avsc"
            raise SchemaLoadError(msg)
        sv = _read(path, int(match["version"]), current=False)
        if sv.name.rsplit(".", 1)[-1] != match["name"]:
            msg = f"{path}: file name does not match record name {sv.name}"
            raise SchemaLoadError(msg)
        history.setdefault(sv.name, []).append(sv)
    current: dict[str, SchemaVersion] = {}
    for path in sorted(root.glob("*.avsc")):
        name_versions = history.get(_peek_name(path), [])
        latest = max((v.version for v in name_versions), default=0)
        sv = _read(path, latest + 1, current=True)
        if sv.name in current:
            msg = f"{path}: record {sv.name} already defined in {current[sv.name].path}"
            raise SchemaLoadError(msg)
        current[sv.name] = sv
    if not current:  # the parent folder, a typo: checking nothing said "ok: 0 records"
        msg = f"schema directory {root} holds no schema (*.avsc)"
        raise SchemaLoadError(msg)
    orphans = sorted(set(history) - set(current))
    if orphans:
        msg = f"historical schemas without a current version (removal is not allowed): {orphans}"
        raise SchemaLoadError(msg)
    return SchemaSet(
        current=current,
        history={k: tuple(sorted(v, key=lambda s: s.version)) for k, v in history.items()},
    )


def _peek_name(path: Path) -> str:
    try:
        schema = json.loads(path.read_text(encoding="utf-8"))
        name = str(schema["name"])
        ns = schema.get("namespace")
    except (OSError, ValueError, TypeError, KeyError) as exc:
        msg = f"cannot load schema {path}: {exc}"
        raise SchemaLoadError(msg) from exc
    return name if "." in name or not ns else f"{ns}.{name}"
