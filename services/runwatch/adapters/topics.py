"""Create the topics of the topic map (``schemas/topics.yaml``) on a broker.

The one place that provisions runwatch's topics: `runwatch topics ensure`,
`runwatch stack up`, the demo and the test harnesses all call
:func:`ensure_topics`; services create their own topics (the processor's tick
topic and changelogs) with :func:`create_named_topics`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ClusterMetadata, NewTopic

from runwatch.adapters.kafka_security import KafkaAuthError, check_credentials
from runwatch.core.topics import TopicSpec, load_topics
from runwatch.errors import FatalError

log = logging.getLogger(__name__)


class TopicProvisionError(FatalError):
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
    admin = _admin(kafka_config, timeout_s)
    meta = _metadata(admin, kafka_config, timeout_s)
    have = set(meta.topics)
    replication = 1 if len(meta.brokers) <= 1 else -1  # -1: the broker's default
    new = [
        NewTopic(
            prefix + spec.name,
            num_partitions=partitions if partitions and spec.partitions > 1 else spec.partitions,
            replication_factor=replication,
            config=spec.topic_config(),
        )
        for spec in chosen
        if prefix + spec.name not in have
    ]
    return _create(admin, new, timeout_s)


def _create(admin: AdminClient, new: list[NewTopic], timeout_s: float) -> list[str]:
    """Create the topics; one that another client created meanwhile is not an error.

    Returns:
        The names of the topics this call created.

    Raises:
        TopicProvisionError: The broker refused a topic.
    """
    created: list[str] = []
    if not new:
        return created
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
    meta = _metadata(AdminClient(dict(kafka_config)), kafka_config, timeout_s).topics
    states = []
    for spec in load_topics().values():
        name = prefix + spec.name
        found = meta.get(name)
        count = len(found.partitions) if found is not None and not found.error else None
        states.append(TopicState(name, count, spec.partitions))
    return states


def create_named_topics(
    kafka_config: Mapping[str, str],
    wanted: Mapping[str, tuple[int, Mapping[str, str]]],
    *,
    replication_factor: int = 0,
    timeout_s: float = 30.0,
) -> list[str]:
    """Create topics outside the map (a service's own) if missing, then wait until listed.

    Another client creating the same topic at the same time is not an error.

    Args:
        kafka_config: librdkafka client config.
        wanted: Topic name → (partition count, topic config).
        replication_factor: Replication factor; 0 (default): 1 on a single broker,
            else the broker's ``default.replication.factor``.
        timeout_s: Timeout for creating, and for the new topics to show in the metadata.

    Returns:
        The names of the topics created.

    Raises:
        TopicProvisionError: The broker did not answer, refused a topic, or a topic
            did not show in the metadata in time.
    """
    admin = _admin(kafka_config, timeout_s)
    meta = _metadata(admin, kafka_config, timeout_s)
    have = set(meta.topics)
    replication = replication_factor or (1 if len(meta.brokers) <= 1 else -1)
    new = [NewTopic(name, num_partitions=n, replication_factor=replication, config=dict(conf))
           for name, (n, conf) in wanted.items() if name not in have]
    created = _create(admin, new, timeout_s)
    deadline = time.monotonic() + timeout_s
    while True:
        listed = _metadata(admin, kafka_config, min(timeout_s, 10.0)).topics
        missing = sorted(set(wanted) - set(listed))
        if not missing:
            return created
        if time.monotonic() >= deadline:
            msg = f"topics {missing} not listed by the broker after {timeout_s:g}s"
            raise TopicProvisionError(msg)
        time.sleep(0.2)


def partition_counts(
    kafka_config: Mapping[str, str], names: Iterable[str], *, timeout_s: float = 10.0
) -> dict[str, int]:
    """Return the partition count of each named topic the broker has.

    Args:
        kafka_config: librdkafka client config.
        names: Topic names (as on the broker).
        timeout_s: Metadata timeout.

    Returns:
        Topic → partition count; topics the broker lacks are left out.

    Raises:
        TopicProvisionError: The broker did not answer.
    """
    meta = _metadata(AdminClient(dict(kafka_config)), kafka_config, timeout_s).topics
    return {name: len(meta[name].partitions) for name in names
            if name in meta and not meta[name].error}


def _admin(kafka_config: Mapping[str, str], timeout_s: float) -> AdminClient:
    """Return an admin client, once its login succeeded (a SASL/TLS client).

    Raises:
        TopicProvisionError: The broker refused the login (librdkafka would retry forever).
    """
    try:
        check_credentials(kafka_config, timeout_s=min(timeout_s, 10.0))
    except KafkaAuthError as exc:
        raise TopicProvisionError(str(exc)) from exc
    return AdminClient(dict(kafka_config))


def _metadata(admin: AdminClient, kafka_config: Mapping[str, str],
              timeout_s: float) -> ClusterMetadata:
    """Return the cluster's metadata (topics and brokers) in one request.

    Raises:
        TopicProvisionError: The broker did not answer.
    """
    try:
        return admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        msg = f"cannot list topics on {kafka_config.get('bootstrap.servers')}: {exc}"
        raise TopicProvisionError(msg) from exc


def delete_topics_with_prefix(
    kafka_config: Mapping[str, str], prefixes: Iterable[str], *, timeout_s: float = 30.0
) -> list[str]:
    """Delete every topic whose name starts with one of ``prefixes`` (best effort).

    Tests and benchmarks use it to remove what they created under a unique prefix.

    Args:
        kafka_config: librdkafka client config.
        prefixes: Topic name prefixes; an empty prefix is refused.
        timeout_s: Timeout for listing and deleting.

    Returns:
        The names whose deletion the broker accepted.

    Raises:
        ValueError: A prefix is empty (it would match every topic).
    """
    wanted = tuple(prefixes)
    if not wanted or any(not p for p in wanted):
        msg = "refusing to delete topics without a non-empty prefix"
        raise ValueError(msg)
    admin = AdminClient(dict(kafka_config))
    names = [t for t in admin.list_topics(timeout=timeout_s).topics if t.startswith(wanted)]
    if not names:
        return []
    deleted = []
    for name, fut in admin.delete_topics(names, operation_timeout=timeout_s).items():
        try:
            fut.result(timeout=timeout_s)
        except KafkaException as exc:
            log.warning("could not delete topic %s: %s", name, exc, extra={"topic": name})
            continue
        deleted.append(name)
    return deleted


def cluster_replication(kafka_config: Mapping[str, str], *, timeout_s: float = 10.0) -> int:
    """Return the replication factor topics should get on this cluster: ``min(3, brokers)``.

    Args:
        kafka_config: librdkafka client config.
        timeout_s: Metadata timeout.

    Returns:
        1 on a single broker, 3 on a cluster of three or more.

    Raises:
        TopicProvisionError: The broker did not answer.
    """
    meta = _metadata(AdminClient(dict(kafka_config)), kafka_config, timeout_s)
    return max(1, min(3, len(meta.brokers)))
