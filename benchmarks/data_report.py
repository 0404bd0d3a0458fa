"""What ``runwatch.client.data.report`` costs a data pipeline, per batch.

Times :func:`runwatch.client.data.compute_stats` (everything ``data.report``
computes before it publishes: nulls, ranges and means, duplicate rows, label
balance, freshness) on a pandas frame of ``--rows`` rows and seven columns
(floats, integers, strings, booleans with nulls, a label and an event-time
column), against pandas' own vectorised figures of the same frame in the same
run (``isna().mean()``, ``describe()``, ``duplicated().sum()``): the baseline a
pipeline already pays for. Medians of ``--reps`` runs, process CPU time.

Checks (exit 1 when one fails): the report's row count, duplicate rows and
null shares equal pandas' on the same frame.

    python benchmarks/data_report.py [--rows 200000] [--reps 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import pandas as pd

from benchkit import Checks
from runwatch.client import data


def frame(rows: int) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    flags = pd.array(rng.random(rows) < 0.5, dtype="boolean")
    flags[rng.random(rows) < 0.02] = pd.NA
    df = pd.DataFrame({
        "a": rng.normal(size=rows), "b": rng.integers(0, 100, rows),
        "c": rng.choice(["x", "y", "z"], rows), "d": rng.normal(size=rows), "e": flags,
        "label": rng.integers(0, 2, rows),
        "ts": pd.date_range("2026-01-01", periods=rows, freq="s"),
    })
    df.loc[rng.random(rows) < 0.01, "a"] = np.nan
    return pd.concat([df, df.iloc[: rows // 100]], ignore_index=True)  # 1 % duplicate rows


def cpu(fn) -> float:  # noqa: ANN001
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    df = frame(args.rows)
    now_ms = int(time.time() * 1000)
    got: list = []

    def report() -> None:
        got[:] = [data.compute_stats("bench", df, now_ms=now_ms, label="label", timestamp="ts")[0]]

    def baseline() -> None:
        df.isna().mean()
        df.describe()
        df.duplicated().sum()

    ours = statistics.median(cpu(report) for _ in range(args.reps))
    theirs = statistics.median(cpu(baseline) for _ in range(args.reps))
    rows, cols = df.shape
    print(f"frame: {rows:,} rows x {cols} columns; medians of {args.reps} runs (CPU time)")
    print(f"data.report statistics : {ours:8.3f} s  ({rows / ours:12,.0f} rows/s)")
    print(f"pandas baseline        : {theirs:8.3f} s  ({rows / theirs:12,.0f} rows/s)")
    print(f"ratio                  : {ours / theirs:8.1f} x the baseline")
    st = got[0]
    checks = Checks()
    checks.check(st.row_count == rows, f"row count {st.row_count} == {rows}")
    dups = int(df.duplicated().sum())
    checks.check(st.duplicate_rows == dups, f"duplicate rows {st.duplicate_rows} == pandas {dups}")
    for c in st.columns:
        want = 100.0 * float(df[c.name].isna().mean())
        checks.check(abs(c.null_pct - want) < 1e-9,
                     f"{c.name} null % {c.null_pct:.4f} == {want:.4f}")
    checks.done()


if __name__ == "__main__":
    main()
