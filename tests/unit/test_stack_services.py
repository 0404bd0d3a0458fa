from __future__ import annotations

import base64
from pathlib import Path

import pytest

from runwatch.stack.services import (
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
    assert tuple(specs) == SERVICES
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
