"""Data-quality statistics in plain Python: pure functions, no I/O, no clock.

Size: the statistics of one data-quality report; each is a short pure function.

Columns come in as a mapping ``name -> sequence`` (lists, tuples, numpy arrays,
pandas series: anything with ``tolist()`` is converted once). A *baseline* is
the JSON-able summary of a reference batch (:func:`make_baseline`): per numeric
column the quantile bin edges, bin proportions and a sorted sample, used for
PSI and the two-sample Kolmogorov-Smirnov statistic.

No numpy: this runs inside training jobs through ``runwatch.client.data.report``
and is part of the base install, which stays small (docs/install.md). The
quantiles follow numpy's default ("linear", type 7) definition and its
interpolation formula, so baselines match those numpy would compute.
"""

from __future__ import annotations

import bisect
import datetime
import math
import numbers
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

PSI_THRESHOLD = 0.2
KS_THRESHOLD = 0.1
DRIFT_ALPHA_Z = 3.09
"""A feature drifts only when its PSI or KS is also beyond what chance gives at this one-sided
normal quantile (α = 0.001 per feature: a report checks tens of features), for the sizes of
the batch and the reference (:func:`drift_bounds`). A fixed KS bound of 0.1 marked features
of a 200-row sample of an unchanged distribution drifted in 70 of 100 reports."""
KS_C_ALPHA = 1.949
"""The two-sample KS critical coefficient c(α) = sqrt(-ln(α / 2) / 2) at α = 0.001."""
DRIFT_ALPHA_REPORT = 0.01
"""Chance of a report of an unchanged table marking any feature drifted: a table of more
than 10 compared features tests each at 0.01 / features instead of 0.001 (Bonferroni).
At 0.001 each, 500 unchanged columns of 400 rows marked one drifted in 6 reports of 10,
and that mark explained a NaN loss as data."""
_BINS = 10
_SAMPLE = 2000
_EPS = 1e-6


def _is_bool(v: Any) -> bool:
    """Python or numpy booleans (numpy's are not registered with :mod:`numbers`)."""
    return isinstance(v, bool) or (
        type(v).__module__ == "numpy" and type(v).__name__ in ("bool", "bool_")
    )


def _is_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not _is_bool(v)


def _is_float(v: Any) -> bool:
    t = type(v)
    if t is float or t is int:  # the common cells first: numbers.Real is an ABC (slow)
        return True
    if t is str or t is bool or v is None:
        return False
    return isinstance(v, numbers.Real) and not _is_bool(v)


def as_float(v: Any) -> float:
    """Return a real number as a float; an integer beyond the float range is ±inf.

    ``float(10**400)`` raises OverflowError: a report of such a column failed with
    it, naming no column. As a float it is infinite, and infinities are kept (min,
    max; a mean of NaN).
    """
    try:
        return float(v)
    except OverflowError:
        return math.inf if v > 0 else -math.inf


def _is_str(v: Any) -> bool:
    return isinstance(v, str)


_TYPES: dict[str, Any] = {
    "float": _is_float,
    "double": _is_float,
    "int": _is_int,
    "long": _is_int,
    "str": _is_str,
    "string": _is_str,
    "bool": _is_bool,
    "boolean": _is_bool,
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


def _as_list(values: Sequence[Any]) -> list[Any]:
    """Return the values as a list of Python scalars where the container can convert them."""
    tolist = getattr(values, "tolist", None)
    if callable(tolist):
        out = tolist()
        if isinstance(out, list):
            return out
    return list(values)


#: pandas' missing-value markers (``pd.NA`` in nullable Int64/boolean/string columns, ``pd.NaT``).
_NA_TYPES = frozenset({"NAType", "NaTType"})


def is_null(v: Any) -> bool:
    """Tell whether a value is None, a float NaN or pandas' ``NA``/``NaT``."""
    t = type(v)
    if t is float:  # the common cells first (an ABC check per cell cost most of a report)
        return v != v
    if t is int or t is str or t is bool:
        return False
    if v is None:
        return True
    if _is_float(v):
        return not isinstance(v, numbers.Integral) and math.isnan(v)
    return t.__name__ in _NA_TYPES


def mean(values: Sequence[float]) -> float:
    """The mean of floats, exact where it can be: NaN when +inf and -inf meet, no overflow."""
    try:
        return math.fsum(values) / len(values)
    except ValueError:  # -inf + inf
        return math.nan
    except OverflowError:  # finite values whose sum is over the float range
        return math.fsum(v / len(values) for v in values)


def epoch_ms(values: Sequence[Any]) -> list[float] | None:
    """Event times as epoch ms: numbers as they are, datetimes (naive ones as UTC) converted."""
    out: list[float] = []
    for v in _as_list(values):
        if is_null(v):
            continue
        if isinstance(v, datetime.datetime):
            aware = v if v.tzinfo is not None else v.replace(tzinfo=datetime.UTC)
            out.append(aware.timestamp() * 1000.0)
        elif _is_float(v):
            out.append(as_float(v))
        else:
            return None
    return out


def numeric(values: Sequence[Any]) -> list[float] | None:
    """Return the non-null numeric values as floats, or None for a non-numeric column.

    Booleans are not numeric.

    Args:
        values: Column values.

    Returns:
        The values (in column order) or None.

    """
    vals = [v for v in _as_list(values) if not is_null(v)]
    if vals and all(_is_float(v) for v in vals):
        return [as_float(v) for v in vals]
    return None


def _lerp(a: float, b: float, t: float) -> float:
    """Interpolate between two order statistics as numpy does (exact at both ends)."""
    diff = b - a
    return b - diff * (1.0 - t) if t >= 0.5 else a + diff * t


def quantile(ordered: Sequence[float], q: float) -> float:
    """Quantile of sorted values, numpy's default ("linear") method.

    Args:
        ordered: Values sorted ascending (at least one).
        q: Quantile in [0, 1].

    Returns:
        The interpolated quantile.

    """
    n = len(ordered)
    h = n * q + (1.0 + q * -1.0) - 1.0  # numpy's virtual index with alpha = beta = 1
    lo = min(max(math.floor(h), 0), n - 1)
    hi = min(lo + 1, n - 1)
    return _lerp(ordered[lo], ordered[hi], h - math.floor(h))


def _linspace(start: float, stop: float, num: int) -> list[float]:
    """``numpy.linspace(start, stop, num)``."""
    if num == 1:
        return [start]
    step = (stop - start) / (num - 1)
    return [start + i * step for i in range(num - 1)] + [stop]


def _bin_counts(edges: Sequence[float], values: Sequence[float], bins: int) -> list[int]:
    """Counts per bin, bin ``i`` holding ``edges[i-1] <= v < edges[i]`` (searchsorted right)."""
    counts = [0] * max(bins, len(edges) + 1)
    for v in values:
        counts[bisect.bisect_right(edges, v)] += 1
    return counts


def psi(expected_props: Sequence[float], edges: Sequence[float], actual: Sequence[float]) -> float:
    """Compute the population stability index of ``actual`` against baseline bins.

    Args:
        expected_props: Baseline proportion per bin.
        edges: Inner bin edges (len = bins - 1).
        actual: Values of the batch.

    Returns:
        PSI (0 = identical).

    """
    values = _as_list(actual)
    if not values:
        return 0.0
    counts = _bin_counts(list(edges), values, len(expected_props))
    total = 0.0
    # the batch's proportions with half a count added to every bin (Jeffreys): an empty
    # bin of a small batch (0 of an expected 5 in 1 of 150 draws per bin at 50 rows) read
    # as a proportion of 1e-6 gave a PSI above 1 by itself
    n = len(values) + 0.5 * len(counts)
    for c, e in zip(counts, list(expected_props) + [0.0] * (len(counts) - len(expected_props)),
                    strict=True):
        a = max((c + 0.5) / n, _EPS)
        e = max(float(e), _EPS)
        total += (a - e) * math.log(a / e)
    return total


def ks(sample: Sequence[float], actual: Sequence[float]) -> float:
    """Two-sample Kolmogorov-Smirnov statistic (sup of CDF difference).

    Args:
        sample: Sorted baseline sample.
        actual: Values of the batch.

    Returns:
        The statistic in [0, 1].

    """
    s = _as_list(sample)
    a = sorted(_as_list(actual))
    ns, na = len(s), len(a)
    if ns == 0 or na == 0:
        return 0.0
    i = j = 0
    d = 0.0
    # Walk both sorted lists; at each observed value x both CDFs count the values <= x.
    while i < ns or j < na:
        x = s[i] if j >= na or (i < ns and s[i] <= a[j]) else a[j]
        while i < ns and s[i] <= x:
            i += 1
        while j < na and a[j] <= x:
            j += 1
        d = max(d, abs(i / ns - j / na))
    return d


def sequence(values: Sequence[float], base: Mapping[str, Any]) -> bool:
    """Return whether a column is a sequence (row ids, a counter, epoch times), not a feature.

    Its batch holds distinct whole numbers, as the baseline's sample does, and lies wholly
    beyond the baseline's range: each batch of an auto-increment id or a time-like column not
    passed as ``timestamp=`` is newer than the reference by design, so it always "drifted",
    and that drift, evidence at every report, named ``data`` the cause of every learning
    symptom of a run whose data never changed (a NaN loss, a divergence). A feature whose
    values repeat (counts, categories as codes) or overlap the reference is compared.
    """
    sample = base.get("sample") or []
    if len(values) < 2 or len(sample) < 2:
        return False
    if min(values) <= sample[-1] and max(values) >= sample[0]:
        return False  # overlaps the reference: compared
    return (_distinct_whole(values) and _distinct_whole(sample))


def _distinct_whole(values: Sequence[float]) -> bool:
    return (all(math.isfinite(v) and v == int(v) for v in values)
            and len(set(values)) == len(values))


def make_baseline(
    columns: Mapping[str, Sequence[Any]], label: str | None = None, *, timestamp: str | None = None,
    key: str | None = None,
) -> dict[str, Any]:
    """Summarise a reference batch as a JSON-able baseline.

    Args:
        columns: name -> values.
        label: Label column, summarised as a distribution.
        timestamp: Event-time column: left out (event times are not a feature;
            every later batch is newer by design, so it would always drift).
        key: Row-key column: left out (identifiers are not a feature: a new block of
            hashed or sampled ids is no shift of the data).

    Returns:
        ``{"columns": {name: {"edges", "props", "sample"}}, "label": {...}}``.

    """
    out: dict[str, Any] = {"columns": {}}
    for name, values in columns.items():
        arr = numeric(values)
        if not arr or name in (label, timestamp, key):
            continue
        arr = [v for v in arr if math.isfinite(v)]  # quantiles of infinities are NaN
        if not arr:
            continue
        ordered = sorted(arr)
        qs = [quantile(ordered, q) for q in _linspace(0.0, 1.0, _BINS + 1)[1:-1]]
        edges = sorted(set(qs))
        counts = _bin_counts(edges, arr, len(edges) + 1)
        picks = _linspace(0.0, len(arr) - 1.0, min(len(arr), _SAMPLE))
        out["columns"][name] = {
            "edges": edges,
            "props": [c / len(arr) for c in counts],
            "sample": [ordered[round(p)] for p in picks],
            "n": len(arr),
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
        k = _label_key(v)
        counts[k] = counts.get(k, 0) + 1
    return {k: c / n for k, c in sorted(counts.items())}


def _label_key(v: Any) -> str:
    """Name a label: a whole number the same as an integer or a float (``1``, ``1.0``).

    A label column read as floats (pandas makes class ids floats once one is null)
    named every label anew (``1.0`` instead of ``1``): the whole balance read as shifted.
    """
    t = type(v)
    if t is str or t is int:
        return v if t is str else str(v)
    if is_null(v):
        return "null"
    if isinstance(v, numbers.Integral) and t is not bool:
        return str(int(v))
    if _is_float(v):
        f = as_float(v)
        return str(int(f)) if f.is_integer() else str(f)
    return str(v)


def check_schema(schema: Any) -> None:
    """Refuse a schema that is not ``{column: type name}`` with known type names.

    ``schema=["user_id", "price"]`` raised a bare AttributeError ('list' object has
    no attribute 'items') from deep in the statistics.

    Raises:
        TypeError: Not a mapping, or a type that is no text (``{"a": int}``).
        ValueError: An unknown type name.

    """
    if not isinstance(schema, Mapping):
        msg = (f"schema must map column names to type names (e.g. {{'user_id': 'int'}}), "
               f"not {type(schema).__name__}")
        raise TypeError(msg)
    for name, tname in schema.items():
        if not isinstance(tname, str):
            msg = (f"schema type for column {name!r} must be a type name such as 'int' or "
                   f"'float?', not {tname!r}")
            raise TypeError(msg)
        if tname.rstrip("?") not in _TYPES:
            msg = f"unknown schema type {tname!r} for column {name!r}"
            raise ValueError(msg)


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
        TypeError: A schema that is no mapping of type names (:func:`check_schema`).
        ValueError: An unknown type name.

    """
    check_schema(schema)
    bad = [False] * rows
    for name, tname in schema.items():
        nullable = tname.endswith("?")
        base = tname.rstrip("?")
        if name not in columns:
            bad = [True] * rows
            continue
        conforms = _TYPES[base]
        for i, v in enumerate(columns[name]):
            if is_null(v):
                bad[i] |= not nullable
            elif not conforms(v):
                bad[i] = True
    return sum(bad)


def duplicate_rows(columns: Mapping[str, Sequence[Any]], rows: int) -> int:
    """Rows equal to an earlier row.

    A row whose cells are all hashable (numbers, strings, timestamps) is its own key;
    a column holding a list, array or dict cell (tags, token ids, an embedding) is
    keyed by :func:`_cell_key` from the first such cell on (the whole column, so its
    earlier rows' keys are unchanged): such a column hid every duplicate of the table
    (its rows were skipped as unhashable, and duplicates were never counted).

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
        key = tuple(_NULL_KEY if is_null(c[i]) else c[i] for c in cols)
        try:
            found = key in seen
        except TypeError:  # a list, array or dict cell: key its column by contents
            for j, c in enumerate(cols):
                if not _hashable(c[i]):
                    cols[j] = [_cell_key(v) for v in c]
            key = tuple(_NULL_KEY if is_null(c[i]) else c[i] for c in cols)
            found = key in seen
        if found:
            dups += 1
        else:
            seen.add(key)
    return dups


_NULL_KEY = "<null>"
"""The key of a null cell (None, NaN, NA): nulls are equal to one another here."""


def _hashable(v: Any) -> bool:
    try:
        hash(v)
    except TypeError:
        return False
    return True


def _cell_key(v: Any) -> Any:
    """Return a hashable key for a cell, equal for cells of equal contents.

    A numeric array is its dtype, shape and bytes (an embedding: exact, and fast for long
    vectors); a list (or an unhashable tuple, or an object array) the tuple of its items'
    keys; a dict the frozenset of its items (their order does not matter); a set a
    frozenset; a hashable cell is itself (a null :data:`_NULL_KEY`, as in a row of
    hashable cells, so a column keyed from its first list on keeps its earlier keys);
    anything else its type and ``repr``.
    """
    t = type(v)
    if t is list:
        return ("seq", tuple(_cell_key(x) for x in v))
    if _hashable(v):
        return _NULL_KEY if is_null(v) else v
    dtype = getattr(v, "dtype", None)
    if dtype is not None and hasattr(v, "tobytes") and hasattr(v, "shape"):
        if getattr(dtype, "hasobject", False):  # object cells: their bytes are pointers
            return ("array", tuple(v.shape), tuple(_cell_key(x) for x in v.ravel().tolist()))
        return ("array", str(dtype), tuple(v.shape), v.tobytes())
    if isinstance(v, Mapping):
        return ("map", frozenset((_cell_key(k), _cell_key(x)) for k, x in v.items()))
    if isinstance(v, set):
        return ("set", frozenset(_cell_key(x) for x in v))
    if isinstance(v, (list, tuple)):
        return ("seq", tuple(_cell_key(x) for x in v))
    return ("repr", t.__name__, repr(v))


def drift_bounds(n: int, m: int, bins: int, psi_threshold: float = PSI_THRESHOLD,
                 ks_threshold: float = KS_THRESHOLD, features: int = 1) -> tuple[float, float]:
    """Return the PSI and KS a feature must pass to count as drifted, for its sample sizes.

    Each is the larger of its fixed bound (the effect worth reporting) and what
    chance alone reaches with probability 0.001 (:data:`DRIFT_ALPHA_Z`) when the
    batch and the reference come from one distribution: for KS the two-sample
    critical value ``c(α)·sqrt((n + m) / (n·m))``; for PSI the chi-square
    approximation ``PSI ≈ χ²(bins − 1)·(1/n + 1/m)``, its mean plus ``z`` standard
    deviations. Large batches keep the fixed bounds (0.2, 0.1 from about 800 rows
    a side); small ones need a larger shift.

    Args:
        n: Values of the batch.
        m: Values of the reference (its baseline's row count).
        bins: PSI bins.
        psi_threshold: The fixed PSI bound.
        ks_threshold: The fixed KS bound.
        features: Features the report compares (:data:`DRIFT_ALPHA_REPORT`).

    Returns:
        (PSI bound, KS bound).

    """
    if n <= 0 or m <= 0:
        return math.inf, math.inf
    z, c = DRIFT_ALPHA_Z, KS_C_ALPHA
    if features * 0.001 > DRIFT_ALPHA_REPORT:  # a wide table: each feature at a smaller α
        alpha = DRIFT_ALPHA_REPORT / features
        z = statistics.NormalDist().inv_cdf(1.0 - alpha)
        c = math.sqrt(-math.log(alpha / 2.0) / 2.0)
    scale = 1.0 / n + 1.0 / m
    dof = max(bins - 1, 1)
    psi_chance = (dof + z * math.sqrt(2.0 * dof)) * scale
    return max(psi_threshold, psi_chance), max(ks_threshold, c * math.sqrt(scale))


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
    key: str | None = None,
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
        key: Row-key column; never compared for drift (ids are no feature).
        psi_threshold: PSI above which a feature counts as drifted (raised for small
            samples: :func:`drift_bounds`).
        ks_threshold: KS above which a feature counts as drifted (likewise).

    Returns:
        The statistics.

    Raises:
        TypeError: A schema that is no mapping of column names to type names.
        ValueError: Columns of different lengths or an unknown schema type.

    """
    if schema is not None:
        check_schema(schema)
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
    unfeatured = (label, timestamp, key)
    compared = sum(1 for name in columns if name in base_cols and name not in unfeatured)
    for name, values in columns.items():
        nulls = sum(1 for v in values if is_null(v))
        arr = numeric(values) if name != label else None
        if not arr:
            stats.append(ColumnStats(name=name, null_pct=100.0 * nulls / rows if rows else 0.0))
            continue
        p = k = None
        if (name in base_cols and name not in (timestamp, key)
                and not sequence(arr, base_cols[name])):
            b = base_cols[name]
            p = psi(b["props"], b["edges"], arr)
            k = ks(b["sample"], arr)
            psis.append(p)
            kss.append(k)
            psi_bound, ks_bound = drift_bounds(len(arr), int(b.get("n") or len(b["sample"])),
                                               len(b["props"]), psi_threshold, ks_threshold,
                                               compared)
            if p > psi_bound or k > ks_bound:
                drifted.append(name)
        stats.append(
            ColumnStats(
                name=name,
                null_pct=100.0 * nulls / rows if rows else 0.0,
                min=min(arr),
                max=max(arr),
                mean=mean(arr),
                psi=p,
                ks=k,
            )
        )
    lag = None
    if timestamp and timestamp in columns:
        ts = epoch_ms(columns[timestamp])
        if ts:
            lag = int(now_ms - max(ts))
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
