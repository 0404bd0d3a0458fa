"""Run the chaos suite: start a 3-broker stack, load it, inject each fault, compare, report.

:func:`run` is what ``runwatch chaos`` and ``tests/chaos`` call. Everything is
bounded in time (``ChaosSettings.budget_s``, 15 minutes by default) and
printed as progress lines; the result carries the table's rows.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runwatch.adapters.clickhouse import make_client
from runwatch.adapters.cluster import ClusterQueryError, alertmanager_alerts
from runwatch.adapters.settings import ClickHouseSettings, KafkaSettings
from runwatch.chaos import readback
from runwatch.chaos.faults import FAULTS, Fault, Injector
from runwatch.chaos.ledger import Ledger
from runwatch.chaos.load import Load, PhaseLoad
from runwatch.chaos.report import (
    AlertCheck,
    Counts,
    Row,
    compare,
    condition,
    paged_twice,
    render_table,
)
from runwatch.chaos.webhook import Receiver, routes_yaml
from runwatch.stack.manager import Stack
from runwatch.stack.prepare import prepare
from runwatch.stack.services import OPTIONAL_SERVICES
from runwatch.stack.settings import StackSettings

Report = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class ChaosSettings:
    """Where the chaos stack runs and how long each phase lasts.

    Attributes:
        state_dir: The chaos stack's own state directory (wiped at start).
        port_base: Ports: Kafka ``base+92`` (brokers 2 and 3 at +100, +200), controllers
            ``base+94``, store ``base+123``, Alertmanager ``base+93``.
        run_s: How long each phase's SDK runs step.
        fault_at_s: When the fault is injected, from the phase's start.
        nan_at_s: When the NaN run's loss turns NaN.
        settle_s: Quiet time after each phase has recovered.
        recovery_cap_s: Longest wait for a fault's recovery.
        budget_s: Bound on the whole run (setup, phases, read-back).
        keep: Leave the stack running afterwards.
    """

    state_dir: Path
    port_base: int = 39000
    run_s: float = 40.0
    fault_at_s: float = 10.0
    nan_at_s: float = 20.0
    settle_s: float = 5.0
    recovery_cap_s: float = 120.0
    budget_s: float = 900.0
    keep: bool = False

    def stack(self) -> StackSettings:
        """The chaos stack's settings (3 brokers)."""
        b = self.port_base
        return StackSettings(state_dir=self.state_dir, brokers=3, kafka_port=b + 92,
                             controller_port=b + 94, store_port=b + 123,
                             alertmanager_port=b + 93)


@dataclass(slots=True)
class ChaosResult:
    """What a chaos run found."""

    rows: list[Row] = field(default_factory=list)
    table: str = ""
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every fault: nothing lost unaccounted, the fault-free alerts, nobody paged twice."""
        return bool(self.rows) and all(r.ok for r in self.rows)


class _Run:
    def __init__(self, cfg: ChaosSettings, report: Report, nvml_module: Any) -> None:
        self.cfg, self.report = cfg, report
        self.t0 = time.monotonic()
        self.settings = cfg.stack()
        if cfg.state_dir.exists():  # a fresh cluster and store every run
            _check_ours(cfg.state_dir)
            Stack(self.settings).down(report)
            shutil.rmtree(cfg.state_dir)
        cfg.state_dir.mkdir(parents=True)
        self.receiver = Receiver().start()
        self.routes = cfg.state_dir / "pager-routes.yaml"
        self.routes.write_text(routes_yaml("RUNWATCH_CHAOS_WEBHOOK_URL",
                                           "RUNWATCH_CHAOS_WEBHOOK_SECRET",
                                           "RUNWATCH_ALERTMANAGER_URL"), encoding="utf-8")
        os.environ.update({"RUNWATCH_PAGER_RULES_FILE": str(self.routes),  # before the specs
                           "RUNWATCH_CHAOS_WEBHOOK_URL": self.receiver.url,
                           "RUNWATCH_CHAOS_WEBHOOK_SECRET": secrets.token_hex(16)})
        self.stack = Stack(self.settings)
        pager_env = self.stack.specs["pager"].env
        if (pager_env.get("RUNWATCH_PAGER_RULES_FILE") != str(self.routes)
                or pager_env.get("RUNWATCH_ALERTMANAGER_URL") != self.settings.alertmanager_url):
            msg = "the chaos pager would not page the chaos stack's own receivers"
            raise RuntimeError(msg)
        self.injector = Injector(self.stack, report)
        self.ledger = Ledger(cfg.state_dir / "ledger.jsonl")
        self.ch: Any = None  # made once the store is up
        self.db = ClickHouseSettings().database
        kafka = KafkaSettings(bootstrap_servers=self.settings.bootstrap_servers)
        self.session = secrets.token_hex(3)
        self.load = Load(self.ledger, kafka, cfg.state_dir / "spool", nvml_module,
                         session=self.session)
        self.phases: list[tuple[Fault, PhaseLoad, float | None]] = []

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def start_stack(self) -> None:
        result = self.stack.up(self.report)
        if not result.ok:
            msg = f"the chaos stack did not start: {result.failed}"
            raise RuntimeError(msg)
        prepare(self.settings, list(OPTIONAL_SERVICES), self.report)
        result = self.stack.up(self.report, OPTIONAL_SERVICES)
        if not result.ok:
            msg = f"the processor, sink or pager did not start: {result.failed}"
            raise RuntimeError(msg)
        self.ch = make_client(ClickHouseSettings(url=self.settings.clickhouse_url))

    def phase(self, fault: Fault) -> None:
        cfg = self.cfg
        self.report(f"[{self.elapsed():5.0f}s] phase: {fault.name}: {fault.description}")
        self.injector.arm()
        pager = fault.probe == "paged"
        if pager:
            self.receiver.failing.set()

        def on_nan() -> None:  # the pager is killed while it retries this phase's alert
            if pager:
                threading.Thread(target=self.injector.kill_pager_mid_retry, daemon=True,
                                 args=(lambda: self.receiver.refused,
                                       self.receiver.failing.clear),
                                 name="chaos-pager-fault").start()

        nan_at = cfg.nan_at_s if fault.nan_at_s is None else fault.nan_at_s
        load = self.load.phase(fault.name, cfg.run_s, nan_at, fault.spool_max_bytes, on_nan)
        start = time.monotonic()
        time.sleep(max(0.0, start + cfg.fault_at_s - time.monotonic()))
        inject_ms = int(time.time() * 1000)
        pages_before = len(self.receiver.pages())
        worker = threading.Thread(target=self._inject, args=(fault,), name="chaos-fault",
                                  daemon=True)
        worker.start()
        recovery = None
        if fault.probe != "none" and self.injector.injected.wait(cfg.recovery_cap_s):
            recovery = self._recover(fault, load, inject_ms, self.injector.injected_at,
                                     pages_before)
        worker.join(cfg.recovery_cap_s)
        load.join(cfg.run_s + 60)
        self._heal()
        time.sleep(cfg.settle_s)
        self.phases.append((fault, load, recovery))
        rec = "-" if recovery is None else f"{recovery:.1f}s"
        self.report(f"[{self.elapsed():5.0f}s]   published {self.ledger.count(fault.name)} "
                    f"records; recovery {rec}; evicted {load.evicted}")

    def _inject(self, fault: Fault) -> None:
        i = self.injector
        name = fault.name
        try:
            if name.startswith("kill -9 partition"):
                i.kill_leader()
            elif name == "kill -9 processor":
                i.kill_and_restart("processor")
            elif name == "kill -9 sink":
                i.kill_and_restart("sink")
            elif name.startswith("store stopped"):
                i.stop_store()
            elif name.startswith("producer spool"):
                i.freeze_brokers()
        except Exception as exc:  # noqa: BLE001 - the phase reports it; _heal restarts
            self.report(f"  fault {name} failed: {exc}")

    def _recover(self, fault: Fault, load: PhaseLoad, inject_ms: int, inject_mono: float,
                 pages_before: int) -> float | None:
        if fault.probe == "none":
            return None
        deadline = inject_mono + self.cfg.recovery_cap_s
        while time.monotonic() < deadline:
            if fault.probe == "stored":
                done = readback.stored_since(self.ch, self.db, load.run_ids, inject_ms) > 0
            elif fault.probe == "processor":
                done = self.stack.running("processor") is not None and self.stack.healthy(
                    "processor")
            else:
                done = len(self.receiver.pages()) > pages_before
            if done:
                return time.monotonic() - inject_mono
            time.sleep(0.5)
        self.report(f"  {fault.name}: not recovered within {self.cfg.recovery_cap_s:.0f}s")
        return None

    def _heal(self) -> None:
        down = [s for s in self.stack.all if self.stack.running(s) is None]
        if down:
            self.report(f"  restarting {', '.join(down)}")
            self.stack.up(self.report, down)

    def finish(self) -> ChaosResult:
        self.load.stop()
        published = len(self.ledger.entries())
        evicted = sum(p.evicted for _, p, _ in self.phases)
        self.report(f"[{self.elapsed():5.0f}s] draining: waiting for {published - evicted} "
                    "records in ClickHouse")
        left = max(30.0, self.cfg.budget_s - self.elapsed() - 60)
        readback.wait_stored(self.ch, self.db, published - evicted, min(left, 120.0))
        time.sleep(5)  # the last alerts reach the receivers
        rows = readback.raw_rows(self.ch, self.db)
        counts = compare(self.ledger.entries(), rows)
        alerts = readback.alerts(self.ch, self.db)
        pages = self.receiver.pages()
        try:
            in_am = {str(a.get("labels", {}).get("dedup_key", ""))
                     for a in alertmanager_alerts(self.settings.alertmanager_url)}
        except ClusterQueryError as exc:
            in_am = set()
            self.report(f"  Alertmanager: {exc}")
        result = ChaosResult()
        baseline: frozenset[str] = frozenset()
        for fault, load, recovery in self.phases:
            ids = load.run_ids
            raised = frozenset(condition(r, d, i, ids) for r, _, st, d, i in alerts
                               if r in ids and st == "firing")
            if fault.probe == "none":
                baseline = raised
            keys = {k for r, k, *_ in alerts if r in ids}
            twice = paged_twice(("chaos-webhook", k, st) for _, k, st in pages if k in keys)
            check = AlertCheck(baseline, raised, tuple(twice), len(keys & in_am))
            row = Row(fault.name, counts.get(fault.name) or Counts(0, 0, 0, 0), check, recovery,
                      evicted=load.evicted)
            c = row.counts
            if c.missing:
                row.notes.append(f"lost e.g. {', '.join(c.missing)}")
            row.notes.append(f"alerts held by Alertmanager: {check.in_alertmanager}/{len(keys)}; "
                             f"pages accepted: {sum(1 for _, k, _ in pages if k in keys)}")
            row.notes += load.errors
            result.rows.append(row)
        result.table = render_table(result.rows)
        result.seconds = self.elapsed()
        agent = self.load.agent_counters()
        result.notes.append(f"agent transport: {agent}")
        (self.cfg.state_dir / "chaos-report.json").write_text(json.dumps({
            "table": result.table, "seconds": result.seconds, "notes": result.notes,
            "rows": [{"fault": r.fault, "notes": r.notes, "counters": load.counters}
                     for r, (_, load, _) in zip(result.rows, self.phases, strict=True)],
        }, indent=2, default=str), encoding="utf-8")
        return result

    def close(self) -> None:
        self.receiver.stop()
        self.ledger.close()
        if not self.cfg.keep:
            self.stack.down(self.report)


def _check_ours(state: Path) -> None:
    """Refuse to wipe a folder that is not a chaos run's (the ledger marks one)."""
    if any(state.iterdir()) and not (state / "ledger.jsonl").is_file():
        msg = (f"{state} is not empty and holds no chaos ledger: refusing to wipe it "
               "(give the chaos run a state directory of its own)")
        raise RuntimeError(msg)


def run(cfg: ChaosSettings, report: Report = print, nvml_module: Any = None,
        faults: tuple[Fault, ...] = FAULTS) -> ChaosResult:
    """Run the chaos suite on its own 3-broker stack and return the table's rows.

    Args:
        cfg: Where and how long.
        report: Progress callback (one line per call).
        nvml_module: The NVML module the node agent samples (the NVML double).
        faults: The faults, in order; the first must be the fault-free reference.

    Returns:
        The result (``result.table`` is the rendered table).

    """
    r = _Run(cfg, report, nvml_module)
    try:
        report(f"chaos: stack in {cfg.state_dir} (brokers at {r.settings.bootstrap_servers})")
        r.start_stack()
        r.load.start_agent(f"chaos-node-{r.session}")
        for fault in faults:
            if r.elapsed() > cfg.budget_s - 150:
                report(f"  budget: skipping {fault.name} (over {cfg.budget_s:.0f}s)")
                continue
            r.phase(fault)
        result = r.finish()
    finally:
        r.close()
    report(result.table)
    return result
