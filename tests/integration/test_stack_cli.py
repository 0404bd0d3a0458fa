"""``runwatch stack`` as a user runs it: no-op second up, fail-fast on busy ports."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import pytest

from runwatch.stack.services import SERVICES

pytestmark = pytest.mark.integration

PORT_FIELDS = ("kafka_port", "controller_port", "store_port", "alertmanager_port")


def _runwatch(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "runwatch", *args],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _listening_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    return sock


def _registry(stack) -> dict:
    path = stack.local.settings.state / "stack.json"
    return json.loads(path.read_text())["services"] if path.exists() else {}


@pytest.mark.parametrize("services", [("kafka",), ("alertmanager",), ("kafka", "alertmanager"), ()])
def test_second_up_is_a_noop(stack, services: tuple[str, ...]) -> None:
    if stack.local is None:
        pytest.skip("the no-op check is about the local stack (--stack=local)")
    wanted = services or SERVICES
    for name in wanted:
        stack.require(name)  # fails with the log tail when that service could not start
    before = {k: v["pid"] for k, v in _registry(stack).items()}
    result = _runwatch("stack", "up", *services,
                       env={"RUNWATCH_STACK_STATE_DIR": str(stack.local.settings.state)})
    assert result.returncode == 0, result.stderr
    assert "already running; nothing to do" in result.stderr
    for name in wanted:
        assert f"{name}: already running (pid {before[name]})" in result.stderr
    assert {k: v["pid"] for k, v in _registry(stack).items()} == before


@pytest.mark.parametrize("busy_field", PORT_FIELDS)
def test_port_in_use_fails_fast_naming_port_and_holder(tmp_path: Path, busy_field: str) -> None:
    with ExitStack() as cleanup:
        socks = {f: cleanup.enter_context(_listening_socket()) for f in PORT_FIELDS}
        ports = {f: s.getsockname()[1] for f, s in socks.items()}
        # Free every port but the busy one (the OS will not hand them out again at once).
        for f, s in socks.items():
            if f != busy_field:
                s.close()
        env = {"RUNWATCH_STACK_STATE_DIR": str(tmp_path / "state")}
        env.update({f"RUNWATCH_STACK_{f.upper()}": str(p) for f, p in ports.items()})
        result = _runwatch("stack", "up", env=env)
    assert result.returncode == 1
    busy = ports[busy_field]
    assert f"port {busy} is already in use by pid {os.getpid()}" in result.stderr.replace("\n", " ")
    registry = tmp_path / "state" / "stack.json"
    assert not registry.exists() or json.loads(registry.read_text())["services"] == {}
    assert not (tmp_path / "state" / "kafka").exists(), "nothing may start when a port is busy"


def test_status_and_down_on_an_empty_state_dir(tmp_path: Path) -> None:
    env = {"RUNWATCH_STACK_STATE_DIR": str(tmp_path), "RUNWATCH_STACK_KAFKA_PORT": "1",
           "RUNWATCH_STACK_STORE_PORT": "2", "RUNWATCH_STACK_ALERTMANAGER_PORT": "3"}
    status = _runwatch("stack", "status", "--json", env=env)
    assert status.returncode == 3
    payload = json.loads(status.stdout)
    assert [s["name"] for s in payload["services"]] == list(SERVICES)
    assert {s["state"] for s in payload["services"]} == {"stopped"}
    down = _runwatch("stack", "down", env=env)
    assert down.returncode == 0
    assert "nothing to stop" in down.stderr


def test_optional_services_are_supervised_beside_a_running_stack(stack, tmp_path: Path) -> None:
    """``stack up --with-services`` in a fresh state dir reuses the healthy stack,
    records the four services (processor, sink, pager, SLO evaluator), shows them in
    status and ``stack down`` stops them (and nothing else: the stack's own services are
    not recorded there)."""
    import uuid

    tag = uuid.uuid4().hex[:8]
    env = {"RUNWATCH_STACK_STATE_DIR": str(tmp_path),
           "CLICKHOUSE_DATABASE": f"stackcli_{tag}",
           "RUNWATCH_PROCESSOR_APP_ID": f"rw-stackcli-{tag}",
           "RUNWATCH_PROCESSOR_TOPIC_PREFIX": f"stackcli{tag}.",
           "RUNWATCH_SINK_GROUP_ID": f"rw-stackcli-sink-{tag}",
           "RUNWATCH_SINK_TOPICS": json.dumps([f"stackcli{tag}.rw.learning"]),
           "RUNWATCH_PAGER_GROUP_ID": f"rw-stackcli-pager-{tag}",
           "RUNWATCH_PAGER_ALERTS_TOPIC": f"stackcli{tag}.rw.alerts",
           "RUNWATCH_PAGER_DLQ_TOPIC": f"stackcli{tag}.rw.dlq",
           "RUNWATCH_SLO_ALERTS_TOPIC": f"stackcli{tag}.rw.alerts"}
    from runwatch.adapters.topics import ensure_topics

    ensure_topics({"bootstrap.servers": stack.bootstrap_servers}, prefix=f"stackcli{tag}.")
    try:
        up = _runwatch("stack", "up", "--with-services", "--no-topics", env=env)
        assert up.returncode == 0, up.stderr
        status = _runwatch("stack", "status", "--json", env=env)
        rows = {s["name"]: s for s in json.loads(status.stdout)["services"]}
        for name in ("processor", "sink", "pager", "slo"):
            assert rows[name]["state"] == "healthy", (name, rows[name])
            assert rows[name]["pid"]
            assert (tmp_path / "logs" / f"{name}.log").is_file()
        again = _runwatch("stack", "up", "processor", "sink", "pager", "slo", env=env)
        assert again.returncode == 0 and "already running" in again.stderr
    finally:
        down = _runwatch("stack", "down", env=env)
    assert down.returncode == 0
    for name in ("processor", "sink", "pager", "slo"):
        assert f"{name}: stopping pid" in down.stderr
    assert "kafka: stopping" not in down.stderr
    after = json.loads(_runwatch("stack", "status", "--json", env=env).stdout)
    assert [s["name"] for s in after["services"]] == list(SERVICES)
