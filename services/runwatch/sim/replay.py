"""Offline replay: fold simulated records through the processor's pure join.

The same records the simulator publishes, decoded, routed the way the
processor routes them (node samples reduced by :func:`runwatch.core.rekey.node_entries`
and aggregated per run by the processor's own
:func:`runwatch.processor.forward.aggregate`; data reports to the runs whose
manifest names the dataset and to the run a report names, each dataset's first
and recent reports kept and handed to a run when its manifest arrives) and folded with
:func:`runwatch.core.join.step`. No Kafka, no clock: ``now_ms`` is each
record's own emission time, and the timer's rules (stall, missing data
reports, queue deadline, quiet-time resolution) run every :data:`TICK_MS` of
event time with the replay's horizon (the latest emission time folded: one
ordered input), as a live processor's timer runs them with its input's
event-time horizon. Used by ``runwatch simulate --offline`` and the unit
tests to score scenarios without services.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from runwatch.core import join, rekey, runstate
from runwatch.core.records import (
    Alert,
    DataQualityReport,
    JobEvent,
    NodeSample,
    RunManifest,
    Source,
)
from runwatch.processor.forward import RECENT_MAX, aggregate

SOURCE = Source(kind="processor", host="replay", runwatch_version="0")
TICK_MS = 5_000
"""Event time between two runs of the timer's rules in a replay."""


def replay(records: Iterable[Any], cfg: runstate.RunConfig | None = None) -> list[Alert]:
    """Fold records through the run join in event-time order, as live traffic arrives.

    Producers publish from their own threads and batches (the SDK's records
    of a second may be captured after the node agent's of the next minute in
    a simulation that runs faster than real time); live, each reaches the
    processor within moments of its event time. The fold is therefore in
    event-time order (stable: records of one instant keep their publication
    order), and the timer's horizon is the latest event time folded.

    Args:
        records: Decoded records.
        cfg: Processor knobs (default: the processor's defaults, allow-list
            set to the simulator's registry).

    Returns:
        Every Alert the join produced.

    """
    from runwatch.sim.scenarios import ALLOWED_IMAGE_PREFIX

    cfg = cfg or runstate.RunConfig(source=SOURCE, image_allow_list=(ALLOWED_IMAGE_PREFIX,))
    states: dict[str, runstate.RunState] = {}
    node_index: dict[str, rekey.NodeIndex] = {}
    dataset_runs: dict[str, list[str]] = {}
    alerts: list[Alert] = []

    stored: dict[str, list[DataQualityReport]] = {}  # ref -> first report, then recent ones
    procs_seen: set[str] = set()

    def fold(run_id: str, rec: Any) -> None:
        st = states.setdefault(run_id, runstate.new_state(run_id))
        _, outs = join.step(st, rec, int(rec.emitted_at_ms), cfg)
        alerts.extend(o for o in outs if isinstance(o, Alert))

    def remember(ref: str, rec: DataQualityReport) -> None:
        kept = stored.setdefault(ref, [])
        kept.append(rec)
        if len(kept) > RECENT_MAX + 1:
            del kept[1]  # the first report stays: it is the dataset's reference

    def node(rec: NodeSample) -> None:
        d = rec.to_dict()
        if any(g["processes"] for g in d["gpus"]):
            procs_seen.add(rec.node)
        entries = rekey.node_entries(d, node_index.get(rec.node, {}),
                                     procs_visible=rec.node in procs_seen)
        for agg in aggregate(list(entries.items())):
            fold(agg.run_id, agg)

    def report(rec: DataQualityReport) -> None:
        ref = rekey.report_ref(rec)
        if rec.run_id and rec.run_id not in rekey.runs_for_report(dataset_runs, rec):
            for old in stored.get(ref, []):  # a report naming its run subscribes that run
                fold(rec.run_id, old)
            rekey.add_run(dataset_runs, ref, rec.run_id)
        remember(ref, rec)
        if rec.dataset_version:  # for runs that declare the dataset unversioned
            remember(rec.dataset_uri, rec)
        for run_id in rekey.runs_for_report(dataset_runs, rec):
            fold(run_id, rec)

    horizon, next_tick = 0, 0
    for rec in sorted(records, key=lambda r: int(r.emitted_at_ms)):
        horizon = max(horizon, int(rec.emitted_at_ms))
        if horizon >= next_tick:
            for st in states.values():
                alerts.extend(o for o in join.tick(st, horizon, cfg)[1] if isinstance(o, Alert))
            next_tick = horizon + TICK_MS
        if isinstance(rec, NodeSample):
            node(rec)
            continue
        if isinstance(rec, DataQualityReport):
            report(rec)
            continue
        if not rec.run_id:
            continue
        if isinstance(rec, JobEvent):
            rekey.apply_job_event(node_index, rec)
        elif isinstance(rec, RunManifest):
            rekey.apply_manifest(dataset_runs, rec)
        fold(rec.run_id, rec)
        if isinstance(rec, RunManifest):  # the dataset's stored reports reach the new run
            for ref in rekey.manifest_refs(rec.datasets):
                for old in stored.get(ref, []):
                    fold(rec.run_id, old)
    return alerts
