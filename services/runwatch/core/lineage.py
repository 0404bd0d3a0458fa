"""The canonical lineage of a run, its content hash, its repeat group and lineage diffs.

A run's lineage is what its results are a function of: the source data it
read, the transformations applied to it, the code (revision and dirty flag),
the container image, the configuration, the hardware allocation and the seed
policy. :func:`canonical` reduces a RunManifest to exactly those fields in a
normal form (sorted, de-duplicated, blanks as null, hex identifiers lower
case), and :func:`lineage_hash` is the sha256 of its compact, key-sorted JSON.
:func:`repeat_group` is the same hash with the seed left out, so repeats of
one lineage with other seeds share it. docs/contracts.md ("Lineage hash")
states the form; :data:`VERSION` names it.

Everything here works on the manifest as a plain dict (``to_dict()`` or the
codec's ``decode_dict``), so the SDK, the processor and the sink compute the
same values; text is repaired as producers repair it before encoding
(:func:`runwatch.core.codec.text.clean_text`), so a lone surrogate hashes as the
U+FFFD the record carries. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "FIELDS",
    "VERSION",
    "canonical",
    "diff",
    "hashes",
    "is_seed_key",
    "lineage_hash",
    "repeat_group",
    "seed_kind",
]

VERSION = 1
"""Version of the canonical form (part of the hashed text: a new form gives new hashes)."""

FIELDS = ("datasets", "transforms", "code_revision", "code_dirty", "image_digest",
          "config_hash", "gpu_count", "gpu_model", "seed_policy")
"""The canonical lineage's fields, in the order diffs list them."""

_SEED_KEY = re.compile(r"(^|_)seed$")
_LOWER = ("code_revision", "image_digest", "config_hash")


def _str(value: Any) -> str:
    """Text as the record carries it: bytes and lone surrogates repaired as producers do."""
    # imported here: the codec package imports numpy, and `import runwatch.client` stays lean
    from runwatch.core.codec.text import clean_text
    return clean_text(value if isinstance(value, str | bytes | bytearray) else str(value))


def _text(value: Any) -> str | None:
    """A string value normalised: repaired, stripped, blank as None."""
    if value is None:
        return None
    s = _str(value).strip()
    return s or None


def _lower(value: Any) -> str | None:
    s = _text(value)
    return None if s is None else s.lower()


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _dump(doc: Any) -> str:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def is_seed_key(key: str) -> bool:
    """Return whether a flat config key holds a seed (last dotted part ``seed`` or ``*_seed``)."""
    return bool(_SEED_KEY.search(key.rsplit(".", 1)[-1].strip().lower()))


def seed_kind(policy: str | None) -> str | None:
    """Return a seed policy without its seed value: ``fixed:1234`` → ``fixed``.

    A policy is ``<kind>[:<value>]``; a bare integer is a fixed seed. Kinds
    without a value (``per-rank``) stay as they are.
    """
    p = _text(policy)
    if p is None:
        return None
    if re.fullmatch(r"[+-]?\d+", p):
        return "fixed"
    return p.split(":", 1)[0].strip() or None


def _config_map_hash(config: Mapping[str, Any], drop_seeds: bool) -> str | None:
    items = {_str(k): _str(v) for k, v in config.items()
             if not (drop_seeds and is_seed_key(_str(k)))}
    return "sha256:" + _sha(_dump(items)) if items else None


def canonical(manifest: Mapping[str, Any], *, seeds: bool = True) -> dict[str, Any]:
    """Return the canonical lineage of a manifest (see docs/contracts.md, "Lineage hash").

    Args:
        manifest: A RunManifest as a plain dict (``to_dict()`` or ``decode_dict``).
        seeds: False leaves the seed out: the seed policy keeps only its kind
            (:func:`seed_kind`), and seed keys of the config (:func:`is_seed_key`)
            are dropped (the config is then hashed from its flat map).

    Returns:
        ``{"v": 1, "datasets": [...], "transforms": [...], "code_revision",
        "code_dirty", "image_digest", "config_hash", "gpu_count", "gpu_model",
        "seed_policy"}``.

    """
    datasets = {
        (_str(d.get("uri", "")).strip(), _text(d.get("version")), _lower(d.get("content_hash")))
        for d in manifest.get("datasets") or ()
    }
    transforms = {(_str(t.get("name", "")).strip(), _str(t.get("version", "")).strip())
                  for t in manifest.get("transforms") or ()}
    hw = manifest.get("hardware") or {}
    config = manifest.get("config") or {}
    config_hash = _lower(manifest.get("config_hash")) or _config_map_hash(config, False)
    if not seeds and any(is_seed_key(_str(k)) for k in config):
        config_hash = _config_map_hash(config, True)  # the producer's hash covers the seed
    policy = _text(manifest.get("seed_policy"))
    return {
        "v": VERSION,
        "datasets": [{"uri": u, "version": v, "content_hash": h}
                     for u, v, h in sorted(datasets, key=lambda d: (d[0], d[1] or "", d[2] or ""))],
        "transforms": [{"name": n, "version": v} for n, v in sorted(transforms)],
        "code_revision": _lower(manifest.get("code_revision")),
        "code_dirty": bool(manifest.get("code_dirty")),
        "image_digest": _lower(manifest.get("image_digest")),
        "config_hash": config_hash,
        "gpu_count": int(hw.get("gpu_count") or 0),
        "gpu_model": _text(hw.get("gpu_model")),
        "seed_policy": policy if seeds else seed_kind(policy),
    }


def lineage_hash(manifest: Mapping[str, Any]) -> str:
    """Return the sha256 hex of the manifest's canonical lineage."""
    return _sha(_dump(canonical(manifest)))


def repeat_group(manifest: Mapping[str, Any]) -> str:
    """Return the lineage hash with the seed left out (shared by repeats with other seeds)."""
    return _sha(_dump(canonical(manifest, seeds=False)))


def hashes(manifest: Mapping[str, Any]) -> tuple[str, str]:
    """Return ``(lineage_hash, repeat_group)``, keeping values the producer gave.

    Args:
        manifest: A RunManifest as a plain dict.

    Returns:
        The producer's non-empty values, else the computed ones.

    """
    return (str(manifest.get("lineage_hash") or "") or lineage_hash(manifest),
            str(manifest.get("repeat_group") or "") or repeat_group(manifest))


def _show(name: str, value: Any) -> str:
    if name == "datasets":
        refs = [d["uri"] + (f"@{d['version']}" if d["version"] else "")
                + (f"#{d['content_hash']}" if d["content_hash"] else "") for d in value]
        return ", ".join(refs) or "(none)"
    if name == "transforms":
        return ", ".join(f"{t['name']}@{t['version']}" for t in value) or "(none)"
    if value is None:
        return "(none)"
    return str(value).lower() if isinstance(value, bool) else str(value)


def diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """Return the lineage fields that differ between two canonical lineages.

    Args:
        old: A :func:`canonical` lineage.
        new: Another one.

    Returns:
        ``(field, old value, new value)`` as text, in :data:`FIELDS` order.

    """
    return [(f, _show(f, old.get(f)), _show(f, new.get(f)))
            for f in FIELDS if old.get(f) != new.get(f)]
