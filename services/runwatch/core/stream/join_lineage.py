"""The run join's lineage handlers: re-emitted manifests and upstream stage events.

``rule:lineage_mutated``: a run's manifest re-emitted with a different
canonical lineage (:mod:`runwatch.core.lineage`) raises an alert whose
evidence is each changed field, old → new. The identical manifest re-emitted
(an SDK retry, a resumed run on other nodes) changes nothing. The run's
first lineage stays in its state (and every version in ClickHouse). The
probable cause follows what changed: the data (datasets, transforms) →
``data``; otherwise the code, image, config or seed → ``artifact`` (the run's
outputs no longer follow from the lineage on record); only the hardware
allocation → ``infrastructure``.

Stage events (``StageEvent``) reach a run through the dataset re-keyer like
data-quality reports: a run keeps the stages that wrote the dataset versions
it reads (its upstream), and their output checks feed its data evidence: a
drifted output is ``indicator:drift`` evidence (as a report's drift), an
empty output fires ``rule:zero_rows``, a failed stage is evidence.
"""

from __future__ import annotations

from typing import Any

from runwatch.core import lineage
from runwatch.core.records import RunManifest, StageEvent
from runwatch.core.signals import rules
from runwatch.core.signals.rules import Finding
from runwatch.core.stream import join_datasets
from runwatch.core.stream.rekey import dataset_ref
from runwatch.core.stream.runstate import Output, RunConfig, RunState, clear, emit

__all__ = ["lineage_cause", "manifest_lineage", "stage", "stage_seen"]

DATA_FIELDS = frozenset({"datasets", "transforms"})
HARDWARE_FIELDS = frozenset({"gpu_count", "gpu_model"})
STAGE_IDS = 20  # event ids kept per output dataset (a replay sends at most 17)
STAGES_MAX = 32  # output datasets whose stages a run keeps
ERROR_KEPT = 300  # characters of a failed stage's error a run keeps


def lineage_cause(changed: list[str]) -> str:
    """Return the probable cause of a lineage change from the fields that changed."""
    if DATA_FIELDS & set(changed):
        return "data"
    if set(changed) <= HARDWARE_FIELDS:
        return "infrastructure"
    return "artifact"


def manifest_lineage(s: RunState, e: RunManifest, at: int, now: int,
                     cfg: RunConfig) -> list[Output]:
    """Remember a run's lineage; alert when a re-emitted manifest changes it.

    The hash compared is recomputed from the content (a producer's own value
    is not trusted for this), so only a different canonical lineage alerts.
    """
    canon = lineage.canonical(e.to_dict())
    digest = lineage.lineage_hash(e.to_dict())
    seen: dict[str, Any] | None = s.signals.get("lineage")
    if seen is None:
        s.signals["lineage"] = {"first": digest, "first_at_ms": at, "hash": digest,
                                "canon": canon, "versions": 1}
        return []
    if seen["hash"] == digest:
        return []
    changes = lineage.diff(seen["canon"], canon)
    seen.update(hash=digest, canon=canon, versions=int(seen.get("versions", 1)) + 1)
    fields = [f for f, _, _ in changes]
    cause = lineage_cause(fields)
    out: list[Output] = []
    for name, old, new in changes:  # one piece of evidence per changed field
        out += emit(s, cfg, Finding("rule:lineage_mutated", f"lineage.{name}", cause,  # type: ignore[arg-type]
                                    "info", 1.0, 0.0, 1.0, at, f"{name}: {old} → {new}",
                                    f"{old} → {new}", alert=False, subject=name), now,
                    one_shot=True)
    detail = "; ".join(f"{name}: {old} → {new}" for name, old, new in changes)
    f = Finding(
        "rule:lineage_mutated", "lineage", cause, "warning",  # type: ignore[arg-type]
        float(len(changes)), 0.0, 1.0, at,
        f"Lineage of {s.run_id} re-emitted with other {', '.join(fields)}",
        f"{detail} (first lineage {seen['first']}, now {digest}; version {seen['versions']})",
        subject=digest[:16],  # each new lineage its own alert
        labels={"lineage_changed": ",".join(fields), "lineage_first": seen["first"],
                "lineage_hash": digest},
        hard=True,
    )
    return out + emit(s, cfg, f, now, one_shot=True)


def _stages(s: RunState) -> dict[str, dict[str, Any]]:
    stages: dict[str, dict[str, Any]] = s.signals.setdefault("stages", {})
    return stages


def stage_seen(s: RunState, e: StageEvent) -> bool:
    """Return whether the run has folded this stage event (same event id) already."""
    kept = _stages(s).get(dataset_ref(e.dataset_uri, e.dataset_version)) or {}
    return e.event_id in kept.get("ids", ())


def stage(s: RunState, e: StageEvent, at: int, now: int, cfg: RunConfig) -> list[Output]:
    """Fold a stage that wrote a dataset version the run reads (its upstream).

    Returns:
        Alerts: ``rule:zero_rows`` for an empty output; drift and a failed
        stage are evidence for the probable cause of the run's other alerts.
    """
    ref = dataset_ref(e.dataset_uri, e.dataset_version)
    stages = _stages(s)
    prev = stages.get(ref) or {}
    drifted = list(e.drift.drifted_features) if e.drift is not None else []
    stages[ref] = {
        "stage": e.stage, "code_version": e.code_version, "outcome": e.outcome,
        "inputs": sorted(dataset_ref(d.uri, d.version) for d in e.inputs),
        "rows_in": e.rows_in, "rows_out": e.rows_out, "at_ms": at, "drifted": drifted,
        "error": (e.error or "")[:ERROR_KEPT],  # a failed stage's page names its error
        "ids": [*prev.get("ids", []), e.event_id][-STAGE_IDS:],
        # a stage wrote the version once (rule:missing_data_report counts it as reported)
        "wrote": bool(prev.get("wrote")) or e.outcome != "failed",
    }
    if len(stages) > STAGES_MAX:
        del stages[min(stages, key=lambda k: stages[k]["at_ms"])]
    out: list[Output] = []
    if e.outcome == "failed":
        out += emit(s, cfg, Finding("rule:stage_failed", "stage", "data", "warning", 1.0, 0.0,
                                    0.5, at, f"Stage {e.stage} writing {ref} failed",
                                    e.error or "", subject=ref, alert=False), now, one_shot=True)
        return out
    # counted and empty (a negative count is no count): as for a report, the alert stays
    # firing until the dataset's healthy outputs (or reports) resolve it, not after 15
    # minutes without a repeat
    if e.rows_out == 0:
        f = rules.zero_rows(ref, e.rows_out, at)
        if f:
            out += emit(s, cfg, f, now, one_shot=False)
    elif e.rows_out is not None and e.rows_out > 0:
        out += clear(s, cfg, "rule:zero_rows", "rows", now, subject=ref, at_ms=at)
        # read unversioned, each output a new version: the later versions' healthy outputs
        out += join_datasets.clear_versions(s, cfg, "rule:zero_rows", "rows", e.dataset_uri,
                                            ref, now, at)
    if drifted:
        names = ", ".join(drifted[:5])
        out += emit(s, cfg, Finding("indicator:drift", "feature_drift", "data", "warning",
                                    float(len(drifted)), 0.0, 0.5, at,
                                    f"Feature drift in {ref} (stage {e.stage} against "
                                    f"{e.baseline or 'its reference'}): {names}",
                                    subject=ref, alert=False), now, one_shot=True)
    return out
