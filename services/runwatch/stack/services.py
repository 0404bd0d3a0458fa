"""The three local services: how each is configured, started and probed."""

from __future__ import annotations

import base64
import logging
import subprocess
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from runwatch.adapters.probes import http_ready, kafka_ready
from runwatch.stack.settings import StackSettings

logger = logging.getLogger(__name__)

ServiceName = Literal["kafka", "store", "alertmanager"]
SERVICES: tuple[ServiceName, ...] = ("kafka", "store", "alertmanager")


class StackError(RuntimeError):
    """The stack cannot do what was asked (clear message for the user)."""


@dataclass(frozen=True, slots=True)
class ServiceSpec:
    """How to run and check one service."""

    name: ServiceName
    argv: tuple[str, ...]
    ports: tuple[int, ...]
    log: Path
    extra_logs: tuple[Path, ...]
    env: dict[str, str]
    probe: Callable[[], bool]

    @property
    def port(self) -> int:
        """The service's main (client) port."""
        return self.ports[0]


def kafka_properties(settings: StackSettings) -> str:
    """Render ``server.properties`` of a single-node broker+controller.

    Args:
        settings: The stack settings.

    Returns:
        The properties file content.

    """
    host = settings.host
    data = settings.state / "kafka" / "data"
    lines = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "listeners": f"PLAINTEXT://{host}:{settings.kafka_port},"
        f"CONTROLLER://{host}:{settings.controller_port}",
        "advertised.listeners": f"PLAINTEXT://{host}:{settings.kafka_port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "controller.quorum.bootstrap.servers": f"{host}:{settings.controller_port}",
        "log.dirs": str(data),
        "num.partitions": str(settings.kafka_partitions),
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "8",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "true",
        "delete.topic.enable": "true",
        "log.retention.hours": "168",
    }
    head = "# Written by `runwatch stack up`; regenerated on every start.\n"
    return head + "".join(f"{k}={v}\n" for k, v in lines.items())


def new_cluster_id() -> str:
    """Return a random KRaft cluster id (Kafka's base64url UUID form).

    Returns:
        A 22-character id that does not start with '-' (it goes on a command line).

    """
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if cid[0].isalnum():
            return cid


def _java_argv(settings: StackSettings, main: str, *args: str) -> tuple[str, ...]:
    kafka_logs = settings.logs / "kafka"
    return (
        settings.java,
        f"-Xms{settings.kafka_heap}",
        f"-Xmx{settings.kafka_heap}",
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        "-Djava.awt.headless=true",
        f"-Dkafka.logs.dir={kafka_logs}",
        f"-Dlog4j2.configurationFile={settings.root / 'infra' / 'kafka' / 'log4j2.properties'}",
        "-cp",
        f"{settings.lib}/*",
        main,
        *args,
    )


def prepare_kafka(settings: StackSettings, report: Callable[[str], None]) -> Path:
    """Write the broker config and format KRaft storage once.

    Args:
        settings: The stack settings.
        report: Progress callback.

    Returns:
        The path of ``server.properties``.

    Raises:
        StackError: When the jars are missing or formatting fails.

    """
    if not any(settings.lib.glob("kafka_2.13-*.jar")):
        msg = (
            f"Kafka broker jars not found in {settings.lib}; run `make jars` "
            "(mvn dependency:copy-dependencies on infra/kafka/pom.xml)"
        )
        raise StackError(msg)
    kdir = settings.state / "kafka"
    (kdir / "data").mkdir(parents=True, exist_ok=True)
    (settings.logs / "kafka").mkdir(parents=True, exist_ok=True)
    props = kdir / "server.properties"
    props.write_text(kafka_properties(settings), encoding="utf-8")
    if (kdir / "data" / "meta.properties").is_file():
        return props
    id_file = kdir / "cluster.id"
    cluster_id = id_file.read_text().strip() if id_file.is_file() else new_cluster_id()
    id_file.write_text(cluster_id + "\n")
    report(f"formatting KRaft storage (cluster id {cluster_id})")
    argv = _java_argv(
        settings,
        "kafka.tools.StorageTool",
        "format",
        "--standalone",
        "-t",
        cluster_id,
        "-c",
        str(props),
    )
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    with (settings.logs / "kafka-format.log").open("a") as log:
        log.write(result.stdout + result.stderr)
    if result.returncode != 0:
        msg = f"KRaft storage format failed ({result.returncode}): {result.stderr[-2000:]}"
        raise StackError(msg)
    return props


def build_specs(settings: StackSettings) -> dict[ServiceName, ServiceSpec]:
    """Describe every service of the stack for these settings.

    Args:
        settings: The stack settings.

    Returns:
        Specs by service name, in start order.

    """
    logs = settings.logs
    host = settings.host
    kafka = ServiceSpec(
        name="kafka",
        argv=_java_argv(
            settings, "kafka.Kafka", str(settings.state / "kafka" / "server.properties")
        ),
        ports=(settings.kafka_port, settings.controller_port),
        log=logs / "kafka.out",
        extra_logs=(logs / "kafka" / "server.log",),
        env={},
        probe=lambda: kafka_ready(settings.bootstrap_servers),
    )
    store = ServiceSpec(
        name="store",
        argv=(
            settings.python,
            "-m",
            "runwatch",
            "store",
            "--host",
            host,
            "--port",
            str(settings.store_port),
            "--path",
            str(settings.state / "clickhouse"),
        ),
        ports=(settings.store_port,),
        log=logs / "store.log",
        extra_logs=(),
        env={},
        probe=lambda: http_ready(f"{settings.clickhouse_url}/ping", "Ok."),
    )
    alertmanager = ServiceSpec(
        name="alertmanager",
        argv=(
            settings.alertmanager_bin,
            f"--config.file={settings.am_config}",
            f"--storage.path={settings.state / 'alertmanager'}",
            f"--web.listen-address={host}:{settings.alertmanager_port}",
            "--cluster.listen-address=",
            "--log.level=info",
        ),
        ports=(settings.alertmanager_port,),
        log=logs / "alertmanager.log",
        extra_logs=(),
        env={},
        probe=lambda: http_ready(f"{settings.alertmanager_url}/-/ready"),
    )
    return {"kafka": kafka, "store": store, "alertmanager": alertmanager}
