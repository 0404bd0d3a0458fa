"""Session fixtures shared by every integration and e2e test.

``stack`` gives the addresses of a real Kafka broker, the ClickHouse store and
Alertmanager. With ``--stack=local`` (the default) it uses the local stack if
it is already healthy, else starts what is missing through
:class:`runwatch.stack.manager.Stack` and stops what it started at the end of
the session. It fails (never skips) with the service's log tail when a service
cannot start. ``--stack=docker`` uses testcontainers where a Docker engine
answers and skips with that reason where none does.

Fixtures are only activated by the tests that request them, so unit tests
never start services.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from runwatch.adapters.probes import http_ready, kafka_ready
from runwatch.stack.manager import Stack
from runwatch.stack.services import SERVICES, ServiceName, StackError
from runwatch.stack.settings import StackSettings

KAFKA_IMAGE = "apache/kafka:4.1.1"
CLICKHOUSE_IMAGE = "clickhouse/clickhouse-server:25.8"
ALERTMANAGER_IMAGE = "prom/alertmanager:v0.28.1"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--stack",
        choices=("local", "docker"),
        default=os.environ.get("RUNWATCH_TEST_STACK", "local"),
        help="services for integration tests: the local stack (default) or testcontainers",
    )


#: The order tiers are handed to ``pytest -n`` workers (``--dist loadfile``): the long
#: files on the stack first, the many short unit files last, so the workers finish
#: together instead of one running the last long integration file alone.
TIER_ORDER = ("e2e", "integration", "packaging", "chaos", "contract", "unit")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Order the session by tier (:data:`TIER_ORDER`); files keep their order within a tier."""
    root = config.rootpath / "tests"

    def tier(item: pytest.Item) -> int:
        try:
            top = item.path.relative_to(root).parts[0]
        except ValueError:
            return len(TIER_ORDER)
        return TIER_ORDER.index(top) if top in TIER_ORDER else len(TIER_ORDER)

    items.sort(key=tier)  # stable: a module's tests stay together and in order


@dataclass
class StackHandle:
    """Addresses of the services the tests talk to.

    Accessing a service whose start failed fails the test with the reason and
    the service's log tail.
    """

    mode: str
    addresses: dict[str, str]
    failures: dict[str, str] = field(default_factory=dict)
    local: Stack | None = None
    containers: dict[str, Any] = field(default_factory=dict)

    def require(self, name: ServiceName) -> str:
        if name in self.failures:
            pytest.fail(f"{name} of the {self.mode} stack could not start: {self.failures[name]}",
                        pytrace=False)
        return self.addresses[name]

    @property
    def bootstrap_servers(self) -> str:
        return self.require("kafka")

    @property
    def clickhouse_url(self) -> str:
        return self.require("store")

    @property
    def alertmanager_url(self) -> str:
        return self.require("alertmanager")

    def kafka_config(self, **extra: Any) -> dict[str, Any]:
        """librdkafka config for this broker plus ``extra`` (dots as underscores allowed)."""
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers}
        conf.update({k.replace("_", "."): v for k, v in extra.items()})
        return conf

    def restart_kafka(self) -> None:
        """Stop and start the shared broker; its data (topics, offsets) is kept.

        Other test sessions may be using the shared stack: prefer a private
        ``Stack`` on ephemeral ports for restart tests (see test_kafka_stack.py).
        """
        if self.local is None:
            pytest.skip("restarting the broker is done through --stack=local")
        result = self.local.restart("kafka")
        if not result.ok:
            pytest.fail(f"kafka did not come back: {result.failed.get('kafka')}", pytrace=False)


class _Leases:
    """Test sessions sharing one local stack.

    Several pytest sessions may use the same checkout's stack at once. Each one
    holds a lease file while it runs; services that a session's fixture started
    are stopped by the last session to leave, never under a running one. A
    stack started by the user (``runwatch stack up``) is left running.
    """

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.dir = stack.settings.state / "test-leases"
        self.started_file = self.dir / "fixture-started.json"
        self.mine = self.dir / f"{os.getpid()}.lease"

    def take(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.mine.write_text(str(os.getpid()))

    def note_started(self, names: tuple[str, ...]) -> None:
        with self.stack.locked():
            known = set(self._started())
            self.started_file.write_text(json.dumps(sorted(known | set(names))))

    def release(self) -> list[str]:
        """Drop this session's lease; return what to stop if it was the last one."""
        with self.stack.locked():
            self.mine.unlink(missing_ok=True)
            others = [p for p in self.dir.glob("*.lease") if _alive(p.stem)]
            if others:
                return []
            started = self._started()
            self.started_file.unlink(missing_ok=True)
            return started

    def _started(self) -> list[str]:
        try:
            return list(json.loads(self.started_file.read_text()))
        except (OSError, ValueError):
            return []


def _alive(pid: str) -> bool:
    import psutil

    return pid.isdigit() and psutil.pid_exists(int(pid))


def _local_stack(request: pytest.FixtureRequest) -> Iterator[StackHandle]:
    settings = StackSettings()
    stack = Stack(settings)
    leases = _Leases(stack)
    leases.take()
    down = [s for s in SERVICES if not stack.healthy(s)]
    handle = StackHandle(
        mode="local",
        addresses={s: stack.url(s) for s in SERVICES},
        local=stack,
    )
    if down:
        reporter = request.config.pluginmanager.get_plugin("terminalreporter")

        def report(line: str) -> None:
            if reporter is not None:
                reporter.write_line(f"[stack] {line}")

        try:
            result = stack.up(report, down)
        except StackError as exc:
            leases.release()
            pytest.fail(f"the local stack cannot start: {exc}", pytrace=False)
        leases.note_started(result.started)
        handle.failures.update(result.failed)
    try:
        yield handle
    finally:
        to_stop = leases.release()
        if to_stop:
            stack.down(services=to_stop)  # type: ignore[arg-type]


def _docker_stack() -> Iterator[StackHandle]:
    try:
        import docker

        docker.from_env().ping()
    except Exception as exc:  # noqa: BLE001 - any failure means no engine
        pytest.skip(f"--stack=docker needs a Docker engine, none answers here: {exc}")
    from testcontainers.clickhouse import ClickHouseContainer
    from testcontainers.core.container import DockerContainer
    from testcontainers.kafka import KafkaContainer

    kafka = KafkaContainer(KAFKA_IMAGE).with_kraft()
    clickhouse = ClickHouseContainer(CLICKHOUSE_IMAGE, username="runwatch", password="runwatch")
    alertmanager = DockerContainer(ALERTMANAGER_IMAGE).with_exposed_ports(9093)
    containers = {"kafka": kafka, "store": clickhouse, "alertmanager": alertmanager}
    for c in containers.values():
        c.start()
    try:
        am_host = alertmanager.get_container_host_ip()
        ch_host = clickhouse.get_container_host_ip()
        handle = StackHandle(
            mode="docker",
            addresses={
                "kafka": kafka.get_bootstrap_server(),
                "store": f"http://{ch_host}:{clickhouse.get_exposed_port(8123)}",
                "alertmanager": f"http://{am_host}:{alertmanager.get_exposed_port(9093)}",
            },
            containers=containers,
        )
        if not kafka_ready(handle.addresses["kafka"], timeout_s=30):
            handle.failures["kafka"] = "the Kafka container does not answer metadata"
        if not http_ready(handle.addresses["alertmanager"] + "/-/ready"):
            handle.failures["alertmanager"] = "the Alertmanager container is not ready"
        yield handle
    finally:
        for c in containers.values():
            c.stop()


@pytest.fixture(scope="session")
def stack(request: pytest.FixtureRequest) -> Iterator[StackHandle]:
    """The running services for integration tests (see the module docstring)."""
    if request.config.getoption("--stack") == "docker":
        yield from _docker_stack()
    else:
        yield from _local_stack(request)


@pytest.fixture
def fresh_topic(stack: StackHandle) -> Iterator[Callable[..., str]]:
    """Factory making uniquely named topics (deleted after the test).

    Call ``fresh_topic(partitions=8, prefix="t")`` to get a new topic's name.
    """
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
    made: list[str] = []

    def make(partitions: int = 8, prefix: str = "test", **config: str) -> str:
        name = f"{prefix}.{uuid.uuid4().hex[:12]}"
        futures = admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config)],
            operation_timeout=30,
        )
        futures[name].result(timeout=30)
        made.append(name)
        return name

    yield make
    if made:
        admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
        for name, fut in admin.delete_topics(made, operation_timeout=30).items():
            try:
                fut.result(timeout=30)
            except Exception as exc:  # noqa: BLE001 - cleanup must not mask the test result
                print(f"could not delete topic {name}: {exc}")
