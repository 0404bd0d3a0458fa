"""Package data, the lean base import, missing extras and schema errors at init.

The wheel itself is built, installed and exercised in tests/packaging; these
checks run on the development install.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import runwatch
from runwatch import resources
from runwatch.client import NullRun
from runwatch.core.codec import SchemaLoadError

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ROOT / "services" / "runwatch"
HEAVY = ("faust", "chdb", "river", "numpy", "clickhouse_connect", "httpx", "rich", "uvloop")


class ListTransport:
    def __init__(self) -> None:
        self.out: list = []

    def produce(self, topic, key, value) -> None:
        self.out.append((topic, key, value))

    def flush(self, timeout=1):
        return 0

    def close(self, timeout=1):
        return 0


def _files(root: Path) -> dict[str, bytes]:
    files = sorted(p for p in root.rglob("*") if p.is_file())
    return {str(p.relative_to(root)): p.read_bytes() for p in files}


@pytest.mark.parametrize(
    ("packaged", "source"),
    [
        ("schemas/avro", "schemas/avro"),
        ("schemas/clickhouse", "schemas/clickhouse"),
        ("infra/clickhouse", "infra/clickhouse"),
        ("infra/pager", "infra/pager"),
        ("infra/alertmanager", "infra/alertmanager"),
    ],
)
def test_packaged_folders_are_the_repository_files(packaged: str, source: str) -> None:
    got = _files(resources.resource(*packaged.split("/")))
    assert got, packaged
    assert got == _files(ROOT / source)


def test_every_lookup_resolves_to_the_top_level_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(resources.SCHEMA_DIR_ENV, raising=False)
    monkeypatch.delenv(resources.TOPICS_FILE_ENV, raising=False)
    pairs = {
        resources.topics_file(): "schemas/topics.yaml",
        resources.retention_file(): "schemas/retention.yaml",
        resources.summary_sql_file(): "schemas/clickhouse/summary/run_summary.sql",
        resources.users_file(): "infra/clickhouse/users.yaml",
        resources.pager_routes_file(): "infra/pager/routes.yaml",
        resources.kafka_pom(): "infra/kafka/pom.xml",
        resources.kafka_log4j(): "infra/kafka/log4j2.properties",
        resources.avro_schema_dir() / "LearningStep.avsc": "schemas/avro/LearningStep.avsc",
    }
    for found, source in pairs.items():
        assert found.read_bytes() == (ROOT / source).read_bytes(), source


def test_a_missing_resource_is_a_clear_error(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(resources, "data_root", lambda: tmp_path)
    with pytest.raises(resources.ResourceError, match="retention.yaml is missing"):
        resources.retention_file()


def test_no_code_looks_for_the_repository_around_its_own_file() -> None:
    offenders = [
        f"{p.relative_to(SERVICES)}:{i}"
        for p in SERVICES.rglob("*.py")
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if "__file__" in line
    ]
    assert offenders == []


def _python(code: str, env: dict[str, str] | None = None, cwd: Path | None = None):
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, **(env or {})}, cwd=cwd,
    )


def test_importing_the_sdk_imports_no_service_dependency(tmp_path: Path) -> None:
    res = _python(
        f"""
        import sys
        import runwatch, runwatch.client, runwatch.client.data, runwatch.client.emit
        runwatch.init  # the lazy attribute
        print(sorted(m for m in {HEAVY!r} if m in sys.modules))
        """,
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"


# A meta-path finder that makes the service extras' packages look uninstalled.
BLOCK = f"""
import sys, importlib.abc, importlib.util
HIDDEN = {HEAVY!r}
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, Hide())
_find_spec = importlib.util.find_spec
def find_spec(name, package=None):
    if name.split(".")[0] in HIDDEN:
        return None
    return _find_spec(name, package)
importlib.util.find_spec = find_spec
"""


@pytest.mark.parametrize(
    ("argv", "extra"),
    [
        (["processor", "worker", "-l", "info"], "processor"),
        (["sink"], "sink"),
        (["store"], "store"),
        (["pager", "--check"], "pager"),
        (["stack", "up"], "all"),
    ],
)
def test_a_command_without_its_extra_names_the_extra(argv: list[str], extra: str) -> None:
    res = _python(BLOCK + f"from runwatch.cli import main\nsys.exit(main({argv!r}))")
    assert res.returncode == 2, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith(
        f"runwatch {argv[0]} needs the '{extra}' extra: pip install 'runwatch[{extra}]'"
    )


def test_base_commands_work_without_any_extra() -> None:
    res = _python(BLOCK + "from runwatch.cli import main\nsys.exit(main(['emit', '--help']))")
    assert res.returncode == 0, res.stderr
    assert "usage: runwatch emit" in res.stdout


@pytest.mark.parametrize(
    ("module", "extra"),
    [
        ("runwatch.processor.app", "processor"),
        ("runwatch.sink.service", "sink"),
        ("runwatch.store.service", "store"),
        ("runwatch.pager.service", "pager"),
    ],
)
def test_importing_a_service_without_its_extra_names_the_extra(module: str, extra: str) -> None:
    res = _python(BLOCK + f"import {module}")
    assert res.returncode == 1
    assert (
        f"MissingExtraError: runwatch {extra} needs the '{extra}' extra: "
        f"pip install 'runwatch[{extra}]'"
    ) in res.stderr


def _bad_schema_dirs(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    partial = tmp_path / "partial"
    partial.mkdir()
    shutil.copy(ROOT / "schemas/avro/LearningStep.avsc", partial)
    broken = tmp_path / "broken"
    shutil.copytree(ROOT / "schemas/avro", broken)
    (broken / "JobEvent.avsc").write_text("{not json", encoding="utf-8")
    return {
        "missing": (tmp_path / "nope", "does not exist"),
        "partial": (partial, "lacks the schemas of"),
        "unreadable": (broken, "cannot load schema"),
    }


@pytest.mark.parametrize("case", ["missing", "partial", "unreadable"])
def test_wrong_schema_dir_is_one_clear_error_at_init_when_strict(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, why = _bad_schema_dirs(tmp_path)[case]
    monkeypatch.setenv("RUNWATCH_SCHEMA_DIR", str(path))
    with pytest.raises(SchemaLoadError, match=why) as info:
        runwatch.init("p", transport=ListTransport(), install_hooks=False,
                      capture_lineage=False, strict=True)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("case", ["missing", "partial", "unreadable"])
def test_wrong_schema_dir_warns_once_and_counts_every_dropped_call(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path, why = _bad_schema_dirs(tmp_path)[case]
    monkeypatch.setenv("RUNWATCH_SCHEMA_DIR", str(path))
    transport = ListTransport()
    with caplog.at_level(logging.WARNING, logger="runwatch"):
        run = runwatch.init("p", transport=transport, install_hooks=False, capture_lineage=False)
    assert isinstance(run, NullRun)
    records = [r for r in caplog.records if r.name.startswith("runwatch")]
    assert len(records) == 1 and records[0].levelno == logging.ERROR
    assert why in records[0].getMessage() and str(path) in records[0].getMessage()
    assert why in run.reason
    for i in range(3):
        run.step(i, loss=1.0, now_ms=1000 + i)
    with run.data_wait():
        pass
    assert run.finish() == {"dropped_init_failed": 5}
    assert transport.out == []


FAKE_MVN = """#!/bin/sh
# records its arguments; copies a fake broker jar where -DoutputDirectory says
echo "$@" > "$MVN_ARGS"
for a in "$@"; do case "$a" in -DoutputDirectory=*) out="${a#-DoutputDirectory=}";; esac; done
mkdir -p "$out" && touch "$out/kafka_2.13-4.1.0.jar"
"""


def test_stack_outside_a_checkout_resolves_the_broker_jars_with_maven(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runwatch.stack.services import resolve_kafka_jars
    from runwatch.stack.settings import StackSettings

    for var in [v for v in os.environ if v.startswith("RUNWATCH_STACK_")]:
        monkeypatch.delenv(var)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "mvn").write_text(FAKE_MVN)
    (bindir / "mvn").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("MVN_ARGS", str(tmp_path / "args"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    s = StackSettings()
    lines: list[str] = []
    resolve_kafka_jars(s, lines.append)
    assert (tmp_path / "cache/runwatch/kafka-lib/kafka_2.13-4.1.0.jar").is_file()
    pom = work / ".runwatch/kafka-pom/pom.xml"
    assert pom.read_bytes() == (ROOT / "infra/kafka/pom.xml").read_bytes()
    args = (tmp_path / "args").read_text().split()
    assert "dependency:copy-dependencies" in args and str(pom) in args
    assert lines and "Maven" in lines[0]


def test_stack_without_jars_or_maven_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runwatch.stack.services import StackError, resolve_kafka_jars
    from runwatch.stack.settings import StackSettings

    monkeypatch.setenv("PATH", str(tmp_path))  # no mvn
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(StackError, match="Maven .* is not installed.*RUNWATCH_STACK_KAFKA_LIB"):
        resolve_kafka_jars(StackSettings(), lambda _line: None)


def test_wrong_topics_file_is_one_clear_error_at_init(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from runwatch.adapters.publisher import default_topics
    from runwatch.core.topics import TopicMapError

    missing = tmp_path / "topics.yaml"
    monkeypatch.setenv("RUNWATCH_TOPICS_FILE", str(missing))
    default_topics.cache_clear()
    try:
        with pytest.raises(TopicMapError, match=str(missing)):
            runwatch.init("p", transport=ListTransport(), install_hooks=False,
                          capture_lineage=False, strict=True)
        with caplog.at_level(logging.WARNING, logger="runwatch"):
            run = runwatch.init("p", transport=ListTransport(), install_hooks=False,
                                capture_lineage=False)
        assert isinstance(run, NullRun) and str(missing) in run.reason
        assert [r.levelno for r in caplog.records if r.name.startswith("runwatch")] == [
            logging.ERROR]
    finally:
        monkeypatch.delenv("RUNWATCH_TOPICS_FILE")
        default_topics.cache_clear()
