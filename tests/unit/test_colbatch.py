"""The direct record→columns path must give exactly what rows_for + check_row give."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest

from runwatch.core.codec import load_codec
from runwatch.core.storage.colbatch import FAST_TYPES, TableColumns, append_fast, undo
from runwatch.core.storage.columns import COLUMNS
from runwatch.core.storage.rows import Origin, RowError, check_row, rows_for
from runwatch.sink.batch import dedup_token
from runwatch.testing.synth import mixed_events

NOW = 1_800_000_000_000
EVENTS = mixed_events(seed=3, runs=4, ticks=30, start_ms=NOW - 60_000)
CODEC = load_codec()
DECODED = [CODEC.decode_dict(CODEC.encode(e.record)) for e in EVENTS]


def _general(name: str, rec: dict[str, Any], origin: Origin) -> dict[str, list[tuple]] | None:
    """What the row path stores for a record (None: it dead-letters something)."""
    try:
        rows = rows_for(name, rec, origin)
    except RowError:
        return None
    out: dict[str, list[tuple]] = {}
    for table, row in rows:
        if check_row(table, row, NOW) is not None:
            return None
        out.setdefault(table, []).append(row)
    return out


def _fast(name: str, rec: dict[str, Any], origin: Origin) -> dict[str, list[tuple]] | None:
    tables: dict[str, TableColumns] = {}

    def cols(t: str) -> TableColumns:
        return tables.setdefault(t, TableColumns(len(COLUMNS[t])))

    marks = append_fast(name, rec, (origin.topic, origin.partition, origin.offset), NOW, cols)
    if marks is None:
        assert all(len(c) == 0 for c in tables.values()), "a declined record left rows"
        return None
    return {t: c.rows() for t, c in tables.items() if len(c)}


def test_fast_path_equals_row_path_on_every_synthetic_hot_record() -> None:
    hot = [(n, r) for n, r in DECODED if n in FAST_TYPES]
    assert {n for n, _ in hot} == FAST_TYPES
    for i, (name, rec) in enumerate(hot):
        origin = Origin("rw.x", 2, i)
        assert _fast(name, rec, origin) == _general(name, rec, origin), name


def _node() -> dict[str, Any]:
    return copy.deepcopy(next(r for n, r in DECODED if n.endswith("NodeSample")))


def _step() -> dict[str, Any]:
    return copy.deepcopy(next(r for n, r in DECODED if n.endswith("StepTiming")))


def _learning() -> dict[str, Any]:
    return copy.deepcopy(next(r for n, r in DECODED if n.endswith("LearningStep")))


def _set(path: tuple[Any, ...], value: Any, make: Any) -> dict[str, Any]:
    rec = make()
    target = rec
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return rec


def _distinct_optionals() -> dict[str, Any]:
    rec = _node()
    for i, g in enumerate(rec["gpus"]):
        for j, f in enumerate(
            ["sm_active_pct", "pcie_rx_bps", "pcie_tx_bps", "nvlink_rx_bps", "nvlink_tx_bps"]
        ):
            g[f] = float(100 * i + j)
        g["xid"] = 10 + i
    return rec


NS = "runwatch.v1."
CASES = [
    # (record type, record) -> the fast path declines (None) or agrees with rows_for
    ("NodeSample", _set(("emitted_at_ms",), 1000, _node)),
    ("NodeSample", _set(("emitted_at_ms",), NOW + 2 * 86_400_000, _node)),
    ("NodeSample", _set(("gpus", 3, "util_pct"), 150.0, _node)),
    ("NodeSample", _set(("gpus", 7, "util_pct"), math.nan, _node)),
    ("NodeSample", _set(("gpus", 2, "util_pct"), 100.5, _node)),
    ("NodeSample", _set(("gpus", 2, "util_pct"), -0.5, _node)),
    ("NodeSample", _set(("gpus", 2, "util_pct"), 100.0, _node)),
    ("NodeSample", _set(("gpus", 4, "xid"), 79, _node)),
    ("NodeSample", _distinct_optionals()),
    ("NodeSample", _set(("gpus", 5, "uuid"), KeyError, _node)),
    ("NodeSample", _set(("gpus", 0, "processes"), [], _node)),
    ("NodeSample", _set(("gpus", 1, "processes"), [{"pid": 1, "run_id": None}], _node)),
    ("NodeSample", _set(("gpus",), [], _node)),
    ("NodeSample", _set(("run_id",), None, _node)),
    ("NodeSample", _set(("source",), KeyError, _node)),
    ("StepTiming", _set(("tokens",), None, _step)),
    ("StepTiming", _set(("step",), KeyError, _step)),
    ("StepTiming", _set(("emitted_at_ms",), 5, _step)),
    ("LearningStep", _set(("metrics",), None, _learning)),
    ("LearningStep", _set(("loss",), KeyError, _learning)),
    ("LearningStep", _set(("emitted_at_ms",), "soon", _learning)),
]


@pytest.mark.parametrize(("kind", "rec"), CASES)
def test_fast_path_declines_or_agrees_on_edge_cases(kind: str, rec: dict[str, Any]) -> None:
    origin = Origin("rw.y", 0, 7)
    fast = _fast(NS + kind, rec, origin)
    if fast is not None:
        assert fast == _general(NS + kind, rec, origin)


@pytest.mark.parametrize(
    ("kind", "rec", "declines"),
    [
        ("NodeSample", _set(("gpus", 3, "util_pct"), 150.0, _node), True),
        ("NodeSample", _set(("gpus", 5, "uuid"), KeyError, _node), True),
        ("StepTiming", _set(("step",), KeyError, _step), True),
        ("JobEvent", {}, True),
        ("NodeSample", _node(), False),
    ],
)
def test_declined_records_leave_earlier_rows_intact(
    kind: str, rec: dict[str, Any], declines: bool
) -> None:
    tables: dict[str, TableColumns] = {}

    def cols(t: str) -> TableColumns:
        return tables.setdefault(t, TableColumns(len(COLUMNS[t])))

    first = append_fast(NS + "NodeSample", _node(), ("t", 0, 1), NOW, cols)
    assert first is not None
    before = {t: c.rows() for t, c in tables.items()}
    marks = append_fast(NS + kind, rec, ("t", 0, 2), NOW, cols)
    assert (marks is None) is declines
    if marks is not None:
        undo(marks)
    assert {t: c.rows() for t, c in tables.items() if len(c) or t in before} == before
    assert all(len({len(col) for col in c.data}) == 1 for c in tables.values())


@pytest.mark.parametrize(
    ("lost", "left"),
    [(set(), 4), ({("t", 0)}, 1), ({("t", 0), ("t", 1)}, 0), ({("u", 1)}, 4)],
)
def test_table_columns_slice_drop_and_token(lost: set[tuple[str, int]], left: int) -> None:
    rows = [("a", "t", 0, 1), ("b", "t", 0, 2), ("c", "t", 0, 3), ("d", "t", 1, 8)]
    cols = TableColumns(4)
    for row in rows:
        cols.append(row)
    assert cols.rows() == rows and cols.row(3) == rows[3] and len(cols) == 4
    assert cols.slice(1, 3).rows() == rows[1:3]
    assert cols.token("x") == dedup_token("x", rows) == dedup_token("x", rows[::-1])
    assert cols.slice(0, 3).token("x") != cols.token("x")
    cols.drop_partitions(lost)
    assert len(cols) == left
    assert cols.rows() == [r for r in rows if (r[1], r[2]) not in lost]
