"""What every benchmark here shares: fresh topics, and checks that fail loudly.

A benchmark's figure means something only if what it claims happened did
happen (records sent equal records published, rows equal events, every probe
answered). :class:`Checks` collects those conditions; :meth:`Checks.done`
prints them and exits with status 1 when one failed, so ``make bench-all``
stops instead of printing figures of something else.
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import uuid
from collections.abc import Iterable, Iterator


class Checks:
    """Conditions a benchmark's figures depend on."""

    def __init__(self) -> None:
        """Start with none."""
        self.results: list[tuple[bool, str]] = []

    def check(self, ok: bool, what: str) -> bool:
        """Record one condition (``what`` says what was expected and what was seen)."""
        self.results.append((bool(ok), what))
        return bool(ok)

    def done(self) -> None:
        """Print every condition; exit 1 if one failed."""
        print("\nchecks:")
        for ok, what in self.results:
            print(f"  {'ok  ' if ok else 'FAIL'} {what}")
        failed = [what for ok, what in self.results if not ok]
        if failed:
            print(f"\nBENCHMARK INVALID: {len(failed)} check(s) failed; the figures above do "
                  "not measure what they claim", file=sys.stderr)
            sys.exit(1)


@contextlib.contextmanager
def fresh_topics(bootstrap: str, names: Iterable[str], partitions: int = 1
                 ) -> Iterator[dict[str, str]]:
    """Create topics under a unique prefix for the benchmark, delete them afterwards.

    The local broker does not auto-create topics, so a benchmark that writes to
    a topic nobody created measures its spool, not its delivery.

    Args:
        bootstrap: Kafka bootstrap servers.
        names: Logical topic names (``rw.learning``...).
        partitions: Partitions per topic.

    Yields:
        Logical name -> the created topic.

    """
    from runwatch.adapters.settings import KafkaSettings
    from runwatch.adapters.topics import create_named_topics, delete_topics_with_prefix

    conf = KafkaSettings(bootstrap_servers=bootstrap).client_config()
    prefix = f"bench.{uuid.uuid4().hex[:8]}."
    topics = {n: prefix + n for n in names}
    create_named_topics(conf, {t: (partitions, {}) for t in topics.values()})
    try:
        yield topics
    finally:
        delete_topics_with_prefix(conf, [prefix])


def median(values: Iterable[float]) -> float:
    """Median of the values (nan when there are none)."""
    vals = list(values)
    return statistics.median(vals) if vals else float("nan")


def percentile(values: Iterable[float], q: float) -> float:
    """The ``q`` quantile (0..1) by the nearest-rank method (nan when empty)."""
    vals = sorted(values)
    if not vals:
        return float("nan")
    rank = max(1, -(-len(vals) * q // 1))  # ceil(n q), at least 1
    return vals[min(len(vals), int(rank)) - 1]
