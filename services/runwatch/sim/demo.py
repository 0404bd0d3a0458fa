"""``runwatch demo``: the stack and services, two simulated minutes of faults, a summary.

Reuses whatever already runs. The stack (Kafka, store, Alertmanager) and the
runwatch services (processor, sink, pager) are started through the stack
supervisor (:class:`runwatch.stack.manager.Stack`), so they have PID records,
logs in ``<state>/logs``, show in ``runwatch stack status`` and stop with
``runwatch stack down`` / ``make down``. A second demo reuses them. Everything
is left running at the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from runwatch.sim.scenarios import ALLOWED_IMAGE_PREFIX, DEMO_SCENARIOS, get

QUERIES: tuple[tuple[str, str], ...] = (
    ("Alerts by probable cause",
     "SELECT probable_cause, detector, count() AS n_alerts FROM alerts "
     "WHERE status = 'firing' AND startsWith(run_id, '{p}') "
     "GROUP BY probable_cause, detector ORDER BY n_alerts DESC"),
    ("Mean loader share and step time per run (slowest loaders first)",
     "SELECT run_id, round(avg(loader_wait_ms / step_ms), 3) AS loader_share, "
     "round(avg(step_ms)) AS mean_step_ms, count() AS steps FROM step_timings "
     "WHERE startsWith(run_id, '{p}') GROUP BY run_id ORDER BY loader_share DESC LIMIT 5"),
    ("GPU utilization per node",
     "SELECT node, round(avg(util_pct), 1) AS util_pct, count() AS samples FROM gpu_samples "
     "WHERE ts >= now() - INTERVAL 1 DAY GROUP BY node ORDER BY node"),
)


def _say(line: str) -> None:
    print(f"[demo] {line}", flush=True)


def _runwatch(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runwatch", *args], capture_output=True,  # noqa: S603
                          text=True, timeout=timeout, check=False)


def ensure_services(state_dir: Path | None) -> int:
    """Start what is missing of the stack and of the services; 0 when all are up.

    The stack first, then its topics and the ClickHouse schema (``runwatch db
    migrate``, idempotent), then the processor, sink and pager.

    Args:
        state_dir: Stack state directory (default ``.runwatch``).

    Returns:
        0 on success, 1 when something could not start (the reason is printed).

    """
    from runwatch.stack.manager import Stack
    from runwatch.stack.prepare import PrepareError, check_partitions, ensure_topics, migrate
    from runwatch.stack.services import OPTIONAL_SERVICES, SERVICES, StackError
    from runwatch.stack.settings import StackSettings

    # the simulated registry is the processor's allow-list (unless the user set one)
    os.environ.setdefault("RUNWATCH_PROCESSOR_IMAGE_ALLOW_LIST",
                          json.dumps([ALLOWED_IMAGE_PREFIX]))
    settings = StackSettings(state_dir=state_dir) if state_dir else StackSettings()
    stack = Stack(settings)
    try:
        down = [s for s in SERVICES if not stack.healthy(s)]
        if down:
            _say(f"starting {', '.join(down)}")
            if not _ok(stack.up(_say, down)):
                return 1
        else:
            _say("stack already running: reusing it")
        made = ensure_topics(settings)
        _say(f"topics: created {len(made)}" if made else "topics: all present")
        check_partitions(settings)
        out = migrate(settings)
        _say(f"database: {out.splitlines()[-1] if out else 'migrated'}")
        live = [s for s in OPTIONAL_SERVICES if stack.running(s) is not None
                and stack.healthy(s)]
        if live:
            _say(f"reusing {', '.join(live)}")
        todo = [s for s in OPTIONAL_SERVICES if s not in live]
        if todo:
            _say(f"starting {', '.join(todo)}")
            if not _ok(stack.up(_say, todo)):
                return 1
    except (StackError, PrepareError) as exc:
        _say(f"cannot start: {exc}")
        return 1
    return 0


def _ok(result: object) -> bool:
    from runwatch.stack.manager import UpResult

    assert isinstance(result, UpResult)  # noqa: S101 - narrowing for mypy
    for name, why in result.failed.items():
        _say(f"{name} failed: {why}")
    return result.ok


def run_demo(*, speed: float = 20.0, duration_s: float = 2400.0, seed: int = 7,
             state_dir: Path | None = None, grace_s: float = 30.0) -> int:
    """Run the whole demo; see the module docstring.

    Args:
        speed: Virtual seconds per wall second.
        duration_s: Virtual seconds to simulate.
        seed: Random seed.
        state_dir: Stack state directory.
        grace_s: Wall seconds to wait for late alerts.

    Returns:
        The exit code (0 on success).

    """
    import logging

    from runwatch.sim.progress import RichProgress
    from runwatch.sim.runner import SimConfig, run_simulation
    from runwatch.sim.scoreboard import format_board
    from runwatch.stack.settings import StackSettings

    for noisy in ("httpx", "runwatch.sim", "runwatch.client", "runwatch.adapters.kafka"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if ensure_services(state_dir):
        return 1
    state = (StackSettings(state_dir=state_dir) if state_dir else StackSettings()).state
    scenarios = tuple(get(n).with_(at_s=min(get(n).at_s, 400)) for n in DEMO_SCENARIOS)
    cfg = SimConfig(nodes=4, runs=4, seed=seed, speed=speed, duration_s=duration_s,
                    scenarios=scenarios, grace_s=grace_s)
    _say(f"simulating {cfg.runs + len(scenarios)} runs on {cfg.nodes} nodes x 8 GPUs, "
         f"{duration_s:.0f} virtual s at {speed:g}x (~{duration_s / speed:.0f} s); "
         f"faults: {', '.join(DEMO_SCENARIOS)}")
    with RichProgress(duration_s) as progress:
        res = run_simulation(cfg, progress=progress.update)
    _summary(res)
    print("\n## Detection scoreboard\n")
    print(format_board(res.board()))
    _queries(res.prefix)
    page = investigation_page(res, state)
    print("\nEverything is still running:")
    print(f'  query:          .venv/bin/runwatch sql "SELECT run_id, count() FROM learning_steps '  # noqa: S608 - prefix is ours
          f"WHERE startsWith(run_id, '{res.prefix}') GROUP BY run_id\"")
    print("  follow alerts:  .venv/bin/runwatch alerts tail")
    print("  Alertmanager:   http://127.0.0.1:9093/#/alerts")
    print("  services:       .venv/bin/runwatch stack status")
    print(f"  service logs:   {state / 'logs'}")
    print("  stop:           make down")
    if page is not None:
        print(f"\nInvestigation page of {page[0]}: {page[1]}")
    return 0


def pick_faulty_run(alerts: list) -> str | None:
    """Return the run to investigate: the first with a data-caused alert, else any alert."""
    firing = sorted((a for a in alerts if a.status == "firing" and a.run_id),
                    key=lambda a: (a.cause != "data", a.first_seen_ms))
    return firing[0].run_id if firing else None


def investigation_page(res: object, state: Path, tries: int = 6,
                       wait_s: float = 5.0) -> tuple[str, Path] | None:
    """Write ``runwatch investigate --html`` of one faulty run under the state directory.

    The sink may still be storing the run's last rows: the page is written once
    the store holds the run's alerts (``tries`` looks, ``wait_s`` apart).

    Returns:
        (run id, page path), or None when no run alerted or the page could not be written.
    """
    import time

    from runwatch.sim.runner import SimResult

    assert isinstance(res, SimResult)  # noqa: S101 - narrowing for mypy
    run = pick_faulty_run(res.alerts)
    if run is None:
        _say("no faulty run to investigate")
        return None
    page = state / f"investigate-{run}.html"
    for _ in range(tries):
        got = _runwatch("investigate", run, "--json", timeout=120.0)
        if got.returncode == 0 and json.loads(got.stdout or "{}").get("alerts"):
            break
        time.sleep(wait_s)
    out = _runwatch("investigate", run, "--html", str(page), timeout=120.0)
    if out.returncode != 0:
        _say(f"investigate {run}: {(out.stderr or out.stdout).strip()}")
        return None
    print(f"\n## Investigation of {run}\n\n$ runwatch investigate {run} --html {page}")
    return run, page


def _summary(res: object) -> None:
    from runwatch.sim.runner import SimResult

    assert isinstance(res, SimResult)  # noqa: S101 - narrowing for mypy
    inj = {i.run_id: i for i in res.injections}
    print(f"\n## Alerts ({res.records} records from {len(res.run_ids)} runs in "
          f"{res.wall_s:.0f} s wall; run ids {res.prefix}-*)\n")
    firing = sorted((a for a in res.alerts if a.status == "firing"),
                    key=lambda a: a.first_seen_ms)
    if not firing:
        print("no alerts came back (is the processor running? `runwatch stack status`)")
    for a in firing:
        i = inj.get(a.run_id)
        if i is not None and i.injected_ms is not None:
            ttd = (f"{max(a.first_seen_ms - i.injected_ms, 0) / 1000:.0f} virtual s after "
                   f"{i.scenario.name} was injected")
        else:
            ttd = "no fault was injected in this run"
        print(f"- {a.run_id}: {a.title}\n    alert {a.detector}, probable cause "
              f"{a.cause}; {ttd}")


def _queries(prefix: str) -> None:
    for title, sql in QUERIES:
        q = sql.format(p=prefix)
        print(f"\n## {title}\n\n$ runwatch sql \"{q}\"")
        res = _runwatch("sql", q, timeout=60.0)
        print((res.stdout or res.stderr).rstrip())
