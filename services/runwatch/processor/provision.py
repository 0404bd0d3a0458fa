"""Creating the processor's own topics (tick topic, table changelogs) before it starts."""

from __future__ import annotations

from runwatch.adapters.settings import KafkaSettings
from runwatch.adapters.topics import create_named_topics, partition_counts
from runwatch.core.topics import load_topics
from runwatch.processor.settings import ProcessorSettings

TABLES = ("runstate", "node-runs", "dataset-index", "dataset-reports", "baselines")
# topics of the map only the processor uses
INTERNAL = ("rw.internal.manifest-by-dataset", "rw.internal.job-by-node")
# pairs joined by partition: each must have the run partition count
COPARTITIONED = (("rw.data", "rw.internal.manifest-by-dataset"),
                 ("rw.exec.node", "rw.internal.job-by-node"))


def ensure_internal_topics(settings: ProcessorSettings, kafka: KafkaSettings) -> None:
    """Create the tick topic (faust runtime), the tables' changelogs and internal topics.

    Faust would create the changelogs itself, but a worker that joins its group
    before the new topics show in the metadata can stall in recovery; creating
    them first avoids that race. The internal topics of :data:`INTERNAL` get
    the run partition count (they are co-partitioned with ``rw.data`` and
    ``rw.exec.node``) and the map's retention. The topics of
    :data:`COPARTITIONED` are then checked (:func:`check_copartitioned`).

    Args:
        settings: Processor settings.
        kafka: Where Kafka is.

    Raises:
        ValueError: A co-partitioned topic has another partition count.
    """
    config = dict(kafka.client_config())
    create_named_topics(config, wanted_topics(settings),
                        replication_factor=settings.replication_factor)
    names = [settings.topic(t) for pair in COPARTITIONED for t in pair]
    check_copartitioned(partition_counts(config, names), names, settings.partitions)


def wanted_topics(settings: ProcessorSettings) -> dict[str, tuple[int, dict[str, str]]]:
    """Return the processor's own topics: name -> (partitions, topic config)."""
    n, app_id = settings.partitions, settings.app_id
    wanted: dict[str, tuple[int, dict[str, str]]] = {}
    if settings.runtime == "faust":  # the plain runtime's loop times its rules without one
        wanted[f"{app_id}-tick"] = (n, {"retention.ms": "3600000"})
    wanted.update({f"{app_id}-{t}-changelog": (n, {"cleanup.policy": "compact"})
                   for t in TABLES})
    specs = load_topics()
    wanted.update({settings.topic(t): (n, specs[t].topic_config()) for t in INTERNAL})
    return wanted


def check_copartitioned(counts: dict[str, int], names: list[str], partitions: int) -> None:
    """Refuse to start when co-partitioned topics differ from the run partition count.

    The data agent joins ``rw.data`` and ``rw.internal.manifest-by-dataset``,
    and the nodes agent ``rw.exec.node`` and ``rw.internal.job-by-node``, by
    partition, and the processor computes partitions with ``partitions``; a
    topic with another count would silently lose the dataset → run or the
    node → run join.

    Args:
        counts: Topic → partition count, as the broker reports it.
        names: The topics that must be co-partitioned (missing ones are skipped).
        partitions: The processor's run partition count.

    Raises:
        ValueError: A present topic has another partition count.

    """
    bad = {name: counts[name] for name in names if name in counts and counts[name] != partitions}
    if bad:
        msg = (f"topics {bad} must have {partitions} partitions (RUNWATCH_PROCESSOR_PARTITIONS) "
               "to be co-partitioned for the dataset and node joins")
        raise ValueError(msg)
