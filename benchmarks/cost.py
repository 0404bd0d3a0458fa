"""``runwatch cost --since 30d`` over 10k runs and 100M GPU samples, on a store of its own.

The data is generated inside the store with ``INSERT ... SELECT FROM numbers()``
(100M rows through Kafka and the sink would take hours on a small machine):
per run, three job events (queued, running with its allocation, the outcome),
100 step timings, 10 checkpoints, and 8 GPUs x ``samples / runs / 8`` GPU
samples every 10 s (all within the last 7 days: older raw rows of routine
runs expire); every 7th run at 25 % utilization, every 17th with half
its GPUs idle, every 13th failed. Then the run summaries are written for every
run, in the sink's chunks (timed: that is the sink's work as runs end), and
``runwatch cost --since 30d --json`` and ``runwatch capacity --since 24h --json``
run as a user runs them (a new process each time). Prints medians::

    nice .venv/bin/python benchmarks/cost.py [--runs 10000] [--samples 100000000] [--reps 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchkit import Checks
from runwatch.adapters import clickhouse as ch
from runwatch.adapters.settings import ClickHouseSettings
from runwatch.commands.cost import _RUN_COLS, _runs, load_prices
from runwatch.core.cost.waste import cost_report
from runwatch.core.storage.retention import parse_rules
from runwatch.resources import clickhouse_ddl_dir, retention_file, summary_sql_file
from runwatch.store.process import start_store

NODES = 250
TICK_S = 10
CHUNK = 10_000_000
SUMMARY_CHUNK = 200


def generate(client, db: str, runs: int, samples: int, t0_ms: int) -> tuple[int, float]:
    """Insert the synthetic runs; return (ticks per GPU, seconds taken)."""
    ticks = samples // (runs * 8)
    run_ms = ticks * TICK_S * 1000
    gap = run_ms + 600_000
    start = f"fromUnixTimestamp64Milli(toInt64({t0_ms} + intDiv(r, {NODES}) * {gap}), 'UTC')"
    began = time.perf_counter()
    total = runs * 8 * ticks
    for lo in range(0, total, CHUNK):
        n = min(CHUNK, total - lo)
        client.command(f"""
            INSERT INTO {db}.gpu_samples (event_id, ts, node, gpu_index, gpu_uuid, run_id,
                util_pct, mem_used_bytes, mem_total_bytes, power_w, temp_c, process_count,
                source_kind, seq)
            SELECT toString(number), {start} + toIntervalSecond(intDiv(k, 8) * {TICK_S}),
                   concat('node-', toString(r % {NODES})), toUInt8(k % 8),
                   concat('GPU-', toString(r % {NODES}), '-', toString(k % 8)),
                   concat('b-', toString(r)),
                   if(r % 7 = 3, 23, 70) + (cityHash64(number) % 5),
                   40000000000, 80000000000, 500, 60,
                   if(r % 17 = 0 AND k % 8 < 4, 0, 1), 'agent', number
            FROM (SELECT number, intDiv(number, {8 * ticks}) AS r, number % {8 * ticks} AS k
                  FROM numbers({lo}, {n}))""")
    ev = f"""
        SELECT concat('e-', toString(number)) AS event_id, r, {start} AS t0,
               {start} + toIntervalMillisecond({run_ms}) AS t1
        FROM (SELECT number, number AS r FROM numbers({runs}))"""
    common = ("concat('b-', toString(r)), s, attempt, reason, 'batch', "
              "if(r % 3 = 0, 'preemptible', 'standard'), team, family")
    client.command(f"""
        INSERT INTO {db}.job_events (event_id, ts, run_id, state, attempt, reason, queue,
            priority_class, team, experiment_family, nodes, gpu_indices, gpu_model, source_kind,
            seq)
        SELECT concat(event_id, '-', s), ts, {common}, nodes, gpus, model, 'hook', r * 3
        FROM (SELECT event_id, r, 1 AS attempt, '' AS reason,
                     concat('team-', toString(r % 7)) AS team,
                     concat('fam-', toString(r % 20)) AS family,
                     arrayJoin([('queued', t0 - toIntervalSecond(60 + r % 600)), ('running', t0),
                                (if(r % 13 = 0, 'failed', 'succeeded'), t1)]) AS st,
                     st.1 AS s, st.2 AS ts,
                     if(s = 'running', [concat('node-', toString(r % {NODES}))], []) AS nodes,
                     if(s = 'running', [0, 1, 2, 3, 4, 5, 6, 7], []) AS gpus,
                     if(s = 'running', 'H100', '') AS model
              FROM ({ev}))""")
    client.command(f"""
        INSERT INTO {db}.step_timings (event_id, ts, run_id, step, loader_wait_ms, compute_ms,
            step_ms, samples, source_kind, seq)
        SELECT concat(event_id, '-s', toString(i)),
               t0 + toIntervalMillisecond(intDiv({run_ms} * i, 100)),
               concat('b-', toString(r)), i, 150, 1800, 1950, 256, 'sdk', i
        FROM ({ev}) ARRAY JOIN range(100) AS i""")
    client.command(f"""
        INSERT INTO {db}.checkpoints (event_id, ts, run_id, step, started_at, ended_at,
            duration_ms, uri, outcome, source_kind, seq)
        SELECT concat(event_id, '-c', toString(i)), ts, concat('b-', toString(r)), i * 10,
               ts - toIntervalSecond(20), ts, 20000,
               concat('s3://ckpt/b-', toString(r), '/', toString(i)), 'ok', 'sdk', i
        FROM (SELECT event_id, r, i, t0 + toIntervalMillisecond(intDiv({run_ms} * i, 12)) AS ts
              FROM ({ev}) ARRAY JOIN range(1, 11) AS i)""")
    return ticks, time.perf_counter() - began


def summarise(client, db: str, runs: int) -> float:
    sql = summary_sql_file().read_text().replace("${db}", db)
    began = time.perf_counter()
    ids = [f"b-{r}" for r in range(runs)]
    by_time = sorted(ids, key=lambda s: (int(s[2:]) // NODES, int(s[2:])))
    for i in range(0, runs, SUMMARY_CHUNK):
        client.command(sql, parameters={"runs": by_time[i:i + SUMMARY_CHUNK], "idle_pct": 5.0})
    return time.perf_counter() - began


def cli(url: str, db: str, *args: str) -> tuple[float, dict]:
    began = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "runwatch", *args, "--json"], capture_output=True,
                         text=True, check=False,
                         env={**os.environ, "CLICKHOUSE_URL": url, "CLICKHOUSE_DATABASE": db})
    took = time.perf_counter() - began
    if out.returncode != 0:
        raise SystemExit(out.stderr)
    return took, json.loads(out.stdout)


def sql_time(url: str, db: str, query: str) -> float:
    began = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "runwatch", "sql", query, "--format", "json"],
                         capture_output=True, text=True, check=False,
                         env={**os.environ, "CLICKHOUSE_URL": url, "CLICKHOUSE_DATABASE": db})
    took = time.perf_counter() - began
    if out.returncode != 0:
        raise SystemExit(out.stderr)
    return took


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=100_000_000)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    checks = Checks()
    with tempfile.TemporaryDirectory(dir=os.environ.get("RUNWATCH_BENCH_DIR")) as tmp:
        store = start_store(Path(tmp) / "store", Path(tmp) / "store.log")
        try:
            url = f"http://127.0.0.1:{store.port}"
            db = "bench_cost"
            client = ch.make_client(ClickHouseSettings(url=url), database="",
                                    send_receive_timeout=3600)
            ch.migrate(client, db, clickhouse_ddl_dir(), parse_rules(retention_file().read_text()))
            t0 = int(time.time() * 1000) - 156 * 3_600_000
            ticks, gen_s = generate(client, db, args.runs, args.samples, t0)
            n = client.query(f"SELECT count() FROM {db}.gpu_samples").result_rows[0][0]
            checks.check(n == args.runs * 8 * ticks, f"GPU samples stored: {n:,}")
            sum_s = summarise(client, db, args.runs)
            got = client.query(f"SELECT count() FROM {db}.run_summaries FINAL").result_rows[0][0]
            checks.check(got == args.runs, f"run summaries: {got} of {args.runs}")
            times, report = [], {}
            for _ in range(args.reps):
                took, report = cli(url, db, "cost", "--since", "30d")
                times.append(took)
            cap_times = [cli(url, db, "capacity", "--since", "24h")[0] for _ in range(args.reps)]
            # Baseline: the same rows read by `runwatch sql` as JSON, in a new process each.
            base_sql = (f"SELECT {_RUN_COLS} FROM run_costs WHERE ended_at >= now() - "  # noqa: S608
                        "INTERVAL 30 DAY")
            base_times = [sql_time(url, db, base_sql) for _ in range(args.reps)]
            inproc = []
            ro = ch.make_client(ClickHouseSettings(url=url, database=db), readonly=True)
            prices = load_prices(None)
            for _ in range(args.reps):
                began = time.perf_counter()
                window, history = _runs(ro, 30 * 86_400, int(time.time() * 1000))
                cost_report(window, history, prices, "family")
                inproc.append(time.perf_counter() - began)
            hours = args.runs * 8 * ticks * TICK_S / 3600
            t = report["totals"]
            checks.check(t["runs"] == args.runs, f"runs in the report: {t['runs']}")
            checks.check(abs(t["gpu_hours"] - hours) < 0.01 * hours,
                         f"GPU-hours {t['gpu_hours']:,.0f} vs generated {hours:,.0f}")
            checks.check(t["wasted_gpu_hours"]["idle"] > 0 and
                         t["wasted_gpu_hours"]["below_baseline"] > 0,
                         f"waste found: {t['wasted_gpu_hours']}")
            idle = sum(1 for r in range(args.runs) if r % 17 == 0) * 4 * ticks * TICK_S / 3600
            checks.check(abs(t["wasted_gpu_hours"]["idle"] - idle) < 0.01 * idle,
                         f"idle GPU-hours {t['wasted_gpu_hours']['idle']:,.1f} vs generated "
                         f"{idle:,.1f}")
        finally:
            store.stop()
    print(f"{args.runs:,} runs, {n:,} GPU samples (generated in {gen_s:.0f} s with INSERT ... "
          f"SELECT FROM numbers(); run summaries of every run in {sum_s:.0f} s)")
    print(f"  runwatch cost --since 30d --json      median {statistics.median(times):.2f} s "
          f"(min {min(times):.2f}, max {max(times):.2f}, {args.reps} runs, new process each)")
    print(f"  runwatch capacity --since 24h --json  median {statistics.median(cap_times):.2f} s")
    print(f"  in process: read run_costs + attribute  median {statistics.median(inproc):.2f} s")
    base = statistics.median(base_times)
    print(f"  baseline: runwatch sql of the same rows (JSON)  median {base:.2f} s; cost / baseline "
          f"{statistics.median(times) / base:.2f}")
    checks.done()


if __name__ == "__main__":
    main()
