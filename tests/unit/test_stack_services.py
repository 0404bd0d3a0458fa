from __future__ import annotations

import base64
from pathlib import Path

import pytest

from runwatch.stack.services import (
    ALL_SERVICES,
    OPTIONAL_SERVICES,
    SERVICES,
    StackError,
    build_specs,
    kafka_properties,
    new_cluster_id,
    prepare_kafka,
)
from runwatch.stack.settings import StackSettings


@pytest.fixture(autouse=True)
def _no_stack_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests see the defaults, whatever RUNWATCH_STACK_* the caller exported."""
    import os

    for var in [v for v in os.environ if v.startswith("RUNWATCH_STACK_")]:
        monkeypatch.delenv(var)


def _settings(tmp_path: Path, **kw) -> StackSettings:
    return StackSettings(state_dir=tmp_path / "state", **kw)


def _props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line and line[0] != "#")


@pytest.mark.parametrize(("kafka_port", "controller_port"), [(9092, 9094), (19092, 19094)])
def test_kafka_properties_single_node_kraft(tmp_path: Path, kafka_port: int,
                                            controller_port: int) -> None:
    s = _settings(tmp_path, kafka_port=kafka_port, controller_port=controller_port)
    props = _props(kafka_properties(s))
    assert props["process.roles"] == "broker,controller"
    assert props["listeners"] == (f"PLAINTEXT://127.0.0.1:{kafka_port},"
                                  f"CONTROLLER://127.0.0.1:{controller_port}")
    assert props["advertised.listeners"] == f"PLAINTEXT://127.0.0.1:{kafka_port}"
    assert props["controller.quorum.bootstrap.servers"] == f"127.0.0.1:{controller_port}"
    assert props["log.dirs"] == str(tmp_path / "state" / "kafka" / "data")
    assert props["offsets.topic.replication.factor"] == "1"


def test_cluster_ids_are_kafka_uuids() -> None:
    ids = {new_cluster_id() for _ in range(200)}
    assert len(ids) == 200
    for cid in ids:
        assert len(cid) == 22 and cid[0] != "-"
        assert len(base64.urlsafe_b64decode(cid + "==")) == 16


def test_specs_start_the_real_programs(tmp_path: Path) -> None:
    s = _settings(tmp_path, python="/venv/bin/python")
    specs = build_specs(s)
    assert tuple(specs) == ALL_SERVICES == SERVICES + OPTIONAL_SERVICES
    kafka = specs["kafka"].argv
    assert kafka[0] == "java" and "kafka.Kafka" in kafka
    assert kafka[kafka.index("-cp") + 1] == f"{s.lib}/*"
    assert specs["kafka"].ports == (9092, 9094)
    assert specs["store"].argv == ("/venv/bin/python", "-m", "runwatch", "store", "--host",
                                   "127.0.0.1", "--port", "8123", "--path",
                                   str(tmp_path / "state" / "clickhouse"))
    am = specs["alertmanager"].argv
    assert am[0] == "prometheus-alertmanager"
    assert "--cluster.listen-address=" in am
    assert "--web.listen-address=127.0.0.1:9093" in am
    assert f"--storage.path={tmp_path / 'state' / 'alertmanager'}" in am


def test_missing_jars_is_a_clear_error(tmp_path: Path) -> None:
    s = _settings(tmp_path, kafka_lib=tmp_path / "nolib")
    with pytest.raises(StackError, match="make jars"):
        prepare_kafka(s, lambda _line: None)


@pytest.mark.parametrize("name,argv,needs", [
    ("processor", ("processor", "worker", "-l", "info"), ("kafka",)),
    ("sink", ("sink",), ("kafka", "store")),
    ("pager", ("pager",), ("kafka", "alertmanager")),
])
def test_optional_services_run_runwatch_with_this_stacks_addresses(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name, argv, needs) -> None:
    monkeypatch.delenv("RUNWATCH_PROCESSOR_IMAGE_ALLOW_LIST", raising=False)
    s = _settings(tmp_path, python="/venv/bin/python", kafka_port=19092, store_port=18123,
                  alertmanager_port=19093)
    spec = build_specs(s)[name]
    assert spec.argv == ("/venv/bin/python", "-m", "runwatch", *argv)
    assert spec.ports == () and spec.port == 0 and spec.needs == needs
    assert spec.log == tmp_path / "state" / "logs" / f"{name}.log"
    assert spec.env["KAFKA_BOOTSTRAP_SERVERS"] == "127.0.0.1:19092"
    assert spec.env["CLICKHOUSE_URL"] == "http://127.0.0.1:18123"
    assert spec.env["RUNWATCH_ALERTMANAGER_URL"] == "http://127.0.0.1:19093"
    assert spec.env["RUNWATCH_PROCESSOR_DATA_DIR"] == str(tmp_path / "state" / "processor")
    # Alertmanager on another port: the packaged rules (which page 127.0.0.1:9093) are
    # copied under the state directory with this stack's address (written by `up`)
    assert spec.env["RUNWATCH_PAGER_RULES_FILE"] == str(tmp_path / "state" / "pager" /
                                                        "routes.yaml")
    assert spec.cwd == s.root
    assert spec.probe() is False  # nothing recorded


def test_caller_env_wins_for_service_settings_but_not_addresses(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNWATCH_PROCESSOR_IMAGE_ALLOW_LIST", '["registry.x/"]')
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "elsewhere:1")
    env = build_specs(_settings(tmp_path))["processor"].env
    assert env["RUNWATCH_PROCESSOR_IMAGE_ALLOW_LIST"] == '["registry.x/"]'
    assert env["KAFKA_BOOTSTRAP_SERVERS"] == "127.0.0.1:9092"


@pytest.mark.parametrize("marker_logged,expect", [(True, True), (False, False)])
def test_processor_is_healthy_once_its_worker_is_ready(
        tmp_path: Path, marker_logged: bool, expect: bool) -> None:
    import sys

    from runwatch.stack import process

    s = _settings(tmp_path)
    log = s.logs / "processor.log"
    rec = process.spawn("processor", (sys.executable, "-c", "import time; time.sleep(30)"), log,
                        tmp_path)
    try:
        process.Registry(s.state / "stack.json").put(rec)
        if marker_logged:
            with log.open("a") as f:
                f.write("[^Worker]: Ready\n")
        assert build_specs(s)["processor"].probe() is expect
        assert build_specs(s)["sink"].probe() is False  # not recorded
    finally:
        process.stop(rec, 5.0)
