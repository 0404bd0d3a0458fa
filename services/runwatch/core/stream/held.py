"""Events of runs not seen yet: held in the run state, replayed or dead-lettered.

A record may arrive before its run's manifest or first job event (topics are
consumed independently). It is held (as JSON, never pickle) for ``hold_ms``;
when the run becomes known the held events are replayed, otherwise they are
dead-lettered together with a summary.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from runwatch.core.records import RECORD_TYPES
from runwatch.core.stream.join_node import NODE_AGG, NodeAgg
from runwatch.core.stream.runstate import Output, RunConfig, RunState, dead_letter


def hold(state: RunState, cfg: RunConfig, event: Any, now_ms: int) -> list[Output]:
    """Hold an event of a run not seen yet (manifest or job event missing)."""
    if not state.pending:
        state.held_since_ms = now_ms
    if len(state.pending) >= cfg.hold_max:
        return [dead_letter(state, cfg, f"run {state.run_id} unseen; hold buffer full "
                            f"({cfg.hold_max})", b"", "rw.internal.held", now_ms)]
    state.pending.append({"t": event.AVRO_NAME, "d": _jsonable(event.to_dict())})
    return []


def _jsonable(d: Any) -> Any:
    if isinstance(d, bytes):
        return {"__b64": base64.b64encode(d).decode()}
    if isinstance(d, dict):
        return {k: _jsonable(v) for k, v in d.items()}
    if isinstance(d, list | tuple):
        return [_jsonable(v) for v in d]
    return d


def _unjson(d: Any) -> Any:
    if isinstance(d, dict):
        if set(d) == {"__b64"}:
            return base64.b64decode(d["__b64"])
        return {k: _unjson(v) for k, v in d.items()}
    if isinstance(d, list):
        return [_unjson(v) for v in d]
    return d


def take_pending(state: RunState) -> list[Any]:
    """Remove and rebuild the held events of a run that has just become known."""
    events = [(NodeAgg if p["t"] == NODE_AGG else RECORD_TYPES[p["t"]]).from_dict(_unjson(p["d"]))
              for p in state.pending]
    state.pending = []
    state.held_since_ms = 0
    return events


def expire_pending(state: RunState, cfg: RunConfig, now_ms: int) -> list[Output]:
    """Dead-letter held events of a still-unseen run after ``hold_ms``, with a summary."""
    if not state.pending or state.known or now_ms - state.held_since_ms < cfg.hold_ms:
        return []
    counts: dict[str, int] = {}
    for p in state.pending:
        counts[p["t"]] = counts.get(p["t"], 0) + 1
    summary = {"run_id": state.run_id, "held_since_ms": state.held_since_ms,
               "events": counts, "total": len(state.pending)}
    state.pending = []
    state.held_since_ms = 0
    reason = (f"unseen run {state.run_id}: no manifest or job event within "
              f"{cfg.hold_ms} ms; {summary['total']} events dropped")
    return [dead_letter(state, cfg, reason, json.dumps(summary).encode(), "rw.internal.held",
                        now_ms)]
