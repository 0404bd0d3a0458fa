"""Keep a Kafka client library's repeated connection errors from flooding a service's log.

aiokafka (the faust processor's client) logs an ERROR for every connection attempt while
the broker is away (``Unable connect to node with id 1: [Errno 111] Connection refused``,
``Unable to update metadata from [1]``): about 780 lines a second, 75,000 lines (7 MB)
for a 96 s outage, where the sink and the pager (confluent-kafka, whose lines go to DEBUG)
write one ``does not answer; still trying`` line. :func:`collapse_aiokafka_repeats` puts a
filter on aiokafka's loggers: each kind of WARNING or ERROR line (its logger and message
template) is written the first time, then at most once per window, saying how many like it
were left out since the last one written.
"""

from __future__ import annotations

import logging
import threading

from runwatch.core.logrepeat import RepeatWindow

#: aiokafka's loggers that log per connection attempt or per request while the broker is away.
AIOKAFKA_LOGGERS = (
    "aiokafka",  # aiokafka.client logs on "aiokafka": Unable connect to node, update metadata
    "aiokafka.conn",
    "aiokafka.cluster",
    "aiokafka.consumer.fetcher",
    "aiokafka.consumer.group_coordinator",
    "aiokafka.consumer.consumer",
    "aiokafka.producer.sender",
    "aiokafka.producer.producer",
)
WINDOW_S = 60.0
"""Least time between two written lines of one kind."""


class CollapseRepeats(logging.Filter):
    """A logger filter: each kind of WARNING+ line once per window, with the count left out.

    Lines below WARNING pass untouched. The decision uses the record's own time
    (``record.created``), so it is the same whichever thread logs.
    """

    def __init__(self, window_s: float = WINDOW_S) -> None:
        """Start with no line seen.

        Args:
            window_s: Least seconds between two written lines of one kind.

        """
        super().__init__()
        self.window_s = window_s
        self._window = RepeatWindow(int(window_s * 1000))
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        """Write the record (possibly with the count of those left out) or leave it out."""
        if record.levelno < logging.WARNING:
            return True
        with self._lock:
            left_out = self._window.admit((record.name, str(record.msg)),
                                          int(record.created * 1000))
        if left_out is None:
            return False
        text = record.getMessage()
        if left_out:
            text += (f" ({left_out} more like this in the last {self.window_s:.0f} s were not "
                     "written)")
        else:
            text += (f" (repeats of this line are written once per {self.window_s:.0f} s at "
                     "most, with their count)")
        record.msg, record.args = text, ()
        return True

    @property
    def left_out(self) -> int:
        """Lines left out and not yet reported in a later line."""
        with self._lock:
            return self._window.left_out()


def collapse_aiokafka_repeats(window_s: float = WINDOW_S) -> CollapseRepeats:
    """Put one :class:`CollapseRepeats` on each of aiokafka's loggers (once per process).

    Args:
        window_s: Least seconds between two written lines of one kind.

    Returns:
        The filter (the one already installed, when called again).

    """
    for name in AIOKAFKA_LOGGERS:
        for flt in logging.getLogger(name).filters:
            if isinstance(flt, CollapseRepeats):
                return flt
    flt = CollapseRepeats(window_s)
    for name in AIOKAFKA_LOGGERS:
        logging.getLogger(name).addFilter(flt)
    return flt
