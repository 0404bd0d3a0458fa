"""Create the topics of the topic map (``schemas/topics.yaml``) on a broker.

The one place that provisions runwatch's topics: `runwatch topics ensure`,
`runwatch stack up`, the demo and the test harnesses all call
:func:`ensure_topics`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from runwatch.core.topics import TopicSpec, load_topics

log = logging.getLogger(__name__)


class TopicProvisionError(RuntimeError):
    """A topic could not be created or listed."""


@dataclass(frozen=True, slots=True)
class TopicState:
    """A topic of the map as the broker sees it.

    Attributes:
        name: Topic name on the broker (prefix included).
        partitions: Partitions on the broker; None when the topic is missing.
        expected_partitions: Partitions the map asks for.
    """

    name: str
    partitions: int | None
    expected_partitions: int


def ensure_topics(
    kafka_config: Mapping[str, str],
    *,
    prefix: str = "",
    specs: Iterable[TopicSpec] | None = None,
    partitions: int | None = None,
    timeout_s: float = 30.0,
) -> list[str]:
    """Create the map's topics that do not exist yet (idempotent).

    Args:
        kafka_config: librdkafka client config (``KafkaSettings.client_config()``).
        prefix: Prefix for every topic name (tests use a unique one each).
        specs: Topics to create; defaults to every topic of ``schemas/topics.yaml``.
        partitions: Override the partition count of multi-partition topics.
        timeout_s: Timeout for listing and creating.

    Returns:
        The names of the topics created.

    Raises:
        TopicProvisionError: The broker did not answer or refused a topic.
    """
    chosen = list(specs) if specs is not None else list(load_topics().values())
    admin = AdminClient(dict(kafka_config))
    try:
        have = set(admin.list_topics(timeout=timeout_s).topics)
    except KafkaException as exc:
        msg = f"cannot list topics on {kafka_config.get('bootstrap.servers')}: {exc}"
        raise TopicProvisionError(msg) from exc
    new = [
        NewTopic(
            prefix + spec.name,
            num_partitions=partitions if partitions and spec.partitions > 1 else spec.partitions,
            replication_factor=1 if _single_broker(admin, timeout_s) else -1,
            config=spec.topic_config(),
        )
        for spec in chosen
        if prefix + spec.name not in have
    ]
    if not new:
        return []
    created: list[str] = []
    for name, fut in admin.create_topics(new, operation_timeout=timeout_s).items():
        try:
            fut.result(timeout=timeout_s)
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" in str(exc):
                continue
            msg = f"cannot create topic {name}: {exc}"
            raise TopicProvisionError(msg) from exc
        created.append(name)
        log.info("created topic %s", name, extra={"topic": name})
    return created


def topic_states(
    kafka_config: Mapping[str, str], *, prefix: str = "", timeout_s: float = 10.0
) -> list[TopicState]:
    """Compare the map's topics with what the broker has.

    Args:
        kafka_config: librdkafka client config.
        prefix: Prefix for every topic name.
        timeout_s: Metadata timeout.

    Returns:
        One state per topic of the map, in map order.

    Raises:
        TopicProvisionError: The broker did not answer.
    """
    admin = AdminClient(dict(kafka_config))
    try:
        meta = admin.list_topics(timeout=timeout_s).topics
    except KafkaException as exc:
        msg = f"cannot list topics on {kafka_config.get('bootstrap.servers')}: {exc}"
        raise TopicProvisionError(msg) from exc
    states = []
    for spec in load_topics().values():
        name = prefix + spec.name
        found = meta.get(name)
        count = len(found.partitions) if found is not None and not found.error else None
        states.append(TopicState(name, count, spec.partitions))
    return states


def _single_broker(admin: AdminClient, timeout_s: float) -> bool:
    """Return whether the cluster has one broker (replication factor 1 then)."""
    return len(admin.list_topics(timeout=timeout_s).brokers) <= 1
