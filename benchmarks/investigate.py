"""``runwatch investigate`` on a run with 1M stored telemetry rows, on the local store.

Usage: python benchmarks/investigate.py [--rows 1000000] [--reps 5]

Starts its own ``runwatch store`` on an ephemeral port and fills a fresh
database by SQL (``INSERT ... SELECT FROM numbers()``): the investigated run
with ``--rows`` telemetry rows (learning steps, step timings and per-GPU
samples in equal parts, on its 8 GPUs), checkpoints, validation results,
data-quality reports of its dataset with a label shift, an alert, a failed
gate; its family's reference run and 200 other runs with 1M telemetry rows of
their own between them, so every query has to find its run's slice; the run
summaries of the run and its reference (the cost answer's rows, priced from the
packaged costs.yaml; written by SQL like the rest: the sink's summary statement
over this run's 1M rows exceeds the store's 8 GiB query memory). Then it times,
over ``--reps`` repetitions:

* ``answer``: reading the evidence and answering every question (what
  ``runwatch investigate RUN --json`` does after start-up, the store included);
* ``page``: the same plus the HTML page;
* ``cli``: the command itself (``python -m runwatch investigate RUN --json``, Python
  start-up included);
* the baseline: one ``count()`` of the run's learning steps (the store's per-query floor).

The issue's target is an answer under 2 s. Checks (exit 1 when one fails):
the run's rows are all stored, the answer finds the run, its reference, the
label shift, the resume point, the failed gate and the run's cost beside its
reference's, and every plot (the cost plot too) has data.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))
from sinkkit import Store, migrate  # noqa: E402

from runwatch.adapters import clickhouse as ch  # noqa: E402
from runwatch.adapters.evidence import investigate_run  # noqa: E402
from runwatch.adapters.settings import ClickHouseSettings  # noqa: E402
from runwatch.commands.cost import load_prices  # noqa: E402
from runwatch.core.investigate.html import render  # noqa: E402
from runwatch.core.paging.ownership import load_ownership  # noqa: E402
from runwatch.core.storage.columns import COLUMNS  # noqa: E402
from runwatch.resources import ownership_file, summary_sql_file  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchkit import Checks  # noqa: E402

RUN, REF = "bench-run", "bench-ref"
TAIL = "'bench', 0, 'bench', 0, number"  # source_kind, seq, kafka topic/partition/offset


def _tail(idx: range) -> list[list]:
    n = len(idx)
    return [["bench"] * n, [0] * n, ["bench"] * n, [0] * n, list(idx)]


def _learning(idx: range, t0: int, per: int, own: bool, rng: random.Random) -> list[list]:
    n = len(idx)
    runs = [RUN] * n if own else [f"other-{2 + i % 200}" for i in idx]
    return [[f"{'o' if own else 'x'}{i}" for i in idx], [t0 + i * 1000 for i in idx], runs,
            list(idx), [0] * n, [2.0 * math.exp(-i / per) + rng.random() / 50 for i in idx],
            [{}] * n, [0.003] * n, [1.0] * n, [0] * n, *_tail(idx)]


def _timings(idx: range, t0: int, per: int, own: bool, rng: random.Random) -> list[list]:
    n = len(idx)
    runs = [RUN] * n if own else [f"other-{2 + i % 200}" for i in idx]
    return [[f"{'o' if own else 'x'}{i}" for i in idx], [t0 + i * 1000 for i in idx], runs,
            list(idx), [40 + rng.random() * 10 for _ in idx], [900.0] * n, [1000.0] * n,
            [256] * n, [None] * n, [256] * n, [0] * n, *_tail(idx)]


def _gpus(idx: range, t0: int, per: int, own: bool, rng: random.Random) -> list[list]:
    n = len(idx)
    nodes = ["node-1"] * n if own else [f"node-{2 + (i // 8) % 40}" for i in idx]
    return [[f"{'o' if own else 'x'}{i}" for i in idx], [t0 + (i // 8) * 8000 for i in idx],
            nodes, [i % 8 for i in idx], [""] * n, [RUN if own else ""] * n,
            [80 + rng.random() * 15 for _ in idx], [60.0] * n, [1] * n, [2] * n, [600.0] * n,
            [60.0] * n, [1900] * n, [2600] * n, [0] * n, [0] * n, [0] * n, [None] * n,
            [None] * n, [None] * n, [None] * n, [None] * n, [1] * n, [1] * n, *_tail(idx)]


def fill(client, db: str, rows: int, t0: int) -> None:
    """Store the scenario (see the module docstring)."""
    per = rows // 3
    ticks = per // 8
    span = per * 1000  # one step a second
    def q(sql: str) -> None:
        # every row must land (rows older than the raw TTL would be dropped silently)
        table = sql.split()[2]
        want = int(sql.rsplit("numbers(", 1)[1].split(")")[0])
        before = int(client.command(f"SELECT count() FROM {table}"))  # noqa: S608
        client.command(sql)
        now = int(client.command(f"SELECT count() FROM {table}"))  # noqa: S608
        if now != before + want:
            msg = f"{table}: {now - before} of {want} rows landed"
            raise RuntimeError(msg)

    ts = f"fromUnixTimestamp64Milli(toInt64({t0}) + number * 1000)"
    q(f"INSERT INTO {db}.run_manifests (event_id, ts, run_id, dataset_uris, dataset_versions, "
      "dataset_hashes, transform_names, transform_versions, code_revision, code_dirty, "
      "image_digest, config_hash, config, hardware_nodes, gpu_count, gpu_model, seed_policy, "
      "framework_versions, experiment_family, team, parent_run_id, resumed_from_checkpoint, "
      "labels, source_kind, seq, kafka_topic, kafka_partition, kafka_offset) "
      "SELECT toString(generateUUIDv4()), fromUnixTimestamp64Milli(toInt64("
      f"{t0}) - 86400000 + number * 1000), multiIf(number = 0, '{REF}', number = 1, '{RUN}', "
      "concat('other-', toString(number))), ['s3://bench/ds'], [if(number = 1, 'v2', 'v1')], "
      "[''], [], [], 'abc', false, 'img@sha256:1', 'h', map('lr', if(number = 1, '0.003', "
      "'0.001')), [concat('node-', toString(number % 50))], 8, 'H100', 'fixed:1', map(), "
      f"if(number < 2, 'bench', 'other'), 'ml', '', '', map(), {TAIL} FROM numbers(202)")
    q(f"INSERT INTO {db}.job_events (event_id, ts, run_id, state, attempt, reason, queue, "
      "priority_class, nodes, gpu_indices, gpu_model, deadline, team, experiment_family, "
      "source_kind, seq, kafka_topic, kafka_partition, kafka_offset) "
      "SELECT toString(generateUUIDv4()), fromUnixTimestamp64Milli(toInt64("
      f"{t0}) - 86400000 + intDiv(number, 2) * 1000 + (number % 2) * 3600000), "
      f"multiIf(intDiv(number, 2) = 0, '{REF}', intDiv(number, 2) = 1, '{RUN}', "
      "concat('other-', toString(intDiv(number, 2)))), if(number % 2 = 0, 'running', "
      "'succeeded'), 0, '', '', '', [concat('node-', toString(intDiv(number, 2) % 50))], "
      "[0,1,2,3,4,5,6,7], 'H100', NULL, 'ml', 'bench', " + TAIL + " FROM numbers(404)")
    # the run's own job events span its telemetry
    q(f"INSERT INTO {db}.job_events (event_id, ts, run_id, state, attempt, reason, queue, "
      "priority_class, nodes, gpu_indices, gpu_model, deadline, team, experiment_family, "
      "source_kind, seq, kafka_topic, kafka_partition, kafka_offset) "
      f"SELECT toString(generateUUIDv4()), fromUnixTimestamp64Milli(toInt64({t0}) + number * "
      f"{span}), '{RUN}', if(number = 0, 'running', 'failed'), 0, '', '', '', ['node-1'], "
      f"[0,1,2,3,4,5,6,7], 'H100', NULL, 'ml', 'bench', {TAIL} FROM numbers(2)")
    # telemetry through the client's column inserts, the sink's path (chunks of 100k rows)
    rng = random.Random(7)
    for table, n, make in (("learning_steps", per, _learning), ("step_timings", per, _timings),
                           ("gpu_samples", ticks * 8, _gpus)):
        for own in (True, False):
            for lo in range(0, n, 100_000):
                hi = min(n, lo + 100_000)
                cols = make(range(lo, hi), t0, per, own, rng)
                ch.insert_rows(client, f"{db}.{table}", COLUMNS[table], cols,
                               column_oriented=True)
    q(f"INSERT INTO {db}.checkpoints (event_id, ts, run_id, step, started_at, ended_at, "
      "duration_ms, size_bytes, sha256, expected_sha256, uri, outcome, throughput_bps, "
      "source_kind, seq, kafka_topic, kafka_partition, kafka_offset) "
      f"SELECT toString(number), {ts.replace('number * 1000', f'(number + 1) * {per // 50} * 1000')}"  # noqa: E501
      f", '{RUN}', (number + 1) * {per // 50}, now64(), now64(), 30000, 1, 's', 's', "
      f"concat('s3://ck/', toString(number)), 'ok', NULL, {TAIL} FROM numbers(50)")
    q(f"INSERT INTO {db}.validation_results (event_id, ts, run_id, step, epoch, metrics, "
      "dataset_uri, dataset_version, slice, source_kind, seq, kafka_topic, kafka_partition, "
      f"kafka_offset) SELECT toString(number), {ts.replace('number * 1000', 'number * 100000')}, "
      f"'{RUN}', number * 100, 0, map('accuracy', if(number < {per // 200}, 0.5 + number / "
      f"{per}, 0.4)), 's3://bench/val', '', '', {TAIL} FROM numbers({per // 100})")
    shift = t0 + span * 3 // 4
    q(f"INSERT INTO {db}.data_quality_reports (event_id, ts, run_id, dataset_uri, "
      "dataset_version, data_partition, window_start, window_end, row_count, schema_failures, "
      "duplicate_rows, rejected_samples, feature_names, feature_null_pct, feature_psi, "
      "feature_ks, label_distribution, freshness_lag_ms, baseline, drifted_features, max_psi, "
      "max_ks, source_kind, seq, kafka_topic, kafka_partition, kafka_offset) "
      f"SELECT toString(number), fromUnixTimestamp64Milli(toInt64({t0}) + number * "
      f"{span // 100}), '', 's3://bench/ds', 'v2', '', now64(), now64(), 1000, 0, 0, 0, [], "
      f"[], [], [], if(toInt64({t0}) + number * {span // 100} >= {shift}, "
      "map('a', 0.8, 'b', 0.2), map('a', 0.5, 'b', 0.5)), NULL, 'ref', [], NULL, NULL, "
      f"{TAIL} FROM numbers(100)")
    q(f"INSERT INTO {db}.alerts (event_id, ts, run_id, alert_id, dedup_key, status, severity, "
      "detector, indicator, observed, expected, score, probable_cause, evidence_signals, "
      "evidence_indicators, evidence_observed, evidence_at, title, summary, team, "
      "experiment_family, node, labels, first_seen, last_seen, source_kind, seq, kafka_topic, "
      f"kafka_partition, kafka_offset) SELECT 'a1', fromUnixTimestamp64Milli({shift + 60_000}), "
      f"'{RUN}', 'a1', 'k', 'firing', 'warning', 'rule:validation_decline', 'accuracy', 0.4, "
      f"0.6, 1, 'data', ['data'], ['label_balance'], [0.3], [fromUnixTimestamp64Milli({shift})]"
      f", 'decline', '', 'ml', 'bench', '', map(), fromUnixTimestamp64Milli({shift + 60_000}), "
      f"fromUnixTimestamp64Milli({shift + 60_000}), {TAIL} FROM numbers(1)")
    q(f"INSERT INTO {db}.gate_decisions (event_id, ts, run_id, gate, decision, thresholds, "
      "measured, slice_names, slice_passed, reasons, evaluator, source_kind, seq, kafka_topic, "
      f"kafka_partition, kafka_offset) SELECT 'g1', fromUnixTimestamp64Milli({t0 + span}), "
      f"'{RUN}', 'eval', 'fail', map(), map(), [], [], ['accuracy 0.40 < 0.70'], 'bench', "
      f"{TAIL} FROM numbers(1)")


def summaries(client, db: str) -> float:
    """Summarise the run and its reference with the sink's own statement; return its seconds."""
    sql = summary_sql_file().read_text().replace("${db}", db)
    began = time.perf_counter()
    client.command(sql, parameters={"runs": [RUN, REF], "idle_pct": 5.0})
    return time.perf_counter() - began


def main() -> int:
    """Fill, time, print."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args()
    checks = Checks()
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "chdb")
        store.start()
        try:
            db = f"bench_inv_{uuid.uuid4().hex[:8]}"
            writer = migrate(store.url, db)
            t0 = int(time.time() * 1000) - 108 * 3_600_000  # inside the raw tables' 7-day TTL
            began = time.perf_counter()
            fill(writer, db, args.rows, t0)
            summary_s = summaries(writer, db)
            print(f"filled {db} in {time.perf_counter() - began:.1f} s (the sink's summary "
                  f"statement for the run and its reference: {summary_s:.2f} s)")
            summary_steps = int(writer.command(
                f"SELECT step_records FROM {db}.run_summaries FINAL "  # noqa: S608
                f"WHERE run_id = '{RUN}'") or 0)
            mine = sum(int(writer.command(
                f"SELECT count() FROM {db}.{t} WHERE run_id = '{RUN}'"))  # noqa: S608
                for t in ("learning_steps", "step_timings", "gpu_samples"))
            total = sum(int(writer.command(f"SELECT count() FROM {db}.{t}"))  # noqa: S608
                        for t in ("learning_steps", "step_timings", "gpu_samples"))
            checks.check(mine >= args.rows - 24, f"the run's telemetry rows: {mine} "
                         f"(asked {args.rows}; {total} in all)")
            reader = ch.make_client(ClickHouseSettings(url=store.url), readonly=True,
                                    database="")
            own = load_ownership(ownership_file())
            prices = load_prices(None)

            def answer() -> tuple[dict, dict]:
                return investigate_run(reader, db, RUN, int(time.time() * 1000), ownership=own,
                                       prices=prices)

            result, series = answer()  # warm the store's caches once, as a second look would
            times: dict[str, list[float]] = {"answer": [], "page": [], "cli": [], "baseline": []}
            for _ in range(args.reps):
                s = time.perf_counter()
                result, series = answer()
                times["answer"].append(time.perf_counter() - s)
                s = time.perf_counter()
                result, series = answer()
                page = render(result, series)
                times["page"].append(time.perf_counter() - s)
                s = time.perf_counter()
                reader.command(f"SELECT count() FROM {db}.learning_steps "  # noqa: S608
                               f"WHERE run_id = '{RUN}'")
                times["baseline"].append(time.perf_counter() - s)
            env = {**os.environ, "CLICKHOUSE_URL": store.url, "CLICKHOUSE_DATABASE": db}
            for _ in range(max(2, args.reps // 2)):
                s = time.perf_counter()
                out = subprocess.run([sys.executable, "-m", "runwatch", "investigate", RUN,
                                      "--json"], env=env, capture_output=True, text=True,
                                     check=False)
                times["cli"].append(time.perf_counter() - s)
            cli_ok = out.returncode == 0 and json.loads(out.stdout)["run_id"] == RUN
        finally:
            store.stop()
    base = statistics.median(times["baseline"])
    print(f"\ninvestigate {RUN}: {mine} telemetry rows of its own, {total} in the tables "
          f"({time.strftime('%Y-%m-%d')}; medians of {args.reps} repetitions)")
    print(f"{'what':<10}{'median s':>10}{'x baseline':>12}")
    for name in ("answer", "page", "cli", "baseline"):
        med = statistics.median(times[name])
        print(f"{name:<10}{med:>10.3f}{med / base:>12.1f}")
    checks.check(summary_steps == args.rows // 3, "the sink's statement summarised the run: "
                 f"{summary_steps} step records")
    checks.check(result["found"], "the run is found")
    checks.check(result["what_changed"]["reference_run_id"] == REF, "its reference run: "
                 f"{result['what_changed']['reference_run_id']}")
    checks.check(bool(result["what_changed"]["input_quality"]), "the label shift is found")
    checks.check(result["resume_point"]["step"] is not None, "a resume point: "
                 f"step {result['resume_point']['step']}")
    checks.check(result["release"]["blocked"], "the failed gate blocks the release")
    checks.check(all(series.get(k) for k in ("loss", "loader_share", "gpu_util",
                                             "checkpoint_share")), "every plot has data")
    cost = result["cost"]
    checks.check(cost["run"] is not None and cost["run"]["cost"] is not None
                 and cost["run"]["gpu_hours"] > 0, f"the run's cost: {cost['run']}")
    checks.check([r["run_id"] for r in cost["peers"]["runs"]] == [REF], "its reference is its "
                 f"peer: {[r['run_id'] for r in cost['peers']['runs']]}")
    checks.check(page.count('<svg class="plot" data-indicator') == 5
                 and page.count('data-empty="false"') == 6, "five plots and the cost plot drawn")
    checks.check(cli_ok, "the CLI answers")
    checks.done()
    return 0


if __name__ == "__main__":
    sys.exit(main())
