"""A replicated local cluster: ``runwatch stack up --brokers 3``.

Each broker is its own ``kafka.Kafka`` JVM (KRaft, combined broker and
controller) with its own data directory and ports; the controllers form a
static quorum (``controller.quorum.voters``). Topics default to replication
factor ``min(3, brokers)`` with ``min.insync.replicas=2``, so a producer
with ``acks=all`` keeps writing while one broker is down and never loses an
acknowledged record to a single broker's death.

Broker 1 is the ``kafka`` service (its state in ``<state>/kafka``, as for a
single broker); brokers 2..n are ``kafka-2`` ... (``<state>/kafka-<n>``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from runwatch.stack.settings import StackSettings

BrokerName = Literal["kafka", "kafka-2", "kafka-3", "kafka-4", "kafka-5"]
#: Every broker service name the supervisor knows, broker 1 first.
BROKER_NAMES: tuple[BrokerName, ...] = ("kafka", "kafka-2", "kafka-3", "kafka-4", "kafka-5")


class ClusterError(RuntimeError):
    """A state directory formatted for another broker count (message says which)."""


def broker_name(node: int) -> BrokerName:
    """Return the service name of broker ``node`` (1-based)."""
    return BROKER_NAMES[node - 1]


def broker_names(settings: StackSettings) -> tuple[BrokerName, ...]:
    """Return the service names of this stack's brokers."""
    return BROKER_NAMES[: settings.brokers]


def node_of(name: str) -> int:
    """Return the node id of a broker service name (``kafka`` → 1, ``kafka-3`` → 3)."""
    return BROKER_NAMES.index(name) + 1


def broker_dir(settings: StackSettings, node: int) -> Path:
    """Return broker ``node``'s state folder (``server.properties``, ``data/``)."""
    return settings.state / broker_name(node)


def replication_factor(settings: StackSettings) -> int:
    """Return the replication factor of this stack's topics (3 at most)."""
    return min(3, settings.brokers)


def cluster_properties(settings: StackSettings, node: int) -> dict[str, str]:
    """Return the ``server.properties`` lines that make broker ``node`` one of a cluster.

    Args:
        settings: The stack settings (``brokers`` > 1).
        node: The broker's node id (1-based).

    Returns:
        Property name → value; they replace the single-node lines.

    """
    host = settings.host
    port, cport = settings.broker_ports(node)
    rf = replication_factor(settings)
    isr = str(min(2, rf))
    voters = ",".join(f"{n}@{host}:{settings.broker_ports(n)[1]}"
                      for n in range(1, settings.brokers + 1))
    return {
        "node.id": str(node),
        "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{cport}",
        "advertised.listeners": f"PLAINTEXT://{host}:{port}",
        "controller.quorum.voters": voters,
        "log.dirs": str(broker_dir(settings, node) / "data"),
        "default.replication.factor": str(rf),
        "min.insync.replicas": isr,
        "offsets.topic.replication.factor": str(rf),
        "transaction.state.log.replication.factor": str(rf),
        "transaction.state.log.min.isr": isr,
        "share.coordinator.state.topic.replication.factor": str(rf),
        "share.coordinator.state.topic.min.isr": isr,
        "unclean.leader.election.enable": "false",
        "broker.session.timeout.ms": "6000",  # a killed broker's partitions move in seconds
    }


def check_broker_count(settings: StackSettings) -> None:
    """Refuse to start brokers on storage formatted for another broker count.

    A single broker's storage is formatted as a standalone controller; a
    cluster's as voters of a static quorum: the two cannot share a state
    directory. The count is kept in ``<state>/kafka/brokers`` at format time.

    Raises:
        ClusterError: The state directory was formatted for another count.

    """
    formatted = formatted_brokers(settings)
    if formatted is not None and formatted != settings.brokers:
        msg = (f"the Kafka storage in {settings.state} was formatted for {formatted} "
               f"broker(s), not {settings.brokers}; use its count (--brokers {formatted}) "
               "or another state directory (--state-dir or RUNWATCH_STACK_STATE_DIR)")
        raise ClusterError(msg)


def formatted_brokers(settings: StackSettings) -> int | None:
    """Return the broker count the state directory was formatted for (None: not formatted)."""
    kdir = settings.state / "kafka"
    if not (kdir / "data" / "meta.properties").is_file():
        return None
    try:
        return int((kdir / "brokers").read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return 1  # formatted before the count was recorded: a single broker


def remember_broker_count(settings: StackSettings) -> None:
    """Record the broker count once broker 1's storage is formatted."""
    (settings.state / "kafka" / "brokers").write_text(f"{settings.brokers}\n", encoding="utf-8")
