"""Cost and capacity as an independent user meets them (found 2026-12-07): Slurm-style hooks
that name no team, family or GPU model, a family whose healthy runs evaluate at low
utilization, runs that started before ``--since``; with the healthy controls beside them.

Everything is published by the real producers (the scheduler hook's job states through
``runwatch.client.emit``, ``runwatch.init`` and the run's methods with explicit times, node
agents over the NVML double), mapped to rows as the sink maps them, summarised by the
sink's statement, and read back with ``runwatch cost --json`` / ``runwatch capacity --json``.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

import pytest
from costkit import cli_json, side_by_side, store_capture, store_scenario
from sinkkit import ROOT, Store

from runwatch.adapters.publisher import CaptureTransport, Publisher
from runwatch.sim.costsim import MIN, CostScenario, SimRun

pytestmark = pytest.mark.integration

#: The packaged prices (infra/cost/costs.yaml) in December 2026, per GPU-hour.
H100, A100 = 4.00, 1.60


@pytest.fixture(scope="module")
def store(module_store: Store) -> Store:
    return module_store


@dataclass(frozen=True)
class Job:
    """One job of a hand-written schedule (times in virtual seconds from its start)."""

    run_id: str
    family: str
    team: str
    node: str
    end_s: int
    #: what NVML names the node's GPUs (the SDK's manifest): the hook names no model
    nvml_model: str = "NVIDIA H100 80GB HBM3"
    util: float = 80.0
    #: (every_s, for_s, util): an evaluation pass (a process, no training step) every every_s
    evals: tuple[int, int, float] | None = None
    queue: str = "gpu"
    #: (start_s, end_s, extra loader ms a step, extra ms a checkpoint): slow shared storage
    slow: tuple[int, int, float, float] | None = None
    #: whether the prolog's GPU list holds indices (GPU-<uuid> names: the nodes only)
    indices: bool = True
    #: whether each evaluation pass ends with ``run.validation`` (as the SDK's callbacks do)
    validates: bool = False
    #: (start_s, end_s): a hang, the process on its GPUs, no step and no validation
    hang: tuple[int, int] | None = None


def _play(jobs: list[Job], start_ms: int, *, hook_names: bool = False) -> CaptureTransport:
    """Play ``jobs`` as a Slurm cluster with the shipped hooks publishes them.

    The prolog sends ``scheduled`` with the nodes, GPU indices and partition (no team,
    family or GPU model unless ``hook_names``), the SDK its run and its steps and
    checkpoints, the epilog the end state; one agent a node ticks every 30 s.
    """
    from runwatch.client import init
    from runwatch.client.emit import emit_records
    from runwatch.sim.drivers import GIB, SharedTransport, make_node

    capture = CaptureTransport()
    transport = SharedTransport(capture)
    now = [start_ms]
    hook = Publisher(transport, kind="hook", clock=lambda: now[0])
    agent = Publisher(transport, kind="agent", clock=lambda: now[0])
    nodes = {j.node: make_node(j.node, agent) for j in jobs}
    rng = random.Random(7)

    def job(j: Job, state: str, alloc: bool = False) -> None:
        obj: dict[str, Any] = {"type": "job-state", "run_id": j.run_id, "state": state,
                               "attempt": 1, "queue": j.queue, "emitted_at_ms": now[0]}
        if hook_names:
            obj.update(team=j.team, experiment_family=j.family)
        if alloc:
            obj["allocation"] = {"nodes": [j.node],
                                 "gpu_indices": list(range(8)) if j.indices else []}
        assert not emit_records(hook, [obj]).errors

    sdk: dict[str, Any] = {}
    for j in jobs:
        job(j, "scheduled", alloc=True)
        job(j, "running")
        sdk[j.run_id] = init(
            run_id=j.run_id, experiment_family=j.family, team=j.team, transport=transport,
            clock=lambda: now[0], capture_lineage=False, install_hooks=False,
            lineage={"hardware": {"nodes": [j.node], "gpu_count": 8,
                                  "gpu_model": j.nvml_model}})
        for g in range(8):
            nodes[j.node].attributor.pids[1000 + g] = j.run_id
            nodes[j.node].nvml.attach_process(g, 1000 + g, 40 * GIB)
    steps = dict.fromkeys(sdk, 0)
    was_evaluating = dict.fromkeys(sdk, False)
    for t in range(0, max(j.end_s for j in jobs) + 30, 30):
        now[0] = start_ms + t * 1000
        for j in jobs:
            if t >= j.end_s:
                continue
            evaluating = j.evals is not None and t % j.evals[0] >= j.evals[0] - j.evals[1]
            slow = j.slow if j.slow is not None and j.slow[0] <= t < j.slow[1] else None
            hung = j.hang is not None and j.hang[0] <= t < j.hang[1]
            if was_evaluating[j.run_id] and not evaluating and j.validates:
                sdk[j.run_id].validation(steps[j.run_id], {"val_loss": 1.0}, now_ms=now[0])
            was_evaluating[j.run_id] = evaluating
            if not evaluating and not hung:
                steps[j.run_id] += 1
                loader = 150.0 + (slow[2] if slow else 0.0)
                sdk[j.run_id].step(steps[j.run_id], loss=1.0, samples=256, now_ms=now[0],
                                   step_ms=1800.0 + loader, loader_wait_ms=loader)
                if t and t % 600 == 0:
                    sdk[j.run_id].checkpoint(f"s3://ck/{j.run_id}/{steps[j.run_id]}",
                                             step=steps[j.run_id],
                                             duration_ms=20_000.0 + (slow[3] if slow else 0.0),
                                             now_ms=now[0])
            for g in range(8):
                base = j.evals[2] if evaluating and j.evals else j.util
                nodes[j.node].nvml.util[g] = max(0.0, base + rng.uniform(-2.0, 2.0))
        for n in nodes.values():
            n.agent.tick(now_ms=now[0])
    now[0] = start_ms + max(j.end_s for j in jobs) * 1000
    for j in jobs:
        if was_evaluating[j.run_id] and j.validates:  # the last pass ends with the run
            sdk[j.run_id].validation(steps[j.run_id], {"val_loss": 1.0}, now_ms=now[0])
        sdk[j.run_id].artifact(f"s3://models/{j.run_id}", "model", sha256="0" * 64,
                               now_ms=now[0])
        sdk[j.run_id].finish("succeeded", timeout=10.0, now_ms=now[0])
    now[0] += 2000
    for j in jobs:
        job(j, "succeeded")  # the epilog: after the SDK's end, naming no team or family
    transport.flush(30.0)
    return capture


def _start_ms(duration_s: int) -> int:
    start = int(time.time() * 1000) - duration_s * 1000 - 600_000
    return start - start % 60_000


def _text(url: str, db: str, *args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "runwatch", *args], capture_output=True,
                         text=True, cwd=ROOT, timeout=120,
                         env={**os.environ, "CLICKHOUSE_URL": url, "CLICKHOUSE_DATABASE": db,
                              "COLUMNS": "250"})
    assert out.returncode == 0, out.stderr
    return out.stdout


SLURM = [Job("slurm-llm-0", "llm-pretrain", "core", "n0", 60 * MIN),
         Job("slurm-llm-1", "llm-pretrain", "core", "n1", 60 * MIN),
         Job("slurm-rec-0", "recsys-ranker", "ads", "n2", 60 * MIN,
             nvml_model="NVIDIA A100-SXM4-80GB", util=45.0, queue="a100")]


def test_slurm_runs_keep_the_sdks_team_and_family_and_nvmls_model_is_priced(
        store: Store) -> None:
    """The shipped Slurm hooks send no team, family or GPU model. The summary took the team
    and family of any job event (``anyLast``): the epilog's, sent after the SDK's end, named
    neither, so every run was ``(none)`` in ``--by team`` and ``--by family`` (and no family
    had a baseline). The model then comes from the SDK's manifest as NVML names it,
    ``NVIDIA H100 80GB HBM3``, and the packaged prices' ``H100`` did not price it: every run
    unpriced. Controls: totals are the sum of the groups, whatever the key; the text table
    shows the JSON's figures."""
    jobs = SLURM
    db, client = store_capture(store.url, _play(jobs, _start_ms(60 * MIN)),
                               [j.run_id for j in jobs])
    by_team = cli_json(store.url, db, "cost", "--by", "team", "--since", "1d")
    teams = {g["key"]: g for g in by_team["groups"]}
    print("\nteams:", {k: (g["runs"], g["gpu_hours"], g["cost"]) for k, g in teams.items()},
          "\nbad input:", by_team["bad_input"])
    assert set(teams) == {"core", "ads"}
    assert teams["core"]["cost"] == pytest.approx(2 * 8 * H100, abs=0.1)
    assert teams["ads"]["cost"] == pytest.approx(8 * A100, abs=0.1)
    assert by_team["bad_input"]["unpriced_runs"] == 0
    assert by_team["bad_input"]["unknown_gpu_models"] == {}
    by_family = cli_json(store.url, db, "cost", "--by", "family", "--since", "1d")
    assert {g["key"] for g in by_family["groups"]} == {"llm-pretrain", "recsys-ranker"}
    # controls: every grouping adds up to the same totals
    for by in ("family", "team", "queue", "priority_class", "run"):
        rep = by_family if by == "family" else cli_json(store.url, db, "cost", "--by", by,
                                                         "--since", "1d")
        tot = rep["totals"]
        assert tot["runs"] == sum(g["runs"] for g in rep["groups"]) == len(jobs)
        assert tot["gpu_hours"] == pytest.approx(sum(g["gpu_hours"] for g in rep["groups"]))
        assert tot["cost"] == pytest.approx(sum(g["cost"] for g in rep["groups"]), abs=0.02)
        assert tot["wasted_gpu_hours_total"] == pytest.approx(
            sum(g["wasted_gpu_hours_total"] for g in rep["groups"]), abs=0.005)
    assert {g["key"] for g in cli_json(store.url, db, "cost", "--by", "queue", "--since",
                                       "1d")["groups"]} == {"gpu", "a100"}
    # the text table shows the JSON's figures, row by row
    text = _text(store.url, db, "cost", "--by", "team", "--since", "1d")
    for g in [*by_team["groups"], {"key": "total", **by_team["totals"]}]:
        row = next(line for line in text.splitlines()
                   if re.match(rf"^\W*{re.escape(g['key'])}\s", line))
        cells = [c.strip() for c in re.split(r"[│┃]", row) if c.strip()]
        assert cells[1:4] == [str(g["runs"]), str(g["completed_runs"]), f"{g['gpu_hours']:g}"]
        assert cells[4] == f"{g['cost']:,.2f}"
    client.command(f"DROP DATABASE {db}")


def _evals(run_id: str, node: str, util: float = 80.0) -> Job:
    # 4 minutes of evaluation at 3 % in every 20 (no training step, the process stays)
    return Job(run_id, "finetune", "core", node, 60 * MIN, util=util,
               evals=(20 * MIN, 4 * MIN, 3.0))


def test_a_familys_usual_evaluation_passes_are_not_below_baseline_waste(store: Store) -> None:
    """Four healthy runs of a family that evaluates 4 minutes in 20 at 3 % utilization: each
    was charged 8 x 12/60 x (1 - 3/80) = 1.54 GPU-hours below its family's baseline, and
    ``runwatch capacity`` named ``workload_configuration`` the bottleneck of a healthy
    cluster. A run of the family at 30 % while it trains is still found: 8 GPUs x 48 min x
    (1 - 30/80) = 4.0 GPU-hours below the range."""
    healthy = [_evals(f"ft-{i}", f"n{i}") for i in range(4)]
    slow = _evals("ft-slow", "n4", util=30.0)
    start = _start_ms(60 * MIN)
    db, client = store_capture(store.url, _play(healthy, start, hook_names=True),
                               [j.run_id for j in healthy])
    cap = cli_json(store.url, db, "capacity", "--since", "1d")
    runs = {g["key"]: g for g in cli_json(store.url, db, "cost", "--by", "run", "--since",
                                          "1d")["groups"]}
    print("\nhealthy below-baseline:",
          {k: g["wasted_gpu_hours"]["below_baseline"] for k, g in runs.items()},
          "\ncapacity:", {c["cause"]: c["lost_gpu_hours"] for c in cap["causes"]})
    assert {k: g["wasted_gpu_hours_total"] for k, g in runs.items()} == {
        j.run_id: 0.0 for j in healthy}
    assert cap["bottleneck"] is None
    client.command(f"DROP DATABASE {db}")

    db, client = store_capture(store.url, _play([*healthy, slow], start, hook_names=True),
                               [j.run_id for j in [*healthy, slow]])
    rep = cli_json(store.url, db, "cost", "--by", "run", "--since", "1d")
    got = {g["key"]: g["wasted_gpu_hours"]["below_baseline"] for g in rep["groups"]}
    side_by_side("evaluating family", {"below_baseline ft-slow": 8 * 48 / 60 * (1 - 30 / 80)},
                 {"below_baseline ft-slow": got["ft-slow"]})
    assert got["ft-slow"] == pytest.approx(8 * 48 / 60 * (1 - 30 / 80), rel=0.05)
    assert {k: v for k, v in got.items() if k != "ft-slow"} == {j.run_id: 0.0 for j in healthy}
    cap = cli_json(store.url, db, "capacity", "--since", "1d")
    assert cap["bottleneck"] == "workload_configuration"
    (cfg,) = [c for c in cap["causes"] if c["cause"] == "workload_configuration"]
    assert [r["run_id"] for r in cfg["evidence"]["runs"]] == ["ft-slow"]
    client.command(f"DROP DATABASE {db}")


def _shifted(name: str, **slow: Any) -> CostScenario:
    return CostScenario(name, "four 2-hour runs slowed from 80 to 110 minutes", tuple(
        f"n{i}" for i in range(4)), tuple(SimRun(f"llm-{i}", "llm-pretrain", f"n{i}", 0,
                                                 120 * MIN, **slow) for i in range(4)), {})


SHIFTED: dict[str, tuple[CostScenario, float]] = {
    # +3 s of loader wait a step and +60 s a checkpoint: 60 steps x 3 s + 3 x 60 s, 8 GPUs, x4
    "distributed_storage": (_shifted("storage_late", slow=(80 * MIN, 110 * MIN, 3000.0,
                                                          60_000.0)),
                            4 * 8 * (60 * 3.0 + 3 * 60.0) / 3600),
    # +10.8 s of compute a step on four nodes: 60 steps x 10.8 s, 8 GPUs, x4
    "network_fabric": (_shifted("network_late", compute_slow=(80 * MIN, 110 * MIN, 10_800.0)),
                       4 * 8 * 60 * 10.8 / 3600),
}


@pytest.mark.parametrize("cause", list(SHIFTED))
def test_capacity_counts_runs_that_started_before_the_window(store: Store, cause: str) -> None:
    """``runwatch capacity --since 100m`` over runs that started 130 minutes ago, slowed 50
    to 20 minutes ago: their allocations were read from job events in the window only, so
    each run was on 1 GPU and no node. Storage contention read 0.4 of 3.2 GPU-hours and the
    network fabric (which needs two nodes) nothing at all: no bottleneck. ``--since 1d``
    (the control) read both right."""
    sc, injected = SHIFTED[cause]
    db, client = store_scenario(store.url, sc)
    got = {}
    for since in ("1d", "100m"):
        rep = cli_json(store.url, db, "capacity", "--since", since)
        got[since] = ({c["cause"]: c["lost_gpu_hours"] for c in rep["causes"]},
                      rep["bottleneck"])
        side_by_side(f"{sc.name} --since {since}", {cause: injected}, got[since][0])
    for since in ("1d", "100m"):
        assert got[since][1] == cause, since
        assert got[since][0][cause] == pytest.approx(injected, rel=0.05), since
    client.command(f"DROP DATABASE {db}")


def test_cost_window_counts_runs_that_ended_in_it_whole(store: Store) -> None:
    """Control: ``--since`` selects runs by their end (docs/cost.md): a one-hour run that
    ended 10 minutes ago is billed its whole hour with ``--since 30m`` (it started before
    the window) and is absent with ``--since 5m``."""
    jobs = [Job("edge-0", "llm-pretrain", "core", "n0", 60 * MIN)]
    db, client = store_capture(store.url, _play(jobs, _start_ms(60 * MIN), hook_names=True),
                               ["edge-0"])
    wide = cli_json(store.url, db, "cost", "--by", "run", "--since", "30m")
    assert [(g["key"], g["gpu_hours"]) for g in wide["groups"]] == [
        ("edge-0", pytest.approx(8.0, abs=0.02))]
    narrow = cli_json(store.url, db, "cost", "--since", "5m")
    assert narrow["groups"] == [] and narrow["totals"]["runs"] == 0
    client.command(f"DROP DATABASE {db}")


def test_capacity_counts_the_gpus_of_runs_whose_hook_names_no_gpu_indices(store: Store) -> None:
    """The shipped prolog sends the nodes only when Slurm lists GPUs by name (GPU-<uuid>):
    ``runwatch capacity`` took such a run for 0 GPUs, counted as 1, and storage contention
    of four 8-GPU runs read 0.4 of 3.2 GPU-hours. The run's manifest names its 8 GPUs (as
    ``runwatch cost`` bills it)."""
    jobs = [Job(f"uuid-{i}", "llm-pretrain", "core", f"n{i}", 120 * MIN, indices=False,
                slow=(30 * MIN, 60 * MIN, 3000.0, 60_000.0)) for i in range(4)]
    db, client = store_capture(store.url, _play(jobs, _start_ms(120 * MIN), hook_names=True),
                               [j.run_id for j in jobs])
    rep = cli_json(store.url, db, "capacity", "--since", "1d")
    got = {c["cause"]: c["lost_gpu_hours"] for c in rep["causes"]}
    injected = 4 * 8 * (60 * 3.0 + 3 * 60.0) / 3600
    side_by_side("storage, GPUs named by UUID", {"distributed_storage": injected}, got)
    assert rep["bottleneck"] == "distributed_storage"
    assert got["distributed_storage"] == pytest.approx(injected, rel=0.05)
    billed = cli_json(store.url, db, "cost", "--by", "run", "--since", "1d")["groups"]
    assert {g["key"]: g["gpu_hours"] for g in billed} == {
        j.run_id: pytest.approx(16.0, abs=0.1) for j in jobs}
    client.command(f"DROP DATABASE {db}")


def test_validation_passes_are_not_stalls_a_hang_is(store: Store) -> None:
    """A run that validates 8 minutes in every 30 (no training step meanwhile, its GPUs busy,
    ``run.validation`` as the pass ends, as the SDK's Lightning and Hugging Face callbacks
    publish it) had each pass counted as stalled: 4 passes x 8 min x 8 GPUs = 4.27 of its
    16 GPU-hours wasted. A hang of 10 minutes (no step, no validation) is still stalled:
    8 GPUs x 10 min = 1.33 GPU-hours."""
    val = (30 * MIN, 8 * MIN, 70.0)
    jobs = [Job(f"val-{i}", "llm-val", "core", f"n{i}", 120 * MIN, evals=val, validates=True)
            for i in range(3)]
    hang = Job("val-hang", "llm-val", "core", "n3", 120 * MIN, evals=val, validates=True,
               hang=(40 * MIN, 50 * MIN))
    db, client = store_capture(store.url, _play([*jobs, hang], _start_ms(120 * MIN),
                                                hook_names=True),
                               [j.run_id for j in [*jobs, hang]])
    runs = {g["key"]: g["wasted_gpu_hours"] for g in cli_json(
        store.url, db, "cost", "--by", "run", "--since", "1d")["groups"]}
    print("\nwaste by run:", runs)
    side_by_side("validation passes and a hang", {"stalled val-hang": 8 * 10 / 60},
                 {"stalled val-hang": runs["val-hang"]["stalled"]})
    assert {r: runs[r]["stalled"] for r in ("val-0", "val-1", "val-2")} == {
        "val-0": 0.0, "val-1": 0.0, "val-2": 0.0}
    assert runs["val-hang"]["stalled"] == pytest.approx(8 * 10 / 60, rel=0.05)
    assert sum(sum(w.values()) for r, w in runs.items() if r != "val-hang") == 0.0
    client.command(f"DROP DATABASE {db}")
