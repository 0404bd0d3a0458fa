from __future__ import annotations

from pathlib import Path

import pytest

from runwatch.stack.settings import StackSettings, find_checkout_root

ROOT = Path(__file__).resolve().parents[2]



@pytest.fixture(autouse=True)
def _no_stack_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests see the defaults, whatever RUNWATCH_STACK_* the caller exported."""
    import os

    for var in [v for v in os.environ if v.startswith("RUNWATCH_STACK_")]:
        monkeypatch.delenv(var)


def test_checkout_root_is_found_from_anywhere_inside(tmp_path: Path) -> None:
    assert find_checkout_root(ROOT / "services" / "runwatch") == ROOT
    # Outside a checkout the working directory is the root: an installed package
    # never looks for the repository around its own files.
    assert find_checkout_root(tmp_path) == tmp_path.resolve()


def test_outside_a_checkout_state_is_local_and_jars_go_to_the_user_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    s = StackSettings()
    assert not s.in_checkout
    assert s.state == tmp_path.resolve() / ".runwatch"
    assert s.lib == (tmp_path / "cache" / "runwatch" / "kafka-lib").resolve()
    # Configs come from the package: the same files as the checkout's infra/.
    assert s.am_config.read_bytes() == (ROOT / "infra/alertmanager/alertmanager.yml").read_bytes()
    assert s.log4j_config.read_bytes() == (ROOT / "infra/kafka/log4j2.properties").read_bytes()


def test_defaults_point_into_the_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("STATE_DIR", "KAFKA_PORT", "ROOT"):
        monkeypatch.delenv(f"RUNWATCH_STACK_{var}", raising=False)
    s = StackSettings()
    assert s.state == ROOT / ".runwatch"
    assert s.lib == ROOT / "infra" / "kafka" / "lib"
    assert s.am_config == ROOT / "infra" / "alertmanager" / "alertmanager.yml"
    assert (s.bootstrap_servers, s.clickhouse_url, s.alertmanager_url) == (
        "127.0.0.1:9092", "http://127.0.0.1:8123", "http://127.0.0.1:9093")


@pytest.mark.parametrize(
    ("env", "attr", "expected"),
    [
        ({"RUNWATCH_STACK_KAFKA_PORT": "19092"}, "bootstrap_servers", "127.0.0.1:19092"),
        ({"RUNWATCH_STACK_STORE_PORT": "18123"}, "clickhouse_url", "http://127.0.0.1:18123"),
        ({"RUNWATCH_STACK_ALERTMANAGER_PORT": "19093"}, "alertmanager_url",
         "http://127.0.0.1:19093"),
        ({"RUNWATCH_STACK_STATE_DIR": "/tmp/rw-state"}, "state", Path("/tmp/rw-state")),
        ({"RUNWATCH_STACK_KAFKA_LIB": "/opt/kafka/libs"}, "lib", Path("/opt/kafka/libs")),
    ],
)
def test_env_overrides(monkeypatch: pytest.MonkeyPatch, env: dict, attr: str, expected) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert getattr(StackSettings(), attr) == expected


@pytest.mark.parametrize("port", ["0", "70000", "http"])
def test_bad_port_is_refused(monkeypatch: pytest.MonkeyPatch, port: str) -> None:
    monkeypatch.setenv("RUNWATCH_STACK_KAFKA_PORT", port)
    with pytest.raises(ValueError, match="kafka_port"):
        StackSettings()
