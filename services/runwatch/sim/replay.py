"""Offline replay: fold simulated records through the processor's pure join.

The same records the simulator publishes, decoded, routed the way the
processor routes them (node samples by allocation and process attribution,
data reports by the runs whose manifest names the dataset) and folded with
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

    def fold(run_id: str, rec: Any) -> None:
        st = states.setdefault(run_id, runstate.new_state(run_id))
        _, outs = join.step(st, rec, int(rec.emitted_at_ms), cfg)
        alerts.extend(o for o in outs if isinstance(o, Alert))

    horizon, next_tick = 0, 0
    for rec in sorted(records, key=lambda r: int(r.emitted_at_ms)):
        horizon = max(horizon, int(rec.emitted_at_ms))
        if horizon >= next_tick:
            for st in states.values():
                alerts.extend(o for o in join.tick(st, horizon, cfg)[1] if isinstance(o, Alert))
            next_tick = horizon + TICK_MS
        if isinstance(rec, NodeSample):
            for run_id in rekey.route_node_sample(rec, node_index.get(rec.node, {})):
                fold(run_id, rec)
            continue
        if isinstance(rec, DataQualityReport):
            for run_id in rekey.runs_for_report(dataset_runs, rec):
                fold(run_id, rec)
            continue
        if not rec.run_id:
            continue
        if isinstance(rec, JobEvent):
            rekey.apply_job_event(node_index, rec)
        elif isinstance(rec, RunManifest):
            rekey.apply_manifest(dataset_runs, rec)
        fold(rec.run_id, rec)
    return alerts
