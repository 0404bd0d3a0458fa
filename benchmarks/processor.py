"""Processor throughput and event-to-alert latency, beside the bare batch-decode ceiling.

Load: 2,000 NodeSamples/s (8 GPUs each: 16k GPUs at 1 Hz) from 2,000 nodes plus
step events (StepTiming) from 1,000 runs, each run owning two nodes.

Figures, all measured in this run:
  1. ceiling   — codec.decode_many over the same events (bare batch decode);
  2. core      — decode + run join (core.join.step) + JSON state, in process: per event,
                 batched per run, and as the worker now does it (node samples decoded
                 to dicts, one compact aggregate per run per batch);
  3. broker    — (with --broker) one real worker on the local Kafka: events/s
                 sustained at the offered load and event-to-alert latency p50/p99
                 of probe runs that emit a NaN loss.

Usage: python benchmarks/processor.py [--seconds 10] [--broker 127.0.0.1:9092]
"""

from __future__ import annotations

import argparse
import statistics
import time

from runwatch.core import join, runstate, scenarios
from runwatch.core.codec import load_codec
from runwatch.core.records import (
    Allocation,
    GpuSample,
    JobEvent,
    LearningStep,
    NodeSample,
    RunManifest,
    StepTiming,
)

SRC = scenarios.SOURCE
RUNS, NODES, GPUS = 1_000, 2_000, 8  # the load (--scale multiplies runs and nodes)
WARMUP_S = 3  # seconds of load before the measured window


def c(run: str | None, t: int, seq: int) -> dict:
    return {"event_id": f"e{seq}", "run_id": run, "emitted_at_ms": t, "source": SRC, "seq": seq}


def setup_events(t: int, runs: int = RUNS) -> list:
    out = []
    for r in range(runs):
        run = f"bench-{r}"
        nodes = (f"n{2 * r}", f"n{2 * r + 1}")
        out.append(RunManifest(**c(run, t, r), datasets=(), transforms=(), code_dirty=False))
        out.append(
            JobEvent(
                **c(run, t, r),
                state="running",
                attempt=1,
                allocation=Allocation(nodes=nodes, gpu_indices=tuple(range(GPUS))),
            )
        )
    return out


def second_of_load(t: int, tick: int, runs: int = RUNS) -> list:
    """One second of load: a NodeSample per node (two per run) and a StepTiming per run."""
    out = []
    gpus = tuple(
        GpuSample(
            index=i,
            uuid=f"g{i}",
            util_pct=90.0,
            sm_active_pct=70.0,
            mem_used_bytes=1,
            mem_total_bytes=2,
            power_w=500.0,
            temp_c=60.0,
            sm_clock_mhz=1900,
            mem_clock_mhz=2600,
            throttle_reasons=0,
            ecc_corrected=0,
            ecc_uncorrected=0,
        )
        for i in range(GPUS)
    )
    for n in range(2 * runs):
        out.append(
            NodeSample(
                **c(None, t, n),
                node=f"n{n}",
                cpu_pct=30.0,
                mem_used_bytes=1,
                mem_total_bytes=2,
                disk_read_bps=0.0,
                disk_write_bps=0.0,
                net_rx_bps=0.0,
                net_tx_bps=0.0,
                gpus=gpus,
            )
        )
    for r in range(runs):
        out.append(
            StepTiming(
                **c(f"bench-{r}", t, r),
                step=tick,
                loader_wait_ms=80.0,
                compute_ms=900.0,
                step_ms=980.0,
                samples=256,
                effective_batch_size=256,
                worker_restarts=0,
            )
        )
    return out


def bench_decode(encoded: list[bytes], repeat: int) -> float:
    codec = load_codec()
    t0 = time.perf_counter()
    for _ in range(repeat):
        codec.decode_many(encoded)
    return repeat * len(encoded) / (time.perf_counter() - t0)


def bench_core(encoded_setup: list[bytes], encoded: list[bytes], seconds: int) -> float:
    codec = load_codec()
    cfg = runstate.RunConfig(source=SRC)
    states: dict[str, bytes] = {}
    node_runs = {f"n{n}": f"bench-{n // 2}" for n in range(NODES)}

    def run(batch: list[bytes], now: int) -> None:
        for rec in codec.decode_many(batch):
            run_id = rec.run_id or node_runs[rec.node]
            raw = states.get(run_id)
            st = runstate.loads(raw) if raw else runstate.new_state(run_id)
            st, _ = join.step(st, rec, now, cfg)
            states[run_id] = runstate.dumps(st)

    now = int(time.time() * 1000)
    run(encoded_setup, now)
    t0 = time.perf_counter()
    n = 0
    for _ in range(seconds):
        run(encoded, now)
        n += len(encoded)
    return n / (time.perf_counter() - t0)


def bench_core_batched(encoded_setup: list[bytes], encoded: list[bytes], seconds: int,
                       batch: int = 500) -> float:
    """As the worker does it: per batch, group by run, one join pass and one JSON write per run."""
    codec = load_codec()
    cfg = runstate.RunConfig(source=SRC)
    states: dict[str, tuple[bytes, runstate.RunState]] = {}
    node_runs = {f"n{n}": f"bench-{n // 2}" for n in range(NODES)}

    def run(chunk: list[bytes], now: int) -> None:
        by_run: dict[str, list] = {}
        for rec in codec.decode_many(chunk):
            by_run.setdefault(rec.run_id or node_runs[rec.node], []).append(rec)
        fold(states, by_run, now, cfg)

    now = int(time.time() * 1000)
    run(encoded_setup, now)
    return batched_rate(run, encoded, seconds, batch, now)


def bench_core_agg(encoded_setup: list[bytes], encoded: list[bytes], seconds: int,
                   batch: int = 2000) -> float:
    """The worker's current path: node samples decoded to dicts and reduced to one compact
    NodeAgg per run per batch (JSON round trip as on the internal topic), then the batched join."""
    from runwatch.core import rekey
    from runwatch.core.join_node import NodeAgg
    from runwatch.core.records import RECORD_TYPES
    from runwatch.processor.forward import aggregate

    codec = load_codec()
    cfg = runstate.RunConfig(source=SRC)
    states: dict[str, tuple[bytes, runstate.RunState]] = {}
    index = {f"n{n}": {f"bench-{n // 2}": list(range(GPUS))} for n in range(NODES)}

    def run(chunk: list[bytes], now: int) -> None:
        by_run: dict[str, list] = {}
        pairs = []
        for dec in codec.decode_many_dicts(chunk):
            name, d = dec
            if name == NodeSample.AVRO_NAME:
                pairs.extend(rekey.node_entries(d, index.get(d["node"], {})).items())
            else:
                by_run.setdefault(d["run_id"], []).append(RECORD_TYPES[name].from_dict(d))
        for agg in aggregate(pairs):
            by_run.setdefault(agg.run_id, []).append(NodeAgg.from_json(agg.to_json()))
        fold(states, by_run, now, cfg)

    now = int(time.time() * 1000)
    setup: dict[str, list] = {}
    for rec in codec.decode_many(encoded_setup):
        setup.setdefault(rec.run_id, []).append(rec)
    fold(states, setup, now, cfg)
    return batched_rate(run, encoded, seconds, batch, now)


def fold(states: dict, by_run: dict[str, list], now: int, cfg: runstate.RunConfig) -> None:
    """One join pass and one JSON state write per run, as the worker does per batch."""
    for run_id, recs in by_run.items():
        hit = states.get(run_id)
        st = hit[1] if hit else runstate.new_state(run_id)
        for rec in recs:
            st, _ = join.step(st, rec, now, cfg)
        states[run_id] = (runstate.dumps(st), st)


def batched_rate(run, encoded: list[bytes], seconds: int, batch: int, now: int) -> float:
    """Events/s of ``run`` over ``seconds`` passes in batches, after one untimed pass
    (the first second builds the detectors of new runs)."""
    for i in range(0, len(encoded), batch):
        run(encoded[i:i + batch], now)
    t0 = time.perf_counter()
    n = 0
    for _ in range(seconds):
        for i in range(0, len(encoded), batch):
            run(encoded[i:i + batch], now)
        n += len(encoded)
    return n / (time.perf_counter() - t0)


def bench_broker(bootstrap: str, seconds: int, worker_env: dict[str, str],
                 runs: int = RUNS) -> dict[str, float]:
    from runwatch.core.records import Alert
    from runwatch.processor.harness import Harness

    h = Harness(bootstrap, partitions=8)
    h.env["RUNWATCH_PROCESSOR_CORRELATION_DELAY_MS"] = "0"
    h.env["RUNWATCH_PROCESSOR_TIMER_INTERVAL_S"] = "1.0"  # the default (tests tick faster)
    h.env.update(worker_env)
    h.create_topics()
    lag = None
    try:
        h.start_worker()
        h.wait_ready()
        t = int(time.time() * 1000)
        h.produce(setup_events(t, runs))
        # warm-up: the runs have been training before the measured window (their detectors
        # and HalfSpaceTrees exist, as in a cluster in steady state)
        for s in range(WARMUP_S):
            h.produce(second_of_load(int(time.time() * 1000), s, runs))
        lag = LagProbe(h)
        lag.wait_drained(time.monotonic())
        sent_at: dict[str, float] = {}
        total = 0
        start = time.monotonic()
        cpu0 = cpu_seconds(h.workers[0].pid)
        trend: list[tuple[float, int]] = []  # (seconds into the load, group lag)
        for s in range(seconds):
            tick_start = time.monotonic()
            t = int(time.time() * 1000)
            load = second_of_load(t, WARMUP_S + s, runs)
            probe = f"bench-{s % runs}"
            load.append(
                LearningStep(
                    **c(probe, t, s),
                    step=s,
                    epoch=0,
                    loss=float("nan"),
                    metrics={},
                    nonfinite_count=0,
                )
            )
            total += h.produce(load)
            sent_at[probe] = time.monotonic()
            trend.append((time.monotonic() - start, lag.lag()))
            time.sleep(max(0.0, 1.0 - (time.monotonic() - tick_start)))
        offered_s = time.monotonic() - start
        got: dict[str, float] = {}
        alerts = h.collect(
            "rw.alerts",
            lambda r: len({a.run_id for a in r if isinstance(a, Alert)}) >= len(sent_at),
            120,
        )
        recv = time.monotonic()
        for a in alerts:
            if isinstance(a, Alert) and a.run_id in sent_at and a.detector == "rule:non_finite":
                got[a.run_id] = a.emitted_at_ms / 1000.0
        # latency from the event's emit time (wall clock) to the alert's emit time
        lat = sorted(got[r] - (sent_wall(sent_at[r], recv)) for r in got)
        lag_drained = lag.wait_drained(start)
        cpu = cpu_seconds(h.workers[0].pid) - cpu0
        offered = total / offered_s
        growth = slope(trend[len(trend) // 2:])  # second half: past the first commits
        return {
            "cpu_s": cpu,
            "cores": cpu / lag_drained,
            "eps_per_core": total / cpu if cpu > 0 else float("nan"),
            "offered_eps": offered,
            "sustained_eps": total / lag_drained,
            "lag_growth_eps": growth,
            "kept_eps": min(offered, offered - growth),
            "lag_end": trend[-1][1],
            "drain_s": lag_drained - offered_s,
            "p50_s": statistics.median(lat) if lat else float("nan"),
            "p99_s": lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else float("nan"),
            "alerts": len(got),
            "probes": len(sent_at),
        }
    finally:
        if lag is not None:
            lag.close()
        h.stop_all()
        h.delete_topics()


def slope(points: list[tuple[float, int]]) -> float:
    """Least-squares slope of (x, y) points (0 for fewer than two)."""
    if len(points) < 2:
        return 0.0
    mx = statistics.fmean(x for x, _ in points)
    my = statistics.fmean(y for _, y in points)
    den = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / den if den else 0.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    import os

    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def sent_wall(mono: float, recv_mono: float) -> float:
    return time.time() - (time.monotonic() - mono)


class LagProbe:
    """The worker group's lag (high watermarks minus committed offsets) on its input topics.

    Committed offsets trail processing by the checkpoint and commit intervals
    (a few seconds), so a worker that keeps up shows a steady lag of about that
    many seconds of load; one that falls behind shows a growing lag.
    """

    TOPICS = ("rw.exec.node", "rw.exec.job", "rw.learning", "rw.internal.node-by-run")

    def __init__(self, h) -> None:
        from confluent_kafka import Consumer, TopicPartition
        from confluent_kafka.admin import AdminClient

        self.h = h
        self.admin = AdminClient({"bootstrap.servers": h.bootstrap})
        self.cons = Consumer({"bootstrap.servers": h.bootstrap, "group.id": "lag-probe"})
        self.tps = [TopicPartition(h.topic(t), p) for t in self.TOPICS for p in range(h.partitions)]

    def lag(self) -> int:
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        fut = self.admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(self.h.app_id, self.tps)])
        total = 0
        for x in list(fut.values())[0].result().topic_partitions:
            _, high = self.cons.get_watermark_offsets(TopicPartition(x.topic, x.partition),
                                                      timeout=10)
            total += high - max(x.offset, 0)
        return total

    def wait_drained(self, start: float) -> float:
        """Seconds from ``start`` until the group has no lag (at most 300)."""
        deadline = time.monotonic() + 300
        while self.lag() and time.monotonic() < deadline:
            time.sleep(0.5)
        return time.monotonic() - start

    def close(self) -> None:
        self.cons.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--broker", default=None, help="bootstrap servers for the worker benchmark")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="multiply the runs and nodes of the load (1.0: the issue's load)")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                    help="extra worker setting, e.g. RUNWATCH_PROCESSOR_BATCH_SIZE=2000")
    args = ap.parse_args()
    codec = load_codec()
    t = int(time.time() * 1000)
    enc_setup = codec.encode_many(setup_events(t))
    enc = codec.encode_many(second_of_load(t, 0))
    ceiling = bench_decode(enc, 3)
    core = bench_core(enc_setup, enc, max(1, args.seconds // 5))
    print(
        f"load: {NODES} NodeSamples/s ({NODES * GPUS} GPUs) + {RUNS} step events/s "
        f"= {len(enc)} events/s offered"
    )
    print(f"ceiling  bare batch decode      : {ceiling:12,.0f} events/s")
    print(
        f"core     decode+join+JSON state : {core:12,.0f} events/s  "
        f"({core / ceiling:.2f} x ceiling, {core / len(enc):.2f} x load)"
    )
    batched = bench_core_batched(enc_setup, enc, max(2, args.seconds // 4))
    print(
        f"core     batched per run        : {batched:12,.0f} events/s  "
        f"({batched / ceiling:.2f} x ceiling, {batched / core:.2f} x per-event core)"
    )
    agg = bench_core_agg(enc_setup, enc, max(2, args.seconds // 4))
    print(
        f"core     per-run node aggregates: {agg:12,.0f} events/s  "
        f"({agg / ceiling:.2f} x ceiling, {agg / batched:.2f} x batched, "
        f"{agg / len(enc):.2f} x load)"
    )
    if args.broker:
        worker_env = dict(kv.split("=", 1) for kv in args.env)
        if worker_env:
            print("worker   settings               : " + " ".join(args.env))
        runs = max(1, round(RUNS * args.scale))
        r = bench_broker(args.broker, args.seconds, worker_env, runs)
        print(f"broker   offered                : {r['offered_eps']:12,.0f} events/s  "
              f"({2 * runs} NodeSamples/s + {runs} step events/s + 1 probe/s)")
        print(
            f"broker   sustained (lag drained): {r['sustained_eps']:12,.0f} events/s  "
            f"({r['sustained_eps'] / ceiling:.3f} x ceiling; includes the "
            f"{r['drain_s']:.1f} s the lag took to drain after the load)"
        )
        print(
            f"broker   kept up with           : {r['kept_eps']:12,.0f} events/s  "
            f"(offered minus the lag's growth {r['lag_growth_eps']:+,.0f}/s over the "
            f"load's second half; lag at its end {r['lag_end']:,})"
        )
        print(
            f"broker   event->alert latency   : p50 {r['p50_s']:.2f} s  p99 {r['p99_s']:.2f} s "
            f"({r['alerts']}/{r['probes']} probe alerts)"
        )
        print(
            f"broker   worker CPU             : {r['cores']:.2f} cores busy while draining; "
            f"{r['eps_per_core']:,.0f} events per CPU-second"
        )


if __name__ == "__main__":
    main()
