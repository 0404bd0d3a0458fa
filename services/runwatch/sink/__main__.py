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
    check_database(clickhouse)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    if processes > 1:
        return SinkPool(processes, settings, kafka, clickhouse).run(stop)
    Sink(settings, kafka, clickhouse, stop).run()
    return 0


def check_database(clickhouse: ClickHouseSettings) -> None:
    """Refuse to start on a database that is missing, misnamed or not migrated.

    It retried for ever ("ClickHouse unavailable") and ended in a traceback on stop.
    A store that does not answer is waited for, as before (the sink pauses).

    Raises:
        FatalError: With what to do.
    """
    from runwatch.adapters import clickhouse as ch
    from runwatch.core.storage.ddl import DdlError, check_identifier
    from runwatch.errors import FatalError
    from runwatch.resources import clickhouse_ddl_dir

    try:
        check_identifier(clickhouse.database, "database name")
    except DdlError as exc:
        raise FatalError(str(exc)) from None
    try:
        problem = ch.schema_problem(ch.make_client(clickhouse, database=""), clickhouse.database,
                                    clickhouse_ddl_dir())
    except (ch.ClickHouseUnavailable, ch.ClickHouseRejected) as exc:
        logging.getLogger(__name__).warning(
            "cannot check database %s yet (%s); the sink waits for the store",
            clickhouse.database, str(exc)[:200])
        return
    if problem is not None:
        raise FatalError(problem)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    sys.exit(run_sink(SinkSettings(), KafkaSettings(), ClickHouseSettings()))
