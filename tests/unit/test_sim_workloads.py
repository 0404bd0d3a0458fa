"""The simulator's workloads, controls, public-API producers and post-run collection."""

from __future__ import annotations

import inspect
import statistics

import pytest

from runwatch.adapters.publisher import CaptureTransport
from runwatch.core.codec import load_codec
from runwatch.sim import drivers
from runwatch.sim import scenarios as sc
from runwatch.sim.model import (
    CKPT_EVERY,
    LOADING_UTIL,
    PLATEAU_ACC,
    RunModel,
    plan_cluster,
)
from runwatch.sim.runner import SimConfig, run_simulation
from runwatch.sim.scoreboard import AlertSeen, Injection, format_board, score

DAY_MS = 86_400_000


def _model(name: str | None, seed: int = 2, duration_ms: int = 1_200_000) -> RunModel:
    faults = [sc.get(name)] if name else []
    plan = next(p for p in plan_cluster(seed, 2, 1, faults, "w")
                if (p.fault.name if p.fault else None) == name)
    return RunModel(plan, seed, 0, duration_ms)


def _acts(name: str | None, kind: str, **kw: int) -> list:
    return [a for a in _model(name, **kw).advance(10**9) if a.kind == kind]


def test_every_run_loads_its_model_with_low_utilization_first() -> None:
    m = _model(None)
    first_step = _acts(None, "step")[0].at_ms
    assert first_step >= m.start_ms + sc.LOADING_S * 1000
    loading = [m.gpu_util(t) for t in range(m.start_ms, first_step - 1, 10_000)]
    training = [m.gpu_util(t) for t in range(first_step, first_step + 200_000, 10_000)]
    assert loading and max(loading) < LOADING_UTIL + 5
    assert min(training) > 85


@pytest.mark.parametrize(("name", "image"), [
    ("no_container", None), ("nan_loss_no_image", None), ("unauthorized_image", "docker.io/"),
    (None, sc.ALLOWED_IMAGE_PREFIX)])
def test_images_follow_the_workload(name: str | None, image: str | None) -> None:
    plan = _model(name).plan
    if image is None:
        assert plan.image is None
    else:
        assert plan.image is not None and plan.image.startswith(image)


def test_a_shared_dataset_has_one_pipeline_and_every_run_names_it() -> None:
    names = ("shared_dataset", "shared_label_shift", "shared_dataset_run_id")
    plans = plan_cluster(1, 4, 1, [sc.get(n) for n in names], "s")
    for name in names:
        group = [p for p in plans if p.fault is not None and p.fault.name == name]
        assert len(group) == 2
        assert group[0].datasets == group[1].datasets
        assert group[0].pipelines == group[0].datasets and group[1].pipelines == ()
    assert len({p.dataset_uri for p in plans}) == len(plans) - 3


def test_pipelines_report_before_a_late_run_is_scheduled() -> None:
    m = _model("two_datasets_late_start")
    data = [a for a in m.advance(10**9) if a.kind == "data"]
    assert len(m.plan.datasets) == 2
    assert {a.args["dataset"] for a in data} == set(m.plan.datasets)
    early = [a for a in data if a.at_ms < m.start_ms]
    assert len(early) >= 2 * 9  # ten minutes of both datasets' reports before the run starts


def test_eval_phases_pause_steps_and_lower_utilization_briefly() -> None:
    m = _model("eval_phases")
    acts = m.advance(10**9)
    steps = [a.at_ms for a in acts if a.kind == "step"]
    gaps = [b - a for a, b in zip(steps, steps[1:], strict=False)]
    long = [g for g in gaps if g > 10_000]
    assert len(m.evals) >= 2 and len(long) == len(m.evals)
    assert all(45_000 <= g < 60_000 for g in long)  # under the stall rule's 60 s floor
    start, end = m.evals[0]
    assert max(m.gpu_util(t) for t in range(start, end, 5_000)) < 40
    assert min(m.gpu_util(t) for t in range(end + 1_000, end + 60_000, 5_000)) > 85


def test_lr_restart_raises_loss_and_lr_then_both_fall_again() -> None:
    steps = _acts("lr_restart", "step")
    m = _model("lr_restart")
    at = m.train_ms + int(sc.get("lr_restart").workload.lr_restart_s * 1000)
    before = [a for a in steps if at - 60_000 <= a.at_ms < at]
    after = [a for a in steps if at <= a.at_ms < at + 20_000]
    later = [a for a in steps if at + 300_000 <= a.at_ms]
    assert before and after and later
    assert min(a.args["loss"] for a in after) > max(a.args["loss"] for a in before) + 0.3
    assert after[0].args["lr"] > 1.5 * before[-1].args["lr"]
    assert statistics.mean(a.args["loss"] for a in later) < statistics.mean(
        a.args["loss"] for a in after)


def test_input_bound_loader_share_is_high_and_stationary() -> None:
    steps = _acts("input_bound", "step")
    shares = [a.args["loader_wait_ms"] / a.args["step_ms"] for a in steps]
    half = len(shares) // 2
    assert 0.35 < statistics.mean(shares) < 0.45
    assert abs(statistics.mean(shares[:half]) - statistics.mean(shares[half:])) < 0.01


def test_noisy_validation_is_stationary_around_its_plateau() -> None:
    acc = [a.args["metrics"]["accuracy"] for a in _acts("noisy_validation", "validation",
                                                        duration_ms=3_600_000)]
    half = len(acc) // 2
    assert len(acc) > 40
    assert 0.008 < statistics.stdev(acc) < 0.025
    assert abs(statistics.mean(acc[:half]) - PLATEAU_ACC) < 0.01
    assert abs(statistics.mean(acc[half:]) - PLATEAU_ACC) < 0.01


def test_weekly_snapshot_lag_is_large_and_constant() -> None:
    data = _acts("weekly_snapshot", "data")
    snaps = {a.args["snapshot_ms"] for a in data}
    assert len(snaps) == 1
    cols = drivers.make_batch(data[-1].args, data[-1].at_ms)
    lag = data[-1].at_ms - max(cols["ts"])
    assert 4 * DAY_MS <= lag < 5 * DAY_MS
    live = _acts(None, "data")[-1]
    assert live.at_ms - max(drivers.make_batch(live.args, live.at_ms)["ts"]) < 200_000


def test_schema_failures_put_strings_in_a_float_column() -> None:
    data = _acts("schema_failures", "data")
    bad = [a for a in data if a.args["bad_share"] > 0]
    assert bad and all(a.at_ms >= _model("schema_failures").fault_ms for a in bad)
    cols = drivers.make_batch(bad[0].args, bad[0].at_ms)
    strings = sum(1 for v in cols["f_age"] if isinstance(v, str))
    assert strings == round(len(cols["f_age"]) * bad[0].args["bad_share"])


def test_checkpoints_grow_to_a_third_of_each_interval() -> None:
    m = _model("checkpoint_share", duration_ms=1_500_000)
    acts = m.advance(10**9)
    ckpts = [a for a in acts if a.kind == "checkpoint"]
    steps = [a for a in acts if a.kind == "step"]

    def share(c) -> float:
        train = sum(s.args["step_ms"] for s in steps if c.args["step"] - CKPT_EVERY < s.args["step"]
                    <= c.args["step"])
        return c.args["duration_ms"] / (train + c.args["duration_ms"])

    healthy = [share(c) for c in ckpts if c.at_ms < m.fault_ms]
    grown = [share(c) for c in ckpts if c.at_ms >= m.fault_ms]
    assert healthy and max(healthy) < 0.04
    assert grown == sorted(grown) and grown[-1] > 0.30


def test_drivers_build_no_records() -> None:
    src = inspect.getsource(drivers)
    for built in ("build_report", "Report(", "Event(", "Manifest(", "Step(", "Run(", ".meta("):
        assert built not in src, built


@pytest.fixture(scope="module")
def published():
    transport = CaptureTransport()
    cfg = SimConfig(nodes=2, runs=1, seed=4, speed=200.0, duration_s=500.0, tick_s=0.02,
                    scenarios=(sc.get("no_container"), sc.get("checkpoint_corrupt").with_(at_s=60),
                               sc.get("shared_dataset_run_id")),
                    collect_alerts=False, collect_s=5.0)
    res = run_simulation(cfg, transport=transport)
    codec = load_codec()
    return res, [codec.decode(v) for _, _, v in transport.messages]


def test_data_reports_carry_no_run_id_and_manifests_their_image(published) -> None:
    res, recs = published
    reports = [r for r in recs if type(r).__name__ == "DataQualityReport"]
    owner = next(r for r in res.run_ids if r.endswith("shared_dataset_run_id1"))
    named = [r for r in reports if r.run_id is not None]
    assert named and {r.run_id for r in named} == {owner}
    assert {r.dataset_uri for r in named}.isdisjoint(
        {r.dataset_uri for r in reports if r.run_id is None})
    assert len(named) < len(reports)
    assert all(r.schema_failures == 0 and r.freshness_lag_ms is not None for r in reports)
    images = {r.run_id: r.image_digest for r in recs if type(r).__name__ == "RunManifest"}
    assert images[next(r for r in res.run_ids if r.endswith("no_container"))] is None
    assert images[next(r for r in res.run_ids if r.endswith("control"))].startswith(
        sc.ALLOWED_IMAGE_PREFIX)


def test_a_mismatched_checkpoint_goes_through_the_sdks_checksum(published) -> None:
    _, recs = published
    ck = [r for r in recs if type(r).__name__ == "CheckpointEvent"
          and r.run_id.endswith("checkpoint_corrupt")]
    bad = [r for r in ck if r.sha256 != r.expected_sha256]
    assert len(bad) == 1 and all(r.sha256 for r in ck)


def test_agents_keep_sampling_through_the_collection_window(published) -> None:
    res, recs = published
    last_run = max(r.emitted_at_ms for r in recs if type(r).__name__ == "JobEvent")
    after = [r for r in recs if type(r).__name__ == "NodeSample" and r.emitted_at_ms > last_run]
    span = max(r.emitted_at_ms for r in after) - last_run
    assert 5.0 * 200.0 * 1000 - 20_000 <= span <= 5.0 * 200.0 * 1000 + 20_000
    assert all(not p.run_id for r in after for g in r.gpus for p in g.processes)


def _alert(run: str, det: str, cause: str, at: int, wall: int = 0) -> AlertSeen:
    return AlertSeen(run, det, "x", cause, "firing", at, "t", wall)


def test_a_ruled_out_alert_fails_a_detected_fault() -> None:
    inj = Injection("r1", sc.get("nan_loss_no_image"), 1_000)
    good = score([inj], [_alert("r1", "rule:non_finite", "learning", 2_000)], [])
    bad = score([inj], [_alert("r1", "rule:non_finite", "learning", 2_000),
                        _alert("r1", "rule:image_allow_list", "artifact", 500)], [])
    assert good.rows[0].passed and good.ok
    assert bad.rows[0].detected and bad.rows[0].cause_correct and not bad.rows[0].passed
    assert bad.rows[0].forbidden == ("rule:image_allow_list",) and not bad.ok
    assert "rule:image_allow_list (ruled out)" in format_board(bad)


def test_controls_list_every_alert_late_ones_with_their_delay() -> None:
    board = score([], [_alert("c1", "rule:missing_data_report", "data", 9_000, wall=700_000)],
                  ["c0", "c1"], {"c1": "shared_dataset"})
    assert [(c.scenario, len(c.alerts)) for c in board.controls] == [
        ("healthy", 0), ("shared_dataset", 1)]
    text = format_board(board, ended_wall_ms=100_000)
    assert "| shared_dataset | c1 | rule:missing_data_report (data) |" in text
    assert "arrived +600 s after the runs ended" in text
    assert not board.ok


def test_a_persistent_faults_alert_resolving_while_the_run_goes_on_is_a_flap() -> None:
    inj = Injection("r1", sc.get("loader_slowdown"), 1_000, ended_wall_ms=50_000)
    fired = _alert("r1", "watch:loader_share", "execution", 2_000, wall=10_000)
    early = AlertSeen("r1", "watch:loader_share", "x", "execution", "resolved", 2_000, "t", 20_000)
    late = AlertSeen("r1", "watch:loader_share", "x", "execution", "resolved", 2_000, "t", 60_000)
    assert score([inj], [fired, late], []).rows[0].passed
    row = score([inj], [fired, early, late], []).rows[0]
    assert row.detected and row.flaps == 1 and not row.passed
    assert "resolved 1x while the fault went on" in format_board(score([inj], [fired, early], []))
    one_shot = Injection("r2", sc.get("failed_gate"), 1_000, ended_wall_ms=50_000)
    gate = [_alert("r2", "rule:failed_gate", "artifact", 1_000, wall=10_000),
            AlertSeen("r2", "rule:failed_gate", "x", "artifact", "resolved", 1_000, "t", 20_000)]
    assert score([one_shot], gate, []).rows[0].passed


def test_offline_replay_hands_stored_reports_to_a_run_that_starts_later() -> None:
    """As the processor's data agent does: a run gets its dataset's earlier reports."""
    from runwatch.adapters.publisher import Publisher
    from runwatch.client import data, init
    from runwatch.core.records import DatasetRef
    from runwatch.sim.replay import replay

    transport = CaptureTransport()
    pipeline = Publisher(transport, kind="sdk")
    t0 = 1_800_000_000_000
    for k, rows in enumerate(([1.0, 2.0, 3.0], [])):  # the second partition came out empty
        data.report("s3://lake/d", "v1", f"p{k}", {"x": rows}, baseline={"columns": {}},
                    publisher=pipeline, now_ms=t0 + 60_000 * k)
    times = iter(range(t0 + 120_000, t0 + 10**9, 1_000))
    run = init(run_id="late-run", datasets=[DatasetRef(uri="s3://lake/d", version="v1")],
               transport=transport, clock=lambda: next(times), capture_lineage=False,
               install_hooks=False)
    for i in range(5):
        run.step(i, loss=1.0, now_ms=t0 + 125_000 + i * 1_000)
    run.finish(now_ms=t0 + 130_000)
    alerts = replay(transport.messages)
    assert [(a.run_id, a.detector) for a in alerts if a.status == "firing"] == [
        ("late-run", "rule:zero_rows")]
