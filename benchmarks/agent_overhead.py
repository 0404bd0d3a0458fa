"""CPU use of the node agent at 1 Hz with 8 GPUs (FakeNvml8 test double).

Three phases of equal length in one process, measured with process CPU time:
  * baseline: the same process idling (transport thread running, no sampling);
  * agent with host figures only (no NVML);
  * agent with 8 GPUs through the FakeNvml8 TEST DOUBLE, processes attributed.

Prints CPU % of one core per phase, per-tick cost, and the ratio to the baseline.
Publishes over the real transport to --bootstrap (KAFKA_BOOTSTRAP_SERVERS by
default); with no broker there the records are spooled, which is also measured.

    .venv/bin/python benchmarks/agent_overhead.py [--seconds 20] [--interval 1.0]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from pathlib import Path

from runwatch.adapters.host import HostSampler
from runwatch.adapters.kafka import KafkaTransport, ProducerSettings
from runwatch.adapters.nvml import Nvml
from runwatch.adapters.settings import KafkaSettings
from runwatch.agent.nvml_double import FakeNvml8
from runwatch.agent.service import NodeAgent
from runwatch.client.publisher import Publisher


def phase(seconds: float, agent: NodeAgent | None, interval: float) -> tuple[float, float, int]:
    stop = threading.Event()
    timer = threading.Timer(seconds, stop.set)
    c0, w0 = time.process_time(), time.monotonic()
    timer.start()
    ticks = 0
    if agent is None:
        stop.wait()
    else:
        before = agent.ticks
        agent.run(stop, interval)
        ticks = agent.ticks - before
    return time.process_time() - c0, time.monotonic() - w0, ticks


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument(
        "--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    )
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as d:
        transport = KafkaTransport(
            KafkaSettings(bootstrap_servers=args.bootstrap),
            ProducerSettings(spool_dir=Path(d)),
            name="agent-bench",
        )
        pub = Publisher(transport, kind="agent", topics={"rw.exec.node": "bench.node"})
        fake = FakeNvml8()
        for g in range(8):
            fake.attach_process(g, os.getpid())
        host_only = NodeAgent(pub, node="bench", nvml=None, host=HostSampler())
        gpu8 = NodeAgent(pub, node="bench", nvml=Nvml.open(fake), host=HostSampler())
        results = {
            "baseline: idle process": phase(args.seconds, None, args.interval),
            "agent, host figures only": phase(args.seconds, host_only, args.interval),
            "agent, 8 GPUs (FakeNvml8 double)": phase(args.seconds, gpu8, args.interval),
        }
        t0 = time.perf_counter()
        n = 200
        for _ in range(n):
            gpu8.sample()
        per_sample_ms = (time.perf_counter() - t0) / n * 1000
        c = transport.close(10)

    print(f"\nagent CPU at {1 / args.interval:.1f} Hz, {args.seconds:.0f} s per phase")
    print(f"{'phase':36s} {'CPU s':>8s} {'CPU %':>8s} {'ticks':>6s} {'ms/tick':>8s}")
    base_pct = None
    for k, (cpu, wall, ticks) in results.items():
        pct = 100 * cpu / wall
        base_pct = pct if base_pct is None else base_pct
        per = (cpu / ticks * 1000) if ticks else float("nan")
        print(f"{k:36s} {cpu:8.3f} {pct:8.3f} {ticks:6d} {per:8.2f}")
    gpu_pct = (
        100
        * results["agent, 8 GPUs (FakeNvml8 double)"][0]
        / results["agent, 8 GPUs (FakeNvml8 double)"][1]
    )
    print(
        f"\n8-GPU agent: {gpu_pct:.3f}% of one core; {gpu_pct - base_pct:.3f} points above the "
        f"idle baseline (x{gpu_pct / max(base_pct, 1e-6):.1f})"
    )
    print(f"one 8-GPU sample (build only, no publish): {per_sample_ms:.3f} ms")
    print(f"transport: sent={c.sent} spooled={c.spooled} failed={c.failed}")


if __name__ == "__main__":
    main()
