"""``runwatch demo``: stack up, services up, two simulated minutes of faults, a summary.

Reuses whatever already runs: the stack (``runwatch stack up``) and the
processor, sink and pager started by an earlier demo (recorded with their PIDs
in ``<state>/demo-services.json``, logs in ``<state>/logs``). Everything is
left running at the end.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from runwatch.sim.scenarios import ALLOWED_IMAGE_PREFIX, DEMO_SCENARIOS, get

SERVICES: dict[str, tuple[str, ...]] = {
    "processor": ("processor", "worker", "-l", "warn"),
    "sink": ("sink",),
    "pager": ("pager",),
}
QUERIES: tuple[tuple[str, str], ...] = (
    ("Alerts by probable cause",
     "SELECT probable_cause, detector, count() AS alerts FROM alerts "
     "WHERE status = 'firing' GROUP BY probable_cause, detector ORDER BY alerts DESC"),
    ("Mean loader share and step time per run (slowest loaders first)",
     "SELECT run_id, round(avg(loader_wait_ms / step_ms), 3) AS loader_share, "
     "round(avg(step_ms)) AS step_ms, count() AS steps FROM step_timings "
     "GROUP BY run_id ORDER BY loader_share DESC LIMIT 5"),
    ("GPU utilization per node",
     "SELECT node, round(avg(util_pct), 1) AS util_pct, count() AS samples FROM gpu_samples "
     "GROUP BY node ORDER BY node"),
)


def _say(line: str) -> None:
    print(f"[demo] {line}", flush=True)


def _runwatch(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runwatch", *args], capture_output=True,  # noqa: S603
                          text=True, timeout=timeout, check=False)


def ensure_stack(state_dir: Path | None) -> int:
    """Start what is missing of the stack; return 0 when every service is healthy."""
    from runwatch.stack.manager import Stack
    from runwatch.stack.services import SERVICES as STACK
    from runwatch.stack.services import StackError
    from runwatch.stack.settings import StackSettings

    settings = StackSettings(state_dir=state_dir) if state_dir else StackSettings()
    stack = Stack(settings)
    down = [s for s in STACK if not stack.healthy(s)]
    if not down:
        _say("stack already running: reusing it")
        return 0
    _say(f"starting {', '.join(down)}")
    try:
        result = stack.up(_say, down)
    except StackError as exc:
        _say(f"the stack cannot start: {exc}")
        return 1
    if not result.ok:
        for name, why in result.failed.items():
            _say(f"{name} failed: {why}")
        return 1
    return 0


def ensure_topics(bootstrap: str, prefix: str = "") -> list[str]:
    """Create the topics of ``schemas/topics.yaml`` that do not exist yet.

    Args:
        bootstrap: Kafka bootstrap servers.
        prefix: Topic name prefix.

    Returns:
        The topics created.

    """
    from confluent_kafka.admin import AdminClient, NewTopic

    from runwatch.core.topics import load_topics

    admin = AdminClient({"bootstrap.servers": bootstrap})
    have = set(admin.list_topics(timeout=10).topics)
    new = [NewTopic(prefix + spec.name, num_partitions=spec.partitions, replication_factor=1,
                    config=spec.topic_config())
           for spec in load_topics().values() if prefix + spec.name not in have]
    if not new:
        return []
    for fut in admin.create_topics(new, operation_timeout=30).values():
        fut.result(timeout=30)
    return [t.topic for t in new]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _demo_routes(state: Path) -> Path:
    """Write the demo's pager routes: every alert to the stack's Alertmanager."""
    path = state / "demo-routes.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("receivers:\n  - name: alertmanager\n    kind: alertmanager\n"
                    "    url_env: RUNWATCH_ALERTMANAGER_URL\n    repeat_interval: 4h\n"
                    "route:\n  receiver: alertmanager\n")
    return path


def ensure_services(state: Path, alertmanager_url: str) -> dict[str, str]:
    """Start the processor, sink and pager unless an earlier demo's are still alive."""
    from runwatch.stack import process

    registry = process.Registry(state / "demo-services.json")
    known = registry.load()
    out: dict[str, str] = {}
    env = {"RUNWATCH_PROCESSOR_IMAGE_ALLOW_LIST": json.dumps([ALLOWED_IMAGE_PREFIX]),
           "RUNWATCH_PROCESSOR_DATA_DIR": str(state / "processor"),
           "RUNWATCH_ALERTMANAGER_URL": alertmanager_url,
           "RUNWATCH_PAGER_RULES_FILE": str(_demo_routes(state)),
           "WEB_PORT": str(_free_port())}
    for name, argv in SERVICES.items():
        rec = known.get(name)
        if rec is not None and process.owned_process(rec) is not None:
            out[name] = f"reused pid {rec.pid}"
            continue
        rec = process.spawn(name, (sys.executable, "-m", "runwatch", *argv),
                            state / "logs" / f"{name}.log", Path.cwd(), env)
        registry.put(rec)
        out[name] = f"started pid {rec.pid} (log {rec.log})"
    return out


def run_demo(*, speed: float = 20.0, duration_s: float = 2400.0, seed: int = 7,
             state_dir: Path | None = None) -> int:
    """Run the whole demo; see the module docstring.

    Returns:
        The exit code (0 on success).

    """
    from runwatch.sim.report import print_progress
    from runwatch.sim.runner import SimConfig, run_simulation
    from runwatch.sim.scoreboard import format_board
    from runwatch.stack.settings import StackSettings

    if ensure_stack(state_dir):
        return 1
    settings = StackSettings(state_dir=state_dir) if state_dir else StackSettings()
    state = settings.state
    made = ensure_topics(settings.bootstrap_servers)
    if made:
        _say(f"created {len(made)} topics")
    mig = _runwatch("db", "migrate")
    if mig.returncode != 0:
        _say(f"runwatch db migrate failed:\n{mig.stdout}{mig.stderr}")
        return 1
    _say("database migrated")
    for name, what in ensure_services(state, settings.alertmanager_url).items():
        _say(f"{name}: {what}")
    time.sleep(5.0)  # let the processor join its group before the first records
    scenarios = tuple(get(n).with_(at_s=min(get(n).at_s, 400)) for n in DEMO_SCENARIOS)
    cfg = SimConfig(nodes=4, runs=4, seed=seed, speed=speed, duration_s=duration_s,
                    scenarios=scenarios, grace_s=30.0)
    _say(f"simulating {cfg.runs + len(scenarios)} runs on {cfg.nodes} nodes x 8 GPUs, "
         f"{duration_s:.0f} virtual s at {speed:g}x; faults: {', '.join(DEMO_SCENARIOS)}")
    res = run_simulation(cfg, progress=print_progress)
    print(file=sys.stderr)
    _summary(res)
    print("\n## Detection scoreboard\n")
    print(format_board(res.board()))
    _queries()
    print("\nEverything is still running:")
    print('  query:          .venv/bin/runwatch sql "SELECT run_id, count() FROM learning_steps '
          'GROUP BY run_id"')
    print("  follow alerts:  .venv/bin/runwatch alerts tail")
    print("  Alertmanager:   http://127.0.0.1:9093/#/alerts")
    print(f"  service logs:   {state / 'logs'}")
    print("  stop:           make down")
    return 0


def _summary(res: object) -> None:
    from runwatch.sim.runner import SimResult

    assert isinstance(res, SimResult)  # noqa: S101 - narrowing for mypy
    inj = {i.run_id: i for i in res.injections}
    print(f"\n## Alerts ({res.records} records from {len(res.run_ids)} runs in "
          f"{res.wall_s:.0f} s)\n")
    firing = sorted((a for a in res.alerts if a.status == "firing"),
                    key=lambda a: a.first_seen_ms)
    if not firing:
        print("no alerts came back (is the processor running? see its log)")
    for a in firing:
        i = inj.get(a.run_id)
        if i is not None and i.injected_ms is not None:
            ttd = f"{max(a.first_seen_ms - i.injected_ms, 0) / 1000:.0f} s after {i.scenario.name}"
        else:
            ttd = "no fault injected in this run"
        print(f"- {a.run_id}: {a.title} [{a.detector}] probable cause {a.cause}; detected {ttd}")


def _queries() -> None:
    for title, sql in QUERIES:
        print(f"\n## {title}\n\n$ runwatch sql \"{sql}\"")
        res = _runwatch("sql", sql, timeout=60.0)
        print((res.stdout or res.stderr).rstrip())
