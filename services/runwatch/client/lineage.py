"""Lineage capture for the RunManifest (runs on the SDK's worker thread)."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import json
import logging
import os
import shutil
import socket
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runwatch.core.records import DatasetRef

logger = logging.getLogger(__name__)

FRAMEWORKS = ("torch", "jax", "tensorflow", "numpy", "transformers", "lightning", "keras")


def git_revision(cwd: str | None = None) -> tuple[str | None, bool]:
    """Return (commit, dirty) of the git work tree around ``cwd``.

    Args:
        cwd: Directory; the current one when None.

    Returns:
        (None, False) outside a repository or without git.

    """
    git = shutil.which("git")
    if git is None:
        return None, False
    try:
        rev = subprocess.run(
            [git, "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5
        )
        if rev.returncode != 0:
            return None, False
        status = subprocess.run(
            [git, "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=5,
        )
        return rev.stdout.strip() or None, bool(status.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        return None, False


def config_hash(config: Mapping[str, Any] | str | os.PathLike[str] | None) -> str | None:
    """Hash a config dict (canonical JSON) or a config file's bytes.

    Args:
        config: A mapping, a path, or None.

    Returns:
        ``sha256:<hex>`` or None.

    """
    if config is None:
        return None
    if isinstance(config, Mapping):
        try:
            data = json.dumps(config, sort_keys=True, default=str, separators=(",", ":"))
        except TypeError:  # keys that do not sort together ({1: .., "a": ..}) or are tuples
            data = json.dumps(_text_keys(config), sort_keys=True, default=str,
                              separators=(",", ":"))
        return "sha256:" + hashlib.sha256(data.encode()).hexdigest()
    try:
        raw = Path(config).read_bytes()
    except OSError as exc:
        logger.warning("cannot read config file %s for hashing: %s", config, exc)
        return None
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def _text_keys(obj: Any) -> Any:
    """A config with every mapping's keys as text (their order then sorts)."""
    if isinstance(obj, Mapping):
        return {str(k): _text_keys(v) for k, v in obj.items()}
    return obj


def flat_config(config: Mapping[str, Any] | str | os.PathLike[str] | None) -> dict[str, str]:
    """Flatten a config mapping to ``{"a.b": "value"}`` strings.

    Args:
        config: A mapping (nested allowed), or a path (recorded as ``path``).

    Returns:
        The flat string map.

    """
    if config is None:
        return {}
    if not isinstance(config, Mapping):
        return {"path": str(config)}
    out: dict[str, str] = {}

    def walk(prefix: str, obj: Any) -> None:
        if isinstance(obj, Mapping):
            for k, v in obj.items():
                walk(f"{prefix}{k}.", v)
        else:
            out[prefix[:-1]] = str(obj)

    walk("", config)
    return out


def framework_versions(names: tuple[str, ...] = FRAMEWORKS) -> dict[str, str]:
    """Versions of installed frameworks, read from metadata (nothing imported).

    Args:
        names: Distribution names.

    Returns:
        name -> version for those installed.

    """
    out: dict[str, str] = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


def gpu_hardware() -> tuple[int, str | None]:
    """GPU count and model via NVML; (0, None) without NVML.

    Returns:
        (count, model).

    """
    try:
        from runwatch.adapters.nvml import Nvml

        nv = Nvml.open(quiet=True)
    except Exception:
        return 0, None
    if nv is None:
        return 0, None
    try:
        count = nv.device_count()
        model = nv.device_name(0) if count else None
        return count, model
    finally:
        nv.close()


def image_digest() -> str | None:
    """Return the container image digest the launcher put in the environment, if any."""
    for var in ("RUNWATCH_IMAGE_DIGEST", "IMAGE_DIGEST", "CONTAINER_IMAGE_DIGEST"):
        if os.environ.get(var):
            return os.environ[var]
    return None


def hostname() -> str:
    """Return this host's name."""
    return socket.gethostname()


_STAMP_FIELDS = frozenset({"event_id", "run_id", "emitted_at_ms", "source", "seq"})
_COMPUTED = frozenset({"lineage_hash", "repeat_group"})
_STR_MAPS = frozenset({"config", "labels", "framework_versions"})


def _coerce(name: str, value: Any) -> Any:
    """Turn plain values of a ``lineage=`` override into what RunManifest holds.

    Raises:
        ValueError: The value cannot be turned into that field's type.
        TypeError: Idem.

    """
    from runwatch.core.records import Hardware, TransformRef

    if name == "hardware" and isinstance(value, Mapping):
        unknown = sorted(set(value) - {"nodes", "gpu_count", "gpu_model"})
        if unknown:
            msg = f"unknown keys {unknown} (expected nodes, gpu_count, gpu_model)"
            raise ValueError(msg)
        nodes = value.get("nodes", ())
        return Hardware(
            nodes=(nodes,) if isinstance(nodes, str) else tuple(str(n) for n in nodes),
            gpu_count=int(value.get("gpu_count", 0)),
            gpu_model=None if value.get("gpu_model") is None else str(value["gpu_model"]),
        )
    if name == "datasets" and not isinstance(value, str | Mapping):
        return tuple(
            dataset_ref(d) for d in value
        )
    if name == "transforms" and not isinstance(value, str | Mapping):
        return tuple(t if isinstance(t, TransformRef) else TransformRef.from_dict(t)
                     for t in value)
    if name in _STR_MAPS and isinstance(value, Mapping):
        return {str(k): str(v) for k, v in value.items()}
    return value


def manifest_overrides(
    overrides: Mapping[str, Any], check: Callable[[dict[str, Any]], None]
) -> tuple[dict[str, Any], dict[str, str]]:
    """Coerce and check the ``lineage=`` overrides of :func:`runwatch.init`.

    Plain values are accepted where the manifest holds a record: a mapping for
    ``hardware`` (``nodes``, ``gpu_count``, ``gpu_model``), strings or
    mappings for ``datasets``, mappings for ``transforms``; string maps are
    stringified. Each field is checked on its own, so one bad field costs only
    itself, never the whole manifest.

    Args:
        overrides: RunManifest field name -> value.
        check: Raises when a dict of manifest fields cannot be published (the
            SDK encodes a trial manifest with the run's codec).

    Returns:
        (fields to apply, field name -> why it was refused).

    """
    from runwatch.core.records import RunManifest

    known = {f.name for f in dataclasses.fields(RunManifest)} - _STAMP_FIELDS - _COMPUTED
    good: dict[str, Any] = {}
    bad: dict[str, str] = {}
    for name, value in overrides.items():
        if name in _COMPUTED:
            bad[name] = "computed by runwatch from the other lineage fields"
            continue
        if name not in known:
            bad[name] = f"not a RunManifest field (one of {', '.join(sorted(known))})"
            continue
        try:
            fixed = _coerce(name, value)
            check({name: fixed})
        except Exception as exc:
            bad[name] = f"{type(value).__name__} value refused: {exc}"
            continue
        good[name] = fixed
    return good, bad


def dataset_ref(ref: Any) -> DatasetRef:
    """Read a dataset reference: a DatasetRef, a mapping, ``(uri, version)`` or a string.

    A string ``uri@version`` names a version when the part after the last ``@``
    holds no ``/`` (``s3://b/clicks@2026-11-30``); otherwise it is an
    unversioned uri (``s3://user@host/x``).

    Raises:
        ValueError: Nothing a reference can be read from (an empty uri).

    """
    from runwatch.core.records import DatasetRef

    if isinstance(ref, DatasetRef):
        out = ref
    elif isinstance(ref, Mapping):
        out = DatasetRef(uri=str(ref.get("uri", "")), version=optional_text(ref.get("version")),
                         content_hash=optional_text(ref.get("content_hash")))
    elif isinstance(ref, tuple) and len(ref) == 2:
        out = DatasetRef(uri=str(ref[0]), version=optional_text(ref[1]))
    else:
        text = str(ref).strip()
        head, at, tail = text.rpartition("@")
        out = (DatasetRef(uri=head, version=tail) if at and head and tail and "/" not in tail
               else DatasetRef(uri=text))
    if not out.uri.strip():
        msg = f"no dataset uri in {ref!r}"
        raise ValueError(msg)
    return out


def optional_text(value: Any) -> str | None:
    """Return ``str(value)``, or None for None and the empty text."""
    return None if value is None or str(value) == "" else str(value)
