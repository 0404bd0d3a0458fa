"""Cost scenarios through the producers and the sink's row mapping into the store, then
``runwatch cost --json`` / ``runwatch capacity --json``: each injected waste cause and
bottleneck is reported within 5 % of its GPU-hours; the bottleneck is named first."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from costkit import (
    SUMMARY,
    cli_json,
    scenario_start_ms,
    side_by_side,
    store_capture,
    store_scenario,
)
from sinkkit import Store

from runwatch.adapters.publisher import CaptureTransport, Publisher
from runwatch.sim.costsim import MIN, SCENARIOS, WASTE, CostScenario, SimRun

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def store(module_store: Store) -> Store:
    return module_store


BOTTLENECKS = ["supply_crunch", "scheduler_fragmentation", "storage_contention",
               "network_fabric", "misconfigured_run"]


def test_each_waste_cause_within_5_percent_and_input_bound_is_not_waste(store: Store) -> None:
    db, client = store_scenario(store.url, WASTE)
    report = cli_json(store.url, db, "cost", "--since", "1d")
    got = report["totals"]["wasted_gpu_hours"]
    side_by_side(WASTE.name, WASTE.injected, got)
    for cause, hours in WASTE.injected.items():
        assert got[cause] == pytest.approx(hours, rel=0.05), cause
    groups = {g["key"]: g for g in report["groups"]}
    assert groups["recsys-ranker"]["wasted_gpu_hours_total"] == 0.0  # input-bound at 45 %
    assert groups["recsys-ranker"]["cost"] == pytest.approx(3 * 16 * 4.0)
    assert {b["family"]: b["util_p50"] for b in report["baselines"]} == pytest.approx(
        {"llm-pretrain": 80.0, "recsys-ranker": 45.0}, abs=1.0)
    assert report["bad_input"]["unpriced_runs"] == 0
    client.command(f"DROP DATABASE {db}")


@pytest.mark.parametrize("name", BOTTLENECKS)
def test_capacity_names_the_injected_bottleneck_first(store: Store, name: str) -> None:
    sc = SCENARIOS[name]
    db, client = store_scenario(store.url, sc)
    report = cli_json(store.url, db, "capacity", "--since", "1d")
    got = {c["cause"]: c["lost_gpu_hours"] for c in report["causes"]}
    side_by_side(name, sc.injected, got)
    assert report["bottleneck"] == sc.bottleneck
    assert report["causes"][0]["cause"] == sc.bottleneck
    assert got[sc.bottleneck] == pytest.approx(sc.injected[sc.bottleneck], rel=0.05)
    client.command(f"DROP DATABASE {db}")


def test_bad_input_is_counted_not_zero(store: Store, tmp_path: Path) -> None:
    prices = tmp_path / "costs.yaml"
    prices.write_text("prices:\n  - gpu_model: H100\n    per_gpu_hour: 4.0\n"
                      "    effective_from: 2026-01-01\n  - gpu_model: A100\n"
                      "    per_gpu_hour: 1.0\n    effective_from: 2099-01-01\n")
    sc = SCENARIOS["bad_input"]
    db, client = store_scenario(store.url, sc)
    bad = cli_json(store.url, db, "cost", "--since", "1d", "--prices",
                   str(prices))["bad_input"]
    print("\nbad input:", bad)
    assert bad["unpriced_reasons"] == {"no price in effect": 1, "unknown GPU model": 1}
    assert bad["unknown_gpu_models"] == {"Z9": 1}
    assert bad["unpriced_gpu_hours"] == pytest.approx(32.0)
    assert bad["telemetry_gap_runs"] == 1
    assert bad["unobserved_gpu_hours"] == pytest.approx(8 * 0.5, rel=0.05)
    assert bad["clock_skew_runs"] == 1
    client.command(f"DROP DATABASE {db}")


def test_a_long_runs_summary_stays_small(store: Store) -> None:
    """The summary statement once joined the run's step times, as an array, to each of its
    GPU samples (a 37-hour run with 1M rows needed 12 GiB and was never summarised); now a
    30-hour run is summarised under 256 MiB, its stall still found."""
    hours = 60 * MIN
    long_run = CostScenario(
        "long_run", "one 30-hour run with a 1-hour stall", ("n0",),
        (SimRun("llm-long", "llm-pretrain", "n0", 0, 30 * hours, stall=(10 * hours, 11 * hours)),),
        {"stalled": 8 * 1.0}, duration_s=30 * hours)
    db, client = store_scenario(store.url, long_run)
    client.command(SUMMARY.read_text().replace("${db}", db),
                   parameters={"runs": ["llm-long"], "idle_pct": 5.0},
                   settings={"max_memory_usage": 256 << 20})
    rows = client.query(f"SELECT step_records, observed_gpu_hours, stalled_gpu_hours "  # noqa: S608
                        f"FROM {db}.run_summaries FINAL").result_rows
    assert len(rows) == 1
    steps, observed, stalled = rows[0]
    assert steps > 3000 and observed == pytest.approx(8 * 30, rel=0.01)
    assert stalled == pytest.approx(8.0, rel=0.05)
    client.command(f"DROP DATABASE {db}")


# Odd schedules, as a stranger publishes them: the scheduler hook (``runwatch emit``'s
# job states), the SDK (``runwatch.init`` / ``run.step`` / ``run.finish`` with explicit
# times) and node agents over the NVML double, 30-second ticks. Each attempt is
# (start_s, end_s, node, GPUs, how it ends, whether its GPUs run a process).
ODD = {
    # preempted after 30 min on n0 (8 GPUs); resumed 10 min later on n1 with 4 GPUs for 60 min
    "resumed": [(0, 30 * MIN, "n0", 8, "preempted", True),
                (40 * MIN, 100 * MIN, "n1", 4, "succeeded", True)],
    # running, queued and running again in the same millisecond (a scheduler hook replaying
    # a log with seconds-resolution times)
    "same-ms": [(0, 60 * MIN, "n2", 8, "succeeded", True)],
    # the hook sends the allocation with the scheduled state, the running one names none
    "scheduled-alloc": [(0, 60 * MIN, "n7", 2, "succeeded", True)],
    # allocated, nothing ever ran on their GPUs
    "all-idle": [(0, 60 * MIN, "n3", 8, "failed", False)],
    "all-idle-2": [(0, 45 * MIN, "n6", 2, "cancelled", False)],
    # resumed on another node; the first attempt's node n4 has its clock 10 min ahead
    "resumed-skewed": [(0, 30 * MIN, "n4", 8, "preempted", True),
                       (40 * MIN, 100 * MIN, "n5", 8, "succeeded", True)],
    # preempted after 30 min, resumed 60 min later on the same node and GPUs for 10 min
    "resumed-same-gpus": [(0, 30 * MIN, "n8", 8, "preempted", True),
                          (90 * MIN, 100 * MIN, "n8", 8, "succeeded", True)],
    # no job event names an allocation (NO_ALLOC); the agent saw its processes on 8 GPUs
    "no-alloc": [(0, 60 * MIN, "n9", 8, "succeeded", True)],
    # preempted at 30 min, resumed at 40 min; its first step 4 min after the resume (STARTUP)
    "resume-startup": [(0, 30 * MIN, "n10", 8, "preempted", True),
                       (40 * MIN, 100 * MIN, "n10", 8, "succeeded", True)],
    # queued at 0, ran on 8 GPUs from 5 min (FIRST_QUEUED); preempted at 30, queued, ran on
    # 2 GPUs from 40 min: waits of 8 and of 2 GPUs
    "waits-two-sizes": [(5 * MIN, 30 * MIN, "n11", 8, "preempted", True),
                        (40 * MIN, 100 * MIN, "n12", 2, "succeeded", True)],
    # two jobs on n13's GPUs, one after the other; the second's processes exit 3 min before
    # its job ends (PROCS_END): no node clock is off
    "before": [(0, 50 * MIN, "n13", 8, "succeeded", True)],
    "after": [(50 * MIN, 100 * MIN, "n13", 8, "succeeded", True)],
    # preempted at 30 min, resumed at 40 min from the step it logged at 20 min (RESUME_FROM):
    # 10 min of 8 GPUs computed again
    "resume-redo": [(0, 30 * MIN, "n14", 8, "preempted", True),
                    (40 * MIN, 100 * MIN, "n14", 8, "succeeded", True)],
}
SKEW_S = {"n4": 600}
NO_ALLOC = {"no-alloc"}
STARTUP = {"resume-startup": 4 * MIN}
FIRST_QUEUED = {"waits-two-sizes": 0}
PROCS_END = {"after": 97 * MIN}
RESUME_FROM = {"resume-redo": 20 * MIN}


def _play_odd(start_ms: int) -> CaptureTransport:
    from runwatch.client import init
    from runwatch.client.emit import emit_records
    from runwatch.sim.drivers import GIB, SharedTransport, make_node

    capture = CaptureTransport()
    transport = SharedTransport(capture)
    now = [start_ms]
    hook = Publisher(transport, kind="hook", clock=lambda: now[0])
    agent = Publisher(transport, kind="agent", clock=lambda: now[0])
    nodes = {f"n{i}": make_node(f"n{i}", agent) for i in range(15)}
    sdk: dict[str, Any] = {}

    def job(rid: str, state: str, attempt: int, node: str = "", gpus: int = 0) -> None:
        obj: dict[str, Any] = {"type": "job-state", "run_id": rid, "state": state,
                               "attempt": attempt, "team": "t", "experiment_family": "odd",
                               "queue": "batch", "priority_class": "standard",
                               "emitted_at_ms": now[0]}
        if node and rid not in NO_ALLOC:
            obj["allocation"] = {"nodes": [node], "gpu_indices": list(range(gpus)),
                                 "gpu_model": "H100"}
        assert not emit_records(hook, [obj]).errors

    def procs_gone(sim: Any, gpus: int) -> None:
        for g in range(gpus):
            sim.attributor.pids.pop(1000 + g, None)
            sim.nvml.processes[g] = []
            sim.nvml.util.pop(g, None)

    steps: dict[str, int] = {}
    logged: dict[tuple[str, int], int] = {}  # (run, t) -> the step it logged then
    for t in range(0, 100 * MIN + 30, 30):
        now[0] = start_ms + t * 1000
        for rid, attempts in ODD.items():
            if t == FIRST_QUEUED.get(rid):
                job(rid, "queued", 1)
            if t == PROCS_END.get(rid):
                procs_gone(nodes[attempts[-1][2]], attempts[-1][3])
            for i, (a0, a1, node, gpus, end, busy) in enumerate(attempts, start=1):
                sim = nodes[node]
                if t == a1:
                    job(rid, end, i)
                    procs_gone(sim, gpus)
                    if i == len(attempts):
                        sdk.pop(rid).finish(end, timeout=10.0, now_ms=now[0])
                    else:
                        job(rid, "queued", i + 1)
                if t == a0:
                    if i == 1 and rid != "same-ms" and rid not in FIRST_QUEUED:
                        job(rid, "queued", 1)
                    if rid == "scheduled-alloc":
                        job(rid, "scheduled", i, node, gpus)
                        job(rid, "running", i)
                    else:
                        job(rid, "running", i, node, gpus)
                    if rid == "same-ms":  # stamped with its running event, sent after it,
                        job(rid, "queued", 1)  # and the running state reported once more
                        job(rid, "running", i, node, gpus)
                    for g in range(gpus if busy else 0):
                        sim.attributor.pids[1000 + g] = rid
                        sim.nvml.attach_process(g, 1000 + g, 40 * GIB)
                # same-ms: the job's own SDK starts a tick later (its running event apart)
                if rid not in sdk and a0 <= t < a1 and (rid != "same-ms" or t > a0):
                    hw = ({"hardware": {"nodes": [node], "gpu_count": gpus, "gpu_model": "H100"}}
                          if rid in NO_ALLOC else None)  # its manifest names the model (NVML)
                    sdk[rid] = init(run_id=rid, experiment_family="odd", team="t",
                                    transport=transport, clock=lambda: now[0],
                                    capture_lineage=False, install_hooks=False, lineage=hw)
                starting = i > 1 and t < a0 + STARTUP.get(rid, 0)  # loading, no step yet
                if i > 1 and t == a0 and rid in RESUME_FROM:  # resumes from an earlier step
                    steps[rid] = logged[rid, RESUME_FROM[rid]] - 1
                if a0 <= t < a1 and rid in sdk and not starting:
                    steps[rid] = steps.get(rid, 0) + 1
                    logged[rid, t] = steps[rid]
                    sdk[rid].step(steps[rid], loss=1.0, samples=1, now_ms=now[0], step_ms=900,
                                  loader_wait_ms=100)
                    for g in range(gpus if busy else 0):
                        sim.nvml.util[g] = 80.0
        for name, sim in nodes.items():
            sim.agent.tick(now_ms=now[0] + SKEW_S.get(name, 0) * 1000)
    transport.flush(30.0)
    return capture


def test_resumed_same_ms_and_idle_runs_are_billed_by_each_attempts_allocation(
        store: Store) -> None:
    """Figures by hand (docs/cost.md): GPU-hours = each running interval x its allocation.

    resumed: 0.5 h x 8 GPUs on n0, then 1 h x 4 GPUs on n1 = 8 GPU-h, all busy (the summary
    once took the last attempt's n1 GPUs for the whole run: 6 GPU-h, 2 of them idle), and a
    resumed run whose first node's clock is 10 min ahead has that node skewed;
    same-ms: 1 h x 8 = 8 GPU-h (a queued and a running event in the same millisecond once
    sorted either way and could count the interval twice); all-idle: 8 GPU-h idle, and no
    clock skew (a node without a process sample had its busy period at the epoch; the
    product of the two huge offsets overflowed, so such runs read as skewed or not at random).
    """
    sc = CostScenario("odd", "odd schedules", (), (), {}, duration_s=100 * MIN)
    db, client = store_capture(store.url, _play_odd(scenario_start_ms(sc)), list(ODD))
    report = cli_json(store.url, db, "cost", "--by", "run", "--since", "1d")
    runs = {g["key"]: g for g in report["groups"]}
    rows = {r[0]: r[1:] for r in client.query(
        f"SELECT run_id, allocated_gpu_hours, observed_gpu_hours, noproc_gpu_hours, "  # noqa: S608
        f"skewed_nodes FROM {db}.run_summaries FINAL").result_rows}
    print("\nodd schedules (allocated, observed, idle, skewed nodes):", rows)
    assert rows["resumed"] == pytest.approx((8.0, 8.0, 0.0, 0), abs=0.02)
    assert runs["resumed"]["gpu_hours"] == pytest.approx(8.0)
    assert runs["resumed"]["cost"] == pytest.approx(8.0 * 4.0)
    assert runs["resumed"]["wasted_gpu_hours_total"] == pytest.approx(0.0, abs=0.02)
    # each attempt's node against its own interval (n4 once read against the whole run: its
    # busy period started 10 min late and ended 70 min early, so no shift was seen)
    assert rows["resumed-skewed"][3] == 1
    assert rows["same-ms"][:3] == pytest.approx((8.0, 8.0, 0.0), abs=0.02)
    # 2 GPUs x 1 h, busy (once 0 GPU-h priced at 0.00: only running events' allocations counted)
    assert rows["scheduled-alloc"] == pytest.approx((2.0, 2.0, 0.0, 0), abs=0.02)
    assert runs["scheduled-alloc"]["cost"] == pytest.approx(2.0 * 4.0, abs=0.1)
    assert rows["all-idle"] == pytest.approx((8.0, 8.0, 8.0, 0), abs=0.02)
    assert runs["all-idle"]["wasted_gpu_hours"]["idle"] == pytest.approx(8.0, abs=0.02)
    assert rows["all-idle-2"] == pytest.approx((1.5, 1.5, 1.5, 0), abs=0.02)
    assert report["bad_input"]["clock_skew_runs"] == 1  # resumed-skewed only
    # resumed on the same GPUs: 8 GPUs x (30 + 10) min = 5.33 GPU-h, all busy. gpu_hours once
    # took each GPU's tick as (last - first sample) / (samples - 1), spreading the hour
    # between the attempts over the samples: 13.4 GPU-h.
    same = client.query(
        f"SELECT gpu_hours, idle_gpu_hours, wasted_gpu_hours, observed_gpu_hours "  # noqa: S608
        f"FROM {db}.run_summaries FINAL WHERE run_id = 'resumed-same-gpus'").result_rows
    assert same == [pytest.approx((8 * 40 / 60, 0.0, 0.0, 8 * 40 / 60), abs=0.02)]
    # 2 of n7's 8 GPUs allocated and busy: 2 GPU-h, none idle. The node's 6 free GPUs carry
    # its only run's id, and once counted: 8 GPU-h, 6 of them idle and wasted.
    two = client.query(
        f"SELECT gpu_hours, idle_gpu_hours, wasted_gpu_hours FROM {db}.run_summaries "  # noqa: S608
        f"FINAL WHERE run_id = 'scheduled-alloc'").result_rows
    assert two == [pytest.approx((2.0, 0.0, 0.0), abs=0.02)]
    # Every wait that ended running, the requeue after a preemption too (only the first
    # queued -> running wait was kept: 0 s here, so these runs had no wait at all).
    waits = client.query(
        f"SELECT run_id, queue_delay_s, gpu_count FROM {db}.queue_waits "  # noqa: S608
        f"ORDER BY run_id, queued_at").result_rows
    # Each wait with the GPUs of the attempt it ended in (every wait once took the run's
    # latest allocation: waits-two-sizes' first wait counted 2 GPUs, not 8).
    assert [(r, round(d), g) for r, d, g in waits] == [
        ("resume-redo", 10 * MIN, 8), ("resume-startup", 10 * MIN, 8), ("resumed", 10 * MIN, 4),
        ("resumed-same-gpus", 60 * MIN, 8), ("resumed-skewed", 10 * MIN, 8),
        ("waits-two-sizes", 5 * MIN, 8), ("waits-two-sizes", 10 * MIN, 2)]
    more = {r[0]: r[1:] for r in client.query(
        f"SELECT run_id, allocated_gpu_hours, observed_gpu_hours, stalled_gpu_hours, "  # noqa: S608
        f"skewed_nodes, gpu_count, gpu_model FROM {db}.run_summaries FINAL").result_rows}
    print("\nmore (allocated, observed, stalled, skewed, GPUs, model):", more)
    # no allocation in any job event: billed what the agent saw its processes use (once 0
    # GPU-h, the run not even counted as unpriced), at the model its manifest names
    assert more["no-alloc"] == (pytest.approx(0.0), pytest.approx(8.0, abs=0.02),
                                pytest.approx(0.0), 0, 8, "H100")
    assert runs["no-alloc"]["gpu_hours"] == pytest.approx(8.0, abs=0.02)
    assert runs["no-alloc"]["cost"] == pytest.approx(8.0 * 4.0, abs=0.1)
    # a resumed attempt's 4-minute start-up is not a stall (the gap once ran from the first
    # attempt's last step: 8 GPUs x 4 min = 0.53 GPU-h stalled)
    assert more["resume-startup"][2] == pytest.approx(0.0, abs=0.01)
    # the job before on the same GPUs is not the run's busy period (once: skewed by 15 min)
    assert (more["after"][3], more["before"][3]) == (0, 0)
    # work done again after a resume: from the step the next attempt resumed from (logged at
    # 20 min) to the preemption at 30 min, 8 GPUs x 10 min; it once vanished as the run
    # went on to succeed. A resume past the last step (resumed, resume-startup) redoes nothing.
    redo = client.query(
        f"SELECT run_id, lost_gpu_hours FROM {db}.run_summaries FINAL "  # noqa: S608
        f"WHERE run_id IN ('resume-redo', 'resumed', 'resume-startup', 'waits-two-sizes') "
        f"ORDER BY run_id").result_rows
    assert redo == [("resume-redo", pytest.approx(8 * 10 / 60, abs=0.02)),
                    ("resume-startup", 0.0), ("resumed", 0.0), ("waits-two-sizes", 0.0)]
    assert runs["resume-redo"]["wasted_gpu_hours"]["work_lost"] == pytest.approx(
        8 * 10 / 60, abs=0.02)
    client.command(f"DROP DATABASE {db}")


def test_final_metrics_are_each_metrics_latest_value(store: Store) -> None:
    """A metric logged every 10 steps, one logged by an eval step, a last step with the loss
    only: the summary's final_metrics was the last step's map, here empty ({}), so a run's
    final accuracy was lost. A resumed attempt that logs step 100 again wins over the first."""
    from runwatch.client import init

    start = (int(time.time()) - 3600) * 1000
    capture = CaptureTransport()
    run = init(run_id="final-metrics", experiment_family="f", transport=capture,
               clock=lambda: start, capture_lineage=False, install_hooks=False)
    for i in range(1, 101):
        run.step(i, loss=1.0 / i, metrics={"acc": i / 100} if i % 10 == 0 else None,
                 now_ms=start + i * 1000, step_ms=10.0)
    run.step(100, loss=0.02, metrics={"acc": 0.95}, now_ms=start + 100_500, step_ms=10.0)
    run.step(101, metrics={"eval_acc": 0.7}, now_ms=start + 101_000, step_ms=10.0)
    run.step(103, loss=0.5, now_ms=start + 103_000, step_ms=10.0)
    run.finish("succeeded", timeout=10.0, now_ms=start + 104_000)
    db, client = store_capture(store.url, capture, ["final-metrics"])
    rows = client.query(f"SELECT steps, final_loss, final_metrics "  # noqa: S608
                        f"FROM {db}.run_summaries FINAL").result_rows
    assert rows == [(103, 0.5, {"acc": 0.95, "eval_acc": 0.7})]
    client.command(f"DROP DATABASE {db}")


def test_fairness_counts_each_run_as_cost_bills_it(store: Store) -> None:
    """The SLO kind ``fairness`` counted a run from its first ``running`` to its end x its
    largest allocation: a preempted run's wait in the queue was GPU use (docs/slo.md:
    allocated GPUs x time running), 8.0 GPU-h where ``runwatch cost`` billed 2.667. Its
    query's rows now give, run by run, the GPU-hours ``runwatch cost --by run`` bills."""
    from runwatch.core.cost.running import running_intervals
    from runwatch.core.slo.spec import parse_slos
    from runwatch.slo.queries import query_for, to_rows
    from runwatch.slo.service import ClickHouseStore

    sc = CostScenario("odd", "odd schedules", (), (), {}, duration_s=100 * MIN)
    db, client = store_capture(store.url, _play_odd(scenario_start_ms(sc)), list(ODD))
    billed = {g["key"]: g["gpu_hours"] for g in cli_json(
        store.url, db, "cost", "--by", "run", "--since", "1d")["groups"]}
    obj = parse_slos("apiVersion: openslo/v1\nkind: SLO\nmetadata: {name: share}\nspec:\n"
                     "  indicator: {spec: {kind: fairness, team: t, quota: 0.5, bucket: 1h}}\n"
                     "  timeWindow: [{duration: 7d, isRolling: true}]\n"
                     "  objectives: [{target: 0.9}]\n")[0]
    now = int(time.time() * 1000)
    sql, params = query_for([obj], db, now, {obj.name: now - 86_400_000})
    used = {r.run_id: sum((t1 - t0) * n for t0, t1, n in running_intervals(r.jobs, now, r.gpus))
            / 3_600_000 for r in to_rows("fairness", ClickHouseStore(client).query(sql, params))}
    print("\nfairness GPU-h by run:", used, "\ncost GPU-h by run:", billed)
    assert set(used) == set(ODD)
    assert used == pytest.approx({r: billed[r] for r in ODD}, abs=0.02)
    assert used["resumed"] == pytest.approx(8.0, abs=0.02)  # 0.5 h x 8, then 1 h x 4
    client.command(f"DROP DATABASE {db}")


def test_a_run_the_sdk_alone_reports_is_billed_its_manifests_gpus(store: Store) -> None:
    """A run with no scheduler hook and no node agent (the SDK alone, its manifest naming
    2 H100s) was billed 0 GPU-h and 0.00 USD, and no bad-input counter said so. It is billed
    its running time x its manifest's GPUs, all of it counted as unobserved."""
    from runwatch.client import init

    start = (int(time.time()) - 7200) * 1000
    capture = CaptureTransport()
    run = init(run_id="sdk-alone", experiment_family="f", team="t", transport=capture,
               clock=lambda: start, capture_lineage=False, install_hooks=False,
               lineage={"hardware": {"nodes": ["n1"], "gpu_count": 2, "gpu_model": "H100"}})
    for i in range(1, 61):
        run.step(i, loss=1.0 / i, now_ms=start + i * 60_000, step_ms=55_000.0)
    run.finish("succeeded", timeout=10.0, now_ms=start + 3_600_000)
    db, client = store_capture(store.url, capture, ["sdk-alone"])
    got = cli_json(store.url, db, "cost", "--by", "run", "--since", "1d")
    (group,) = got["groups"]
    assert group["gpu_hours"] == pytest.approx(2.0, abs=0.01), group
    assert group["cost"] == pytest.approx(8.0, abs=0.05), group  # the example's 4 USD/GPU-h
    assert got["bad_input"]["telemetry_gap_runs"] == 1, got["bad_input"]
    assert got["bad_input"]["unobserved_gpu_hours"] == pytest.approx(2.0, abs=0.01)
    client.command(f"DROP DATABASE {db}")


def test_one_ms_runs_end_and_a_late_sdk_preemption_is_one_preemption(
        store: Store, tmp_path: Path) -> None:
    """Found by an independent case (2026-12-07).

    12 runs whose SDK started and finished in one millisecond: the summary's latest state
    was ``argMax(state, ts)``, either of the two, and 8 of 12 read ``running`` in
    ``run_costs`` (and in ``runwatch investigate``). A preempted run that the scheduler's
    hook requeues and whose SDK reports the preemption 4 s after that ``queued``: its 10
    minutes in the queue were no wait (the ``queued`` one's next event was no ``running``
    one), and the resumability SLO counted two preemptions, the hook's and the SDK's.
    """
    from runwatch.client import init
    from runwatch.client.emit import emit_records
    from runwatch.sim.drivers import SharedTransport

    capture = CaptureTransport()
    transport = SharedTransport(capture)
    start = int(time.time() * 1000) - 3 * 3_600_000
    start -= start % 60_000
    now = [start]
    hook = Publisher(transport, kind="hook", clock=lambda: now[0])

    def job(rid: str, state: str, attempt: int) -> None:
        obj: dict[str, Any] = {"type": "job-state", "run_id": rid, "state": state,
                               "attempt": attempt, "team": "t", "experiment_family": "late",
                               "emitted_at_ms": now[0],
                               "allocation": {"nodes": ["n0"], "gpu_indices": list(range(8)),
                                              "gpu_model": "H100"}}
        assert not emit_records(hook, [obj]).errors

    def sdk(rid: str) -> Any:
        return init(run_id=rid, experiment_family="late", team="t", transport=transport,
                    clock=lambda: now[0], capture_lineage=False, install_hooks=False)

    one_ms = [f"ms{i}" for i in range(12)]
    for rid in one_ms:
        sdk(rid).finish("succeeded", timeout=10.0, now_ms=now[0])
    job("pre", "queued", 1)
    job("pre", "running", 1)
    run = sdk("pre")
    run.checkpoint("s3://ck/pre/10", step=10, now_ms=now[0] + 20 * MIN * 1000)
    now[0] += 30 * MIN * 1000
    job("pre", "preempted", 1)
    now[0] += 1000
    job("pre", "queued", 2)
    now[0] += 4000
    run.finish("preempted", timeout=10.0, now_ms=now[0])  # the SDK's SIGTERM, told late
    now[0] = start + 40 * MIN * 1000
    job("pre", "running", 2)
    resumed = sdk("pre")
    now[0] += 30 * MIN * 1000
    resumed.finish("succeeded", timeout=10.0, now_ms=now[0])
    job("pre", "succeeded", 2)
    transport.flush(30.0)

    db, client = store_capture(store.url, capture, [*one_ms, "pre"])
    outcomes = dict(client.query(
        f"SELECT run_id, outcome FROM {db}.run_summaries FINAL").result_rows)  # noqa: S608
    print("\noutcomes:", outcomes)
    assert {outcomes[r] for r in one_ms} == {"succeeded"}
    waits = client.query(
        f"SELECT run_id, queue_delay_s FROM {db}.queue_waits "  # noqa: S608
        f"ORDER BY run_id, queued_at").result_rows
    # queued and running in one millisecond is no wait; the requeue waited 10 min less 1 s
    assert [(r, round(d)) for r, d in waits if r == "pre"] == [("pre", 10 * MIN - 1)]
    slo = tmp_path / "slos.yaml"
    slo.write_text("apiVersion: openslo/v1\nkind: SLO\nmetadata: {name: resume}\nspec:\n"
                   "  indicator:\n    metadata: {name: resume}\n"
                   "    spec: {kind: resumability, maxLoss: 30m}\n"
                   "  timeWindow: [{duration: 1d, isRolling: true}]\n"
                   "  budgetingMethod: Occurrences\n  objectives: [{target: 0.9}]\n")
    status = cli_json(store.url, db, "slo", "status", "--file", str(slo))
    print("slo:", status)
    (obj,) = status
    assert (obj["good"], obj["valid"]) == (1, 1)  # preempted 10 min after its checkpoint
    client.command(f"DROP DATABASE {db}")
