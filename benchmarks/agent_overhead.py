"""CPU use of the node agent at 1 Hz with 8 GPUs (FakeNvml8 test double) against an idle process.

Each phase runs in its own fresh process, built the same way (transport to the
broker with its background thread, publisher), and measures that process's
CPU seconds over the phase after a settling second:
  * idle: the process does nothing else (the transport's thread still polls);
  * host: the agent sampling host figures only (no NVML);
  * gpu8: the agent with 8 GPUs through the FakeNvml8 TEST DOUBLE, processes attributed.

Phases are interleaved (idle, host, gpu8, idle, ...) for ``--repeats`` rounds, so
a slow spell of a shared machine hits every phase alike; figures are medians over
the rounds. Per phase it prints the process's CPU % of one core, the agent
thread's own CPU per tick (``time.thread_time`` of the sampling thread) and, for
the agent phases, the points above idle and the ratio to idle.

Samples go to a topic created for the run on --bootstrap (KAFKA_BOOTSTRAP_SERVERS by
default). Checks, exit status 1 when one fails: every agent phase ticked at the
interval (at least 90 % of the expected ticks) and the transport delivered every
sample it published (sent equals ticks, nothing spooled or failed).

    .venv/bin/python benchmarks/agent_overhead.py [--seconds 30] [--repeats 3] [--interval 1.0]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchkit import Checks, fresh_topics, median

PHASES = ("idle", "host", "gpu8")
LABELS = {
    "idle": "baseline: idle process",
    "host": "agent, host figures only",
    "gpu8": "agent, 8 GPUs (FakeNvml8 double)",
}


def child(phase: str, seconds: float, interval: float, bootstrap: str, topic: str) -> None:
    """Run one phase in this process and print its figures as one JSON line."""
    from runwatch.adapters.host import HostSampler
    from runwatch.adapters.kafka import KafkaTransport, ProducerSettings
    from runwatch.adapters.nvml import Nvml
    from runwatch.adapters.publisher import Publisher
    from runwatch.adapters.settings import KafkaSettings
    from runwatch.agent.service import NodeAgent
    from runwatch.testing.nvml_double import FakeNvml8

    with tempfile.TemporaryDirectory() as d:
        transport = KafkaTransport(
            KafkaSettings(bootstrap_servers=bootstrap),
            ProducerSettings(spool_dir=Path(d)),
            name=f"agent-bench-{phase}",
        )
        pub = Publisher(transport, kind="agent", topics={"rw.exec.node": topic})
        agent = None
        if phase == "host":
            agent = NodeAgent(pub, node="bench", nvml=None, host=HostSampler())
        elif phase == "gpu8":
            fake = FakeNvml8()
            for g in range(8):
                fake.attach_process(g, os.getpid())
            agent = NodeAgent(pub, node="bench", nvml=Nvml.open(fake), host=HostSampler())
        time.sleep(1.0)  # settle: connections made, imports done
        stop = threading.Event()
        timer = threading.Timer(seconds, stop.set)
        c0, t0, w0 = time.process_time(), time.thread_time(), time.monotonic()
        timer.start()
        if agent is None:
            stop.wait()
            ticks = 0
        else:
            ticks = agent.run(stop, interval)
        cpu, thread_cpu = time.process_time() - c0, time.thread_time() - t0
        wall = time.monotonic() - w0
        c = transport.close(30)
    print("JSON" + json.dumps({
        "cpu_s": cpu, "thread_cpu_s": thread_cpu, "wall_s": wall, "ticks": ticks,
        "sent": c.sent, "spooled": c.spooled, "failed": c.failed, "in_spool": c.in_spool,
    }))


def run_phase(phase: str, args: argparse.Namespace, topic: str) -> dict:
    cmd = [sys.executable, __file__, "--child", phase, "--seconds", str(args.seconds),
           "--interval", str(args.interval), "--bootstrap", args.bootstrap, "--topic", topic]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.seconds + 120)
    for line in p.stdout.splitlines():
        if line.startswith("JSON"):
            return json.loads(line[4:])
    msg = f"phase {phase} failed (rc {p.returncode}): {(p.stderr or p.stdout)[-800:]}"
    raise SystemExit(msg)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument(
        "--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    )
    ap.add_argument("--child", choices=PHASES, help=argparse.SUPPRESS)
    ap.add_argument("--topic", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.seconds, args.interval, args.bootstrap, args.topic)
        return

    results: dict[str, list[dict]] = {p: [] for p in PHASES}
    with fresh_topics(args.bootstrap, ["rw.exec.node"]) as topics:
        for r in range(args.repeats):
            for phase in PHASES:
                results[phase].append(run_phase(phase, args, topics["rw.exec.node"]))
            print(f"round {r + 1}/{args.repeats} done", flush=True)

    def pct(x: dict) -> float:
        return 100 * x["cpu_s"] / x["wall_s"]

    idle = median(pct(x) for x in results["idle"])
    print(f"\nagent CPU at {1 / args.interval:.1f} Hz: {args.repeats} interleaved rounds of "
          f"{args.seconds:.0f} s per phase, each phase in a fresh process; medians")
    print(f"{'phase':36s} {'CPU %':>8s} {'min-max %':>14s} {'agent ms/tick':>14s} "
          f"{'above idle':>11s} {'x idle':>7s}")
    for phase in PHASES:
        xs = results[phase]
        p = median(pct(x) for x in xs)
        lo, hi = min(pct(x) for x in xs), max(pct(x) for x in xs)
        ticks = sum(x["ticks"] for x in xs)
        per = 1000 * median(x["thread_cpu_s"] / x["ticks"] for x in xs) if ticks else None
        per_s = f"{per:14.3f}" if per is not None else f"{'':>14s}"
        extra = (f"{p - idle:+11.3f} {p / idle:7.2f}" if phase != "idle" and idle > 0
                 else f"{'':>11s} {'':>7s}")
        print(f"{LABELS[phase]:36s} {p:8.3f} {f'{lo:.3f}-{hi:.3f}':>14s} {per_s} {extra}")

    checks = Checks()
    expected = int(args.seconds / args.interval)
    for phase in PHASES:
        for i, x in enumerate(results[phase]):
            if phase != "idle":
                checks.check(x["ticks"] >= 0.9 * expected,
                             f"{phase} round {i + 1}: {x['ticks']} ticks of ~{expected}")
            checks.check(x["sent"] == x["ticks"] and not x["spooled"] and not x["failed"],
                         f"{phase} round {i + 1}: delivered {x['sent']} of {x['ticks']} "
                         f"samples, spooled {x['spooled']}, failed {x['failed']}")
    checks.done()


if __name__ == "__main__":
    main()
