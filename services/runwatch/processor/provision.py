"""Creating the processor's own topics (tick topic, table changelogs) before it starts."""

from __future__ import annotations

import time

from runwatch.adapters.settings import KafkaSettings
from runwatch.processor.settings import ProcessorSettings

TABLES = ("runstate", "node-index", "dataset-runs", "dataset-last", "baselines")


def ensure_internal_topics(settings: ProcessorSettings, kafka: KafkaSettings) -> None:
    """Create the tick topic and the tables' changelog topics if missing.

    Faust would create the changelogs itself, but a worker that joins its group
    before the new topics show in the metadata can stall in recovery; creating
    them first avoids that race.

    Args:
        settings: Processor settings.
        kafka: Where Kafka is.
    """
    from confluent_kafka.admin import AdminClient, NewTopic

    n, app_id = settings.partitions, settings.app_id
    wanted = {f"{app_id}-tick": {"retention.ms": "3600000"}}
    wanted.update({f"{app_id}-{t}-changelog": {"cleanup.policy": "compact"} for t in TABLES})
    admin = AdminClient(dict(kafka.client_config()))  # type: ignore[arg-type]
    existing = admin.list_topics(timeout=30).topics
    new = [NewTopic(name, num_partitions=n, replication_factor=1, config=conf)
           for name, conf in wanted.items() if name not in existing]
    if not new:
        return
    for fut in admin.create_topics(new, operation_timeout=30).values():
        try:
            fut.result(timeout=30)
        except Exception as exc:  # noqa: BLE001 - another worker may have created it
            if "exist" not in str(exc).lower():
                raise
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        topics = admin.list_topics(timeout=10).topics
        if all(name in topics for name in wanted):
            return
        time.sleep(0.2)
