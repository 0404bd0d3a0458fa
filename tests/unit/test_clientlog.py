"""aiokafka's repeated connection errors are collapsed in the processor's log (ops D6).

While the broker was away the processor wrote about 780 lines a second (75,000 for a 96 s
outage) of aiokafka's ``Unable connect to node ...`` and ``Unable to update metadata ...``;
the sink and the pager wrote one line.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator

import pytest
from aiokafka import AIOKafkaClient
from aiokafka.errors import KafkaConnectionError

from runwatch.adapters.clientlog import AIOKAFKA_LOGGERS, CollapseRepeats, collapse_aiokafka_repeats
from runwatch.core.logrepeat import RepeatWindow


def test_the_first_line_then_one_per_window_with_the_count_left_out() -> None:
    w = RepeatWindow(60_000)
    assert w.admit("a", 0) == 0
    assert [w.admit("a", t) for t in range(1, 1000)] == [None] * 999
    assert w.admit("b", 500) == 0  # another kind of line is its own
    assert w.left_out() == 999
    assert w.admit("a", 60_000) == 999
    assert w.admit("a", 60_001) is None
    assert w.admit("a", 200_000) == 1 and w.left_out() == 0


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def aiokafka_lines() -> Iterator[tuple[CollapseRepeats, _Lines]]:
    lines = _Lines()
    flt = CollapseRepeats(window_s=60.0)
    for name in AIOKAFKA_LOGGERS:
        logging.getLogger(name).addFilter(flt)
    root = logging.getLogger()
    root.addHandler(lines)
    level = logging.getLogger("aiokafka").level
    logging.getLogger("aiokafka").setLevel(logging.DEBUG)
    try:
        yield flt, lines
    finally:
        root.removeHandler(lines)
        logging.getLogger("aiokafka").setLevel(level)
        for name in AIOKAFKA_LOGGERS:
            logging.getLogger(name).removeFilter(flt)


def test_a_minute_of_connection_errors_is_two_lines(aiokafka_lines) -> None:
    flt, lines = aiokafka_lines
    log = logging.getLogger("aiokafka")
    t0 = 1_800_000_000.0
    for i in range(78_000):  # 100 s at the rate seen: 780 a second, two kinds
        msg, args = (("Unable connect to node with id %s: %s", (1, "Connection refused"))
                     if i % 2 else ("Unable to update metadata from %s", ([1],)))
        record = log.makeRecord("aiokafka", logging.ERROR, "client.py", 1, msg, args, None)
        record.created = t0 + i / 780
        log.handle(record)
    log.info("Discovered coordinator 1")  # below WARNING: untouched
    assert len(lines.lines) == 5, lines.lines
    assert lines.lines[0] == ("Unable to update metadata from [1] (repeats of this line are "
                              "written once per 60 s at most, with their count)")
    assert lines.lines[1].startswith("Unable connect to node with id 1: Connection refused")
    assert lines.lines[2].startswith("Unable to update metadata from [1] (")
    assert "more like this in the last 60 s were not written" in lines.lines[2]
    assert lines.lines[-1] == "Discovered coordinator 1"
    assert flt.left_out < 78_000 - 4


def test_aiokafka_failing_to_reach_its_broker_logs_one_line(aiokafka_lines) -> None:
    """aiokafka's own code path: 200 bootstraps against a port nothing listens on."""
    _flt, lines = aiokafka_lines

    async def tries() -> None:
        for _ in range(200):
            client = AIOKafkaClient(bootstrap_servers="127.0.0.1:1", request_timeout_ms=1000)
            with pytest.raises(KafkaConnectionError):
                await client.bootstrap()
            await client.close()

    t0 = time.monotonic()
    asyncio.run(tries())
    assert time.monotonic() - t0 < 60
    unable = [line for line in lines.lines if line.startswith("Unable connect to")]
    assert len(unable) == 1, unable


def test_installing_twice_keeps_one_filter() -> None:
    a = collapse_aiokafka_repeats()
    try:
        assert collapse_aiokafka_repeats() is a
        assert sum(isinstance(f, CollapseRepeats)
                   for f in logging.getLogger("aiokafka").filters) == 1
    finally:
        for name in AIOKAFKA_LOGGERS:
            logging.getLogger(name).removeFilter(a)
