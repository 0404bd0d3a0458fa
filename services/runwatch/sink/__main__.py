"""``python -m runwatch.sink``: run the sink with settings from the environment."""

from __future__ import annotations

import logging
import signal
import sys
import threading

from runwatch.adapters.settings import ClickHouseSettings, KafkaSettings
from runwatch.sink.service import Sink
from runwatch.sink.settings import SinkSettings


def run_sink(settings: SinkSettings, kafka: KafkaSettings, clickhouse: ClickHouseSettings) -> int:
    """Run the sink until SIGTERM/SIGINT.

    Args:
        settings: Sink settings.
        kafka: Kafka settings.
        clickhouse: ClickHouse settings.

    Returns:
        Exit code.
    """
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    Sink(settings, kafka, clickhouse, stop).run()
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    sys.exit(run_sink(SinkSettings(), KafkaSettings(), ClickHouseSettings()))
