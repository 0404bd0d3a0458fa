"""The replicated local cluster (``runwatch stack up --brokers 3``): configs, specs, markers."""

from __future__ import annotations

from pathlib import Path

import pytest

from runwatch.stack.cluster import broker_names, check_broker_count, formatted_brokers
from runwatch.stack.manager import Stack
from runwatch.stack.services import StackError, build_specs, kafka_properties, prepare_kafka
from runwatch.stack.settings import StackSettings


@pytest.fixture(autouse=True)
def _no_stack_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for var in [v for v in os.environ if v.startswith("RUNWATCH_STACK_")]:
        monkeypatch.delenv(var)


def _props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line and line[0] != "#")


def _cluster(tmp_path: Path, **kw: object) -> StackSettings:
    return StackSettings(state_dir=tmp_path / "state", brokers=3, kafka_port=19092,
                         controller_port=19094, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("node", [1, 2, 3])
def test_three_broker_properties(tmp_path: Path, node: int) -> None:
    s = _cluster(tmp_path)
    props = _props(kafka_properties(s, node))
    port, cport = 19092 + 100 * (node - 1), 19094 + 100 * (node - 1)
    assert props["node.id"] == str(node)
    assert props["process.roles"] == "broker,controller"
    assert props["listeners"] == f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}"
    assert props["advertised.listeners"] == f"PLAINTEXT://127.0.0.1:{port}"
    assert props["controller.quorum.voters"] == (
        "1@127.0.0.1:19094,2@127.0.0.1:19194,3@127.0.0.1:19294")
    assert "controller.quorum.bootstrap.servers" not in props
    assert props["default.replication.factor"] == "3"
    assert props["min.insync.replicas"] == "2"
    assert props["offsets.topic.replication.factor"] == "3"
    assert props["transaction.state.log.min.isr"] == "2"
    assert props["unclean.leader.election.enable"] == "false"
    state = tmp_path / "state"
    assert props["log.dirs"] == str(state / ("kafka" if node == 1 else f"kafka-{node}") / "data")


def test_single_broker_is_unchanged(tmp_path: Path) -> None:
    s = StackSettings(state_dir=tmp_path / "state")
    props = _props(kafka_properties(s))
    assert props["node.id"] == "1" and "controller.quorum.voters" not in props
    assert "default.replication.factor" not in props and "min.insync.replicas" not in props
    assert s.bootstrap_servers == "127.0.0.1:9092" and s.heap == "512m"


def test_cluster_specs_ports_heap_and_bootstrap(tmp_path: Path) -> None:
    s = _cluster(tmp_path)
    assert broker_names(s) == ("kafka", "kafka-2", "kafka-3")
    assert s.bootstrap_servers == "127.0.0.1:19092,127.0.0.1:19192,127.0.0.1:19292"
    specs = build_specs(s)
    assert [n for n in specs if n.startswith("kafka")] == ["kafka", "kafka-2", "kafka-3"]
    assert specs["kafka-3"].ports == (19292, 19294)
    assert "-Xmx384m" in specs["kafka-2"].argv  # three JVMs on a small machine
    assert str(tmp_path / "state" / "kafka-2" / "server.properties") in specs["kafka-2"].argv
    assert "-Xmx1g" in build_specs(_cluster(tmp_path, kafka_heap="1g"))["kafka"].argv
    stack = Stack(s)
    assert stack.core == ("kafka", "kafka-2", "kafka-3", "store", "alertmanager")
    assert [r.name for r in stack.status()][:3] == ["kafka", "kafka-2", "kafka-3"]
    assert stack.url("kafka-2") == "127.0.0.1:19192"


def test_storage_of_another_broker_count_is_refused(tmp_path: Path) -> None:
    one = StackSettings(state_dir=tmp_path / "state")
    (one.state / "kafka" / "data").mkdir(parents=True)
    (one.state / "kafka" / "data" / "meta.properties").write_text("x")
    assert formatted_brokers(one) == 1  # formatted before the count was kept
    with pytest.raises(RuntimeError, match="formatted for 1 broker"):
        check_broker_count(_cluster(tmp_path))
    (one.state / "kafka" / "brokers").write_text("3\n")
    check_broker_count(_cluster(tmp_path))


def test_secure_cluster_is_refused_clearly(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "kafka_2.13-4.1.1.jar").write_text("")
    with pytest.raises(StackError, match="--secure with --brokers"):
        prepare_kafka(_cluster(tmp_path, secure=True, kafka_lib=lib), lambda _l: None, 2)


def test_a_stack_on_other_ports_pages_its_own_alertmanager(tmp_path: Path) -> None:
    from runwatch.resources import pager_routes_file
    from runwatch.stack.pagerroutes import stack_routes_file, write_stack_routes
    from runwatch.stack.services import service_env

    default = StackSettings(state_dir=tmp_path / "a")
    assert stack_routes_file(default) == pager_routes_file()
    other = StackSettings(state_dir=tmp_path / "b", alertmanager_port=39093)
    path = stack_routes_file(other)
    assert path == other.state / "pager" / "routes.yaml"
    assert service_env(other)["RUNWATCH_PAGER_RULES_FILE"] == str(path)
    write_stack_routes(other)
    text = path.read_text()
    assert "url: http://127.0.0.1:39093" in text and "127.0.0.1:9093" not in text
