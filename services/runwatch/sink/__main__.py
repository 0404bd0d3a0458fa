"""``python -m runwatch.sink``: run the sink with settings from the environment."""

from __future__ import annotations

import logging
import signal
import sys
import threading

from runwatch.adapters.settings import ClickHouseSettings, KafkaSettings
from runwatch.sink.pool import SinkPool
from runwatch.sink.service import Sink
from runwatch.sink.settings import SinkSettings


def run_sink(
    settings: SinkSettings,
    kafka: KafkaSettings,
    clickhouse: ClickHouseSettings,
    processes: int = 1,
) -> int:
    """Run the sink until SIGTERM/SIGINT.

    Args:
        settings: Sink settings.
        kafka: Kafka settings.
        clickhouse: ClickHouse settings.
        processes: Sink processes in the consumer group; above 1 this process
            supervises them (:class:`~runwatch.sink.pool.SinkPool`).

    Returns:
        Exit code: non-zero when a sink process ended unexpectedly.
    """
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    if processes > 1:
        return SinkPool(processes, settings, kafka, clickhouse).run(stop)
    Sink(settings, kafka, clickhouse, stop).run()
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    sys.exit(run_sink(SinkSettings(), KafkaSettings(), ClickHouseSettings()))
