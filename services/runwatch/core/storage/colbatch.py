"""Rows kept column by column, and a direct record→columns path for hot record types.

The sink hands clickhouse-connect columns (``column_oriented=True``), so it
keeps each table's rows as one list per column (:class:`TableColumns`): no
tuple per row, nothing for the garbage collector to track, nothing for the
client to transpose. Every table's last three columns are the Kafka topic,
partition and offset of the row's message.

:func:`append_fast` maps the high-volume records (``NodeSample``,
``StepTiming``, ``LearningStep``) straight into columns. It must give exactly
what :func:`runwatch.core.storage.rows.rows_for` plus :func:`~runwatch.core.storage.rows.check_row`
give; whenever that is not certain (a field is missing or of the wrong shape, a
row would fail ``check_row``) it appends nothing and returns None, and the
caller takes the general row path, which produces the dead letters. Only the
column ranges (:func:`~runwatch.core.storage.rows.column_problem`: a negative
count, a GPU index of 300) are left to the insert, off this hot path: the
client refuses such a row, and the writer dead-letters it with the reason
``check_row`` gives.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from operator import itemgetter
from typing import Any

from runwatch.core.storage.rows import (
    STORE_AHEAD_MS,
    Origin,
    RowError,
    gpu_attribution,
    rows_for,
)
from runwatch.core.stream.eventtime import MIN_EVENT_MS

__all__ = [
    "FAST_TYPES",
    "TableColumns",
    "Undo",
    "append_fast",
    "offsets_token",
    "undo",
]

Row = tuple[Any, ...]
#: What :func:`undo` needs to take a record's rows back: (columns, length before).
Undo = tuple[tuple["TableColumns", int], ...]

_NS = "runwatch.v1."
#: GPU fields in gpu_samples column order (after index, uuid, run).
_GPU_HEAD = itemgetter("index", "uuid")
_GPU_BODY = itemgetter(
    "util_pct", "sm_active_pct", "mem_used_bytes", "mem_total_bytes", "power_w", "temp_c",
    "sm_clock_mhz", "mem_clock_mhz", "throttle_reasons", "ecc_corrected", "ecc_uncorrected",
    "xid", "pcie_rx_bps", "pcie_tx_bps", "nvlink_rx_bps", "nvlink_tx_bps",
)  # fmt: skip


class TableColumns:
    """The rows of one table, one list per column."""

    __slots__ = ("data",)

    def __init__(self, width: int, data: list[list[Any]] | None = None) -> None:
        """Create empty columns (or wrap ``data``, a list of equally long columns).

        Args:
            width: Number of columns (ignored when ``data`` is given).
            data: Existing columns.
        """
        self.data: list[list[Any]] = data if data is not None else [[] for _ in range(width)]

    def __len__(self) -> int:
        """Return the number of rows."""
        return len(self.data[-1])

    def append(self, row: Row) -> None:
        """Append one row (values in column order)."""
        for col, value in zip(self.data, row, strict=True):
            col.append(value)

    def row(self, i: int) -> Row:
        """Return row ``i`` as a tuple."""
        return tuple(col[i] for col in self.data)

    def rows(self) -> list[Row]:
        """Return every row as a tuple (tests, small tables)."""
        return list(zip(*self.data, strict=True))

    def slice(self, lo: int, hi: int) -> TableColumns:
        """Return rows ``lo`` to ``hi`` (exclusive) as new columns."""
        return TableColumns(0, [col[lo:hi] for col in self.data])

    def truncate(self, n: int) -> None:
        """Keep only the first ``n`` rows."""
        for col in self.data:
            del col[n:]

    def drop_partitions(self, lost: set[tuple[str, int]]) -> None:
        """Remove the rows whose Kafka (topic, partition) is in ``lost``."""
        keep = [
            i
            for i, tp in enumerate(zip(self.data[-3], self.data[-2], strict=True))
            if tp not in lost
        ]
        if len(keep) != len(self):
            self.data = [[col[i] for i in keep] for col in self.data]

    def token(self, table: str) -> str:
        """Return the insert deduplication token of these rows (see :func:`offsets_token`)."""
        return offsets_token(table, zip(self.data[-3], self.data[-2], self.data[-1], strict=True))

    def slice_token(self, table: str, lo: int, hi: int) -> str:
        """Return the insert deduplication token of rows ``lo`` to ``hi`` (exclusive).

        A record can make several rows of a table (a NodeSample one per GPU). Two
        slices cut inside such records can cover the same offsets with as many rows
        (GPU 6's row and GPU 7's): with the offsets' token alone, ClickHouse took the
        second insert for a retry of the first and dropped its rows. So a slice's
        token also names where it starts and ends inside its first and last record.
        """
        coords = list(zip(self.data[-3], self.data[-2], self.data[-1], strict=True))
        first, last = coords[lo], coords[hi - 1]
        into = next((lo - j for j in range(lo, -1, -1) if coords[j] != first), lo + 1) - 1
        left = next((j - hi for j in range(hi, len(coords)) if coords[j] != last),
                    len(coords) - hi)
        return f"{offsets_token(table, coords[lo:hi])}/{into}/{left}"


def offsets_token(table: str, coords: Iterable[tuple[str, int, int]]) -> str:
    """Return an insert deduplication token from the rows' Kafka coordinates.

    Args:
        table: Target table.
        coords: (topic, partition, offset) of every row, in any order.

    Returns:
        ``table:`` plus a digest of the per-partition offset ranges and the row count.
    """
    ranges: dict[tuple[str, int], list[int]] = {}
    count = 0
    for topic, part, off in coords:
        count += 1
        lo_hi = ranges.get((topic, part))
        if lo_hi is None:
            ranges[(topic, part)] = [off, off]
        elif off > lo_hi[1]:
            lo_hi[1] = off
        elif off < lo_hi[0]:
            lo_hi[0] = off
    text = ";".join(f"{t}/{p}/{lo}-{hi}" for (t, p), (lo, hi) in sorted(ranges.items()))
    digest = hashlib.sha256(f"{text}#{count}".encode()).hexdigest()[:32]
    return f"{table}:{digest}"


def undo(marks: Undo) -> None:
    """Take back the rows :func:`append_fast` appended for one record."""
    for cols, n in marks:
        cols.truncate(n)


Mapper = Callable[[Mapping[str, Any], Row, int, tuple[TableColumns, ...]], bool]


def _ts_ok(ts: Any, now_ms: int) -> bool:
    return type(ts) is int and MIN_EVENT_MS <= ts <= now_ms + STORE_AHEAD_MS  # as check_row


def _s(value: Any) -> str:
    return "" if value is None else str(value)


def _node(r: Mapping[str, Any], kafka: Row, now_ms: int, out: tuple[TableColumns, ...]) -> bool:
    ts = r["emitted_at_ms"]
    if not _ts_ok(ts, now_ms):
        return False
    host, gpu = out
    eid, node, run = r["event_id"], r["node"], _s(r.get("run_id"))
    tail = (r["source"]["kind"], r["seq"], *kafka)
    gpus = r.get("gpus") or ()
    get = r.get
    host.append(
        (
            eid,
            ts,
            node,
            run,
            r["cpu_pct"],
            r["mem_used_bytes"],
            r["mem_total_bytes"],
            get("disk_read_bps", 0.0),
            get("disk_write_bps", 0.0),
            get("net_rx_bps", 0.0),
            get("net_tx_bps", 0.0),
            len(gpus),
            *tail,
        )
    )
    src, seq, k_topic, k_part, k_off = tail
    rows = []
    for g in gpus:
        body = _GPU_BODY(g)  # every field present, or KeyError: the row path decides
        util = body[0]
        if not (0.0 <= util <= 100.0):  # also False for NaN: the row path dead-letters it
            return False
        gpu_run, nprocs, pmem = gpu_attribution(g, run)
        idx, uuid = _GPU_HEAD(g)
        rows.append(
            (eid, ts, node, idx, uuid, gpu_run, *body, nprocs, pmem, src, seq, k_topic, k_part,
             k_off)
        )  # fmt: skip
    if rows:  # one extend per column (rows transposed in C), after every check passed
        for col, values in zip(gpu.data, zip(*rows, strict=True), strict=True):
            col.extend(values)
    return True


def _one_row(name: str) -> Mapper:
    """Return the mapper of a record type with one row: ``rows_for``'s row, timestamp checked."""

    def mapper(r: Mapping[str, Any], kafka: Row, now_ms: int,
               out: tuple[TableColumns, ...]) -> bool:
        if not _ts_ok(r["emitted_at_ms"], now_ms):
            return False
        ((_table, row),) = rows_for(name, r, Origin(*kafka))
        out[0].append(row)
        return True

    return mapper


_FAST: dict[str, tuple[Mapper, tuple[str, ...]]] = {
    _NS + "NodeSample": (_node, ("host_samples", "gpu_samples")),
    _NS + "StepTiming": (_one_row(_NS + "StepTiming"), ("step_timings",)),
    _NS + "LearningStep": (_one_row(_NS + "LearningStep"), ("learning_steps",)),
}
#: Record types :func:`append_fast` handles.
FAST_TYPES = frozenset(_FAST)


def append_fast(
    name: str,
    record: Mapping[str, Any],
    kafka: Row,
    now_ms: int,
    tables: Callable[[str], TableColumns],
) -> Undo | None:
    """Append a hot record's rows straight into columns.

    Args:
        name: Avro full name.
        record: The record as the codec's ``decode_dict`` returns it.
        kafka: (topic, partition, offset) of its message.
        now_ms: Current time (epoch ms), for the timestamp check.
        tables: Returns the columns of a table (created on first use).

    Returns:
        How to take the rows back (:func:`undo`), or None when nothing was
        appended: not a hot type, a field missing or malformed, or a row that
        ``check_row`` would refuse. The caller then uses ``rows_for``.
    """
    fast = _FAST.get(name)
    if fast is None:
        return None
    mapper, names = fast
    out = tuple(tables(t) for t in names)
    marks = tuple((cols, len(cols)) for cols in out)
    try:
        if mapper(record, kafka, now_ms, out):
            return marks
    except (KeyError, TypeError, AttributeError, ValueError, RowError):
        pass
    undo(marks)  # also evens out columns a failure left ragged
    return None
