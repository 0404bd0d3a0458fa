"""Per-call cost of ``run.step`` with 10 metrics, against a baseline and other SDKs.

Measures, in one run:
  * baseline: a plain Python function call taking the same arguments;
  * runwatch ``run.step`` with the broker up (KAFKA_BOOTSTRAP_SERVERS or --bootstrap),
    publishing to topics created for the run (the broker does not auto-create them);
  * runwatch ``run.step`` during an outage (a broker address where nothing listens:
    every record goes to the local spool);
  * ``mlflow.log_metrics`` (local file store) and a ``wandb`` offline run's ``log``,
    measured in a subprocess of --compare-python (default: this interpreter), when
    they are importable there; otherwise that is printed.

Prints median, p99 and max in microseconds, and ratios. Never asserts timings, but
checks that each case did what it is named after and exits 1 otherwise: broker up,
every published record was delivered (transport ``sent`` equals ``published``, nothing
spooled); outage, nothing was delivered and every record is in the spool.

    .venv/bin/python benchmarks/sdk_overhead.py [--steps 20000] [--bootstrap 127.0.0.1:9092]
        [--compare-python /tmp/rwbench/bin/python]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchkit import Checks, fresh_topics

METRICS = {f"m{i}": 0.1 * i for i in range(10)}


def stats(ns: list[int]) -> dict[str, float]:
    ns = sorted(ns)
    return {
        "median_us": ns[len(ns) // 2] / 1000,
        "p99_us": ns[int(len(ns) * 0.99)] / 1000,
        "max_us": ns[-1] / 1000,
    }


def time_calls(fn, steps: int) -> dict[str, float]:
    out = [0] * steps
    pc = time.perf_counter_ns
    gc.collect()
    for i in range(steps):
        t0 = pc()
        fn(i)
        out[i] = pc() - t0
    return stats(out)


def bench_baseline(steps: int) -> dict[str, float]:
    sink: list = []

    def plain(step, loss=None, metrics=None, lr=None):
        sink.append(step)

    return time_calls(lambda i: plain(i, loss=0.5, metrics=METRICS, lr=1e-3), steps)


def bench_runwatch(steps: int, bootstrap: str, spool: Path, name: str,
                   topics: dict[str, str]) -> tuple[dict, dict]:
    import runwatch
    from runwatch.adapters.kafka import KafkaTransport, ProducerSettings
    from runwatch.adapters.settings import KafkaSettings

    transport = KafkaTransport(
        KafkaSettings(bootstrap_servers=bootstrap),
        ProducerSettings(spool_dir=spool, message_timeout_ms=2000),
        name=name,
    )
    run = runwatch.init(
        "bench",
        transport=transport,
        install_hooks=False,
        capture_lineage=False,
        topics=topics,
    )
    time.sleep(0.5)  # let the manifest go out
    s = time_calls(lambda i: run.step(i, loss=0.5, metrics=METRICS, lr=1e-3), steps)
    counters = run.finish(timeout=5 if "outage" in name else 30)
    return s, counters


COMPARE = r"""
import json, sys, time, tempfile, os, gc
steps = int(sys.argv[1])
M = {f"m{i}": 0.1 * i for i in range(10)}
def st(ns):
    ns = sorted(ns)
    return {"median_us": ns[len(ns)//2]/1000, "p99_us": ns[int(len(ns)*.99)]/1000,
            "max_us": ns[-1]/1000}
def timed(fn):
    out = []; gc.collect()
    for i in range(steps):
        t0 = time.perf_counter_ns(); fn(i); out.append(time.perf_counter_ns() - t0)
    return st(out)
res = {}
try:
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"  # mlflow 3 keeps the local file store opt-in
    import mlflow
    d = tempfile.mkdtemp()
    mlflow.set_tracking_uri("file://" + d)
    mlflow.set_experiment("bench")
    with mlflow.start_run():
        res["mlflow.log_metrics"] = timed(lambda i: mlflow.log_metrics({**M, "loss": 0.5}, step=i))
    res["mlflow_version"] = mlflow.__version__
except Exception as e:
    res["mlflow_error"] = repr(e)[:300]
try:
    os.environ["WANDB_MODE"] = "offline"; os.environ["WANDB_SILENT"] = "true"
    import wandb
    r = wandb.init(project="bench", mode="offline", dir=tempfile.mkdtemp())
    res["wandb.log (offline)"] = timed(lambda i: r.log({**M, "loss": 0.5}, step=i))
    r.finish()
    res["wandb_version"] = wandb.__version__
except Exception as e:
    res["wandb_error"] = repr(e)[:300]
print("JSON" + json.dumps(res))
"""


def bench_others(python: str, steps: int) -> dict:
    try:
        p = subprocess.run(
            [python, "-c", COMPARE, str(steps)], capture_output=True, text=True, timeout=900
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": str(exc)}
    for line in p.stdout.splitlines():
        if line.startswith("JSON"):
            return json.loads(line[4:])
    return {"error": (p.stderr or p.stdout)[-500:]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--compare-steps", type=int, default=2000)
    ap.add_argument(
        "--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    )
    ap.add_argument("--compare-python", default=sys.executable)
    args = ap.parse_args()

    rows: dict[str, dict[str, float]] = {}
    rows["baseline: plain call"] = bench_baseline(args.steps)
    logical = ("rw.learning", "rw.exec.job", "rw.lineage")
    with tempfile.TemporaryDirectory() as d, fresh_topics(args.bootstrap, logical) as topics:
        rows["runwatch run.step (broker up)"], c_up = bench_runwatch(
            args.steps, args.bootstrap, Path(d), "bench-up", topics
        )
        rows["runwatch run.step (outage)"], c_out = bench_runwatch(
            args.steps, "127.0.0.1:1", Path(d), "bench-outage", topics
        )
    others = bench_others(args.compare_python, args.compare_steps)
    for k, v in others.items():
        if isinstance(v, dict):
            rows[k] = v

    print(f"\nrun.step cost with 10 metrics ({args.steps} calls; others {args.compare_steps})")
    print(f"{'what':34s} {'median µs':>10s} {'p99 µs':>10s} {'max µs':>10s} {'p99/base':>9s}")
    base = rows["baseline: plain call"]["p99_us"] or 1e-3
    for k, v in rows.items():
        print(
            f"{k:34s} {v['median_us']:10.2f} {v['p99_us']:10.2f} {v['max_us']:10.1f} "
            f"{v['p99_us'] / base:9.1f}"
        )
    rw = rows["runwatch run.step (broker up)"]
    print("\nratios (other / runwatch broker-up), median and p99:")
    for k in ("mlflow.log_metrics", "wandb.log (offline)"):
        if k in rows:
            o = rows[k]
            print(
                f"  {k:24s} median x{o['median_us'] / rw['median_us']:.0f}  "
                f"p99 x{o['p99_us'] / rw['p99_us']:.0f}"
            )
        else:
            err = others.get(k.split(".")[0] + "_error") or others.get("error") or "not measured"
            print(f"  {k:24s} not available in {args.compare_python}: {err}")
    for k in ("mlflow_version", "wandb_version"):
        if k in others:
            print(f"  {k} = {others[k]}")
    print(
        f"\ngoal p99 < 50 µs: broker up p99 = {rw['p99_us']:.2f} µs, "
        f"outage p99 = {rows['runwatch run.step (outage)']['p99_us']:.2f} µs"
    )
    keep = ("published", "dropped_queue_full", "transport_sent", "transport_spooled",
            "transport_in_spool", "transport_failed")
    print("counters broker up:", {k: c_up.get(k, 0) for k in keep})
    print("counters outage:   ", {k: c_out.get(k, 0) for k in keep})
    expected = 2 * args.steps + 3  # manifest, running, 2 records per step, the final state
    checks = Checks()
    for label, c in (("broker up", c_up), ("outage", c_out)):
        checks.check(c.get("published", 0) == expected and not c.get("dropped_queue_full"),
                     f"{label}: published {c.get('published', 0)} of {expected} records "
                     f"(dropped {c.get('dropped_queue_full', 0)})")
    checks.check(c_up.get("transport_sent") == c_up.get("published") and
                 not c_up.get("transport_spooled") and not c_up.get("transport_failed"),
                 f"broker up: delivered {c_up.get('transport_sent', 0)} of "
                 f"{c_up.get('published', 0)} published, spooled "
                 f"{c_up.get('transport_spooled', 0)}, failed {c_up.get('transport_failed', 0)}")
    checks.check(not c_out.get("transport_sent") and
                 c_out.get("transport_in_spool") == c_out.get("published"),
                 f"outage: delivered {c_out.get('transport_sent', 0)}, in the spool "
                 f"{c_out.get('transport_in_spool', 0)} of {c_out.get('published', 0)} published")
    checks.done()


if __name__ == "__main__":
    main()
