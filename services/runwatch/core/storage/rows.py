"""Map decoded telemetry records to ClickHouse rows, table by table.

Size: the catalogue of the sink's tables, one short mapping function per table.

Input is the codec's fast path: the Avro full name and the record as a plain
dict (``Codec.decode_dict``); a dataclass record works through
:func:`record_rows`. Every row ends with the Kafka coordinates of the message it
came from (the sink resumes from them). Timestamps are epoch milliseconds,
which clickhouse-connect writes as raw ``DateTime64(3)`` ticks. A
``NodeSample`` becomes one ``host_samples`` row plus one ``gpu_samples`` row per
GPU; a GPU's run is the first run among its processes, else the sample's.
A dead letter's ``original`` and ``key`` stay ``bytes``: clickhouse-connect writes
bytes to a ``String`` column as they are, but encodes ``str`` as UTF-8 (latin-1 text
stored every byte >= 0x80 as two bytes, and the stored copy no longer decoded).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from runwatch.core import lineage
from runwatch.core.storage.columns import COLUMNS, TABLE_OF
from runwatch.core.stream.eventtime import MAX_STORE_MS, MIN_EVENT_MS, MIN_STORE_MS

__all__ = [
    "COLUMNS",
    "TABLE_OF",
    "check_row",
    "column_problem",
    "Origin",
    "RowError",
    "dead_letter_row",
    "record_rows",
    "rows_for",
]

Row = tuple[Any, ...]
_KAFKA = ("kafka_topic", "kafka_partition", "kafka_offset")
_NS = "runwatch.v1."


class RowError(ValueError):
    """A record cannot be mapped to rows (unknown type, missing field)."""


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a record came from in Kafka."""

    topic: str
    partition: int
    offset: int


def _s(value: Any) -> str:
    return "" if value is None else str(value)


def _head(r: Mapping[str, Any]) -> Row:
    return (r["event_id"], r["emitted_at_ms"], _s(r.get("run_id")))


def _tail(r: Mapping[str, Any], o: Origin) -> Row:
    return (r["source"]["kind"], r["seq"], o.topic, o.partition, o.offset)


def gpu_attribution(g: Mapping[str, Any], run: str) -> tuple[str, int, int]:
    """Return a GPU row's run, process count and process memory.

    The run is the first attributed process's, else ``run`` (the sample's).
    """
    procs = g.get("processes")
    if not procs:
        return run, 0, 0
    if len(procs) == 1:  # the common case, without the generators
        p = procs[0]
        return p.get("run_id") or run, 1, p.get("used_mem_bytes", 0)
    gpu_run = next((p["run_id"] for p in procs if p.get("run_id")), run)
    # process_count is UInt8: 255 reads "255 or more" (300 MPS clients on one GPU made
    # the whole GPU row a dead letter)
    return gpu_run, min(len(procs), PROCESS_COUNT_MAX), sum(p.get("used_mem_bytes", 0)
                                                            for p in procs)


PROCESS_COUNT_MAX = 255
"""Largest ``gpu_samples.process_count`` (a UInt8 column): more processes are stored as 255."""


def _node(r: Mapping[str, Any], o: Origin) -> list[tuple[str, Row]]:
    tail = _tail(r, o)
    run = _s(r.get("run_id"))
    gpus = r.get("gpus") or ()
    out: list[tuple[str, Row]] = [
        (
            "host_samples",
            (
                r["event_id"],
                r["emitted_at_ms"],
                r["node"],
                run,
                r["cpu_pct"],
                r["mem_used_bytes"],
                r["mem_total_bytes"],
                r.get("disk_read_bps", 0.0),
                r.get("disk_write_bps", 0.0),
                r.get("net_rx_bps", 0.0),
                r.get("net_tx_bps", 0.0),
                len(gpus),
                *tail,
            ),
        )
    ]
    eid, ts, node = r["event_id"], r["emitted_at_ms"], r["node"]
    append = out.append
    for g in gpus:
        gpu_run, nprocs, pmem = gpu_attribution(g, run)
        get = g.get
        append(
            (
                "gpu_samples",
                (
                    eid,
                    ts,
                    node,
                    g["index"],
                    g["uuid"],
                    gpu_run,
                    g["util_pct"],
                    get("sm_active_pct"),
                    g["mem_used_bytes"],
                    g["mem_total_bytes"],
                    g["power_w"],
                    g["temp_c"],
                    get("sm_clock_mhz", 0),
                    get("mem_clock_mhz", 0),
                    get("throttle_reasons", 0),
                    get("ecc_corrected", 0),
                    get("ecc_uncorrected", 0),
                    get("xid"),
                    get("pcie_rx_bps"),
                    get("pcie_tx_bps"),
                    get("nvlink_rx_bps"),
                    get("nvlink_tx_bps"),
                    nprocs,
                    pmem,
                    *tail,
                ),
            )
        )
    return out


def _job(r: Mapping[str, Any], o: Origin) -> list[tuple[str, Row]]:
    alloc = r.get("allocation") or {}
    return [
        (
            "job_events",
            (
                *_head(r),
                r["state"],
                r["attempt"],
                _s(r.get("reason")),
                _s(r.get("queue")),
                _s(r.get("priority_class")),
                list(alloc.get("nodes", ())),
                list(alloc.get("gpu_indices", ())),
                _s(alloc.get("gpu_model")),
                r.get("deadline_ms") or None,  # 0 sets no deadline: NULL, not 1970-01-01
                _s(r.get("team")),
                _s(r.get("experiment_family")),
                *_tail(r, o),
            ),
        )
    ]


def _step(r: Mapping[str, Any], o: Origin) -> list[tuple[str, Row]]:
    return [
        (
            "step_timings",
            (
                *_head(r),
                r["step"],
                r["loader_wait_ms"],
                r["compute_ms"],
                r["step_ms"],
                r["samples"],
                r.get("tokens"),
                r.get("effective_batch_size"),
                r.get("worker_restarts", 0),
                *_tail(r, o),
            ),
        )
    ]


def _checkpoint(r: Mapping[str, Any], o: Origin) -> list[tuple[str, Row]]:
    return [
        (
            "checkpoints",
            (
                *_head(r),
                r["step"],
                r["started_at_ms"],
                r["ended_at_ms"],
                r["duration_ms"],
                r["size_bytes"],
                _s(r.get("sha256")),
                _s(r.get("expected_sha256")),
                r["uri"],
                r["outcome"],
                r.get("throughput_bps"),
                *_tail(r, o),
            ),
        )
    ]


def _learning(r: Mapping[str, Any], o: Origin) -> list[tuple[str, Row]]:
    return [
        (
            "learning_steps",
            (
                *_head(r),
                r["step"],
                r["epoch"],
                r["loss"],
                dict(r.get("metrics") or {}),
                r.get("lr"),
                r.get("grad_norm"),
                r.get("nonfinite_count", 0),
                *_tail(r, o),
            ),
        )
    ]


def _validation(r: Mapping[str, Any], o: Origin) -> list[tuple[str, Row]]:
    ds = r.get("dataset") or {}
    return [
        (
            "validation_results",
            (
                *_head(r),
                r["step"],
                r["epoch"],
                dict(r.get("metrics") or {}),
                _s(ds.get("uri")),
                _s(ds.get("version")),
                _s(r.get("slice")),
                r.get("kind") or "validation",
                r.get("sample_count", 0),
                dict(r.get("ci_low") or {}),
                dict(r.get("ci_high") or {}),
                _s(r.get("incumbent_run_id")),
                *_tail(r, o),
            ),
        )
    ]


def _data(r: Mapping[str, Any], o: Origin) -> list[tuple[str, Row]]:
    feats = r.get("features") or ()
    drift = r.get("drift") or {}
    return [
        (
            "data_quality_reports",
            (
                *_head(r),
                r["dataset_uri"],
                _s(r.get("dataset_version")),
                _s(r.get("partition")),
                r["window_start_ms"],
                r["window_end_ms"],
                r["row_count"],
                r["schema_failures"],
                r.get("duplicate_rows", 0),
                r.get("rejected_samples", 0),
                [f["name"] for f in feats],
                [f["null_pct"] for f in feats],
                [f.get("psi") for f in feats],
                [f.get("ks") for f in feats],
                dict(r.get("label_distribution") or {}),
                r.get("freshness_lag_ms"),
                _s(r.get("baseline")),
                list(drift.get("drifted_features", ())),
                drift.get("max_psi"),
                drift.get("max_ks"),
                list(r.get("key_sketch") or ()),
                *_tail(r, o),
            ),
        )
    ]


def _artifact(r: Mapping[str, Any], o: Origin) -> list[tuple[str, Row]]:
    return [
        (
            "artifacts",
            (
                *_head(r),
                r["uri"],
                r["kind"],
                r["size_bytes"],
                _s(r.get("sha256")),
                bool(r["serialization_ok"]),
                _s(r.get("registry_status")),
                *_tail(r, o),
            ),
        )
    ]


def _gate(r: Mapping[str, Any], o: Origin) -> list[tuple[str, Row]]:
    slices = r.get("slices") or ()
    return [
        (
            "gate_decisions",
            (
                *_head(r),
                r["gate"],
                r["decision"],
                dict(r.get("thresholds") or {}),
                dict(r.get("measured") or {}),
                [s["name"] for s in slices],
                [bool(s["passed"]) for s in slices],
                list(r.get("reasons") or ()),
                r["evaluator"],
                _s(r.get("policy")),
                _s(r.get("approves")),
                *_tail(r, o),
            ),
        )
    ]


def _manifest(r: Mapping[str, Any], o: Origin) -> list[tuple[str, Row]]:
    ds = r.get("datasets") or ()
    tf = r.get("transforms") or ()
    hw = r.get("hardware") or {}
    return [
        (
            "run_manifests",
            (
                *_head(r),
                [d["uri"] for d in ds],
                [_s(d.get("version")) for d in ds],
                [_s(d.get("content_hash")) for d in ds],
                [t["name"] for t in tf],
                [t["version"] for t in tf],
                _s(r.get("code_revision")),
                bool(r.get("code_dirty")),
                _s(r.get("image_digest")),
                _s(r.get("config_hash")),
                dict(r.get("config") or {}),
                list(hw.get("nodes", ())),
                hw.get("gpu_count", 0),
                _s(hw.get("gpu_model")),
                _s(r.get("seed_policy")),
                dict(r.get("framework_versions") or {}),
                _s(r.get("experiment_family")),
                _s(r.get("team")),
                _s(r.get("parent_run_id")),
                _s(r.get("resumed_from_checkpoint")),
                dict(r.get("labels") or {}),
                *lineage.hashes(r),  # a producer that left them empty: computed here
                *_tail(r, o),
            ),
        )
    ]


def _stage(r: Mapping[str, Any], o: Origin) -> list[tuple[str, Row]]:
    ins = r.get("inputs") or ()
    feats = r.get("features") or ()
    drift = r.get("drift") or {}
    return [
        (
            "stage_events",
            (
                *_head(r),
                r["stage"],
                _s(r.get("code_version")),
                [d["uri"] for d in ins],
                [_s(d.get("version")) for d in ins],
                [_s(d.get("content_hash")) for d in ins],
                r["dataset_uri"],
                _s(r.get("dataset_version")),
                _s(r.get("content_hash")),
                r.get("window_start_ms"),
                r.get("window_end_ms"),
                r["started_at_ms"],
                r["duration_ms"],
                r.get("rows_in"),
                r.get("rows_out"),
                r.get("outcome") or "succeeded",
                _s(r.get("error")),
                [f["name"] for f in feats],
                [f.get("null_pct", 0.0) for f in feats],
                [f.get("min") for f in feats],
                [f.get("max") for f in feats],
                [f.get("mean") for f in feats],
                [f.get("psi") for f in feats],
                [f.get("ks") for f in feats],
                _s(r.get("baseline")),
                list(drift.get("drifted_features", ())),
                drift.get("max_psi"),
                drift.get("max_ks"),
                drift.get("psi_threshold"),
                dict(r.get("labels") or {}),
                *_tail(r, o),
            ),
        )
    ]


def _alert(r: Mapping[str, Any], o: Origin) -> list[tuple[str, Row]]:
    ev = r.get("evidence") or ()
    return [
        (
            "alerts",
            (
                *_head(r),
                r["alert_id"],
                r["dedup_key"],
                r["status"],
                r["severity"],
                r["detector"],
                r["indicator"],
                r.get("observed"),
                r.get("expected"),
                r["score"],
                r["probable_cause"],
                [e["signal"] for e in ev],
                [e["indicator"] for e in ev],
                [e.get("observed") for e in ev],
                [e["at_ms"] for e in ev],
                r["title"],
                r["summary"],
                _s(r.get("team")),
                _s(r.get("experiment_family")),
                _s(r.get("owner")),
                _s(r.get("node")),
                dict(r.get("labels") or {}),
                r["first_seen_ms"],
                r["last_seen_ms"],
                *_tail(r, o),
            ),
        )
    ]


def _dead(r: Mapping[str, Any], o: Origin) -> list[tuple[str, Row]]:
    key = r.get("key")
    return [
        (
            "dead_letters",
            (
                r["event_id"],
                r["failed_at_ms"],
                "upstream",
                "",
                r["topic"],
                r["partition"],
                r["offset"],
                r["reason"],
                bytes(r["original"]),
                None if key is None else bytes(key),
                r["source"]["kind"],
                *_KAFKA_OF(o),
            ),
        )
    ]


def _KAFKA_OF(o: Origin) -> Row:  # noqa: N802 - reads like the column group it fills
    return (o.topic, o.partition, o.offset)


_MAPPERS: dict[str, Callable[[Mapping[str, Any], Origin], list[tuple[str, Row]]]] = {
    _NS + "NodeSample": _node,
    _NS + "JobEvent": _job,
    _NS + "StepTiming": _step,
    _NS + "CheckpointEvent": _checkpoint,
    _NS + "LearningStep": _learning,
    _NS + "ValidationResult": _validation,
    _NS + "DataQualityReport": _data,
    _NS + "ArtifactEvent": _artifact,
    _NS + "GateDecision": _gate,
    _NS + "RunManifest": _manifest,
    _NS + "StageEvent": _stage,
    _NS + "Alert": _alert,
    _NS + "DeadLetter": _dead,
}


def rows_for(name: str, record: Mapping[str, Any], origin: Origin) -> list[tuple[str, Row]]:
    """Return the ``(table, row)`` pairs for one decoded record.

    Args:
        name: Avro full name, e.g. ``runwatch.v1.NodeSample``.
        record: The record as the codec's ``decode_dict`` returns it.
        origin: Kafka coordinates of the message.

    Returns:
        Rows whose values follow :data:`COLUMNS` of their table.

    Raises:
        RowError: Unknown record type or a required field is missing.
    """
    mapper = _MAPPERS.get(name)
    if mapper is None:
        msg = f"no table for record type {name!r}"
        raise RowError(msg)
    try:
        return mapper(record, origin)
    except (KeyError, TypeError, AttributeError) as exc:
        msg = f"cannot map {name} to rows: {type(exc).__name__}: {exc}"
        raise RowError(msg) from exc


def record_rows(record: Any, origin: Origin) -> list[tuple[str, Row]]:
    """Return the rows of a runwatch dataclass record (see :func:`rows_for`)."""
    return rows_for(record.AVRO_NAME, record.to_dict(), origin)


def dead_letter_row(
    *,
    event_id: str,
    now_ms: int,
    stage: str,
    target_table: str,
    origin: Origin,
    reason: str,
    original: bytes,
    key: bytes | None,
) -> Row:
    """Build a ``dead_letters`` row for something the sink could not store.

    Args:
        event_id: A stable id (for example ``topic:partition:offset``).
        now_ms: When it failed (epoch ms).
        stage: ``decode``, ``map`` or ``insert``.
        target_table: The table it was meant for ('' when unknown).
        origin: Kafka coordinates of the message.
        reason: What went wrong (ClickHouse's message for rejected rows).
        original: The original message bytes.
        key: The original message key.

    Returns:
        A row following ``COLUMNS['dead_letters']``.
    """
    return (
        event_id,
        now_ms,
        stage,
        target_table,
        origin.topic,
        origin.partition,
        origin.offset,
        reason[:4000],
        bytes(original),
        None if key is None else bytes(key),
        "sink",
        *_KAFKA_OF(origin),
    )


#: Job states after which the sink writes a run's summary (``run.finish`` takes these four;
#: a preempted run resumed later is summarised again when that attempt ends).
SUMMARISED_STATES = ("succeeded", "failed", "cancelled", "preempted")
#: The same, as a ClickHouse tuple literal for the sink's queries.
SUMMARISED_SQL = "(" + ", ".join(f"'{s}'" for s in SUMMARISED_STATES) + ")"
#: How far ahead of the sink's clock a row's time may be; the tables refuse later ones
#: (and times before 2000, ``MIN_EVENT_MS``).
STORE_AHEAD_MS = 86_400_000
_TS_INDEX = {t: cols.index("ts") for t, cols in COLUMNS.items()}
_UTIL_INDEX = COLUMNS["gpu_samples"].index("util_pct")


UNSIGNED_BITS: dict[str, dict[str, int]] = {
    "alerts": {"seq": 64},
    "artifacts": {"size_bytes": 64, "seq": 64},
    "checkpoints": {"step": 64, "size_bytes": 64, "seq": 64},
    "data_quality_reports": {"row_count": 64, "schema_failures": 64, "duplicate_rows": 64,
                             "rejected_samples": 64, "seq": 64},
    "gate_decisions": {"seq": 64},
    "gpu_samples": {"gpu_index": 8, "mem_used_bytes": 64, "mem_total_bytes": 64,
                    "sm_clock_mhz": 16, "mem_clock_mhz": 16, "throttle_reasons": 64,
                    "ecc_corrected": 64, "ecc_uncorrected": 64, "process_count": 8,
                    "process_mem_bytes": 64, "seq": 64},
    "host_samples": {"mem_used_bytes": 64, "mem_total_bytes": 64, "gpu_count": 8, "seq": 64},
    "job_events": {"attempt": 16, "gpu_indices": 16, "seq": 64},
    "learning_steps": {"step": 64, "epoch": 64, "nonfinite_count": 64, "seq": 64},
    "run_manifests": {"gpu_count": 32, "seq": 64},
    "stage_events": {"seq": 64},
    "step_timings": {"step": 64, "samples": 64, "tokens": 64, "effective_batch_size": 64,
                     "worker_restarts": 32, "seq": 64},
    "validation_results": {"step": 64, "epoch": 64, "sample_count": 64, "seq": 64},
}
"""The unsigned columns (``UIntN``, arrays of them) of every table: Avro's int and long are
signed, so ``attempt: -1``, ``step: -1`` or a GPU index of 300 (a ``UInt8``) is a valid
record the table cannot hold, and its insert failed in the client with "Unable to create
native array". The sink's fast path leaves them to that insert; its writer names a row the
client refuses by :func:`column_problem`. Held to the DDL, table by table, by
``tests/contract/test_columns_match_schemas.py``."""
INSTANT_COLUMNS: dict[str, tuple[str, ...]] = {
    "alerts": ("evidence_at", "first_seen", "last_seen"),
    "checkpoints": ("started_at", "ended_at"),
    "data_quality_reports": ("window_start", "window_end"),
    "job_events": ("deadline",),
    "stage_events": ("window_start", "window_end", "started_at"),
}
"""The ``DateTime64`` columns besides ``ts`` (held to the DDL like :data:`UNSIGNED_BITS`):
one past 2299 was stored, and every query reading it failed."""
_UNSIGNED_AT: dict[str, tuple[tuple[int, str, int], ...]] = {
    t: tuple((COLUMNS[t].index(c), c, (1 << bits) - 1) for c, bits in cols.items())
    for t, cols in UNSIGNED_BITS.items()
}
_INSTANT_AT: dict[str, tuple[tuple[int, str], ...]] = {
    t: tuple((COLUMNS[t].index(c), c) for c in cols) for t, cols in INSTANT_COLUMNS.items()
}


def check_row(table: str, row: Row, now_ms: int) -> str | None:
    """Return why a row must not be stored (the tables' CONSTRAINTs), or None.

    The same rules are CONSTRAINTs in the DDL; checking them here gives a clear
    dead-letter reason before a round trip.

    Args:
        table: Target table.
        row: Row following ``COLUMNS[table]``.
        now_ms: Current time (epoch ms).

    Returns:
        The reason, or None when the row is fine.
    """
    ts = row[_TS_INDEX[table]]
    if not isinstance(ts, int) or ts < MIN_EVENT_MS or ts > now_ms + STORE_AHEAD_MS:
        return f"absurd timestamp {ts!r} ms for {table} (before 2000 or over a day ahead)"
    return column_problem(table, row)


def column_problem(table: str, row: Row) -> str | None:
    """Return why a row's value does not fit its column, whatever the time, or None.

    ``runwatch emit`` refuses what the sink would dead-letter with the same reason: a
    GPU's ``util_pct`` outside 0..100 (a CONSTRAINT), a value outside an unsigned
    column (:func:`unsigned_problem`), an instant outside the ``DateTime64`` range.
    """
    if table == "gpu_samples":
        util = row[_UTIL_INDEX]
        if not (0.0 <= util <= 100.0):  # also False for NaN
            return f"gpu util_pct {util!r} outside 0..100"
    return unsigned_problem(table, row) or _instant_problem(table, row)


def unsigned_problem(table: str, row: Row) -> str | None:
    """Return why a row's value does not fit an unsigned column (:data:`UNSIGNED_BITS`)."""
    for i, name, top in _UNSIGNED_AT.get(table, ()):
        value = row[i]
        for v in value if isinstance(value, list | tuple) else (value,):
            if type(v) is int and not 0 <= v <= top:  # other types: the codec's verdict
                return f"{table}.{name} {v!r} outside 0..{top} (the column is unsigned)"
    return None


def _instant_problem(table: str, row: Row) -> str | None:
    """Return why an instant (ms) does not fit a ``DateTime64`` column (:data:`INSTANT_COLUMNS`)."""
    for i, name in _INSTANT_AT.get(table, ()):
        value = row[i]
        for v in value if isinstance(value, list | tuple) else (value,):
            if type(v) is int and not MIN_STORE_MS <= v <= MAX_STORE_MS:
                return (f"{table}.{name} {v} ms is outside the store's 1900..2299 "
                        "(micro- or nanoseconds? give milliseconds)")
    return None


def implausible_ms(at: int, now: int) -> str:
    """Why an instant given in epoch milliseconds cannot be stored ("" when it can).

    The bounds are :func:`check_row`'s (before 2000, or over a day ahead): epoch
    seconds read as milliseconds fall in 1970, microseconds centuries ahead.
    """
    if at < MIN_EVENT_MS:
        return f"{at} ms is before 2000-01-01 (epoch seconds? give milliseconds)"
    if at > now + STORE_AHEAD_MS:
        return (f"{at} ms is more than a day ahead, the store refuses such records "
                "(micro- or nanoseconds? give milliseconds)")
    return ""
