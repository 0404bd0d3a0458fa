"""runwatch investigate's pure logic: lineage diff, trust rules, resume point, determinism,
release, owner, bad input (nothing recorded, no manifest, no reference), and the page."""

from __future__ import annotations

import re
from typing import Any

import pytest

from runwatch.core.investigate import answers
from runwatch.core.investigate import lineage as lin
from runwatch.core.investigate.answers import Evidence, investigate
from runwatch.core.investigate.html import PLOTS, checkpoint_share, render
from runwatch.core.paging.ownership import load_ownership
from runwatch.resources import ownership_file

T0 = 1_800_000_000_000
MIN = 60_000
OWN = load_ownership(ownership_file())


def manifest(run_id: str, ts: int, **over: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "run_id": run_id, "ts_ms": ts, "event_id": f"e-{run_id}",
        "dataset_uris": ["s3://d/train"], "dataset_versions": ["v1"],
        "transform_names": ["tok"], "transform_versions": ["1.0"], "code_revision": "abc",
        "code_dirty": False, "image_digest": "img@sha256:1", "config_hash": "h1",
        "config": {"lr": "0.001", "batch": "256"}, "hardware_nodes": ["n1"], "gpu_count": 8,
        "gpu_model": "H100", "seed_policy": "fixed:1", "framework_versions": {"torch": "2.5"},
        "experiment_family": "fam", "team": "vision", "labels": {},
    }
    row.update(over)
    return row


def test_diff_names_each_kind_old_to_new_and_intentional_changes() -> None:
    ref = lin.normalize(manifest("a", T0))
    run = lin.normalize(manifest(
        "b", T0, dataset_versions=["v2"], config={"lr": "0.003", "batch": "256",
                                                  "objective": "focal"},
        code_revision="def", code_dirty=True, image_digest="img@sha256:2", gpu_count=16,
        seed_policy="per-rank", framework_versions={"torch": "2.6"}, transform_versions=["1.1"],
        labels={"intended_changes": "config.lr, image"}))
    got = {(c.kind, c.key): (c.old, c.new, c.intentional) for c in lin.diff(ref, run)}
    assert got == {
        ("dataset", "s3://d/train"): ("v1", "v2", False),
        ("transform", "tok"): ("1.0", "1.1", False),
        ("code", "code_revision"): ("abc", "def (dirty)", False),
        ("image", "image_digest"): ("img@sha256:1", "img@sha256:2", True),
        ("config", "lr"): ("0.001", "0.003", True),
        ("config", "objective"): ("", "focal", True),  # an objective change is a decision
        ("hardware", "gpu_count"): ("8", "16", False),
        ("seed_policy", "seed_policy"): ("fixed:1", "per-rank", False),
        ("framework", "torch"): ("2.5", "2.6", False),
    }
    assert lin.diff(ref, lin.normalize(manifest("c", T0))) == []


def test_repeat_key_ignores_seed_and_nodes_not_data() -> None:
    a = lin.normalize(manifest("a", T0))
    b = lin.normalize(manifest("b", T0, seed_policy="fixed:2", hardware_nodes=["n9"]))
    c = lin.normalize(manifest("c", T0, dataset_versions=["v2"]))
    assert lin.repeat_key(a) == lin.repeat_key(b) != lin.repeat_key(c)
    assert lin.repeat_key({**a, "repeat_group": "rg"}) == "rg"


def _alert(alert_id: str, at: int, detector: str = "rule:validation_decline",
           cause: str = "data", status: str = "firing", evidence: tuple[int, ...] = ()
           ) -> dict[str, Any]:
    return {"ts_ms": at, "run_id": "b", "alert_id": alert_id, "status": status,
            "severity": "warning", "detector": detector, "indicator": "accuracy",
            "probable_cause": cause, "evidence_at_ms": list(evidence), "first_seen_ms": at,
            "title": "t", "team": "vision", "experiment_family": "fam", "node": "", "labels": {}}


def _ck(step: int, at: int, *, sha: str = "s", expected: str = "s",
        outcome: str = "ok") -> dict[str, Any]:
    return {"ts_ms": at, "step": step, "sha256": sha, "expected_sha256": expected,
            "outcome": outcome, "uri": f"s3://ck/{step}", "duration_ms": 30_000.0}


def _evidence(**over: Any) -> Evidence:
    ev = Evidence(run_id="b", database="db", now_ms=T0 + 100 * MIN)
    ev.manifests = [manifest("b", T0, dataset_versions=["v2"],
                             config={"lr": "0.003", "batch": "256"})]
    ev.jobs = [{"ts_ms": T0, "state": "running", "attempt": 0, "nodes": ["n1"], "gpu_count": 8,
                "team": "vision", "experiment_family": "fam"},
               {"ts_ms": T0 + 60 * MIN, "state": "failed", "attempt": 0, "nodes": ["n1"],
                "gpu_count": 8}]
    ev.steps_at = [(T0 + i * MIN, i * 10) for i in range(61)]
    ev.family_runs = [{"run_id": "a", "ts_ms": T0 - 120 * MIN, "state": "succeeded",
                       "bad_alerts": 0, "manifest": manifest("a", T0 - 120 * MIN)},
                      {"run_id": "z", "ts_ms": T0 - 60 * MIN, "state": "failed",
                       "bad_alerts": 1, "manifest": manifest("z", T0 - 60 * MIN)}]
    ev.checkpoints = [_ck(100, T0 + 10 * MIN), _ck(200, T0 + 20 * MIN),
                      _ck(300, T0 + 30 * MIN), _ck(400, T0 + 40 * MIN)]
    ev.quality = [{"ts_ms": T0 + 25 * MIN, "dataset_uri": "s3://d/train",
                   "dataset_version": "v2", "row_count": 1000, "schema_failures": 0,
                   "drifted_features": ["label"], "max_psi": 0.4}]
    ev.alerts = [_alert("x1", T0 + 35 * MIN, evidence=(T0 + 25 * MIN,)),
                 _alert("p1", T0, detector="rule:image_allow_list", cause="artifact")]
    ev.stages = []
    for k, v in over.items():
        setattr(ev, k, v)
    return ev


def test_a_label_balance_shift_from_the_versions_first_report_is_a_quality_problem() -> None:
    first = {"ts_ms": T0, "dataset_uri": "s3://d/train", "dataset_version": "v2",
             "row_count": 10, "schema_failures": 0, "drifted_features": [],
             "label_distribution": {"a": 0.5, "b": 0.5}}
    later = {**first, "ts_ms": T0 + MIN, "label_distribution": {"a": 0.8, "b": 0.2}}
    same = {**first, "ts_ms": T0 + 2 * MIN, "label_distribution": {"a": 0.55, "b": 0.45}}
    got = investigate(_evidence(quality=[later, first, same], alerts=[]), OWN)
    assert [(q["ts_ms"], q["problems"]) for q in got["what_changed"]["input_quality"]] == [
        (T0 + MIN, ["label balance shifted by 0.30"])]


def test_answers_of_a_run_with_a_new_dataset_version_and_a_label_shift() -> None:
    ev = _evidence()
    ev.sharing = [{"run_id": "c", "experiment_family": "other", "team": "nlp", "state": "running",
                   "manifest": manifest("c", T0, dataset_versions=["v2"]), "alerts": []},
                  {"run_id": "d", "experiment_family": "other", "team": "nlp", "state": "running",
                   "manifest": manifest("d", T0), "alerts": []}]  # v1: not affected
    assert [s["value"] for s in answers.suspects(ev)] == ["s3://d/train@v2"]
    got = investigate(ev, OWN)
    assert got["version"] == 1 and got["found"]
    changed = got["what_changed"]
    assert changed["reference_run_id"] == "a"  # z failed: not a good run
    assert [(c["kind"], c["key"], c["old"], c["new"]) for c in changed["changes"]] == [
        ("dataset", "s3://d/train", "v1", "v2"), ("config", "lr", "0.001", "0.003")]
    assert changed["input_quality"][0]["problems"] == ["drift in label"]
    assert got["onset_ms"] == T0 + 25 * MIN  # the evidence, not the policy alert at T0
    assert [r["run_id"] for r in got["affected_runs"]["runs"]] == ["c"]
    trusted = [c["step"] for c in got["trustworthy"]["checkpoints"] if c["trustworthy"]]
    assert trusted == [100, 200]
    res = got["resume_point"]
    assert (res["step"], res["gpu_hours_lost"]) == (200, round(40 / 60 * 8, 3))
    assert got["owner"]["team"] == "data-engineering"
    assert "rule:validation_decline" in got["owner"]["why"]
    assert got["release"]["blocked"] is False


def test_a_corrupt_checkpoint_is_not_trusted_and_the_one_before_is_the_resume_point() -> None:
    cks = [_ck(100, T0 + 10 * MIN), _ck(200, T0 + 20 * MIN, sha="bad"),
           _ck(300, T0 + 30 * MIN, outcome="corrupt"), _ck(400, T0 + 40 * MIN, outcome="failed")]
    got = investigate(_evidence(checkpoints=cks, quality=[], alerts=[]), OWN)
    verdicts = {c["step"]: (c["trustworthy"], c["reasons"])
                for c in got["trustworthy"]["checkpoints"]}
    assert verdicts == {100: (True, []), 200: (False, ["checksum mismatch"]),
                        300: (False, ["checksum mismatch"]),
                        400: (False, ["serialization failed"])}
    assert got["resume_point"]["step"] == 100


def test_release_is_blocked_by_the_latest_failing_gate_with_its_reasons() -> None:
    gates = [{"ts_ms": T0, "run_id": "b", "gate": "eval", "decision": "pass", "reasons": []},
             {"ts_ms": T0 + MIN, "run_id": "b", "gate": "eval", "decision": "fail",
              "reasons": ["accuracy 0.61 < 0.70"]},
             {"ts_ms": T0, "run_id": "b", "gate": "safety", "decision": "fail",
              "reasons": ["toxicity"]},
             {"ts_ms": T0 + MIN, "run_id": "b", "gate": "safety", "decision": "pass",
              "reasons": []}]
    rel = investigate(_evidence(gates=gates), OWN)["release"]
    assert rel["blocked"] is True
    assert rel["reasons"] == ["gate eval failed: accuracy 0.61 < 0.70"]
    assert investigate(_evidence(gates=gates[2:]), OWN)["release"]["blocked"] is False


def two_attempts() -> list[dict]:
    """Attempt 0 running at T0, attempt 1 (a restart) 30 minutes later, on one node."""
    return [{"ts_ms": T0, "state": "running", "attempt": 0, "nodes": ["n1"], "gpu_count": 8},
            {"ts_ms": T0 + 30 * MIN, "state": "running", "attempt": 1, "nodes": ["n1"],
             "gpu_count": 8}]


def two_attempt_steps() -> list[tuple[int, int]]:
    """Steps 0-200 of attempt 0, a step a minute; attempt 1 resumes at step 100."""
    return [(T0 + i * MIN, i * 10) for i in range(21)] + [
        (T0 + 30 * MIN + i * MIN, 100 + i * 10) for i in range(21)]


def test_deterministic_across_attempts_and_same_lineage_runs() -> None:
    jobs = two_attempts()
    # the same detector at step 200 in attempt 0 and again at step 200 after the restart
    steps = two_attempt_steps()
    alerts = [_alert("x1", T0 + 20 * MIN), _alert("x2", T0 + 40 * MIN)]
    got = investigate(_evidence(jobs=jobs, steps_at=steps, alerts=alerts), OWN)["deterministic"]
    assert got["deterministic"] is True and "attempts" in got["reason"]
    other = [{"run_id": "r2", "detector": "rule:validation_decline", "indicator": "accuracy",
              "first_seen_ms": 0, "step": 350}]
    got = investigate(_evidence(alerts=[_alert("x1", T0 + 35 * MIN)], repeats=other),
                      OWN)["deterministic"]
    assert got["deterministic"] is True and "same lineage" in got["reason"]
    other[0]["step"] = 120
    got = investigate(_evidence(alerts=[_alert("x1", T0 + 35 * MIN)], repeats=other),
                      OWN)["deterministic"]
    assert got["deterministic"] is False
    got = investigate(_evidence(alerts=[_alert("x1", T0 + 35 * MIN)]), OWN)["deterministic"]
    assert got["deterministic"] is None


def test_a_failure_still_firing_across_a_restart_is_not_called_non_deterministic() -> None:
    # the alert of attempt 0 (step 200) kept firing through attempt 1, so attempt 1's failure
    # at the same step was never sighted again: "deterministic: false" claimed it did not recur
    jobs = two_attempts()
    steps = two_attempt_steps()
    alerts = [_alert("x1", T0 + 20 * MIN, detector="rule:non_finite"),
              _alert("g1", T0 + 51 * MIN, detector="rule:failed_gate", cause="artifact")]
    got = investigate(_evidence(jobs=jobs, steps_at=steps, alerts=alerts),
                      OWN)["deterministic"]
    assert got["deterministic"] is None, got
    assert "rule:non_finite at step 200" in got["reason"]
    assert "failed_gate" not in got["reason"]  # a policy finding is no failure to repeat
    # resolved before attempt 1 went past step 200 without it: evidence that it did not recur
    alerts[0] = dict(_alert("x1", T0 + 20 * MIN, detector="rule:non_finite",
                            status="resolved"), ts_ms=T0 + 25 * MIN)
    got = investigate(_evidence(jobs=jobs, steps_at=steps, alerts=alerts),
                      OWN)["deterministic"]
    assert got["deterministic"] is False, got
    assert "attempt 1 went past it to step 210 without it" in got["reason"]


def test_only_the_dirty_flag_changed_suspects_the_uncommitted_code_not_the_revision() -> None:
    # the unchanged revision was "new since the reference run", and every run of it affected
    ev = _evidence(manifests=[manifest("b", T0, code_dirty=True)], quality=[])
    ev.sharing = [{"run_id": "c", "experiment_family": "fam", "team": "vision",
                   "state": "succeeded", "manifest": manifest("c", T0), "alerts": []}]
    assert answers.suspects(ev) == [{"kind": "code", "value": "abc (dirty)",
                                     "why": "uncommitted changes since the reference run"}]
    got = investigate(ev, OWN)
    assert got["affected_runs"]["runs"] == []
    # a new revision is still a suspect, and its runs affected
    ev.manifests = [manifest("b", T0, code_revision="def")]
    ev.sharing[0]["manifest"] = manifest("c", T0, code_revision="def")
    assert answers.suspects(ev) == [{"kind": "code", "value": "def",
                                     "why": "new since the reference run"}]
    assert [r["run_id"] for r in investigate(ev, OWN)["affected_runs"]["runs"]] == ["c"]


def test_a_since_window_reaching_before_1970_is_refused_without_a_traceback(
        capsys, monkeypatch) -> None:
    from runwatch import cli

    monkeypatch.setenv("CLICKHOUSE_URL", "http://127.0.0.1:9")  # not reached
    assert cli.main(["investigate", "--since", "999999999999d", "--database", "gov"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: --since '999999999999d' reaches back before 1970 (the store's time starts "
        "there)")


def test_bad_input_is_answered_as_far_as_the_evidence_goes() -> None:
    nothing = investigate(Evidence(run_id="ghost", database="db", now_ms=T0), OWN)
    assert nothing["found"] is False
    assert "nothing recorded for run 'ghost'" in nothing["missing"][0]
    assert nothing["resume_point"]["step"] is None
    no_manifest = investigate(_evidence(manifests=[]), OWN)
    assert no_manifest["found"] is True
    assert "no manifest (lineage) recorded for this run" in no_manifest["missing"]
    assert no_manifest["what_changed"]["changes"] == []
    assert "no manifest" in no_manifest["what_changed"]["reference"]
    no_ref = investigate(_evidence(family_runs=[]), OWN)
    assert any("no previous good run in family 'fam'" in m for m in no_ref["missing"])
    partial = investigate(_evidence(series={}, stages=None), OWN)
    assert "no loss telemetry recorded for this run" in partial["missing"]
    assert any("no stage events recorded" in m for m in partial["missing"])
    assert partial["what_changed"]["stages"] is None


def test_the_owner_stamped_on_the_alert_wins_over_the_file() -> None:
    stamped = [dict(_alert("x1", T0 + 35 * MIN), owner="vision-data")]
    got = investigate(_evidence(alerts=stamped), OWN)["owner"]
    assert got["team"] == "vision-data"
    assert "stamped on the alert by the processor (this file says data-engineering" in got["why"]
    same = [dict(_alert("x1", T0 + 35 * MIN), owner="data-engineering")]
    assert "ownership.yaml" in investigate(_evidence(alerts=same), OWN)["owner"]["why"]


def test_alerts_resolved_since_still_give_the_onset_and_the_owner() -> None:
    # a finished run's alerts resolve with it; investigated afterwards, they still count
    resolved = [_alert("x1", T0 + 35 * MIN, status="resolved", evidence=(T0 + 25 * MIN,))]
    got = investigate(_evidence(alerts=resolved), OWN)
    assert got["onset_ms"] == T0 + 25 * MIN
    assert got["owner"]["team"] == "data-engineering"
    assert got["deterministic"]["reason"] != "no alert fired for this run"
    trusted = [c["step"] for c in got["trustworthy"]["checkpoints"] if c["trustworthy"]]
    assert trusted == [100, 200]


def test_hurting_lists_runs_with_firing_alerts_worst_first() -> None:
    rows = [dict(_alert("a1", T0), run_id="r1", state="running"),
            dict(_alert("a2", T0 + MIN, cause="infrastructure"), run_id="r2", state="running",
                 severity="critical"),
            dict(_alert("a3", T0, status="resolved"), run_id="r3", state="succeeded")]
    got = answers.hurting(rows, T0 - MIN, T0 + 2 * MIN, None, OWN, "db")
    assert [(r["run_id"], r["owner"]) for r in got["runs"]] == [
        ("r2", "platform-engineering"), ("r1", "data-engineering")]


def test_alerts_of_no_run_are_counted_apart_not_listed_as_a_run() -> None:
    # an SLO alert (run_id empty) used to be merged into one "run" with an empty id
    rows = [dict(_alert("a1", T0), run_id="r1", state="running"),
            dict(_alert("slo1", T0), run_id="", detector="slo:window"),
            dict(_alert("slo2", T0 + MIN), run_id=None, detector="slo:registry")]
    got = answers.hurting(rows, T0 - MIN, T0 + 2 * MIN, None, OWN, "db")
    assert [r["run_id"] for r in got["runs"]] == ["r1"]
    assert got["alerts_without_run"] == 2 and got["missing"] == []
    only = answers.hurting(rows[1:], T0 - MIN, T0 + 2 * MIN, None, OWN, "db")
    assert only["runs"] == [] and only["alerts_without_run"] == 2
    assert only["missing"] == ["no firing alert of a run in the window"]


def test_resume_point_loss_counts_running_time_on_each_attempts_gpus() -> None:
    # 8 GPUs from T0, checkpoint at 20 min, preempted at 30, queued, resumed at 40 on 4 GPUs,
    # failed at 100: lost = 10 min x 8 + 60 min x 4 = 5.333 GPU-h (not 80 min x 8 = 10.667)
    jobs = [{"ts_ms": T0, "state": "running", "attempt": 1, "nodes": ["n1"], "gpu_count": 8},
            {"ts_ms": T0 + 30 * MIN, "state": "queued", "attempt": 2, "nodes": [],
             "gpu_count": 0},
            {"ts_ms": T0 + 30 * MIN, "state": "preempted", "attempt": 1, "nodes": [],
             "gpu_count": 0},
            {"ts_ms": T0 + 40 * MIN, "state": "running", "attempt": 2, "nodes": ["n2"],
             "gpu_count": 4},
            {"ts_ms": T0 + 40 * MIN, "state": "running", "attempt": 2, "nodes": [],
             "gpu_count": 0},
            {"ts_ms": T0 + 100 * MIN, "state": "failed", "attempt": 2, "nodes": [],
             "gpu_count": 0}]
    ev = _evidence(jobs=jobs, alerts=[], quality=[], checkpoints=[_ck(100, T0 + 20 * MIN)],
                   steps_at=[(T0 + i * MIN, i) for i in [*range(30), *range(40, 100)]])
    res = investigate(ev, OWN)["resume_point"]
    assert (res["step"], res["gpu_hours_lost"]) == (100, round(10 / 60 * 8 + 60 / 60 * 4, 3))


def test_hurting_gives_each_run_the_earliest_onset_of_its_alerts() -> None:
    # a2 is seen later than a1, but its evidence (a label shift) is older than a1's sighting
    rows = [dict(_alert("a1", T0 + 10 * MIN), run_id="r1", state="running"),
            dict(_alert("a2", T0 + 20 * MIN, evidence=(T0 + 2 * MIN,)), run_id="r1",
                 state="running")]
    got = answers.hurting(rows, T0, T0 + 30 * MIN, None, OWN, "db")
    assert [(r["run_id"], r["alerts"], r["first_onset_ms"]) for r in got["runs"]] == [
        ("r1", 2, T0 + 2 * MIN)]


def test_a_registry_alerts_onset_is_its_own_sighting_not_its_gates() -> None:
    """A push after a failed gate: the registry alert's evidence is the gate decision, and
    the run was listed (and its alert shown) "from" the gate's time, before the push."""
    rows = [dict(_alert("g1", T0 + 20 * MIN, detector="rule:registry_without_gate",
                        cause="artifact", evidence=(T0 + 2 * MIN,)), run_id="r1",
                 state="succeeded")]
    got = answers.hurting(rows, T0, T0 + 30 * MIN, None, OWN, "db")
    assert [r["first_onset_ms"] for r in got["runs"]] == [T0 + 20 * MIN]


def test_checkpoint_share_spreads_each_write_over_its_buckets() -> None:
    share = checkpoint_share([{"ts_ms": T0 + 15 * MIN, "duration_ms": 10 * MIN}],
                             (T0, T0 + 60 * MIN), buckets=6)
    assert [round(v, 2) for _t, v in share] == [0.5, 0.5, 0, 0, 0, 0]


def test_the_page_is_self_contained_and_draws_every_plot() -> None:
    ev = _evidence(series={"loss": [(T0, 2.0), (T0 + MIN, 1.5)],
                           "validation:accuracy": [(T0, 0.5)], "gpu_util": []})
    result = investigate(ev, OWN)
    page = render(result, {**ev.series, "checkpoint_share": checkpoint_share(
        ev.checkpoints, (T0, T0 + 60 * MIN))})
    plots = re.findall(r'<svg class="plot" data-indicator="([a-z_]+)" data-empty="(\w+)"', page)
    assert plots == [(k, "false" if k != "gpu_util" and k != "loader_share" else "true")
                     for k, _t in PLOTS]
    assert "<script" not in page and "http://" not in page.replace(
        'xmlns="http://www.w3.org/2000/svg"', "")
    assert page.count('class="onset"') == 5 * 2  # two firing alerts on every plot
    assert page.count('class="checkpoint"') == 5 * 4
    assert "s3://d/train" in page and "0.003" in page  # the lineage diff
    hostile = render({**result, "run_id": "<script>x</script>"}, {})  # text is escaped
    assert "<script" not in hostile and "&lt;script&gt;x" in hostile


@pytest.mark.parametrize("bad", ["", "1bad", "a;b", "db.x"])
def test_the_reader_refuses_database_names_that_are_not_identifiers(bad: str) -> None:
    from runwatch.adapters.evidence import EvidenceError, EvidenceReader

    with pytest.raises(EvidenceError, match="bad database name"):
        EvidenceReader(object(), bad)  # type: ignore[arg-type]


def test_the_demo_investigates_a_data_caused_alert_first() -> None:
    from runwatch.sim.demo import pick_faulty_run
    from runwatch.sim.scoreboard import AlertSeen

    alerts = [AlertSeen("r1", "rule:non_finite", "loss", "learning", "firing", 5, "t"),
              AlertSeen("r2", "rule:validation_decline", "acc", "data", "firing", 9, "t"),
              AlertSeen("r3", "rule:x", "x", "data", "resolved", 1, "t")]
    assert pick_faulty_run(alerts) == "r2"
    assert pick_faulty_run(alerts[:1]) == "r1"
    assert pick_faulty_run(alerts[2:]) is None


def test_the_text_answer_of_a_run_that_succeeded_cleanly(capsys) -> None:
    """Printed for a clean run: "What changed" said nothing at all, a succeeded run was told
    what resuming it would lose, and a release not blocked listed none of its gates."""
    from runwatch.commands.investigate import _show

    jobs = [{"ts_ms": T0, "state": "running", "attempt": 0, "nodes": ["n1"], "gpu_count": 8,
             "team": "vision", "experiment_family": "fam"},
            {"ts_ms": T0 + 60 * MIN, "state": "succeeded", "attempt": 0, "nodes": ["n1"],
             "gpu_count": 8}]
    gates = [{"ts_ms": T0 + 61 * MIN, "run_id": "b", "gate": "eval", "decision": "pass",
              "reasons": []}]
    ev = _evidence(jobs=jobs, gates=gates, alerts=[], quality=[],
                   manifests=[manifest("b", T0)])  # the reference run's lineage: no change
    _show(investigate(ev, OWN))
    out = capsys.readouterr().out
    assert "nothing: no lineage change, input quality problem or GPU fault found" in out
    assert "none needed (the run succeeded); its last trustworthy checkpoint is step 400" in out
    assert "loses" not in out
    assert "gate eval: pass (" in out


def test_the_text_answer_says_why_the_gpu_hours_a_resume_loses_are_unknown(capsys) -> None:
    """Without a GPU count the terminal printed "loses None GPU-hours"."""
    from runwatch.commands.investigate import _show

    jobs = [{"ts_ms": T0, "state": "running", "attempt": 0, "nodes": [], "gpu_count": 0,
             "team": "vision", "experiment_family": "fam"},
            {"ts_ms": T0 + 60 * MIN, "state": "failed", "attempt": 0, "nodes": [],
             "gpu_count": 0}]
    ev = _evidence(jobs=jobs, manifests=[manifest("b", T0, dataset_versions=["v2"], gpu_count=0,
                                                  hardware_nodes=[])])
    got = investigate(ev, OWN)
    assert got["resume_point"]["gpu_hours_lost"] is None
    _show(got)
    out = " ".join(capsys.readouterr().out.split())
    assert "None" not in out
    assert "the GPU-hours it loses are unknown" in out and "GPU count unknown" in out


@pytest.mark.parametrize("detector", ["rule:queue_deadline", "rule:registry_without_gate",
                                      "rule:registry_status"])
def test_a_queue_or_registry_finding_sets_no_onset_and_taints_no_checkpoint(
        detector: str) -> None:
    """A healthy run that waited past its queue deadline: the alert (first seen when it
    started) was its onset, every checkpoint "written at or after the onset", start over."""
    jobs = [{"ts_ms": T0, "state": "running", "attempt": 1, "nodes": ["n1"], "gpu_count": 8,
             "team": "vision", "experiment_family": "fam"},
            {"ts_ms": T0 + 60 * MIN, "state": "succeeded", "attempt": 1, "nodes": ["n1"],
             "gpu_count": 8}]
    alerts = [_alert("q1", T0, detector=detector, cause="execution")]
    got = investigate(_evidence(jobs=jobs, alerts=alerts, quality=[]), OWN)
    assert got["onset_ms"] is None
    assert [c["trustworthy"] for c in got["trustworthy"]["checkpoints"]] == [True] * 4
    assert got["resume_point"]["step"] == 400
    assert got["deterministic"]["deterministic"] is None
    assert "no alert about the run's computation fired" in got["deterministic"]["reason"]


def _resumed_run(resumed_from: str | None, alerts: list[dict[str, Any]]) -> dict[str, Any]:
    """Attempt 1 writes step 10 (ok) and 15 (corrupt), is preempted at 11 min; attempt 2
    starts at 13 min (its manifest naming ``resumed_from``), writes 30 and 49, succeeds."""
    jobs = [{"ts_ms": T0, "state": "running", "attempt": 1, "nodes": ["n1"], "gpu_count": 8},
            {"ts_ms": T0 + 11 * MIN, "state": "preempted", "attempt": 1, "nodes": [],
             "gpu_count": 0},
            {"ts_ms": T0 + 11 * MIN + 2000, "state": "queued", "attempt": 2, "nodes": [],
             "gpu_count": 0},
            {"ts_ms": T0 + 13 * MIN, "state": "running", "attempt": 2, "nodes": ["n1"],
             "gpu_count": 8},
            {"ts_ms": T0 + 33 * MIN, "state": "succeeded", "attempt": 2, "nodes": [],
             "gpu_count": 0}]
    manifests = [manifest("b", T0),
                 manifest("b", T0 + 13 * MIN, event_id="e-b2",
                          resumed_from_checkpoint=resumed_from or "")]
    cks = [_ck(10, T0 + 5 * MIN), _ck(15, T0 + 8 * MIN, sha="bad"),
           _ck(30, T0 + 23 * MIN), _ck(49, T0 + 32 * MIN)]
    steps = [(T0 + i * 30_000, i) for i in range(20)] + [
        (T0 + 13 * MIN + (i - 10) * 30_000, i) for i in range(10, 50)]
    ev = _evidence(jobs=jobs, manifests=manifests, checkpoints=cks, steps_at=steps,
                   alerts=alerts, quality=[])
    return investigate(ev, OWN)


def _trusted(got: dict[str, Any]) -> list[int]:
    return [c["step"] for c in got["trustworthy"]["checkpoints"] if c["trustworthy"]]


def test_an_attempt_resumed_from_a_good_checkpoint_does_not_inherit_a_corrupt_file() -> None:
    """A corrupt checkpoint of attempt 1 tainted every checkpoint of attempt 2, although
    attempt 2 resumed from the good step 10 written before it: the resume point was step 10."""
    corrupt = [_alert("c1", T0 + 8 * MIN, detector="rule:checkpoint_checksum", cause="artifact")]
    got = _resumed_run("s3://ck/10", corrupt)
    assert got["onset_ms"] == T0 + 8 * MIN  # the run's onset is still the corrupt file
    assert _trusted(got) == [10, 30, 49]
    assert got["resume_point"]["step"] == 49
    # resumed from the corrupt file itself, or with no resume recorded: still not trusted
    assert _trusted(_resumed_run("s3://ck/15", corrupt)) == [10]
    assert _trusted(_resumed_run(None, corrupt)) == [10]
    # a cause that persists across the resume (NaN loss, bad data) still taints attempt 2
    nan = [_alert("n1", T0 + 8 * MIN, detector="rule:non_finite", cause="learning")]
    assert _trusted(_resumed_run("s3://ck/10", nan)) == [10]
    # a new finding of attempt 2's own counts from its onset
    again = [*corrupt, _alert("c2", T0 + 25 * MIN, detector="rule:checkpoint_checksum",
                              cause="artifact")]
    assert _trusted(_resumed_run("s3://ck/10", again)) == [10, 30]


def test_the_text_answer_says_each_verdict_once_and_no_blank_after_it(capsys) -> None:
    """The text view printed "Deterministic  unknown: unknown: nothing shows…" and, without
    a gate decision, "Release  not blocked " with a trailing blank."""
    from runwatch.commands.investigate import _show

    _show(investigate(_evidence(jobs=two_attempts(), steps_at=two_attempt_steps(),
                                alerts=[_alert("x1", T0 + 20 * MIN, detector="rule:non_finite")]),
                      OWN))
    lines = capsys.readouterr().out.splitlines()
    det = next(x for x in lines if x.startswith("Deterministic"))
    assert det.startswith("Deterministic  unknown: nothing shows") and "unknown: unknown" not in det
    rel = next(x for x in lines if x.startswith("Release"))
    assert rel == "Release  not blocked (no gate decision recorded for this run)"
