"""Sink throughput (Kafka → ClickHouse) against a direct insert of the same rows.

Usage: python benchmarks/sink.py [--events 1000000] [--bootstrap 127.0.0.1:9092]

Starts its own `runwatch store` on an ephemeral port, publishes mixed events to
fresh topics on the real broker, runs the sink in-process until every row is
stored, then inserts the very same rows directly (the ceiling) into a second
database, and reports rows/s for both, their ratio, and the on-disk bytes per
GPU metric value from system.columns / system.parts after OPTIMIZE FINAL.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))
from sinkkit import Store, expected_counts, migrate, publish  # noqa: E402

from runwatch.adapters import clickhouse as ch  # noqa: E402
from runwatch.adapters.settings import ClickHouseSettings, KafkaSettings  # noqa: E402
from runwatch.core.rows import COLUMNS, Origin, record_rows  # noqa: E402
from runwatch.sink.service import Sink  # noqa: E402
from runwatch.sink.settings import SinkSettings  # noqa: E402
from runwatch.sink.synth import TOPIC_OF, mixed_events  # noqa: E402

GPU_METRICS = [
    "util_pct", "sm_active_pct", "mem_used_bytes", "mem_total_bytes", "power_w", "temp_c",
    "sm_clock_mhz", "mem_clock_mhz", "throttle_reasons", "ecc_corrected", "ecc_uncorrected",
    "xid", "pcie_rx_bps", "pcie_tx_bps", "nvlink_rx_bps", "nvlink_tx_bps",
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--runs", type=int, default=50)
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

        db_sink, db_direct = "bench_sink", "bench_direct"
        client = migrate(store.url, db_sink)
        migrate(store.url, db_direct)
        stop = threading.Event()
        sink = Sink(
            SinkSettings(group_id=f"bench-{uuid.uuid4().hex[:6]}", topics=tuple(topics.values())),
            KafkaSettings(bootstrap_servers=args.bootstrap),
            ClickHouseSettings(url=store.url, database=db_sink),
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

        by_table: dict[str, list] = {}
        for i, e in enumerate(events):
            for table, row in record_rows(e.record, Origin("bench", 0, i)):
                by_table.setdefault(table, []).append(row)
        t0 = time.perf_counter()
        for table, rows in by_table.items():
            for lo in range(0, len(rows), 50_000):
                ch.insert_rows(client, f"{db_direct}.{table}", COLUMNS[table], rows[lo:lo + 50_000])
        direct_s = time.perf_counter() - t0

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
        print(f"sink   Kafka->ClickHouse: {total / sink_s:,.0f} rows/s ({sink_s:.1f}s)")
        print(f"direct insert (ceiling):  {total / direct_s:,.0f} rows/s ({direct_s:.1f}s)")
        print(f"ratio sink/ceiling: {direct_s / sink_s:.2f} (goal >= 0.5)")
        per_value = metric_bytes / values
        print(f"bytes per GPU metric value (metric columns): {per_value:.2f} (goal <= 4)")
        print(f"bytes per GPU metric value (whole table on disk): {table_bytes / values:.2f}")
    finally:
        admin.delete_topics(list(topics.values()))
        store.stop()


if __name__ == "__main__":
    main()
