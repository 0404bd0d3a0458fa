"""docker-compose.yml names only real runwatch commands and real settings fields."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import yaml
from pydantic_settings import BaseSettings

from runwatch.adapters.settings import ClickHouseSettings, KafkaSettings
from runwatch.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]

def _settings_by_prefix() -> dict[str, type[BaseSettings]]:
    classes: list[type[BaseSettings]] = [KafkaSettings, ClickHouseSettings]
    from runwatch.pager.service import PagerSettings

    classes.append(PagerSettings)
    return {str(c.model_config.get("env_prefix", "")).upper(): c for c in classes}


def _commands() -> set[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return set(sub.choices)


def _runwatch_services() -> dict[str, dict]:
    return {name: svc for name, svc in SERVICES.items()
            if (svc.get("command") or [None])[0] == "runwatch"}


def test_compose_has_the_whole_topology() -> None:
    images = {name: svc.get("image", "") for name, svc in SERVICES.items()}
    assert images["kafka"].startswith("apache/kafka:4.")
    assert images["clickhouse"].startswith("clickhouse/clickhouse-server:")
    assert images["alertmanager"].startswith("prom/alertmanager:")
    assert images["grafana"].startswith("grafana/grafana:")
    assert "broker,controller" in SERVICES["kafka"]["environment"]["KAFKA_PROCESS_ROLES"]
    assert "grafana-clickhouse-datasource" in SERVICES["grafana"]["environment"][
        "GF_INSTALL_PLUGINS"]
    assert set(_runwatch_services()) >= {"processor", "sink", "pager"}


def test_every_mounted_file_exists() -> None:
    for name, svc in SERVICES.items():
        for volume in svc.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (ROOT / source).exists(), f"{name} mounts missing {source}"


@pytest.mark.parametrize("service", sorted(_runwatch_services()))
def test_runwatch_commands_exist(service: str) -> None:
    argv = SERVICES[service]["command"][1:]
    assert argv[0] in _commands(), f"{service}: `runwatch {argv[0]}` is not a CLI command"
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        pytest.fail(f"{service}: `runwatch {' '.join(argv)}` does not parse ({exc})")
    runs = getattr(args, "func", None)
    assert callable(runs), f"{service}: `runwatch {' '.join(argv)}` runs nothing"


@pytest.mark.parametrize("service", sorted(_runwatch_services()))
def test_runwatch_env_names_are_settings_fields(service: str) -> None:
    by_prefix = _settings_by_prefix()
    env = SERVICES[service].get("environment", {})
    assert env, f"{service} sets no environment"
    for name in env:
        prefix = max((p for p in by_prefix if name.startswith(p)), key=len, default=None)
        assert prefix is not None, f"{service}: {name} matches no settings class"
        field = name[len(prefix):].lower()
        assert field in by_prefix[prefix].model_fields, (
            f"{service}: {name} is not a field of {by_prefix[prefix].__name__}")


@pytest.mark.parametrize(
    ("name", "ok"),
    [("KAFKA_BOOTSTRAP_SERVERS", True), ("CLICKHOUSE_URL", True),
     ("KAFKA_BOOTSTRAP", False), ("CLICKHOUSE_HOST", False)],
)
def test_env_check_can_fail(name: str, ok: bool) -> None:
    by_prefix = _settings_by_prefix()
    prefix = max((p for p in by_prefix if name.startswith(p)), key=len)
    assert (name[len(prefix):].lower() in by_prefix[prefix].model_fields) is ok


def test_grafana_datasource_is_clickhouse() -> None:
    ds = yaml.safe_load((ROOT / "infra/grafana/provisioning/datasources/clickhouse.yml")
                        .read_text())["datasources"][0]
    assert ds["type"] == "grafana-clickhouse-datasource"
    assert ds["jsonData"]["host"] == "clickhouse"
    assert ds["jsonData"]["username"] == ClickHouseSettings().readonly_user
