"""docker-compose.yml names only real runwatch commands and real settings fields."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import yaml
from dockerfile_kit import parse
from pydantic_settings import BaseSettings

from runwatch.adapters.settings import ClickHouseSettings, KafkaSettings
from runwatch.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
RUNWATCH_IMAGE = "infra/Dockerfile"

def _settings_by_prefix() -> dict[str, type[BaseSettings]]:
    classes: list[type[BaseSettings]] = [KafkaSettings, ClickHouseSettings]
    from runwatch.pager.service import PagerSettings
    from runwatch.processor.settings import ProcessorSettings

    classes += [PagerSettings, ProcessorSettings]
    return {str(c.model_config.get("env_prefix", "")).upper(): c for c in classes}


def _commands() -> set[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return set(sub.choices)


def _entrypoint() -> list[str]:
    _, stages = parse((ROOT / RUNWATCH_IMAGE).read_text())
    entry = stages[-1].last("ENTRYPOINT")
    assert entry is not None, f"{RUNWATCH_IMAGE} has no ENTRYPOINT"
    argv = entry.exec_form()
    assert argv, f"{RUNWATCH_IMAGE}: ENTRYPOINT is not in exec form"
    return argv


def _runwatch_services() -> dict[str, dict]:
    """Services built from the runwatch image."""
    return {name: svc for name, svc in SERVICES.items()
            if (svc.get("build") or {}).get("dockerfile") == RUNWATCH_IMAGE}


def _argv(service: str) -> list[str]:
    """The full command line a service runs: the image's ENTRYPOINT, then `command`."""
    return [*_entrypoint(), *SERVICES[service]["command"]]


def test_compose_has_the_whole_topology() -> None:
    images = {name: svc.get("image", "") for name, svc in SERVICES.items()}
    assert images["kafka"].startswith("apache/kafka:4.")
    assert images["clickhouse"].startswith("clickhouse/clickhouse-server:")
    assert images["alertmanager"].startswith("prom/alertmanager:")
    assert images["grafana"].startswith("grafana/grafana:")
    assert "broker,controller" in SERVICES["kafka"]["environment"]["KAFKA_PROCESS_ROLES"]
    assert "grafana-clickhouse-datasource" in SERVICES["grafana"]["environment"][
        "GF_INSTALL_PLUGINS"]
    assert set(_runwatch_services()) >= {"processor", "sink", "pager", "db-migrate", "topics"}


def test_runwatch_services_use_the_one_image() -> None:
    images = {svc.get("image") for svc in _runwatch_services().values()}
    assert len(images) == 1 and None not in images
    assert _entrypoint()[0] == "runwatch"
    for name, svc in _runwatch_services().items():
        assert svc["build"]["context"] == ".", f"{name}: the build context is the repo root"
        assert (ROOT / svc["build"]["context"] / RUNWATCH_IMAGE).is_file()


def test_services_start_after_the_schema_and_topics_exist() -> None:
    setup = {"db-migrate": ["db", "migrate"], "topics": ["topics", "ensure"]}
    for name, command in setup.items():
        assert SERVICES[name]["command"] == command
        assert SERVICES[name]["restart"] == "no", f"{name} runs once"
    for name in ("processor", "sink", "pager"):
        deps = SERVICES[name]["depends_on"]
        for one in setup:
            assert deps[one]["condition"] == "service_completed_successfully", (name, one)


def test_container_paths_in_settings_are_mounted() -> None:
    """A file or state directory named in a service's env is a mount of that service."""
    path_fields = {"RUNWATCH_PAGER_RULES_FILE", "RUNWATCH_PAGER_STATE_DIR",
                   "RUNWATCH_PROCESSOR_DATA_DIR"}
    checked = 0
    for name, svc in _runwatch_services().items():
        targets = {v.split(":")[1] for v in svc.get("volumes", [])}
        for key, value in (svc.get("environment") or {}).items():
            if key in path_fields:
                checked += 1
                assert value in targets, f"{name}: {key}={value} is not mounted"
    assert checked == len(path_fields)


def test_state_directories_exist_in_the_image_for_the_non_root_user() -> None:
    """Named volumes take their owner from the image's directory: it must exist there."""
    _, stages = parse((ROOT / RUNWATCH_IMAGE).read_text())
    run = " ".join(i.args for i in stages[-1].all("RUN"))
    for name, svc in _runwatch_services().items():
        for volume in svc.get("volumes", []):
            source, target = volume.split(":")[:2]
            if not source.startswith("./"):
                assert target in run and "chown" in run, (
                    f"{name}: {target} is not created and chowned in the image")


def test_every_mounted_file_exists() -> None:
    for name, svc in SERVICES.items():
        for volume in svc.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (ROOT / source).exists(), f"{name} mounts missing {source}"


@pytest.mark.parametrize("service", sorted(_runwatch_services()))
def test_runwatch_commands_exist(service: str) -> None:
    full = _argv(service)
    assert full[0] == "runwatch"
    argv = full[1:]
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


def test_pager_routes_of_compose_parse_and_reach_the_compose_alertmanager() -> None:
    from urllib.parse import urlparse

    from runwatch.pager.service import load_rules

    pager = SERVICES["pager"]
    rules_in_container = pager["environment"]["RUNWATCH_PAGER_RULES_FILE"]
    source = next(v.split(":")[0] for v in pager["volumes"]
                  if v.split(":")[1] == rules_in_container)
    rules = load_rules(ROOT / source)
    hosts = {urlparse(r.settings["url"].value).hostname for r in rules.receivers.values()
             if r.kind == "alertmanager"}
    assert hosts == {"alertmanager"}, f"the pager must reach the `alertmanager` service: {hosts}"
    assert "alertmanager" in SERVICES
