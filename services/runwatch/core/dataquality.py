"""Data-quality statistics with numpy: pure functions, no I/O, no clock.

Columns come in as a mapping ``name -> sequence``. A *baseline* is the
JSON-able summary of a reference batch (:func:`make_baseline`): per numeric
column the quantile bin edges, bin proportions and a sorted sample, used for
PSI and the two-sample Kolmogorov-Smirnov statistic.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

PSI_THRESHOLD = 0.2
KS_THRESHOLD = 0.1
_BINS = 10
_SAMPLE = 2000
_EPS = 1e-6

_TYPES: dict[str, tuple[type, ...]] = {
    "float": (float, int, np.floating, np.integer),
    "double": (float, int, np.floating, np.integer),
    "int": (int, np.integer),
    "long": (int, np.integer),
    "str": (str,),
    "string": (str,),
    "bool": (bool, np.bool_),
    "boolean": (bool, np.bool_),
}


@dataclass(frozen=True, slots=True)
class ColumnStats:
    """Statistics of one column."""

    name: str
    null_pct: float
    min: float | None = None
    max: float | None = None
    mean: float | None = None
    psi: float | None = None
    ks: float | None = None


@dataclass(frozen=True, slots=True)
class QualityStats:
    """Statistics of one batch."""

    row_count: int
    schema_failures: int
    duplicate_rows: int
    columns: tuple[ColumnStats, ...]
    label_distribution: dict[str, float] = field(default_factory=dict)
    freshness_lag_ms: int | None = None
    drifted: tuple[str, ...] = ()
    max_psi: float | None = None
    max_ks: float | None = None


def is_null(v: Any) -> bool:
    """Tell whether a value is None or a float NaN."""
    return v is None or (isinstance(v, float | np.floating) and math.isnan(v))


def numeric(values: Sequence[Any]) -> np.ndarray | None:
    """Return the non-null numeric values as float64, or None for a non-numeric column.

    Args:
        values: Column values.

    Returns:
        The array or None.

    """
    arr = np.asarray(values)
    if arr.dtype.kind in "iuf":
        out = arr.astype(np.float64, copy=False)
        return out[~np.isnan(out)]
    if arr.dtype.kind == "b":
        return None
    vals = [v for v in values if not is_null(v)]
    if vals and all(
        isinstance(v, int | float | np.integer | np.floating) and not isinstance(v, bool)
        for v in vals
    ):
        return np.asarray(vals, dtype=np.float64)
    return None


def psi(expected_props: Sequence[float], edges: Sequence[float], actual: np.ndarray) -> float:
    """Compute the population stability index of ``actual`` against baseline bins.

    Args:
        expected_props: Baseline proportion per bin.
        edges: Inner bin edges (len = bins - 1).
        actual: Values of the batch.

    Returns:
        PSI (0 = identical).

    """
    if actual.size == 0:
        return 0.0
    idx = np.searchsorted(np.asarray(edges), actual, side="right")
    counts = np.bincount(idx, minlength=len(expected_props)).astype(np.float64)
    a = np.clip(counts / actual.size, _EPS, None)
    e = np.clip(np.asarray(expected_props, dtype=np.float64), _EPS, None)
    return float(np.sum((a - e) * np.log(a / e)))


def ks(sample: np.ndarray, actual: np.ndarray) -> float:
    """Two-sample Kolmogorov-Smirnov statistic (sup of CDF difference).

    Args:
        sample: Sorted baseline sample.
        actual: Values of the batch.

    Returns:
        The statistic in [0, 1].

    """
    if sample.size == 0 or actual.size == 0:
        return 0.0
    a = np.sort(actual)
    grid = np.concatenate([sample, a])
    cdf_s = np.searchsorted(sample, grid, side="right") / sample.size
    cdf_a = np.searchsorted(a, grid, side="right") / a.size
    return float(np.max(np.abs(cdf_s - cdf_a)))


def make_baseline(
    columns: Mapping[str, Sequence[Any]], label: str | None = None, *, timestamp: str | None = None
) -> dict[str, Any]:
    """Summarise a reference batch as a JSON-able baseline.

    Args:
        columns: name -> values.
        label: Label column, summarised as a distribution.
        timestamp: Event-time column: left out (event times are not a feature;
            every later batch is newer by design, so it would always drift).

    Returns:
        ``{"columns": {name: {"edges", "props", "sample"}}, "label": {...}}``.

    """
    out: dict[str, Any] = {"columns": {}}
    for name, values in columns.items():
        arr = numeric(values)
        if arr is None or arr.size == 0 or name == label or name == timestamp:
            continue
        qs = np.quantile(arr, np.linspace(0, 1, _BINS + 1)[1:-1])
        edges = np.unique(qs)
        idx = np.searchsorted(edges, arr, side="right")
        props = np.bincount(idx, minlength=len(edges) + 1) / arr.size
        picks = np.linspace(0, arr.size - 1, min(arr.size, _SAMPLE)).round().astype(np.int64)
        sample = np.sort(arr)[picks]
        out["columns"][name] = {
            "edges": edges.tolist(),
            "props": props.tolist(),
            "sample": sample.tolist(),
        }
    if label is not None and label in columns:
        out["label"] = label_distribution(columns[label])
    return out


def label_distribution(values: Sequence[Any]) -> dict[str, float]:
    """Proportion of each label value (nulls under ``"null"``).

    Args:
        values: Label column.

    Returns:
        label -> proportion.

    """
    n = len(values)
    if n == 0:
        return {}
    counts: dict[str, int] = {}
    for v in values:
        k = "null" if is_null(v) else str(v)
        counts[k] = counts.get(k, 0) + 1
    return {k: c / n for k, c in sorted(counts.items())}


def schema_failures(
    columns: Mapping[str, Sequence[Any]], schema: Mapping[str, str], rows: int
) -> int:
    """Rows with a missing column or a value of the wrong type.

    Args:
        columns: name -> values.
        schema: name -> type name (float, int, str, bool; suffix ``?`` = nullable).
        rows: Row count.

    Returns:
        The number of non-conforming rows.

    Raises:
        ValueError: An unknown type name.

    """
    bad = np.zeros(rows, dtype=bool)
    for name, tname in schema.items():
        nullable = tname.endswith("?")
        base = tname.rstrip("?")
        if base not in _TYPES:
            msg = f"unknown schema type {tname!r} for column {name!r}"
            raise ValueError(msg)
        if name not in columns:
            bad[:] = True
            continue
        ok_types = _TYPES[base]
        for i, v in enumerate(columns[name]):
            if is_null(v):
                bad[i] |= not nullable
            elif not isinstance(v, ok_types) or (
                base not in ("bool", "boolean") and isinstance(v, bool)
            ):
                bad[i] = True
    return int(bad.sum())


def duplicate_rows(columns: Mapping[str, Sequence[Any]], rows: int) -> int:
    """Rows equal to an earlier row.

    Args:
        columns: name -> values.
        rows: Row count.

    Returns:
        Duplicate count.

    """
    names = sorted(columns)
    seen: set[tuple[Any, ...]] = set()
    dups = 0
    cols = [list(columns[n]) for n in names]
    for i in range(rows):
        key = tuple("<null>" if is_null(c[i]) else c[i] for c in cols)
        try:
            if key in seen:
                dups += 1
            else:
                seen.add(key)
        except TypeError:  # unhashable cell
            continue
    return dups


def compute(
    columns: Mapping[str, Sequence[Any]],
    *,
    now_ms: int,
    schema: Mapping[str, str] | None = None,
    label: str | None = None,
    timestamp: str | None = None,
    baseline: Mapping[str, Any] | None = None,
    psi_threshold: float = PSI_THRESHOLD,
    ks_threshold: float = KS_THRESHOLD,
) -> QualityStats:
    """Compute every data-quality figure of a batch.

    Args:
        columns: name -> values (equal lengths).
        now_ms: Current time, for freshness.
        schema: Expected column types.
        label: Label column.
        timestamp: Column of event times in epoch ms, for freshness; never
            compared with the baseline for drift.
        baseline: A baseline from :func:`make_baseline`, for drift.
        psi_threshold: PSI above which a feature counts as drifted.
        ks_threshold: KS above which a feature counts as drifted.

    Returns:
        The statistics.

    Raises:
        ValueError: Columns of different lengths or a bad schema.

    """
    lengths = {len(v) for v in columns.values()}
    if len(lengths) > 1:
        msg = f"columns have different lengths: {sorted(lengths)}"
        raise ValueError(msg)
    rows = lengths.pop() if lengths else 0
    base_cols = (baseline or {}).get("columns", {})
    stats: list[ColumnStats] = []
    drifted: list[str] = []
    psis: list[float] = []
    kss: list[float] = []
    for name, values in columns.items():
        nulls = sum(1 for v in values if is_null(v))
        arr = numeric(values) if name != label else None
        if arr is None or arr.size == 0:
            stats.append(ColumnStats(name=name, null_pct=100.0 * nulls / rows if rows else 0.0))
            continue
        p = k = None
        if name in base_cols and name != timestamp:
            b = base_cols[name]
            p = psi(b["props"], b["edges"], arr)
            k = ks(np.asarray(b["sample"], dtype=np.float64), arr)
            psis.append(p)
            kss.append(k)
            if p > psi_threshold or k > ks_threshold:
                drifted.append(name)
        stats.append(
            ColumnStats(
                name=name,
                null_pct=100.0 * nulls / rows if rows else 0.0,
                min=float(arr.min()),
                max=float(arr.max()),
                mean=float(arr.mean()),
                psi=p,
                ks=k,
            )
        )
    lag = None
    if timestamp and timestamp in columns:
        ts = numeric(columns[timestamp])
        if ts is not None and ts.size:
            lag = int(now_ms - ts.max())
    return QualityStats(
        row_count=rows,
        schema_failures=schema_failures(columns, schema, rows) if schema else 0,
        duplicate_rows=duplicate_rows(columns, rows),
        columns=tuple(stats),
        label_distribution=label_distribution(columns[label]) if label and label in columns else {},
        freshness_lag_ms=lag,
        drifted=tuple(drifted),
        max_psi=max(psis) if psis else None,
        max_ks=max(kss) if kss else None,
    )
