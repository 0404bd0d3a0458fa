"""Sink throughput (Kafka → ClickHouse) against a direct insert of the same rows.

Usage: python benchmarks/sink.py [--events 1000000] [--bootstrap 127.0.0.1:9092]
                                [--reps 3] [--processes N]

Starts its own `runwatch store` on an ephemeral port, publishes mixed events to
fresh topics on the real broker, runs the sink in-process until every row is
stored, then inserts the very same rows directly (the ceiling) into a second
database, and reports rows/s for both, their ratio, and the on-disk bytes per
GPU metric value from system.columns / system.parts after OPTIMIZE FINAL.

With ``--processes N`` (N > 1) each repetition also runs ``runwatch sink
--processes N`` (a :class:`SinkPool` of N child processes, fresh group, own
database), timed from launching the children until every row is stored (polled
with count()), and reports it beside the 1-process sink and the same ceiling.

Checks (exit status 1 when one fails): the topics hold every published event,
and each database (sink, direct, pool) holds exactly the expected rows per table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))
from sinkkit import Store, expected_counts, migrate, publish, table_counts  # noqa: E402

from runwatch.adapters import clickhouse as ch  # noqa: E402
from runwatch.adapters.settings import ClickHouseSettings, KafkaSettings  # noqa: E402
from runwatch.core.storage.colbatch import TableColumns  # noqa: E402
from runwatch.core.storage.rows import COLUMNS, Origin, record_rows  # noqa: E402
from runwatch.sink.pool import SinkPool  # noqa: E402
from runwatch.sink.service import Sink  # noqa: E402
from runwatch.sink.settings import SinkSettings  # noqa: E402
from runwatch.testing.synth import TOPIC_OF, mixed_events  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchkit import Checks  # noqa: E402

GPU_METRICS = [
    "util_pct", "sm_active_pct", "mem_used_bytes", "mem_total_bytes", "power_w", "temp_c",
    "sm_clock_mhz", "mem_clock_mhz", "throttle_reasons", "ecc_corrected", "ecc_uncorrected",
    "xid", "pcie_rx_bps", "pcie_tx_bps", "nvlink_rx_bps", "nvlink_tx_bps",
]


def run_sink(bootstrap: str, topics: dict[str, str], url: str, db: str, total: int) -> float:
    """Run one in-process sink (fresh group) until ``total`` rows are stored; return seconds."""
    stop = threading.Event()
    sink = Sink(
        SinkSettings(group_id=f"bench-{uuid.uuid4().hex[:6]}", topics=tuple(topics.values())),
        KafkaSettings(bootstrap_servers=bootstrap),
        ClickHouseSettings(url=url, database=db),
        stop,
    )
    deadline = time.monotonic() + 3600
    t0 = time.perf_counter()
    while sink.stats["rows"] < total:
        if time.monotonic() > deadline:
            raise SystemExit(f"sink stored {sink.stats['rows']} of {total} rows in an hour")
        sink.run_once()
    sink.flush()
    sink_s = time.perf_counter() - t0
    stop.set()
    sink.writer.close()
    sink.consumer.close()
    return sink_s


def run_pool(bootstrap: str, topics: dict[str, str], url: str, db: str,
             expected: dict[str, int], processes: int) -> float:
    """Run N sink processes (fresh group) until every row is stored; return seconds."""
    pool = SinkPool(
        processes,
        SinkSettings(group_id=f"bench-{uuid.uuid4().hex[:6]}", topics=tuple(topics.values())),
        KafkaSettings(bootstrap_servers=bootstrap),
        ClickHouseSettings(url=url, database=db),
    )
    client = ch.make_client(ClickHouseSettings(url=url), database="")
    count_sql = " + ".join(f"(SELECT count() FROM {db}.{t})" for t in expected)
    total = sum(expected.values())
    deadline = time.monotonic() + 3600
    first_s: float | None = None
    t0 = time.perf_counter()
    pool.start()
    try:
        while True:
            if not pool.check(0.2):
                raise SystemExit(f"a sink process ended: {pool.failed}")
            if time.monotonic() > deadline:
                raise SystemExit(f"{processes} sink processes: {total} rows not stored in an hour")
            stored = client.query(f"SELECT {count_sql}").result_rows[0][0]
            if stored and first_s is None:
                first_s = time.perf_counter() - t0
            if stored >= total:
                break
        pool_s = time.perf_counter() - t0
        print(f"    (x{processes}: first rows stored after {first_s:.1f}s of {pool_s:.1f}s)")
    finally:
        pool.stop()
    if stored != total:
        raise SystemExit(f"{processes} sink processes stored {stored} rows, expected {total}")
    return pool_s


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--reps", type=int, default=3, help="sink + direct repetitions (median)")
    ap.add_argument("--processes", type=int, default=1,
                    help="also run `runwatch sink --processes N` each rep (N > 1)")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="rw-bench-sink-"))
    store = Store(tmp / "chdb")
    store.start()
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    topics = {n: f"bench.{n}.{uuid.uuid4().hex[:8]}" for n in sorted(set(TOPIC_OF.values()))}
    for f in admin.create_topics([NewTopic(t, 8, 1) for t in topics.values()]).values():
        f.result(30)
    try:
        ticks = max(10, args.events // (args.runs * 3))
        t0 = time.perf_counter()
        events = mixed_events(11, args.runs, ticks, int(time.time() * 1000) - 6 * 3600_000)
        print(f"generated {len(events)} events in {time.perf_counter() - t0:.1f}s")
        expected = expected_counts(events)
        total = sum(expected.values())
        t0 = time.perf_counter()
        publish(args.bootstrap, topics, events)
        print(f"published in {time.perf_counter() - t0:.1f}s")
        checks = Checks()
        on_topics = topic_events(args.bootstrap, list(topics.values()))
        checks.check(on_topics == len(events),
                     f"events on the topics: {on_topics:,} of {len(events):,} published")

        # The ceiling: the very same rows, already in columns (the cheapest
        # input clickhouse-connect takes), inserted directly in 50k-row chunks.
        by_table: dict[str, TableColumns] = {}
        for i, e in enumerate(events):
            for table, row in record_rows(e.record, Origin("bench", 0, i)):
                cols = by_table.get(table)
                if cols is None:
                    cols = by_table[table] = TableColumns(len(row))
                cols.append(row)
        client = migrate(store.url, "bench_setup")
        sink_runs: list[float] = []
        direct_runs: list[float] = []
        pool_runs: list[float] = []
        for rep in range(args.reps):
            db_sink, db_direct = f"bench_sink_{rep}", f"bench_direct_{rep}"
            migrate(store.url, db_sink)
            migrate(store.url, db_direct)
            sink_s = run_sink(args.bootstrap, topics, store.url, db_sink, total)
            t0 = time.perf_counter()
            for table, cols in by_table.items():
                for lo in range(0, len(cols), 50_000):
                    part = cols.slice(lo, lo + 50_000)
                    ch.insert_rows(client, f"{db_direct}.{table}", COLUMNS[table], part.data,
                                   column_oriented=True)
            direct_s = time.perf_counter() - t0
            for label, db in (("sink", db_sink), ("direct", db_direct)):
                checks.check(*rows_match(table_counts(client, db, sorted(expected)),
                                         expected, f"rep {rep} {label}"))
            sink_runs.append(sink_s)
            direct_runs.append(direct_s)
            print(f"  rep {rep}: sink {total / sink_s:,.0f} rows/s, direct {total / direct_s:,.0f}"
                  f" rows/s, ratio {direct_s / sink_s:.2f}")
            if args.processes > 1:
                db_pool = f"bench_pool_{rep}"
                migrate(store.url, db_pool)
                pool_s = run_pool(args.bootstrap, topics, store.url, db_pool, expected,
                                  args.processes)
                pool_runs.append(pool_s)
                checks.check(*rows_match(table_counts(client, db_pool, sorted(expected)),
                                         expected, f"rep {rep} pool"))
                print(f"  rep {rep}: sink x{args.processes} processes {total / pool_s:,.0f} rows/s,"
                      f" ratio {direct_s / pool_s:.2f}", flush=True)
        ratios = [d / s for d, s in zip(direct_runs, sink_runs, strict=True)]
        sink_s, direct_s = statistics.median(sink_runs), statistics.median(direct_runs)

        client.command(f"OPTIMIZE TABLE {db_sink}.gpu_samples FINAL")
        gpu_rows = client.query(f"SELECT count() FROM {db_sink}.gpu_samples").result_rows[0][0]
        cols = ", ".join(f"'{c}'" for c in GPU_METRICS)
        metric_bytes = client.query(
            f"SELECT sum(data_compressed_bytes) FROM system.columns WHERE database = '{db_sink}' "
            f"AND table = 'gpu_samples' AND name IN ({cols})").result_rows[0][0]
        table_bytes = client.query(
            f"SELECT sum(bytes_on_disk) FROM system.parts WHERE database = '{db_sink}' "
            "AND table = 'gpu_samples' AND active").result_rows[0][0]
        values = gpu_rows * len(GPU_METRICS)
        print(f"rows: {total} ({len(events)} events), gpu rows: {gpu_rows}")
        med = f"median of {args.reps}"
        print(f"sink   Kafka->ClickHouse: {total / sink_s:,.0f} rows/s ({sink_s:.1f}s, {med})")
        print(f"direct insert (ceiling):  {total / direct_s:,.0f} rows/s ({direct_s:.1f}s, {med})")
        print(f"ratio sink/ceiling: {statistics.median(ratios):.2f} ({med} same-rep ratios;"
              " goal >= 0.5)")
        if pool_runs:
            pool_s = statistics.median(pool_runs)
            pool_ratios = [d / s for d, s in zip(direct_runs, pool_runs, strict=True)]
            print(f"sink x{args.processes} processes:      {total / pool_s:,.0f} rows/s"
                  f" ({pool_s:.1f}s, {med})")
            print(f"ratio sink x{args.processes}/ceiling: {statistics.median(pool_ratios):.2f}"
                  f" ({med} same-rep ratios; goal >= 0.5)")
        per_value = metric_bytes / values
        print(f"bytes per GPU metric value (metric columns): {per_value:.2f} (goal <= 4)")
        print(f"bytes per GPU metric value (whole table on disk): {table_bytes / values:.2f}")
    finally:
        admin.delete_topics(list(topics.values()))
        store.stop()
    checks.done()


def rows_match(got: dict[str, int], expected: Mapping[str, int], label: str) -> tuple[bool, str]:
    """Whether a database holds the expected rows per table, and a line saying so."""
    wrong = {t: (got.get(t, 0), n) for t, n in expected.items() if got.get(t, 0) != n}
    detail = "; ".join(f"{t} {g} of {n}" for t, (g, n) in wrong.items())
    return not wrong, (f"{label}: {sum(got.values()):,} rows in {len(got)} tables, expected "
                       f"{sum(expected.values()):,}" + (f" ({detail})" if detail else ""))


def topic_events(bootstrap: str, names: list[str]) -> int:
    """Events on fresh topics: the sum of their partitions' high watermarks."""
    from confluent_kafka import Consumer, TopicPartition

    cons = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}"})
    try:
        total = 0
        for name in names:
            for p in cons.list_topics(name, timeout=10).topics[name].partitions:
                total += cons.get_watermark_offsets(TopicPartition(name, p), timeout=10)[1]
        return total
    finally:
        cons.close()


if __name__ == "__main__":
    main()
