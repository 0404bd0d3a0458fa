"""What a fault-injection run asks a cluster: partition leaders and Alertmanager's alerts.

Used by the chaos suite (:mod:`runwatch.chaos`) to pick the broker to kill and
to read back what Alertmanager holds; kept here because only adapters talk to
Kafka and HTTP.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient


class ClusterQueryError(RuntimeError):
    """The cluster or Alertmanager did not answer (message says which)."""


def _partitions(kafka_config: Mapping[str, str], topic: str, timeout_s: float) -> list[Any]:
    """Return a topic's partition metadata, or raise ClusterQueryError saying why not."""
    try:
        meta = AdminClient(dict(kafka_config)).list_topics(topic, timeout=timeout_s)
    except KafkaException as exc:
        msg = f"cannot read the metadata of {topic}: {exc}"
        raise ClusterQueryError(msg) from exc
    found = meta.topics.get(topic)
    if found is None or found.error is not None:
        msg = f"topic {topic} is not on the cluster ({getattr(found, 'error', 'missing')})"
        raise ClusterQueryError(msg)
    return list(found.partitions.values())


def partition_leaders(kafka_config: Mapping[str, str], topic: str,
                      timeout_s: float = 10.0) -> dict[int, int]:
    """Return partition → leader broker id of a topic (-1 for a partition without a leader).

    Args:
        kafka_config: librdkafka client config.
        topic: The topic.
        timeout_s: Metadata timeout.

    Returns:
        The leaders by partition.

    Raises:
        ClusterQueryError: The cluster did not answer or lacks the topic.
    """
    return {p.id: p.leader for p in _partitions(kafka_config, topic, timeout_s)}


def in_sync_replicas(kafka_config: Mapping[str, str], topic: str,
                     timeout_s: float = 10.0) -> dict[int, list[int]]:
    """Return partition → in-sync replica ids of a topic.

    Raises:
        ClusterQueryError: The cluster did not answer or lacks the topic.
    """
    return {p.id: list(p.isrs) for p in _partitions(kafka_config, topic, timeout_s)}


def alertmanager_alerts(url: str, timeout_s: float = 10.0) -> list[dict[str, Any]]:
    """Return every alert Alertmanager holds (``GET /api/v2/alerts``, active and not).

    Args:
        url: Alertmanager's base URL.
        timeout_s: Request timeout.

    Returns:
        The alerts as Alertmanager returns them (``labels``, ``status``, ...).

    Raises:
        ClusterQueryError: Alertmanager did not answer with a list.
    """
    try:
        resp = httpx.get(f"{url.rstrip('/')}/api/v2/alerts", timeout=timeout_s,
                         params={"active": "true", "silenced": "true", "inhibited": "true"})
        resp.raise_for_status()
        body = resp.json()
    except (httpx.HTTPError, ValueError) as exc:
        msg = f"Alertmanager at {url} did not list its alerts: {exc}"
        raise ClusterQueryError(msg) from exc
    if not isinstance(body, list):
        msg = f"Alertmanager at {url} answered {type(body).__name__}, not a list"
        raise ClusterQueryError(msg)
    return [a for a in body if isinstance(a, dict)]
