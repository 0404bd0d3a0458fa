"""What a worker holds after weeks of runs: run-state retention against keeping every run.

Load: ``--days`` days of ``--runs-per-day`` runs, each reading one of ``--datasets``
datasets, published as a scheduler hook and a job publish them (``runwatch emit``'s
record types: manifest, running, ``--steps`` step timings and learning steps,
succeeded), one day after the other, into one worker driven in memory
(:class:`~runwatch.processor.memory.MemoryProcessor`). After each day the
processor's clock moves on past the inputs' idle time, so the event-time horizon is
the day's end, and the timer runs.

Printed per day, for the shipped retention (``ENDED_RETENTION_MS`` 6 h) beside the
baseline ``ENDED_RETENTION_MS=0`` (every state kept, as before retention): run states
in the ``runstate`` table, CPU seconds of one timer round over every partition
(median of ``--rounds``), and how many runs one data report of a dataset is forwarded
to. Ratios are baseline / retention.

Checks (exit status 1 when one fails): every record was accepted by ``emit``, both
workers folded every run, and with retention the states held are the day's last
6 hours' runs at most.

Usage: python benchmarks/retention.py [--days 7] [--runs-per-day 2000] [--datasets 20]
       [--steps 5] [--rounds 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from benchkit import Checks
from runwatch.adapters.publisher import CaptureTransport, Publisher
from runwatch.client import data
from runwatch.client.emit import emit_records
from runwatch.processor.memory import MemoryProcessor
from runwatch.processor.outbox import DATA_BY_RUN
from runwatch.processor.settings import ProcessorSettings

DAY = 86_400_000


def day_records(day: int, runs: int, datasets: int, steps: int, t0: int) -> list[dict]:
    """One day of runs, spread evenly over it, each ~10 minutes long."""
    out: list[dict] = []
    for i in range(runs):
        run = f"d{day}-r{i}"
        at = t0 + day * DAY + i * (DAY // runs)
        ds = {"uri": f"s3://lake/ds{i % datasets}", "version": "v1"}
        out.append({"type": "manifest", "run_id": run, "experiment_family": f"fam{i % 50}",
                    "datasets": [ds], "emitted_at_ms": at})
        out.append({"type": "job-state", "run_id": run, "state": "running",
                    "experiment_family": f"fam{i % 50}", "emitted_at_ms": at + 1})
        for s in range(steps):
            when = at + 60_000 * (s + 1)
            out.append({"type": "step-timing", "run_id": run, "step": s, "step_ms": 1000.0,
                        "loader_wait_ms": 10.0, "compute_ms": 990.0, "emitted_at_ms": when})
            out.append({"type": "learning-step", "run_id": run, "step": s,
                        "loss": 2.0 - 0.1 * s, "emitted_at_ms": when})
        out.append({"type": "job-state", "run_id": run, "state": "succeeded",
                    "experiment_family": f"fam{i % 50}",
                    "emitted_at_ms": at + 60_000 * (steps + 1)})
    return out


class Worker:
    """One in-memory worker with its own clock, fed day by day."""

    def __init__(self, retention_ms: int) -> None:
        self.wall = [int(time.time() * 1000)]
        settings = ProcessorSettings(save_interval_s=0, ended_retention_ms=retention_ms)
        self.m = MemoryProcessor(settings, clock=lambda: self.wall[0])

    def feed(self, messages: list) -> None:
        self.m.feed(messages)
        self.wall[0] += 120_000  # every input idle: the horizon is the latest event time

    def round_cpu(self) -> float:
        self.wall[0] += 1_000
        t = time.process_time()
        self.m.tick(self.wall[0])
        return time.process_time() - t

    def fan_out(self, at_ms: int, baselines: Path) -> int:
        """Runs one pipeline's data report of ``s3://lake/ds0`` is forwarded to."""
        t = CaptureTransport()
        data.report("s3://lake/ds0", "v1", f"p={at_ms}", {"x": list(range(1000))},
                    publisher=Publisher(t, kind="sdk"), now_ms=at_ms,
                    baseline_directory=baselines)
        before = sum(1 for topic, *_ in self.m.internal if topic == DATA_BY_RUN)
        self.m.feed(t.messages)
        return sum(1 for topic, *_ in self.m.internal if topic == DATA_BY_RUN) - before


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--days", type=int, default=7)
    ap.add_argument("--runs-per-day", type=int, default=2000)
    ap.add_argument("--datasets", type=int, default=20)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    checks = Checks()
    t0 = int(time.time() * 1000) - (a.days + 1) * DAY
    shipped = ProcessorSettings().ended_retention_ms
    kept, retained = Worker(0), Worker(shipped)
    print(f"load: {a.days} days x {a.runs_per_day} runs/day over {a.datasets} datasets, "
          f"{a.steps} steps each; retention {shipped / 3_600_000:g} h against none\n")
    print(f"{'day':>3}  {'states kept':>11} {'retained':>9}  {'timer round kept':>16} "
          f"{'retained':>9} {'ratio':>6}  {'report fan-out kept':>19} {'retained':>9}")
    rejected = 0
    tmp = tempfile.mkdtemp(prefix="rw-bench-retention-")
    for day in range(a.days):
        t = CaptureTransport()
        res = emit_records(Publisher(t, kind="hook"),
                           day_records(day, a.runs_per_day, a.datasets, a.steps, t0))
        rejected += len(res.errors)
        for w in (kept, retained):
            w.feed(t.messages)
        cpu = {}
        for name, w in (("kept", kept), ("retained", retained)):
            cpu[name] = statistics.median(w.round_cpu() for _ in range(a.rounds))
        end = t0 + (day + 1) * DAY
        fan = {name: w.fan_out(end, Path(tmp) / name) for name, w in (("kept", kept),
                                                                      ("retained", retained))}
        n_kept, n_ret = len(kept.m.p.runs.runstate), len(retained.m.p.runs.runstate)
        ratio = cpu["kept"] / cpu["retained"] if cpu["retained"] > 0 else float("nan")
        print(f"{day + 1:>3}  {n_kept:>11,} {n_ret:>9,}  {cpu['kept']:>15.3f}s "
              f"{cpu['retained']:>8.3f}s {ratio:>5.1f}x  {fan['kept']:>19,} "
              f"{fan['retained']:>9,}")
    shutil.rmtree(tmp, ignore_errors=True)
    checks.check(rejected == 0, f"records refused by emit: {rejected}")
    total = a.days * a.runs_per_day
    checks.check(len(kept.m.p.runs.runstate) == total,
                 f"every run folded and kept without retention: "
                 f"{len(kept.m.p.runs.runstate):,} of {total:,}")
    retired = retained.m.p.out.counters["runs_retired"]
    checks.check(retired + len(retained.m.p.runs.runstate) == total,
                 f"with retention, retired + held = every run: {retired:,} + "
                 f"{len(retained.m.p.runs.runstate):,} of {total:,}")
    bound = a.runs_per_day * shipped // DAY + a.runs_per_day // 10
    checks.check(len(retained.m.p.runs.runstate) <= bound,
                 f"with retention, at most the last {shipped / 3_600_000:g} h of runs held: "
                 f"{len(retained.m.p.runs.runstate):,} (bound {bound:,})")
    checks.done()


if __name__ == "__main__":
    main()
