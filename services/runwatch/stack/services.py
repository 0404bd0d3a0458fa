"""The local services: how each is configured, started and probed.

The stack proper is Kafka, the ClickHouse store and Alertmanager
(:data:`SERVICES`, what a plain ``runwatch stack up`` starts and the test
fixtures use). The runwatch services that consume from it, the processor, the
sink, the pager and the SLO evaluator (:data:`OPTIONAL_SERVICES`), are started
on request (``runwatch stack up processor sink pager slo`` or ``--with-services``) and
supervised the same way: PID records, logs, status, ``stack down``.
"""

from __future__ import annotations

import base64
import json
import logging
import subprocess
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from runwatch.adapters.probes import http_ready, kafka_ready
from runwatch.stack import process
from runwatch.stack.cluster import (
    BrokerName,
    ClusterError,
    broker_dir,
    broker_name,
    check_broker_count,
    cluster_properties,
    remember_broker_count,
)
from runwatch.stack.jars import JarsError, resolve_jars
from runwatch.stack.pagerroutes import stack_routes_file
from runwatch.stack.pki import write_private
from runwatch.stack.settings import StackSettings

logger = logging.getLogger(__name__)

ServiceName = Literal[BrokerName, "store", "alertmanager", "processor", "sink", "pager", "slo"]
#: The stack proper, started by a plain ``runwatch stack up``.
SERVICES: tuple[ServiceName, ...] = ("kafka", "store", "alertmanager")
#: runwatch's own services, started only on request.
OPTIONAL_SERVICES: tuple[ServiceName, ...] = ("processor", "sink", "pager", "slo")
#: Everything the stack can supervise, in start order.
ALL_SERVICES: tuple[ServiceName, ...] = SERVICES + OPTIONAL_SERVICES
#: Line the processor's log shows once its worker has joined the group.
PROCESSOR_READY = "Ready"
#: What ``runwatch slo serve`` logs once its objectives are loaded.
SLO_READY = "objectives every"


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
    needs: tuple[ServiceName, ...] = ()
    cwd: Path | None = None

    @property
    def port(self) -> int:
        """The service's main (client) port (0 when it listens on none)."""
        return self.ports[0] if self.ports else 0


def kafka_properties(settings: StackSettings, node: int = 1) -> str:
    """Render ``server.properties`` of a broker+controller (single node, or one of a cluster).

    Args:
        settings: The stack settings.
        node: The broker's node id in a cluster (``settings.brokers`` > 1).

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
        "auto.create.topics.enable": "false",  # topics come from schemas/topics.yaml
        "delete.topic.enable": "true",
        "log.retention.hours": "168",
    }
    if settings.brokers > 1:
        del lines["controller.quorum.bootstrap.servers"]  # a static quorum of voters instead
        lines.update(cluster_properties(settings, node))
    if settings.secure:
        from runwatch.stack.secure import SecureFiles, secure_properties

        files = SecureFiles(settings.secure_dir)
        lines.update(secure_properties(host, settings.kafka_port, settings.controller_port,
                                       files.tls, files.password("admin")))
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


def _java_argv(settings: StackSettings, main: str, *args: str, node: int = 1) -> tuple[str, ...]:
    kafka_logs = settings.logs / broker_name(node)
    return (
        settings.java,
        f"-Xms{settings.heap}",
        f"-Xmx{settings.heap}",
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        "-Djava.awt.headless=true",
        f"-Dkafka.logs.dir={kafka_logs}",
        f"-Dlog4j2.configurationFile={settings.log4j_config}",
        "-cp",
        f"{settings.lib}/*",
        main,
        *args,
    )


def resolve_kafka_jars(settings: StackSettings, report: Callable[[str], None],
                       timeout_s: float = 900.0) -> None:
    """Fill the broker classpath folder with Maven (:func:`runwatch.stack.jars.resolve_jars`).

    Raises:
        StackError: Maven is missing, fails, or leaves no broker jar behind.

    """
    try:
        resolve_jars(settings, report, timeout_s)
    except JarsError as exc:
        raise StackError(str(exc)) from exc


def prepare_kafka(settings: StackSettings, report: Callable[[str], None], node: int = 1) -> Path:
    """Write a broker's config and format its KRaft storage once.

    Args:
        settings: The stack settings.
        report: Progress callback.
        node: Which broker of a cluster (1 for a single broker).

    Returns:
        The path of ``server.properties``.

    Raises:
        StackError: When the jars are missing or formatting fails.

    """
    if not any(settings.lib.glob("kafka_2.13-*.jar")):
        if settings.kafka_lib is not None:  # a folder the user chose: not ours to fill
            msg = (
                f"Kafka broker jars not found in {settings.lib} (RUNWATCH_STACK_KAFKA_LIB); "
                "fill it, unset it, or in a checkout run `make jars` "
                "(mvn dependency:copy-dependencies on infra/kafka/pom.xml)"
            )
            raise StackError(msg)
        resolve_kafka_jars(settings, report)
    if settings.brokers > 1 and settings.secure:
        msg = "--secure with --brokers > 1 is not supported yet: secure a single broker"
        raise StackError(msg)
    try:
        check_broker_count(settings)
    except ClusterError as exc:
        raise StackError(str(exc)) from exc
    kdir = broker_dir(settings, node)
    (kdir / "data").mkdir(parents=True, exist_ok=True)
    (settings.logs / broker_name(node)).mkdir(parents=True, exist_ok=True)
    scram: list[str] = []
    if settings.secure:
        from runwatch.stack.secure import SecureFiles, scram_args

        scram = scram_args(SecureFiles(settings.secure_dir).ensure(settings.host))
    props = kdir / "server.properties"
    write_private(props, kafka_properties(settings, node).encode())  # holds the admin password
    marker = kdir / "secure.marker"
    if (kdir / "data" / "meta.properties").is_file():
        if settings.secure != marker.is_file():
            was, now = ("secured", "plaintext") if marker.is_file() else ("plaintext", "secured")
            msg = (f"the broker's storage in {kdir} was formatted for a {was} broker; a {now} "
                   "one needs its own state directory (--state-dir or RUNWATCH_STACK_STATE_DIR)")
            raise StackError(msg)
        return props
    id_file = settings.state / "kafka" / "cluster.id"  # one id for every broker of a cluster
    cluster_id = id_file.read_text().strip() if id_file.is_file() else new_cluster_id()
    id_file.write_text(cluster_id + "\n")
    report(f"formatting KRaft storage of {broker_name(node)} (cluster id {cluster_id})")
    quorum = ("--standalone",) if settings.brokers == 1 else ()  # else: the static voters
    argv = _java_argv(
        settings,
        "kafka.tools.StorageTool",
        "format",
        *quorum,
        "-t",
        cluster_id,
        "-c",
        str(props),
        *scram,
        node=node,
    )
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    with (settings.logs / "kafka-format.log").open("a") as log:
        log.write(result.stdout + result.stderr)
    if result.returncode != 0:
        msg = f"KRaft storage format failed ({result.returncode}): {result.stderr[-2000:]}"
        raise StackError(msg)
    if settings.secure:
        marker.write_text("formatted for runwatch stack up --secure\n", encoding="utf-8")
    if node == 1:
        remember_broker_count(settings)
    return props


def _logged(path: Path, marker: str, head_bytes: int = 1 << 20) -> bool:
    """Return whether the start of a log (it is rotated at every spawn) shows ``marker``."""
    try:
        with path.open("rb") as f:
            return marker.encode() in f.read(head_bytes)
    except OSError:
        return False


def _alive(settings: StackSettings, name: str, marker: str = "") -> Callable[[], bool]:
    """Probe a portless service: its recorded process is ours, alive and logged ``marker``."""

    def probe() -> bool:
        record = process.Registry(settings.state / "stack.json").load().get(name)
        if record is None or process.owned_process(record) is None:
            return False
        return not marker or _logged(Path(record.log), marker)

    return probe


def service_env(settings: StackSettings, role: str | None = None) -> dict[str, str]:
    """Environment of the optional services: this stack's addresses and state paths.

    Variables already set in the caller's environment win (e.g. an image
    allow-list for the processor), except the addresses, which always point
    at this stack.

    Args:
        settings: The stack settings.
        role: On a secured stack, the role whose ``KAFKA_*`` credentials the
            service gets (:mod:`runwatch.stack.secure`).

    Returns:
        Extra environment variables.

    """
    import os

    state = settings.state
    defaults = {
        "RUNWATCH_PROCESSOR_DATA_DIR": str(state / "processor"),
        "RUNWATCH_PAGER_STATE_DIR": str(state / "pager"),
        "RUNWATCH_PAGER_RULES_FILE": str(stack_routes_file(settings)),
        "RUNWATCH_PROCESSOR_IMAGE_ALLOW_LIST": json.dumps([]),
    }
    env = {k: os.environ.get(k, v) for k, v in defaults.items()}
    env.update({
        "KAFKA_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "CLICKHOUSE_URL": settings.clickhouse_url,
        "RUNWATCH_ALERTMANAGER_URL": settings.alertmanager_url,
    })
    if settings.secure and role is not None:  # the role's credentials, never the caller's
        env.update({f"KAFKA_{k.upper()}": v for k, v in settings.kafka_env(role).items()})
    return env


def _optional_specs(settings: StackSettings) -> dict[ServiceName, ServiceSpec]:
    logs = settings.logs
    rw = (settings.python, "-m", "runwatch")

    def spec(name: ServiceName, argv: tuple[str, ...], needs: tuple[ServiceName, ...],
             marker: str = "") -> ServiceSpec:
        env = service_env(settings, name)  # each service runs as the role of its name
        return ServiceSpec(name=name, argv=(*rw, *argv), ports=(), log=logs / f"{name}.log",
                           extra_logs=(), env=env, probe=_alive(settings, name, marker),
                           needs=needs, cwd=settings.root)

    return {
        "processor": spec("processor", ("processor", "worker", "-l", "info"), ("kafka",),
                          PROCESSOR_READY),
        "sink": spec("sink", ("sink",), ("kafka", "store")),
        "pager": spec("pager", ("pager",), ("kafka", "alertmanager")),
        # the SLO evaluator (`runwatch slo serve`): the shipped slos.yaml unless
        # RUNWATCH_SLO_FILE names another; reads the sink's tables, writes rw.alerts
        "slo": spec("slo", ("slo", "serve"), ("kafka", "store"), SLO_READY),
    }


def build_specs(settings: StackSettings) -> dict[ServiceName, ServiceSpec]:
    """Describe every service of the stack for these settings.

    Args:
        settings: The stack settings.

    Returns:
        Specs by service name, in start order (the stack, then the optional services).

    """
    logs = settings.logs
    host = settings.host
    brokers: dict[ServiceName, ServiceSpec] = {
        broker_name(n): _broker_spec(settings, n) for n in range(1, settings.brokers + 1)}
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
    return {**brokers, "store": store, "alertmanager": alertmanager,
            **_optional_specs(settings)}


def _broker_spec(settings: StackSettings, node: int) -> ServiceSpec:
    """Describe broker ``node`` (``kafka`` for node 1, ``kafka-<n>`` for the others)."""
    name = broker_name(node)
    address = f"{settings.host}:{settings.broker_ports(node)[0]}"
    return ServiceSpec(
        name=name,
        argv=_java_argv(settings, "kafka.Kafka",
                        str(broker_dir(settings, node) / "server.properties"), node=node),
        ports=settings.broker_ports(node),
        log=settings.logs / f"{name}.out",
        extra_logs=(settings.logs / name / "server.log",),
        env={},
        probe=lambda: kafka_ready(address, conf=settings.kafka_client_config("admin")),
    )
