"""The topic map (``schemas/topics.yaml``): key, records, partitions, retention."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

Cleanup = Literal["delete", "compact"]


class TopicMapError(Exception):
    """The topic map is missing or malformed."""


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """One topic of the map.

    Attributes:
        name: Topic name.
        key: Record field used as the message key; None for unkeyed topics.
        records: Avro full names of the records the topic carries.
        partitions: Partition count (run-keyed topics share ``run_partitions``).
        cleanup: ``delete`` (retention) or ``compact``.
        retention_ms: Retention in milliseconds; None for compacted topics.
        writer: Components that write the topic.
        readers: Components that read it.
        internal: True for processor-internal re-key topics.
        description: What the topic holds.
        format: Name of the internal JSON format it carries instead of (or beside) Avro
            records (``schemas/internal/<format>.json``), if any.

    """

    name: str
    key: str | None
    records: tuple[str, ...]
    partitions: int
    cleanup: Cleanup
    retention_ms: int | None
    writer: tuple[str, ...]
    readers: tuple[str, ...]
    internal: bool = False
    description: str = ""
    format: str | None = None

    def topic_config(self) -> dict[str, str]:
        """Return Kafka topic configs for creating the topic.

        Returns:
            ``cleanup.policy`` and, when set, ``retention.ms``.

        """
        conf: dict[str, str] = {"cleanup.policy": self.cleanup}
        if self.retention_ms is not None:
            conf["retention.ms"] = str(self.retention_ms)
        return conf


def default_topics_path() -> Path:
    """Return the topic map: ``$RUNWATCH_TOPICS_FILE`` or the packaged ``topics.yaml``.

    Returns:
        The path (see :mod:`runwatch.resources`).

    """
    from runwatch.resources import topics_file

    return topics_file()


def parse_topics(doc: Any) -> dict[str, TopicSpec]:
    """Build topic specs from the parsed YAML document.

    Args:
        doc: The YAML document as loaded.

    Returns:
        Topic name -> spec, in file order.

    Raises:
        TopicMapError: A required entry is missing or has the wrong type.

    """
    if not isinstance(doc, dict) or not isinstance(doc.get("topics"), dict):
        msg = "topic map needs a 'topics' mapping"
        raise TopicMapError(msg)
    run_partitions = doc.get("run_partitions")
    out: dict[str, TopicSpec] = {}
    for name, raw in doc["topics"].items():
        try:
            partitions = raw["partitions"]
            if partitions == "run":
                partitions = run_partitions
            if not isinstance(partitions, int) or partitions < 1:
                msg = f"partitions must be a positive int or 'run', got {partitions!r}"
                raise TopicMapError(msg)
            cleanup = raw.get("cleanup", "delete")
            if cleanup not in ("delete", "compact"):
                msg = f"cleanup must be delete or compact, got {cleanup!r}"
                raise TopicMapError(msg)
            retention = raw.get("retention_ms")
            out[str(name)] = TopicSpec(
                name=str(name),
                key=None if raw["key"] is None else str(raw["key"]),
                records=tuple(str(r) for r in raw["records"]),
                partitions=partitions,
                cleanup=cleanup,
                retention_ms=None if retention is None else int(retention),
                writer=tuple(str(w) for w in raw.get("writer", ())),
                readers=tuple(str(r) for r in raw.get("readers", ())),
                internal=bool(raw.get("internal", False)),
                description=str(raw.get("description", "")),
                format=None if raw.get("format") is None else str(raw["format"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            msg = f"topic {name}: bad entry: {exc!r}"
            raise TopicMapError(msg) from exc
        except TopicMapError as exc:
            msg = f"topic {name}: {exc}"
            raise TopicMapError(msg) from exc
    return out


def load_topics(path: Path | None = None) -> dict[str, TopicSpec]:
    """Read the topic map.

    Args:
        path: YAML file; default :func:`default_topics_path`.

    Returns:
        Topic name -> spec.

    Raises:
        TopicMapError: The file is missing or malformed.

    """
    target = path if path is not None else default_topics_path()
    try:
        doc = yaml.safe_load(target.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        msg = f"cannot read topic map {target}: {exc}"
        raise TopicMapError(msg) from exc
    return parse_topics(doc)


def record_topics(
    specs: dict[str, TopicSpec], writers: frozenset[str] | None = None
) -> dict[str, str]:
    """Map each record's short name to the public topic that carries it.

    Internal re-key topics are skipped; when two public topics carry one record,
    the first in map order wins.

    Args:
        specs: The topic map, as from :func:`load_topics`.
        writers: Keep only topics written by one of these components.

    Returns:
        Record short name (``"LearningStep"``) -> topic name.

    """
    out: dict[str, str] = {}
    for spec in specs.values():
        if spec.internal or (writers is not None and not writers.intersection(spec.writer)):
            continue
        for fullname in spec.records:
            out.setdefault(fullname.rsplit(".", 1)[-1], spec.name)
    return out


def unknown_overrides(overrides: Mapping[str, str], written: Iterable[str]) -> str | None:
    """Say which topic overrides name no topic of the map (None: all do).

    An override's key is a topic's name in the map (``rw.learning``): a short name
    (``learning``) or a misspelt one (``rw.learnig``) used to be ignored without a word,
    and the records went to the default topic.

    Args:
        overrides: Topic name in the map -> the topic to write instead.
        written: The names a key may be (every topic of the map).

    Returns:
        The error, naming the keys refused and the accepted ones, or None.

    """
    known = set(written)
    bad = sorted(str(k) for k in overrides if k not in known)
    if not bad:
        return None
    return (f"topics: unknown key{'s' if len(bad) > 1 else ''} {', '.join(map(repr, bad))}: "
            f"a key is a topic's name in schemas/topics.yaml (one of {', '.join(sorted(known))}),"
            f" the value the topic to write instead")


@dataclass(frozen=True, slots=True)
class TableSpec:
    """One of the processor's tables (the ``tables`` section of the topic map).

    Attributes:
        name: Table name (its changelog topic is ``<app id>-<name>-changelog``).
        owner: The processor part that owns it (``runs``, ``nodes``, ``datasets``).
        scope: ``local`` (partitioned like its input) or ``global``.
        key: What its keys are.
        format: The internal JSON format of its values.

    """

    name: str
    owner: str
    scope: str
    key: str
    format: str


def parse_tables(doc: Any) -> dict[str, TableSpec]:
    """Return the ``tables`` section of a parsed topic map (empty when there is none).

    Raises:
        TopicMapError: An entry lacks a field or has an unknown scope.

    """
    raw_tables = doc.get("tables") if isinstance(doc, dict) else None
    if raw_tables is None:
        return {}
    if not isinstance(raw_tables, dict):
        msg = "topic map: 'tables' must be a mapping"
        raise TopicMapError(msg)
    out: dict[str, TableSpec] = {}
    for name, raw in raw_tables.items():
        try:
            spec = TableSpec(name=str(name), owner=str(raw["owner"]), scope=str(raw["scope"]),
                             key=str(raw["key"]), format=str(raw["format"]))
        except (KeyError, TypeError) as exc:
            msg = f"table {name}: bad entry: {exc!r}"
            raise TopicMapError(msg) from exc
        if spec.scope not in ("local", "global"):
            msg = f"table {name}: scope must be local or global, got {spec.scope!r}"
            raise TopicMapError(msg)
        out[spec.name] = spec
    return out


def load_tables(path: Path | None = None) -> dict[str, TableSpec]:
    """Read the ``tables`` section of the topic map (see :func:`load_topics`)."""
    target = path if path is not None else default_topics_path()
    try:
        doc = yaml.safe_load(target.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        msg = f"cannot read topic map {target}: {exc}"
        raise TopicMapError(msg) from exc
    return parse_tables(doc)
