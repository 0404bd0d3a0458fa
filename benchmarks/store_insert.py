"""Rows/s of a 1M-row insert: through `runwatch store` over HTTP vs in-process chDB.

Both paths use clickhouse-connect's insert_df with the same DataFrame (three
numeric columns and a LowCardinality string). The baseline is the same client
with interface="chdb" (the engine in this process). Prints the median of
several repetitions and the HTTP/in-process ratio; no assertion.

    .venv/bin/python benchmarks/store_insert.py [--rows 1000000] [--reps 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import clickhouse_connect
import numpy as np
import pandas as pd

from runwatch.store.process import start_store

DDL = (
    "CREATE TABLE IF NOT EXISTS bench (id UInt64, step UInt32, loss Float64, "
    "run LowCardinality(String)) ENGINE = MergeTree ORDER BY id"
)


def frame(rows: int) -> pd.DataFrame:
    idx = np.arange(rows, dtype=np.uint64)
    return pd.DataFrame(
        {
            "id": idx,
            "step": (idx % 10_000).astype(np.uint32),
            "loss": np.random.default_rng(1).random(rows),
            "run": np.array([f"run-{i}" for i in range(16)])[idx % 16],
        }
    )


def measure(client, df: pd.DataFrame, reps: int) -> list[float]:
    client.command(DDL)
    rates = []
    for _ in range(reps):
        client.command("TRUNCATE TABLE bench")
        t0 = time.perf_counter()
        summary = client.insert_df("bench", df)
        elapsed = time.perf_counter() - t0
        assert summary.written_rows == len(df)
        rates.append(len(df) / elapsed)
    assert client.command("SELECT count() FROM bench") == len(df)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    df = frame(args.rows)
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        local = clickhouse_connect.get_client(interface="chdb", path=str(root / "inproc"))
        results["in-process chDB (interface=chdb)"] = statistics.median(
            measure(local, df, args.reps)
        )
        local.close()
        store = start_store(root / "store", root / "store.log")
        try:
            for label, compress in (("lz4 (client default)", True), ("uncompressed", False)):
                http = clickhouse_connect.get_client(
                    host="127.0.0.1",
                    port=store.port,
                    username="runwatch",
                    password="runwatch",
                    compress=compress,
                )
                results[f"HTTP store, {label}"] = statistics.median(measure(http, df, args.reps))
                http.close()
        finally:
            code = store.stop()
    base = results["in-process chDB (interface=chdb)"]
    print(f"insert_df of {args.rows:,} rows, median of {args.reps} (store exit code {code})")
    for label, rate in results.items():
        print(f"  {label:<36} {rate:>14,.0f} rows/s   ratio {rate / base:5.2f}")


if __name__ == "__main__":
    main()
