"""Insert latency and lag of a sink-like writer, with and without one heavy analyst query.

A writer (user ``runwatch``, the sink's) inserts a batch of rows every
``--interval-ms`` through clickhouse-connect, as the sink does, for
``--seconds``; each batch's latency is timed, and the lag is how far the last
acknowledged batch trails the schedule when the phase ends. The "heavy" phase
runs the same writer while one analyst (user ``analyst``, readonly, default
profile) keeps a CPU-bound query running
(``SELECT count() FROM numbers(1e11) WHERE sipHash64(number) % 7 = 3``, cut by
its max_execution_time and restarted). Each round runs both phases; the table
shows the median over rounds of each phase's median and p95 latency, with the
heavy/quiet ratio. Fails (exit 1) if any acknowledged batch did not land.

    .venv/bin/python benchmarks/store_isolation.py [--rounds 3] [--seconds 8]
"""

from __future__ import annotations

import argparse
import base64
import http.client
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import clickhouse_connect

from runwatch.store.process import start_store

HEAVY = "SELECT count() FROM numbers(100000000000) WHERE sipHash64(number) % 7 = 3"
DDL = (
    "CREATE TABLE IF NOT EXISTS iso (id UInt64, run LowCardinality(String), v Float64) "
    "ENGINE = MergeTree ORDER BY id"
)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def writer_phase(port: int, seconds: float, interval_s: float, rows: int, start_id: int) -> dict:
    client = clickhouse_connect.get_client(
        host="127.0.0.1", port=port, username="runwatch", password="runwatch"
    )
    latencies: list[float] = []
    due = time.perf_counter()
    end = due + seconds
    next_id = start_id
    while due < end:
        now = time.perf_counter()
        if now < due:
            time.sleep(due - now)
        data = [[next_id + i, "run-1", float(i)] for i in range(rows)]
        t0 = time.perf_counter()
        client.insert("iso", data, column_names=["id", "run", "v"])
        latencies.append(time.perf_counter() - t0)
        next_id += rows
        due += interval_s
    lag = max(0.0, time.perf_counter() - end)
    return {"latencies": latencies, "lag": lag, "ids": (start_id, next_id)}


class Analyst(threading.Thread):
    """Keeps the heavy query running over raw HTTP; :meth:`stop` disconnects (the store cancels)."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.stopping = threading.Event()
        self.conn: http.client.HTTPConnection | None = None
        self.outcomes: list[int] = []

    def run(self) -> None:
        auth = base64.b64encode(b"analyst:analyst").decode()
        while not self.stopping.is_set():
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
            try:
                self.conn.request("POST", "/", HEAVY.encode(), {"Authorization": f"Basic {auth}"})
                resp = self.conn.getresponse()
                resp.read()
                self.outcomes.append(resp.status)
            except OSError:
                self.outcomes.append(0)
            finally:
                self.conn.close()

    def stop(self) -> None:
        self.stopping.set()
        conn = self.conn
        if conn is not None and conn.sock is not None:
            conn.sock.shutdown(socket.SHUT_RDWR)
        self.join(timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--interval-ms", type=float, default=100.0)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--users", type=Path, default=None, help="a users file (default: packaged)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = start_store(Path(tmp) / "data", Path(tmp) / "store.log", users=args.users)
        try:
            admin = clickhouse_connect.get_client(
                host="127.0.0.1", port=store.port, username="runwatch", password="runwatch"
            )
            admin.command(DDL)
            results: dict[str, list[dict]] = {"quiet": [], "heavy": []}
            next_id = 0
            for _ in range(args.rounds):
                for phase in ("quiet", "heavy"):
                    analyst = Analyst(store.port)
                    if phase == "heavy":
                        analyst.start()
                        time.sleep(1.0)  # the query is running before the writer starts
                    res = writer_phase(
                        store.port, args.seconds, args.interval_ms / 1000, args.rows, next_id
                    )
                    if phase == "heavy":
                        analyst.stop()  # disconnects: the store cancels the query
                    lo, hi = res["ids"]
                    landed = admin.command(
                        f"SELECT count() FROM iso WHERE id >= {lo} AND id < {hi}"
                    )
                    if landed != hi - lo:
                        print(f"FAIL: {phase}: {hi - lo} rows acknowledged, {landed} stored")
                        return 1
                    res["landed"] = landed
                    results[phase].append(res)
                    next_id = hi
            rows = []
            for phase in ("quiet", "heavy"):
                med = statistics.median(statistics.median(r["latencies"]) for r in results[phase])
                p95 = statistics.median(percentile(r["latencies"], 0.95) for r in results[phase])
                lag = statistics.median(r["lag"] for r in results[phase])
                batches = sum(len(r["latencies"]) for r in results[phase])
                rows.append((phase, med, p95, lag, batches))
            print(f"{args.rounds} rounds x {args.seconds:.0f} s, a batch of {args.rows} rows every "
                  f"{args.interval_ms:.0f} ms; median over rounds")  # fmt: skip
            print(f"{'phase':<8}{'batches':>9}{'median ms':>11}{'p95 ms':>9}{'lag s':>8}")
            for phase, med, p95, lag, batches in rows:
                print(f"{phase:<8}{batches:>9}{med * 1000:>11.1f}{p95 * 1000:>9.1f}{lag:>8.2f}")
            (_, qmed, qp95, qlag, _), (_, hmed, hp95, hlag, _) = rows
            print(f"{'ratio':<8}{'':>9}{hmed / qmed:>10.2f}x{hp95 / qp95:>8.2f}x"
                  f"{hlag - qlag:>+7.2f}s")  # fmt: skip
            print("every acknowledged batch landed")
        finally:
            store.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
