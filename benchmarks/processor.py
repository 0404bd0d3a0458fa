"""Processor throughput and event-to-alert latency, beside the bare batch-decode ceiling.

Load: 2,000 NodeSamples/s (8 GPUs each: 16k GPUs at 1 Hz) from 2,000 nodes plus
step events (StepTiming) from 1,000 runs, each run owning two nodes.

Figures, all measured in this run:
  1. ceiling   — codec.decode_many over the same events (bare batch decode);
  2. core      — in process: node samples decoded to dicts and reduced to one compact
                 aggregate per run per batch, then the batched run join and JSON state
                 (core.stream.join.step); and the worker's own parts driven in memory
                 (MemoryProcessor: routing, internal topics, run folder, no broker);
                 all in-process figures under the worker's garbage-collector settings
                 (``tune_gc`` with the shipped threshold);
  3. broker    — (with --broker) one real worker on the local Kafka, run with the
                 processor's shipped defaults (correlation delay, timer interval,
                 read from ProcessorSettings and printed): events/s sustained at the
                 offered load, and event-to-alert latency of --probes probe runs
                 that emit a NaN loss, spread evenly over the load. Latency runs
                 from the probe's own timestamp (``emitted_at_ms``, stamped as it
                 is produced) to the moment this process receives the alert on
                 ``rw.alerts`` (delivery, not creation); p50/p95/p99 by nearest
                 rank.

Checks (exit status 1 when one fails): every probe's alert arrived, and the input
topics hold exactly the events produced (high watermarks of fresh topics).

The worker runs on the runtime ``--runtime`` names (``faust`` or ``plain``:
RUNWATCH_PROCESSOR_RUNTIME); run both alternately in one sitting to compare them.

Usage: python benchmarks/processor.py [--seconds 10] [--broker 127.0.0.1:9092] [--probes 200]
       [--runtime faust|plain]
"""

from __future__ import annotations

import argparse
import math
import statistics
import threading
import time
from collections.abc import Iterable

from benchkit import Checks, percentile
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
from runwatch.core.stream import join, runstate
from runwatch.testing import scenarios

SRC = scenarios.SOURCE
RUNS, NODES, GPUS = 1_000, 2_000, 8  # the load (--scale multiplies runs and nodes)
WARMUP_S = 3  # seconds of load before the measured window
#: Topics the benchmark produces to (RunManifest, JobEvent/StepTiming, NodeSample, LearningStep).
INPUT_TOPICS = frozenset({"rw.lineage", "rw.exec.job", "rw.exec.node", "rw.learning"})


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


def bench_memory(encoded_setup: list[bytes], encoded: list[bytes], seconds: int) -> float:
    """The worker's own parts in memory (MemoryProcessor): node re-keying, the internal
    re-key topics, the run folder with its deferred JSON state saves; no broker, no faust."""
    from runwatch.adapters.publisher import default_topics, record_key
    from runwatch.processor.memory import MemoryProcessor
    from runwatch.processor.settings import ProcessorSettings

    codec, topics = load_codec(), default_topics()

    def messages(encoded_batch: list[bytes]) -> list[tuple[str, str | None, bytes]]:
        return [(topics[type(r).__name__], record_key(r), v)
                for r, v in zip(codec.decode_many(encoded_batch), encoded_batch, strict=True)]

    worker = MemoryProcessor(ProcessorSettings())  # the shipped defaults (deferred saves)
    worker.feed(messages(encoded_setup))
    load = messages(encoded)
    worker.feed(load)  # untimed: the first second builds the detectors of new runs
    t0 = time.perf_counter()
    for _ in range(seconds):
        worker.feed(load)
    return seconds * len(load) / (time.perf_counter() - t0)


def bench_core_agg(encoded_setup: list[bytes], encoded: list[bytes], seconds: int,
                   batch: int = 2000) -> float:
    """The worker's current path: node samples decoded to dicts and reduced to one compact
    NodeAgg per run per batch (JSON round trip as on the internal topic), then the batched join."""
    from runwatch.core.records import RECORD_TYPES
    from runwatch.core.stream import rekey
    from runwatch.core.stream.join_node import NodeAgg
    from runwatch.processor.nodes import aggregate

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


def shipped_defaults() -> dict[str, str]:
    """The processor settings a benchmark must not change, at their shipped defaults."""
    from runwatch.processor.settings import ProcessorSettings

    f = ProcessorSettings.model_fields
    return {
        "RUNWATCH_PROCESSOR_CORRELATION_DELAY_MS": str(f["correlation_delay_ms"].default),
        "RUNWATCH_PROCESSOR_TIMER_INTERVAL_S": str(f["timer_interval_s"].default),
    }


class AlertReader:
    """Reads ``rw.alerts`` in a thread; remembers when each run's first non-finite alert arrived."""

    def __init__(self, h) -> None:
        from runwatch.adapters.kafka import BatchConsumer

        self.consumer = BatchConsumer(h.kafka, f"bench-alerts-{h.app_id}", [h.topic("rw.alerts")])
        self.codec = h.codec
        self.arrived: dict[str, float] = {}  # run id -> wall-clock epoch seconds at receipt
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        from runwatch.core.records import Alert

        while not self.stop.is_set():
            for m in self.consumer.poll_batch(500, timeout=0.2):
                now = time.time()
                rec = self.codec.decode(m.value())
                if (isinstance(rec, Alert) and rec.detector == "rule:non_finite"
                        and rec.run_id and rec.run_id not in self.arrived):
                    self.arrived[rec.run_id] = now

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.consumer.close()


def bench_broker(bootstrap: str, seconds: int, worker_env: dict[str, str],
                 runs: int = RUNS, probes: int = 200) -> dict[str, float]:
    from runwatch.testing.harness import Harness

    if probes > runs:
        msg = f"--probes {probes} needs as many runs (each probe run alerts once): have {runs}"
        raise SystemExit(msg)
    h = Harness(bootstrap, partitions=8)
    h.env.update(shipped_defaults())  # the harness's test settings are not the shipped ones
    h.env.update(worker_env)
    h.create_topics()
    lag = reader = None
    try:
        h.start_worker()
        h.wait_ready()
        reader = AlertReader(h)
        t = int(time.time() * 1000)
        total = h.produce(setup_events(t, runs))
        # warm-up: the runs have been training before the measured window (their detectors
        # and HalfSpaceTrees exist, as in a cluster in steady state)
        for s in range(WARMUP_S):
            total += h.produce(second_of_load(int(time.time() * 1000), s, runs))
        lag = LagProbe(h)
        lag.wait_drained(time.monotonic())
        sent_ms: dict[str, int] = {}  # probe run -> the probe's emitted_at_ms
        per_tick = math.ceil(probes / seconds)
        load_total = 0
        start = time.monotonic()
        cpu0 = cpu_seconds(h.workers[0].pid)
        trend: list[tuple[float, int]] = []  # (seconds into the load, group lag)
        for s in range(seconds):
            tick_start = time.monotonic()
            load_total += h.produce(second_of_load(int(time.time() * 1000), WARMUP_S + s, runs))
            for j in range(per_tick):
                if len(sent_ms) >= probes:
                    break
                time.sleep(max(0.0, tick_start + (j + 0.5) / per_tick - time.monotonic()))
                probe = f"bench-{len(sent_ms)}"
                now_ms = int(time.time() * 1000)
                load_total += h.produce([LearningStep(**c(probe, now_ms, s), step=WARMUP_S + s,
                                                      epoch=0, loss=float("nan"), metrics={},
                                                      nonfinite_count=1)])
                sent_ms[probe] = now_ms
            trend.append((time.monotonic() - start, lag.lag()))
            time.sleep(max(0.0, 1.0 - (time.monotonic() - tick_start)))
        offered_s = time.monotonic() - start
        total += load_total
        lag_drained = lag.wait_drained(start)
        cpu = cpu_seconds(h.workers[0].pid) - cpu0
        delay_s = int(h.env["RUNWATCH_PROCESSOR_CORRELATION_DELAY_MS"]) / 1000
        deadline = time.monotonic() + 120 + delay_s
        while len(reader.arrived.keys() & sent_ms.keys()) < len(sent_ms):
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
        lat = sorted(reader.arrived[r] - sent_ms[r] / 1000 for r in sent_ms
                     if r in reader.arrived)
        offered = load_total / offered_s
        growth = slope(trend[len(trend) // 2:])  # second half: past the first commits
        return {
            "cpu_s": cpu,
            "cores": cpu / lag_drained,
            "eps_per_core": load_total / cpu if cpu > 0 else float("nan"),
            "offered_eps": offered,
            "sustained_eps": load_total / lag_drained,
            "lag_growth_eps": growth,
            "kept_eps": min(offered, offered - growth),
            "lag_end": trend[-1][1],
            "drain_s": lag_drained - offered_s,
            "p50_s": percentile(lat, 0.50),
            "p95_s": percentile(lat, 0.95),
            "p99_s": percentile(lat, 0.99),
            "max_s": lat[-1] if lat else float("nan"),
            "alerts": len(lat),
            "probes": len(sent_ms),
            "produced": total,
            "in_topics": lag.in_topics(sorted(set(h.route.values()) & INPUT_TOPICS)),
            "settings": {k: v for k, v in h.env.items() if k.startswith("RUNWATCH_PROCESSOR_")},
        }
    finally:
        if reader is not None:
            reader.close()
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

    def in_topics(self, names: Iterable[str]) -> int:
        """Events on (fresh) topics: the sum of their partitions' high watermarks."""
        from confluent_kafka import TopicPartition

        total = 0
        for name in names:
            topic = self.h.topic(name)
            parts = self.cons.list_topics(topic, timeout=10).topics[topic].partitions
            for p in parts:
                _, high = self.cons.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                total += high
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
                    help="extra worker setting, e.g. RUNWATCH_PROCESSOR_BATCH_SIZE=2000 "
                         "(figures are then not those of the shipped defaults)")
    ap.add_argument("--runtime", choices=("faust", "plain"), default=None,
                    help="the worker's runtime (default: the shipped one)")
    ap.add_argument("--probes", type=int, default=200,
                    help="NaN-loss probe runs for the latency percentiles (200: a p99 "
                         "that is not the maximum)")
    args = ap.parse_args()
    from runwatch.processor.__main__ import tune_gc
    from runwatch.processor.settings import ProcessorSettings

    # The in-process figures run under the worker's collector settings: under Python's
    # default threshold the long-lived run states make collections far more frequent,
    # and their cost lands on whatever allocates (decoding looked three times slower).
    thresholds = tune_gc(ProcessorSettings().gc_threshold)
    codec = load_codec()
    t = int(time.time() * 1000)
    enc_setup = codec.encode_many(setup_events(t))
    enc = codec.encode_many(second_of_load(t, 0))
    ceiling = bench_decode(enc, 3)
    print(
        f"load: {NODES} NodeSamples/s ({NODES * GPUS} GPUs) + {RUNS} step events/s "
        f"= {len(enc)} events/s offered"
    )
    print(f"in-process figures under the worker's gc thresholds {thresholds}")
    print(f"ceiling  bare batch decode      : {ceiling:12,.0f} events/s")
    agg = bench_core_agg(enc_setup, enc, max(2, args.seconds // 4))
    print(
        f"core     per-run node aggregates: {agg:12,.0f} events/s  "
        f"({agg / ceiling:.2f} x ceiling, {agg / len(enc):.2f} x load)"
    )
    mem = bench_memory(enc_setup, enc, max(2, args.seconds // 4))
    print(
        f"memory   the worker's parts     : {mem:12,.0f} events/s  "
        f"({mem / ceiling:.2f} x ceiling, {mem / agg:.2f} x core, {mem / len(enc):.2f} x load)"
    )
    if args.broker:
        worker_env = dict(kv.split("=", 1) for kv in args.env)
        if args.runtime:
            worker_env["RUNWATCH_PROCESSOR_RUNTIME"] = args.runtime
        if args.env:
            print("worker   settings               : " + " ".join(args.env))
        runs = max(1, round(RUNS * args.scale))
        r = bench_broker(args.broker, args.seconds, worker_env, runs, args.probes)
        print("worker   run with               : " + " ".join(
            f"{k.removeprefix('RUNWATCH_PROCESSOR_')}={v}" for k, v in sorted(r["settings"].items())
            if k in shipped_defaults() or k in worker_env)
            + f" (runtime {r['settings'].get('RUNWATCH_PROCESSOR_RUNTIME', 'shipped default')})")
        print(f"broker   offered                : {r['offered_eps']:12,.0f} events/s  "
              f"({2 * runs} NodeSamples/s + {runs} step events/s + "
              f"{math.ceil(args.probes / args.seconds)} probes/s)")
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
            f"broker   event->alert delivered : p50 {r['p50_s']:.2f} s  p95 {r['p95_s']:.2f} s  "
            f"p99 {r['p99_s']:.2f} s  max {r['max_s']:.2f} s ({r['alerts']}/{r['probes']} "
            "probe alerts; from the probe's emitted_at_ms to receipt on rw.alerts)"
        )
        print(
            f"broker   worker CPU             : {r['cores']:.2f} cores busy while draining; "
            f"{r['eps_per_core']:,.0f} events per CPU-second"
        )
        checks = Checks()
        checks.check(r["probes"] == args.probes,
                     f"probes produced: {r['probes']} of {args.probes} (--seconds too short?)")
        checks.check(r["alerts"] == r["probes"],
                     f"probe alerts received on rw.alerts: {r['alerts']} of {r['probes']}")
        target = 3 * runs + math.ceil(args.probes / args.seconds)
        checks.check(r["offered_eps"] >= 0.95 * target,
                     f"offered load: {r['offered_eps']:,.0f} events/s of the {target:,} "
                     "intended (at least 95 %, or the load generator fell short)")
        checks.check(r["in_topics"] == r["produced"],
                     f"events on the input topics: {r['in_topics']:,} of {r['produced']:,} "
                     "produced")
        checks.done()


if __name__ == "__main__":
    main()
