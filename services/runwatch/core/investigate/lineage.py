"""A run's lineage as stored, and what changed between two runs.

A lineage is the ``run_manifests`` row of a run (its first version: a
re-emitted manifest does not rewrite history). :func:`diff` compares two:
datasets and versions, transforms and versions, code revision and dirty
flag, image, config keys (old → new), hardware, seed policy and framework
versions. ``config_hash`` is not a change of its own: the config keys that
changed say more. Lineage fields are compared as the lineage hash reads them
(:func:`runwatch.core.lineage.canonical`): blanks around a dataset or transform version
are no change, nor is the case of a hex identifier (code revision, image digest, config
hash), so a run whose lineage hash equals its reference's shows no such change.

A change the run declares is *intentional*: the manifest label
``intended_changes`` lists comma-separated names (``config.<key>`` or a bare
config key, ``dataset:<uri>``, ``code``, ``image``, ``hardware``,
``seed_policy``, ``framework:<name>``, ``transform:<name>``), and a change
of the config key ``objective`` is always intentional (a new objective is a
decision, not a fault).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: Config keys whose change is a decision by definition.
INTENTIONAL_KEYS = frozenset({"objective"})


@dataclass(frozen=True, slots=True)
class Change:
    """One difference between a run's lineage and its reference's.

    Attributes:
        kind: dataset, transform, code, image, config, hardware, seed_policy, framework.
        key: What changed within the kind (a dataset uri, a config key...).
        old: The reference's value ("" when absent).
        new: This run's value ("" when absent).
        intentional: Declared by the run (or an objective change).
    """

    kind: str
    key: str
    old: str
    new: str
    intentional: bool = False

    def to_json(self) -> dict[str, Any]:
        """Return the JSON shape (docs/investigation.md)."""
        return {"kind": self.kind, "key": self.key, "old": self.old, "new": self.new,
                "intentional": self.intentional}


def _s(value: Any) -> str:
    return "" if value is None else str(value)


def _pairs(names: Sequence[Any], versions: Sequence[Any]) -> dict[str, str]:
    return {str(n): _s(v) for n, v in zip(names or (), versions or (), strict=False)}


def normalize(row: Mapping[str, Any]) -> dict[str, Any]:
    """Return a run_manifests row as a lineage mapping (the JSON ``lineage`` shape).

    Args:
        row: Columns of ``run_manifests`` (any subset; missing ones read as empty).

    Returns:
        datasets (uri → version), transforms (name → version), code_revision,
        code_dirty, image_digest, config (key → value), config_hash, hardware
        (nodes, gpu_count, gpu_model), seed_policy, framework_versions,
        experiment_family, team, labels, lineage_hash, repeat_group.
    """
    return {
        "datasets": _pairs(row.get("dataset_uris") or (), row.get("dataset_versions") or ()),
        "transforms": _pairs(row.get("transform_names") or (), row.get("transform_versions") or ()),
        "code_revision": _s(row.get("code_revision")),
        "code_dirty": bool(row.get("code_dirty")),
        "image_digest": _s(row.get("image_digest")),
        "config": {str(k): _s(v) for k, v in (row.get("config") or {}).items()},
        "config_hash": _s(row.get("config_hash")),
        "hardware": {"nodes": [str(n) for n in row.get("hardware_nodes") or ()],
                     "gpu_count": int(row.get("gpu_count") or 0),
                     "gpu_model": _s(row.get("gpu_model"))},
        "seed_policy": _s(row.get("seed_policy")),
        "framework_versions": {str(k): _s(v)
                               for k, v in (row.get("framework_versions") or {}).items()},
        "experiment_family": _s(row.get("experiment_family")),
        "team": _s(row.get("team")),
        "labels": {str(k): _s(v) for k, v in (row.get("labels") or {}).items()},
        "lineage_hash": _s(row.get("lineage_hash")),
        "repeat_group": _s(row.get("repeat_group")),
    }


def repeat_key(lineage: Mapping[str, Any]) -> str:
    """Return the key runs of one lineage share whatever their seed.

    The stored ``repeat_group`` when the producer or processor computed one;
    otherwise a sha256 over datasets, transforms, code, image, config hash
    and hardware model and count (not node names, not the seed).
    """
    if lineage.get("repeat_group"):
        return str(lineage["repeat_group"])
    hw = lineage.get("hardware") or {}
    canon = {k: lineage.get(k) for k in ("datasets", "transforms", "code_revision", "code_dirty",
                                         "image_digest", "config_hash")}
    canon["hardware"] = {"gpu_count": hw.get("gpu_count"), "gpu_model": hw.get("gpu_model")}
    text = json.dumps(canon, sort_keys=True, separators=(",", ":"))
    return "local:" + hashlib.sha256(text.encode()).hexdigest()[:32]


def _hex(value: str) -> str:
    """Return a hex identifier (revision, digest, hash) as the lineage hash reads it.

    Case and surrounding blanks are no change (``runwatch.core.lineage.canonical``).
    """
    return value.strip().lower()


def _intended(lineage: Mapping[str, Any]) -> frozenset[str]:
    text = (lineage.get("labels") or {}).get("intended_changes", "")
    return frozenset(p.strip() for p in str(text).split(",") if p.strip())


def _maps(kind: str, old: Mapping[str, str], new: Mapping[str, str], prefix: str,
          intended: frozenset[str]) -> list[Change]:
    out = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key, ""), new.get(key, "")
        in_old, in_new = key in old, key in new
        # a dataset's or transform's version is read stripped by the lineage hash
        same = a.strip() == b.strip() if kind in ("dataset", "transform") else a == b
        if in_old and in_new and same:
            continue
        names = {f"{prefix}{key}", key} if kind == "config" else {f"{prefix}{key}"}
        declared = bool(names & intended) or (kind == "config" and key in INTENTIONAL_KEYS)
        out.append(Change(kind, key, a if in_old else "", b if in_new else "", declared))
    return out


def diff(reference: Mapping[str, Any], run: Mapping[str, Any]) -> list[Change]:
    """Return what changed from ``reference`` (the last good run) to ``run``.

    Args:
        reference: The reference run's lineage (:func:`normalize`).
        run: This run's lineage.

    Returns:
        The changes, in a fixed order (datasets, transforms, code, image,
        config, hardware, seed policy, frameworks).
    """
    intended = _intended(run)
    out = _maps("dataset", reference["datasets"], run["datasets"], "dataset:", intended)
    out += _maps("transform", reference["transforms"], run["transforms"], "transform:", intended)
    old_code = f"{reference['code_revision']}{' (dirty)' if reference['code_dirty'] else ''}"
    new_code = f"{run['code_revision']}{' (dirty)' if run['code_dirty'] else ''}"
    if _hex(old_code) != _hex(new_code):
        out.append(Change("code", "code_revision", old_code, new_code, "code" in intended))
    if _hex(reference["image_digest"]) != _hex(run["image_digest"]):
        out.append(Change("image", "image_digest", reference["image_digest"],
                          run["image_digest"], "image" in intended))
    out += _maps("config", reference["config"], run["config"], "config.", intended)
    if not reference["config"] and not run["config"] and \
            _hex(reference["config_hash"]) != _hex(run["config_hash"]):
        out.append(Change("config", "config_hash", reference["config_hash"], run["config_hash"],
                          "config" in intended))
    old_hw, new_hw = reference["hardware"], run["hardware"]
    for key in ("gpu_model", "gpu_count", "nodes"):
        a, b = old_hw.get(key), new_hw.get(key)
        if a != b:
            text_a = ",".join(a) if isinstance(a, list) else _s(a)
            text_b = ",".join(b) if isinstance(b, list) else _s(b)
            out.append(Change("hardware", key, text_a, text_b, "hardware" in intended))
    if reference["seed_policy"] != run["seed_policy"]:
        out.append(Change("seed_policy", "seed_policy", reference["seed_policy"],
                          run["seed_policy"], "seed_policy" in intended))
    out += _maps("framework", reference["framework_versions"], run["framework_versions"],
                 "framework:", intended)
    return out
