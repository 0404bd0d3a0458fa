"""Records shared by every topic: the event source and dataset references.

Generated from schemas/avro/*.avsc; tests/contract checks they agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

__all__ = ["DatasetRef", "Source"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Source:
    """Who emitted an event.

    Mirrors Avro ``runwatch.v1.Source``.

    Attributes:
        kind: Producer kind: sdk, agent, hook, processor, simulator, cli.
        host: Host name of the emitting process.
        runwatch_version: runwatch version of the emitting process.

    """

    AVRO_NAME: ClassVar[str] = "runwatch.v1.Source"

    kind: str
    host: str
    runwatch_version: str

    def to_dict(self) -> dict[str, Any]:
        """Return the plain dict fastavro writes (nested records as dicts)."""
        return {
            "kind": self.kind,
            "host": self.host,
            "runwatch_version": self.runwatch_version,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Source:
        """Build from a dict as fastavro reads it; absent defaulted fields take defaults."""
        return cls(
            kind=d["kind"],
            host=d["host"],
            runwatch_version=d["runwatch_version"],
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class DatasetRef:
    """A reference to one version of a dataset.

    Mirrors Avro ``runwatch.v1.DatasetRef``.

    Attributes:
        uri: Dataset location or logical id, e.g. s3://bucket/ds or hub:org/name.
        version: Dataset version or snapshot id; null when unversioned.
        content_hash: Content hash of the referenced data (algorithm:hex).

    """

    AVRO_NAME: ClassVar[str] = "runwatch.v1.DatasetRef"

    uri: str
    version: str | None = None
    content_hash: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the plain dict fastavro writes (nested records as dicts)."""
        return {
            "uri": self.uri,
            "version": self.version,
            "content_hash": self.content_hash,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DatasetRef:
        """Build from a dict as fastavro reads it; absent defaulted fields take defaults."""
        return cls(
            uri=d["uri"],
            version=d.get("version", None),
            content_hash=d.get("content_hash", None),
        )
