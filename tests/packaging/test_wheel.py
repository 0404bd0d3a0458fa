"""The packaging tier: the wheel, installed alone into a clean venv, works as a user's would.

Builds the wheel from a copy of the sources (never from a stale ``build/``),
installs it with the base dependencies only into a throwaway venv outside the
checkout, then:

* runs a 100-step SDK job against the local broker with the default topic map
  and reads the 100 LearningSteps back from ``rw.learning`` with a stock
  confluent-kafka consumer, decoded by the codec;
* checks that ``import runwatch`` (and the SDK modules) import none of the
  service dependencies, and that service commands name their extra;
* prints what the base install adds to site-packages (goal <= 60 MB; pip and
  setuptools left out) and ``python -X importtime -c "import runwatch"``'s total
  (goal <= 150 ms; printed, not asserted: no timed assertions).

pip reaches the package registry (or its cache) for the base dependencies and
the build backend.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = [pytest.mark.packaging, pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("faust", "chdb", "river", "numpy", "clickhouse_connect", "httpx", "rich", "uvloop",
         "pandas", "pyarrow")
SITE_PACKAGES_GOAL_MB = 60.0
IMPORT_GOAL_MS = 150.0
STEPS = 100
# Installer machinery a venv starts with: not part of what runwatch adds.
_TOOLING = ("pip", "setuptools", "_distutils_hack", "pkg_resources", "distutils-precedence.pth",
            "__pycache__")


@dataclass
class BaseVenv:
    python: Path
    site: Path
    wheel: Path
    work: Path  # a folder outside the checkout, the jobs' working directory


def _clean_env(**extra: str) -> dict[str, str]:
    """The caller's environment without what would make the venv see other code or settings."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "RUNWATCH_", "KAFKA_", "VIRTUAL_ENV"))}
    return {**env, **extra}


def _run(argv: list[str | Path], timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    kw.setdefault("env", _clean_env())
    res = subprocess.run([str(a) for a in argv], capture_output=True, text=True,
                         timeout=timeout, check=False, **kw)
    assert res.returncode == 0, f"{argv} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}"
    return res


def _source_copy(dest: Path) -> Path:
    """Copy what the build reads (keeping runwatch/_data's symbolic links)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "lib", "target")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, dest / name)
    for name in ("services", "schemas", "infra"):
        shutil.copytree(ROOT / name, dest / name, symlinks=True, ignore=ignore)
    return dest


def build_wheel(out: Path, scratch: Path) -> Path:
    """Build runwatch's wheel into ``out`` from a fresh copy of the sources."""
    src = _source_copy(scratch)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", out, src])
    wheels = sorted(out.glob("runwatch-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def site_packages_mb(site: Path) -> tuple[float, dict[str, float]]:
    """Size of site-packages without the installer tooling, in MB, and per top-level entry."""
    sizes: dict[str, float] = {}
    for entry in site.iterdir():
        if entry.name.startswith(_TOOLING):
            continue
        files = [entry] if entry.is_file() else [p for p in entry.rglob("*") if p.is_file()]
        sizes[entry.name] = sum(p.stat().st_size for p in files) / 1e6
    return sum(sizes.values()), sizes


@pytest.fixture(scope="module")
def base_venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BaseVenv]:
    top = tmp_path_factory.mktemp("packaging")
    (top / "src").mkdir()
    wheel = build_wheel(top / "dist", top / "src")
    venv = top / "venv"
    base_python = getattr(sys, "_base_executable", sys.executable)
    _run([base_python, "-m", "venv", venv])
    python = venv / "bin" / "python"
    _run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", wheel])
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
                .stdout.strip())
    work = top / "work"
    work.mkdir()
    yield BaseVenv(python=python, site=site, wheel=wheel, work=work)


def test_wheel_carries_the_package_data(base_venv: BaseVenv) -> None:
    data = base_venv.site / "runwatch" / "_data"
    for rel in ("schemas/avro", "schemas/avro/history", "schemas/clickhouse",
                "schemas/clickhouse/queries", "schemas/clickhouse/summary"):
        shipped = sorted(p.name for p in (data / rel).iterdir() if p.is_file())
        source = sorted(p.name for p in (ROOT / rel).iterdir() if p.is_file())
        assert shipped == source, rel
    for rel in ("schemas/topics.yaml", "schemas/retention.yaml", "infra/clickhouse/users.yaml",
                "infra/pager/routes.yaml", "infra/alertmanager/alertmanager.yml",
                "infra/kafka/pom.xml", "infra/kafka/log4j2.properties"):
        path = data / rel
        assert not path.is_symlink() and path.read_bytes() == (ROOT / rel).read_bytes(), rel


def test_base_install_is_small_and_lean_to_import(base_venv: BaseVenv) -> None:
    total, sizes = site_packages_mb(base_venv.site)
    largest = sorted(sizes.items(), key=lambda kv: -kv[1])[:6]
    print(f"\nbase install adds {total:.1f} MB to site-packages (goal <= "
          f"{SITE_PACKAGES_GOAL_MB:.0f} MB; pip/setuptools excluded); largest: "
          + ", ".join(f"{k} {v:.1f}" for k, v in largest))
    assert total <= SITE_PACKAGES_GOAL_MB
    for heavy in HEAVY:  # none of the service dependencies came with the base install
        assert not any(k.lower().startswith(heavy) for k in sizes), heavy

    res = _run([base_venv.python, "-c", textwrap.dedent(f"""
        import sys
        import runwatch, runwatch.client, runwatch.client.data, runwatch.client.emit
        print(sorted(m for m in {HEAVY!r} if m in sys.modules))
        """)], cwd=base_venv.work)
    assert res.stdout.strip() == "[]"

    res = _run([base_venv.python, "-X", "importtime", "-c", "import runwatch"],
               cwd=base_venv.work)
    rows = [ln.split("|") for ln in res.stderr.splitlines() if ln.startswith("import time:")]
    own = [int(r[1]) for r in rows if r[2].strip() == "runwatch"]
    assert len(own) == 1, res.stderr
    everything = sum(int(r[0].split(":")[1]) for r in rows[1:])  # self times; row 0: header
    print(f"python -X importtime -c 'import runwatch': runwatch {own[0] / 1000:.1f} ms "
          f"(cumulative); every import of that process, start-up included, "
          f"{everything / 1000:.1f} ms (goal <= {IMPORT_GOAL_MS:.0f} ms)")


def test_service_commands_name_their_extra(base_venv: BaseVenv) -> None:
    runwatch_bin = base_venv.python.parent / "runwatch"
    for argv, extra in ((["processor", "worker"], "processor"), (["sink"], "sink"),
                        (["store"], "store"), (["pager"], "pager"), (["stack", "up"], "all")):
        res = subprocess.run([str(runwatch_bin), *argv], capture_output=True, text=True,
                             timeout=120, check=False, cwd=base_venv.work, env=_clean_env())
        assert res.returncode == 2, (argv, res.stdout, res.stderr)
        lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1, res.stderr
        assert lines[0].startswith(
            f"runwatch {argv[0]} needs the '{extra}' extra: pip install 'runwatch[{extra}]'"
        ), lines
    _run([runwatch_bin, "emit", "--help"], cwd=base_venv.work)
    _run([runwatch_bin, "agent", "--help"], cwd=base_venv.work)


SDK_JOB = """
import json, sys, time
import runwatch

print(runwatch.__file__)
run = runwatch.init("packaging-check", run_id=sys.argv[1], strict=True, install_hooks=False)
t0 = int(time.time() * 1000)
for i in range({steps}):
    run.step(i, loss=1.0 / (i + 1), now_ms=t0 + 10 * i, step_ms=10.0, loader_wait_ms=1.0)
counters = run.finish(timeout=60)
# A data-quality report from the base install (plain-Python statistics, no numpy).
from runwatch.client.data import report
rows = 200
table = {{"x": [i / 10 for i in range(rows)], "y": [i % 3 for i in range(rows)]}}
report(sys.argv[2], "v1", None, table,
       schema={{"x": "float", "y": "int"}}, label="y", run_id=sys.argv[1], now_ms=t0)
print(json.dumps(counters))
"""


def test_sdk_job_from_the_base_install_publishes_decodable_steps(
    base_venv: BaseVenv, stack
) -> None:
    from confluent_kafka import Consumer, TopicPartition

    from runwatch.adapters.topics import ensure_topics
    from runwatch.core.codec import load_codec

    bootstrap = stack.bootstrap_servers
    ensure_topics({"bootstrap.servers": bootstrap})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"pkg-{uuid.uuid4().hex}",
                         "enable.auto.commit": False})
    start = []
    for topic in ("rw.learning", "rw.data"):
        for p in consumer.list_topics(topic, timeout=30).topics[topic].partitions:
            _low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            start.append(TopicPartition(topic, p, high))
    consumer.assign(start)

    run_id = f"run-packaging-{uuid.uuid4().hex[:12]}"
    dataset = f"s3://packaging-check/{uuid.uuid4().hex[:12]}"
    res = _run([base_venv.python, "-c", SDK_JOB.format(steps=STEPS), run_id, dataset],
               cwd=base_venv.work, env=_clean_env(KAFKA_BOOTSTRAP_SERVERS=bootstrap), timeout=180)
    where, *_, last = res.stdout.strip().splitlines()
    assert Path(where).is_relative_to(base_venv.site)  # the installed package, not a checkout
    counters = json.loads(last)
    assert counters.get("publish_errors", 0) == 0 and counters.get("encode_errors", 0) == 0

    codec = load_codec()
    steps: list[int] = []
    reports = []
    deadline = time.monotonic() + 60  # a bound on waiting for delivery, not a timing check
    while (len(steps) < STEPS or not reports) and time.monotonic() < deadline:
        for msg in consumer.consume(500, timeout=1.0):
            if msg.error():
                continue
            rec = codec.decode(msg.value())
            if type(rec).__name__ == "LearningStep" and rec.run_id == run_id:
                steps.append(rec.step)
            elif type(rec).__name__ == "DataQualityReport" and rec.dataset_uri == dataset:
                reports.append(rec)
    consumer.close()
    print(f"\n{len(steps)}/{STEPS} learning steps from the base install decoded from rw.learning;"
          f" {len(reports)} data-quality report decoded from rw.data")
    assert sorted(steps) == list(range(STEPS))
    assert len(reports) == 1
    assert reports[0].row_count == 200 and reports[0].schema_failures == 0
