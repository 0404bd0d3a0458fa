"""Creating the processor's own topics (tick topic, table changelogs) before it starts."""

from __future__ import annotations

import time

from runwatch.adapters.settings import KafkaSettings
from runwatch.core.topics import load_topics
from runwatch.processor.settings import ProcessorSettings

TABLES = ("runstate", "node-index", "dataset-index", "dataset-reports", "baselines")
INTERNAL = ("rw.internal.manifest-by-dataset",)  # topics of the map only the processor uses
COPARTITIONED = ("rw.data", "rw.internal.manifest-by-dataset")


def ensure_internal_topics(settings: ProcessorSettings, kafka: KafkaSettings) -> None:
    """Create the tick topic, the tables' changelogs and internal topics if missing.

    Faust would create the changelogs itself, but a worker that joins its group
    before the new topics show in the metadata can stall in recovery; creating
    them first avoids that race. The internal topics of :data:`INTERNAL` get
    the run partition count (they must be co-partitioned with ``rw.data``) and
    the map's retention.

    Args:
        settings: Processor settings.
        kafka: Where Kafka is.
    """
    from confluent_kafka.admin import AdminClient, NewTopic

    n, app_id = settings.partitions, settings.app_id
    wanted = {f"{app_id}-tick": {"retention.ms": "3600000"}}
    wanted.update({f"{app_id}-{t}-changelog": {"cleanup.policy": "compact"} for t in TABLES})
    specs = load_topics()
    wanted.update({settings.topic(t): specs[t].topic_config() for t in INTERNAL})
    admin = AdminClient(dict(kafka.client_config()))  # type: ignore[arg-type]
    existing = admin.list_topics(timeout=30).topics
    new = [NewTopic(name, num_partitions=n, replication_factor=1, config=conf)
           for name, conf in wanted.items() if name not in existing]
    if new:
        for fut in admin.create_topics(new, operation_timeout=30).values():
            try:
                fut.result(timeout=30)
            except Exception as exc:  # noqa: BLE001 - another worker may have created it
                if "exist" not in str(exc).lower():
                    raise
    topics, deadline = existing, time.monotonic() + 30
    while time.monotonic() < deadline:
        topics = admin.list_topics(timeout=10).topics
        if all(name in topics for name in wanted):
            break
        time.sleep(0.2)
    counts = {name: len(meta.partitions) for name, meta in topics.items()}
    check_copartitioned(counts, [settings.topic(t) for t in COPARTITIONED], n)


def check_copartitioned(counts: dict[str, int], names: list[str], partitions: int) -> None:
    """Refuse to start when co-partitioned topics differ from the run partition count.

    The data agent joins ``rw.data`` and ``rw.internal.manifest-by-dataset`` by
    partition, and the processor computes partitions with ``partitions``; a
    topic with another count would silently lose the dataset → run join.

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
               "to be co-partitioned for the dataset join")
        raise ValueError(msg)
