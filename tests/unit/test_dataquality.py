from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np
import pytest

from runwatch.adapters.publisher import Publisher
from runwatch.client.data import load_baseline, report, to_columns
from runwatch.core.codec import load_codec
from runwatch.core.signals import dataquality as dq


class ListTransport:
    def __init__(self):
        self.out = []

    def produce(self, topic, key, value):
        self.out.append((topic, key, value))


RNG = np.random.default_rng(7)


@pytest.mark.parametrize(
    "shift,drifted",
    [(0.0, False), (0.05, False), (1.0, True), (3.0, True)],
)
def test_psi_and_ks_detect_shift(shift, drifted) -> None:
    ref = RNG.normal(size=5000)
    base = dq.make_baseline({"x": ref.tolist()})
    cur = RNG.normal(loc=shift, size=5000)
    st = dq.compute({"x": cur.tolist()}, now_ms=0, baseline=base)
    assert (st.drifted == ("x",)) is drifted
    assert (st.max_psi > dq.PSI_THRESHOLD) is drifted


@pytest.mark.parametrize(("rows", "ref_rows"), [(200, 200), (200, 5000), (300, 300), (50, 1000)])
def test_small_samples_of_an_unchanged_distribution_are_not_drifted(rows, ref_rows) -> None:
    """A report of a 200-row sample (the docs suggest sampling big batches) was marked
    drifted in 70 of 100 draws of the reference's own distribution (KS > 0.1 by chance),
    and the drift then explained a NaN-loss page as a data problem."""
    rng = np.random.default_rng(rows + ref_rows)
    base = dq.make_baseline({"x": rng.normal(size=ref_rows).tolist(),
                             "y": rng.exponential(size=ref_rows).tolist()})
    drifted = sum(bool(dq.compute({"x": rng.normal(size=rows).tolist(),
                                   "y": rng.exponential(size=rows).tolist()},
                                  now_ms=0, baseline=base).drifted) for _ in range(100))
    assert drifted <= 2  # two features at α = 0.001 each: about 0.2 in 100 expected


def test_a_wide_unchanged_table_is_not_drifted_and_a_shift_in_it_still_is() -> None:
    """500 unchanged columns of 400 rows, each at α = 0.001, marked one drifted in 6 of
    10 reports; the report as a whole is held to 0.01."""
    rng = np.random.default_rng(5)
    names = [f"f{i}" for i in range(500)]
    base = dq.make_baseline({n: rng.normal(size=400).tolist() for n in names})
    reports = [dq.compute({n: rng.normal(size=400).tolist() for n in names}, now_ms=0,
                          baseline=base).drifted for _ in range(10)]
    assert sum(bool(d) for d in reports) <= 1
    moved = {n: rng.normal(loc=0.6 if n == "f7" else 0.0, size=400).tolist() for n in names}
    assert dq.compute(moved, now_ms=0, baseline=base).drifted == ("f7",)


@pytest.mark.parametrize(("rows", "shift"), [(200, 0.6), (50, 1.5), (5000, 0.3)])
def test_a_real_shift_is_still_drifted_in_a_small_sample(rows, shift) -> None:
    rng = np.random.default_rng(rows)
    base = dq.make_baseline({"x": rng.normal(size=2000).tolist()})
    drifted = sum(dq.compute({"x": rng.normal(loc=shift, size=rows).tolist()}, now_ms=0,
                             baseline=base).drifted == ("x",) for _ in range(50))
    assert drifted >= 48


def test_drift_bounds_are_the_fixed_ones_for_large_samples() -> None:
    assert dq.drift_bounds(5000, 5000, 10) == (dq.PSI_THRESHOLD, dq.KS_THRESHOLD)
    psi_b, ks_b = dq.drift_bounds(200, 200, 10)
    assert ks_b == pytest.approx(1.949 * math.sqrt(2 / 200)) and psi_b > dq.PSI_THRESHOLD
    assert dq.drift_bounds(0, 100, 10) == (math.inf, math.inf)


@pytest.mark.parametrize("n", [50, 500])
def test_ks_matches_definition(n) -> None:
    a = np.sort(RNG.normal(size=n))
    b = RNG.normal(loc=0.5, size=n)
    # brute force sup |F_a - F_b| over every observed point
    pts = np.concatenate([a, b])
    expect = max(abs((a <= p).mean() - (b <= p).mean()) for p in pts)
    assert dq.ks(a, b) == pytest.approx(expect)


def test_psi_zero_on_identical_distribution() -> None:
    ref = RNG.uniform(size=10000)
    base = dq.make_baseline({"x": ref.tolist()})["columns"]["x"]
    assert dq.psi(base["props"], base["edges"], ref) == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize(
    "cols,schema,failures",
    [
        ({"a": [1.0, 2.0, None], "b": ["x", "y", "z"]}, {"a": "float", "b": "str"}, 1),
        ({"a": [1.0, 2.0, None], "b": ["x", "y", "z"]}, {"a": "float?", "b": "str"}, 0),
        ({"a": [1, "2", 3]}, {"a": "int"}, 1),
        ({"a": [True, 1, 0]}, {"a": "int"}, 1),
        ({"a": [1, 2]}, {"a": "int", "missing": "str"}, 2),
    ],
)
def test_schema_conformance(cols, schema, failures) -> None:
    assert dq.compute(cols, now_ms=0, schema=schema).schema_failures == failures


def test_unknown_schema_type_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown schema type"):
        dq.compute({"a": [1]}, now_ms=0, schema={"a": "decimal"})


def test_nulls_duplicates_ranges_labels_freshness() -> None:
    cols = {
        "x": [1.0, 2.0, math.nan, 4.0, 1.0],
        "y": ["a", "b", "a", None, "a"],
        "ts": [1000, 2000, 3000, 4000, 1000],
    }
    st = dq.compute(cols, now_ms=10_000, label="y", timestamp="ts")
    x = next(c for c in st.columns if c.name == "x")
    assert x.null_pct == pytest.approx(20.0) and x.min == 1.0 and x.max == 4.0
    assert x.mean == pytest.approx(2.0)
    assert st.duplicate_rows == 1  # rows 0 and 4 are equal
    assert st.label_distribution == {"a": 0.6, "b": 0.2, "null": 0.2}
    assert st.freshness_lag_ms == 6000
    dup = dq.compute({"a": [1, 1, 2, 1], "b": ["x", "x", "y", "x"]}, now_ms=0)
    assert dup.duplicate_rows == 2


def test_unequal_columns_rejected() -> None:
    with pytest.raises(ValueError, match="different lengths"):
        dq.compute({"a": [1, 2], "b": [1]}, now_ms=0)


@pytest.mark.parametrize(
    "table",
    [
        {"x": [1.0, 2.0], "y": ["a", "b"]},
        [{"x": 1.0, "y": "a"}, {"x": 2.0, "y": "b"}],
    ],
)
def test_table_shapes(table) -> None:
    assert to_columns(table) == {"x": [1.0, 2.0], "y": ["a", "b"]}


def test_pandas_and_arrow_tables() -> None:
    pd = pytest.importorskip("pandas")
    pa = pytest.importorskip("pyarrow")
    df = pd.DataFrame({"x": [1.0, 2.0], "y": ["a", "b"]})
    assert to_columns(df) == {"x": [1.0, 2.0], "y": ["a", "b"]}
    assert to_columns(pa.table({"x": [1.0, 2.0], "y": ["a", "b"]})) == {
        "x": [1.0, 2.0],
        "y": ["a", "b"],
    }


def test_report_stores_baseline_then_measures_drift(tmp_path: Path) -> None:
    t = ListTransport()
    pub = Publisher(t, kind="sdk")
    ref = {"f": RNG.normal(size=2000).tolist(), "label": (["cat", "dog"] * 1000)}
    r1 = report(
        "s3://ds",
        "v1",
        "d=1",
        ref,
        baseline="ref",
        label="label",
        baseline_directory=tmp_path,
        publisher=pub,
    )
    assert load_baseline("s3://ds", "ref", tmp_path) is not None
    assert r1.drift is not None and r1.drift.drifted_features == ()
    cur = {"f": (RNG.normal(size=2000) * 3).tolist(), "label": ["cat"] * 2000}
    r2 = report(
        "s3://ds",
        "v1",
        "d=2",
        cur,
        baseline="ref",
        label="label",
        baseline_directory=tmp_path,
        publisher=pub,
        schema={"f": "float", "label": "str"},
        rejected_samples=4,
        run_id="run-1",
    )
    assert r2.drift.drifted_features == ("f",) and r2.label_distribution == {"cat": 1.0}
    assert r2.rejected_samples == 4 and r2.run_id == "run-1" and r2.baseline == "ref"
    topic, key, value = t.out[-1]
    assert topic == "rw.data" and key == "s3://ds"
    assert load_codec().decode(value) == r2


def test_the_fast_cell_checks_agree_with_the_abstract_ones() -> None:
    """``is_null`` and the numeric check test the common cell types first (an ABC check per
    cell cost most of a report: 9.4 s for 200,000 rows x 7 columns); every type still gets
    the answer the ``numbers`` definitions give."""
    import decimal
    import math
    import numbers

    import numpy as np

    from runwatch.core.signals import dataquality as dq

    def ref_float(v: object) -> bool:
        return isinstance(v, numbers.Real) and not dq._is_bool(v)

    def ref_null(v: object) -> bool:
        if v is None:
            return True
        if ref_float(v):
            return not isinstance(v, numbers.Integral) and math.isnan(v)  # type: ignore[arg-type]
        return type(v).__name__ in ("NAType", "NaTType")

    cells = [0, 1, -3, 2**70, 1.5, float("nan"), float("inf"), True, False, "x", "", None,
             np.float64("nan"), np.float32(2.5), np.int64(3), np.bool_(True), np.str_("s"),
             decimal.Decimal("1.5"), b"b", (1,), 1 + 2j]
    for v in cells:
        assert dq._is_float(v) == ref_float(v), v
        assert dq.is_null(v) == ref_null(v), v


def test_an_integer_beyond_the_float_range_is_infinite_not_an_overflow(tmp_path: Path) -> None:
    pub = Publisher(ListTransport(), kind="sdk")
    rec = report("s3://big", "v1", None, {"x": [1, 2, 10**400], "y": [-(10**400), 0, 1]},
                 baseline_directory=tmp_path, publisher=pub)
    by = {f.name: f for f in rec.features}
    assert by["x"].max == math.inf and by["y"].min == -math.inf
    assert rec.row_count == 3


def test_class_ids_read_as_floats_are_the_same_labels() -> None:
    # pandas makes an integer column float once one value is null: 1 became "1.0"
    ints = dq.label_distribution([0, 1, 1, 0, 1])
    floats = dq.label_distribution([0.0, 1.0, 1.0, 0.0, 1.0, math.nan])
    assert set(ints) == {"0", "1"} and set(floats) == {"0", "1", "null"}
    assert dq.label_distribution([np.int64(1), np.float64(2.5), True]) == {
        "1": 1 / 3, "2.5": 1 / 3, "True": 1 / 3}


def test_report_takes_integer_versions_and_whole_counts(tmp_path: Path) -> None:
    """``data.report(uri, 3, 7, df)`` (a version number) could not be encoded: the report
    was lost at publish with one ERROR line, and the runs reading the dataset paged it
    missing."""
    t = ListTransport()
    pub = Publisher(t, kind="sdk")
    cols = {"x": [1.0, 2.0, 3.0]}
    for version, partition, rejected in ((3, 7, "5"), (np.int64(3), 7, 5.0)):
        rec = report("s3://ds", version, partition, cols, rejected_samples=rejected,
                     publisher=pub, baseline_directory=tmp_path)
        assert (rec.dataset_version, rec.partition, rec.rejected_samples) == ("3", "7", 5)
    assert pub.encode_errors == 0
    assert [load_codec().decode(v).dataset_version for _, _, v in t.out] == ["3", "3"]


@pytest.mark.parametrize(("args", "kwargs", "error", "match"), [
    ((None, "v1", "p"), {}, TypeError, "dataset must be text"),
    ((5, "v1", "p"), {}, TypeError, "dataset must be text"),
    (("", "v1", "p"), {}, ValueError, "dataset is empty"),  # an unset environment variable
    (("  ", "v1", "p"), {}, ValueError, "dataset is empty"),
    (("s3://ds", 3.5, "p"), {}, TypeError, "version must be text or an integer"),
    (("s3://ds", "v1", ["p"]), {}, TypeError, "partition must be text or an integer"),
    (("s3://ds", "v1", "p"), {"rejected_samples": "five"}, TypeError,
     "rejected_samples must be a whole number"),
    (("s3://ds", "v1", "p"), {"rejected_samples": 2.5}, TypeError,
     "rejected_samples must be a whole number"),
    (("s3://ds", "v1", "p"), {"rejected_samples": -1}, ValueError,
     "rejected_samples must not be negative"),
    # a list raised a bare AttributeError from the statistics
    (("s3://ds", "v1", "p"), {"schema": ["x"]}, TypeError,
     "schema must map column names to type names"),
    (("s3://ds", "v1", "p"), {"schema": {"x": float}}, TypeError,
     "schema type for column 'x' must be a type name"),
    # these raised int()'s ValueError or "unhashable type: 'list'", naming nothing
    (("s3://ds", "v1", "p"), {"now_ms": "soon"}, TypeError, "now_ms must be epoch milliseconds"),
    (("s3://ds", "v1", "p"), {"now_ms": float("nan")}, TypeError,
     "now_ms must be epoch milliseconds"),
    (("s3://ds", "v1", "p"), {"clock": lambda: 1.8e9}, ValueError,  # clock=time.time
     r"not plausible epoch milliseconds \(epoch seconds\? give milliseconds\)"),
    (("s3://ds", "v1", "p"), {"now_ms": 1_800_000_000_000_000}, ValueError,  # microseconds
     r"\(micro- or nanoseconds\? give milliseconds\)"),
    (("s3://ds", "v1", "p"), {"label": ["y"]}, TypeError, "label must name a column"),
    (("s3://ds", "v1", "p"), {"timestamp": {"ts": 1}}, TypeError, "timestamp must name a column"),
    (("s3://ds", "v1", "p"), {"key": ["id"]}, TypeError, "key must name a column"),
])
def test_report_misuse_raises_naming_the_argument_and_publishes_nothing(
        args, kwargs, error, match, tmp_path: Path) -> None:
    t = ListTransport()
    with pytest.raises(error, match=match):
        report(*args, {"x": [1.0, 2.0]}, publisher=Publisher(t, kind="sdk"),
               baseline_directory=tmp_path, **kwargs)
    assert t.out == []


def test_a_column_named_by_its_number_and_a_float_time_are_read(tmp_path: Path) -> None:
    frame = {0: [0.5, 1.5, 2.5], 1: ["a", "b", "a"]}  # a frame read without a header
    rec = report("s3://ds", "v1", "p", frame, label=np.int64(1), now_ms=1_800_000_003_000.7,
                 publisher=Publisher(ListTransport(), kind="sdk"), baseline_directory=tmp_path)
    assert rec.label_distribution == pytest.approx({"a": 2 / 3, "b": 1 / 3})
    assert rec.emitted_at_ms == 1_800_000_003_000


def test_a_label_or_timestamp_column_the_batch_lacks_is_said(tmp_path: Path, caplog) -> None:
    """A mistyped ``label=`` or ``timestamp=`` left label balance and freshness out without
    a word (a missing ``key=`` column was logged)."""
    cols = {"is_clicked": [True, False], "event_time": [1_800_000_001_000, 1_800_000_002_000]}
    with caplog.at_level(logging.WARNING, logger="runwatch.client.data"):
        rec = report("s3://ds", "v1", "p", cols, label="clicked", timestamp="event_ms",
                     publisher=Publisher(ListTransport(), kind="sdk"),
                     baseline_directory=tmp_path, now_ms=1_800_000_003_000)
    assert rec.label_distribution == {} and rec.freshness_lag_ms is None
    said = [r.getMessage() for r in caplog.records]
    assert sum("no label column 'clicked'" in m for m in said) == 1, said
    assert sum("no timestamp column 'event_ms'" in m for m in said) == 1, said
    caplog.clear()
    report("s3://ds", "v1", "p", cols, label="is_clicked", timestamp="event_time",
           publisher=Publisher(ListTransport(), kind="sdk"), baseline_directory=tmp_path,
           now_ms=1_800_000_003_000)
    assert not [r for r in caplog.records if "column" in r.getMessage()]
