"""runwatch investigate's pure answers, from rows as the store returns them for what real
producers sent (the SDK's steps, gates and artifacts; the processor's alerts).

* deterministic: a run of the same lineage that logged steps past the failing step and
  never fired the detector is evidence that the failure does not recur (it was not read:
  "one attempt and no other run with the same lineage");
* release: a model the processor found registered before its gates allowed it
  (``rule:registry_without_gate``, ``rule:missing_gate``) blocks the release until the
  gate decisions allow it (the answer said "not blocked").
"""

from __future__ import annotations

from typing import Any

from runwatch.core.investigate.answers import Evidence, investigate
from runwatch.core.paging.ownership import load_ownership
from runwatch.resources import ownership_file

T0 = 1_800_000_000_000
MIN = 60_000
OWN = load_ownership(ownership_file())


def _manifest(run_id: str, ts: int) -> dict[str, Any]:
    return {"run_id": run_id, "ts_ms": ts, "event_id": f"e-{run_id}",
            "dataset_uris": ["s3://d/train"], "dataset_versions": ["v1"],
            "transform_names": [], "transform_versions": [], "code_revision": "abc",
            "code_dirty": False, "image_digest": "img@sha256:1", "config_hash": "h1",
            "config": {"lr": "0.001"}, "hardware_nodes": ["n1"], "gpu_count": 8,
            "gpu_model": "H100", "seed_policy": "fixed:1", "framework_versions": {},
            "experiment_family": "fam", "team": "vision", "labels": {},
            "resumed_from_checkpoint": ""}


def _alert(alert_id: str, at: int, detector: str, *, title: str = "t",
           status: str = "firing", cause: str = "learning") -> dict[str, Any]:
    return {"ts_ms": at, "run_id": "b", "alert_id": alert_id, "status": status,
            "severity": "critical", "detector": detector, "indicator": "loss",
            "probable_cause": cause, "evidence_at_ms": [], "first_seen_ms": at,
            "title": title, "team": "vision", "experiment_family": "fam", "node": "",
            "labels": {}, "owner": ""}


def _gate(gate: str, decision: str, at: int) -> dict[str, Any]:
    return {"ts_ms": at, "run_id": "b", "gate": gate, "decision": decision, "reasons": []}


def _evidence(**over: Any) -> Evidence:
    """Run b: one attempt, steps 0..39 a step a minute, NaN loss paged at step 25."""
    ev = Evidence(run_id="b", database="db", now_ms=T0 + 100 * MIN)
    ev.manifests = [_manifest("b", T0)]
    ev.jobs = [{"ts_ms": T0, "state": "running", "attempt": 1, "nodes": ["n1"],
                "gpu_count": 8, "team": "vision", "experiment_family": "fam", "reason": ""},
               {"ts_ms": T0 + 41 * MIN, "state": "failed", "attempt": 1, "nodes": ["n1"],
                "gpu_count": 8, "team": "vision", "experiment_family": "fam", "reason": ""}]
    ev.steps_at = [(T0 + (i + 1) * MIN, i) for i in range(40)]
    ev.alerts = [_alert("nan", T0 + 26 * MIN, "rule:non_finite")]
    ev.stages = []
    for k, v in over.items():
        setattr(ev, k, v)
    return ev


def test_a_clean_run_of_the_lineage_past_the_failing_step_says_it_does_not_recur() -> None:
    got = investigate(_evidence(lineage_runs={"clean": (0, 39)}), OWN)["deterministic"]
    assert got["deterministic"] is False, got
    assert got["same_lineage_runs"] == ["clean"]
    assert "run clean of the same lineage went past it to step 39 without it" in got["reason"]


def test_a_run_of_the_lineage_that_did_not_run_the_step_is_no_evidence() -> None:
    # stopped before step 25; started past it (resumed from a later checkpoint); no steps
    for span in ((0, 20), (30, 60), None):
        got = investigate(_evidence(lineage_runs={"other": span}), OWN)["deterministic"]
        assert got["deterministic"] is None, (span, got)
        assert got["same_lineage_runs"] == ["other"]
        assert "one attempt and no other run" not in got["reason"]


def test_a_run_of_the_lineage_that_fired_the_detector_at_the_step_is_deterministic() -> None:
    repeats = [{"run_id": "twin", "detector": "rule:non_finite", "indicator": "loss",
                "first_seen_ms": T0, "step": 25}]
    got = investigate(_evidence(repeats=repeats, lineage_runs={"twin": (0, 39)}),
                      OWN)["deterministic"]
    assert got["deterministic"] is True, got


def test_a_model_registered_without_a_passing_gate_blocks_the_release() -> None:
    reg = _alert("r1", T0 + 42 * MIN, "rule:registry_without_gate", cause="artifact",
                 title="Model s3://m/model.pt registered without a passing or approved gate")
    # resolved when the run was retired: nothing passed since
    resolved = dict(reg, status="resolved", ts_ms=T0 + 400 * MIN)
    for rows in ([reg], [reg, resolved]):
        rel = investigate(_evidence(alerts=rows), OWN)["release"]
        assert rel["blocked"] is True, rel
        assert rel["reasons"] == [
            "rule:registry_without_gate: Model s3://m/model.pt registered without a passing "
            "or approved gate"]
    # a gate passed (or a review approved) afterwards: the registry allows it now
    rel = investigate(_evidence(alerts=[reg], gates=[_gate("eval", "pass", T0 + 50 * MIN)]),
                      OWN)["release"]
    assert rel["blocked"] is False, rel


def test_a_model_registered_before_its_required_gates_passed_blocks_the_release() -> None:
    miss = _alert("m1", T0 + 42 * MIN, "rule:missing_gate", cause="artifact",
                  title="Model s3://m/model.pt registered before gate(s) safety, eval passed")
    gates = [_gate("eval", "pass", T0 + 40 * MIN)]
    rel = investigate(_evidence(alerts=[miss], gates=gates), OWN)["release"]
    assert rel["blocked"] is True, rel
    assert rel["reasons"] == ["rule:missing_gate: Model s3://m/model.pt registered before "
                              "gate(s) safety, eval passed"]
    gates.append(_gate("safety", "pass", T0 + 60 * MIN))
    assert investigate(_evidence(alerts=[miss], gates=gates), OWN)["release"]["blocked"] is False
    gates.append(_gate("eval", "fail", T0 + 70 * MIN))  # a later failure withdraws it again
    rel = investigate(_evidence(alerts=[miss], gates=gates), OWN)["release"]
    assert rel["blocked"] is True
    assert rel["reasons"][0] == "gate eval failed"


def test_a_run_without_a_registration_or_gate_is_not_blocked() -> None:
    rel = investigate(_evidence(), OWN)["release"]
    assert (rel["blocked"], rel["note"]) == (False, "no gate decision recorded for this run")


def test_the_runs_state_is_the_stores_outcome_not_the_latest_job_event() -> None:
    # the SDK's failed at 41 min, a scheduler epilog's succeeded after it: the store's rule
    # (OUTCOME_SQL) reads failed, as the run summary, slo and --since do
    jobs = _evidence().jobs + [{"ts_ms": T0 + 42 * MIN, "state": "succeeded", "attempt": 1,
                                "nodes": [], "gpu_count": 0, "team": "vision",
                                "experiment_family": "fam", "reason": ""}]
    assert investigate(_evidence(jobs=jobs, outcome="failed"), OWN)["run"]["state"] == "failed"
    assert investigate(_evidence(jobs=jobs), OWN)["run"]["state"] == "succeeded"  # not read


def test_an_unknown_run_is_missing_one_thing_not_its_stage_events_too() -> None:
    # what the reader returns for a run id nothing was recorded for (no inputs: no stages)
    got = investigate(Evidence(run_id="nope", database="db", now_ms=T0, stages=[]), OWN)
    assert got["found"] is False
    assert got["missing"] == ["nothing recorded for run 'nope' in database 'db' (no manifest, "
                              "job events, learning steps, checkpoints or alerts)"]


def test_the_diff_reads_hex_identifiers_as_the_lineage_hash_does() -> None:
    # the same revision, image digest and dataset version in another case or with blanks:
    # one canonical lineage (runwatch.core.lineage), no change; a real change still shows
    from runwatch.core import lineage as canon
    from runwatch.core.investigate import lineage as lin

    ref = _manifest("a", T0)
    img = "registry.local/train@sha256:" + "ab" * 32
    ref.update(image_digest=img, code_revision="c0ffee1")
    same = dict(ref, image_digest="registry.local/train@sha256:" + "AB" * 32,
                code_revision="C0FFEE1", dataset_versions=["v1 "])
    as_record = {"image_digest": same["image_digest"], "code_revision": same["code_revision"],
                 "datasets": [{"uri": "s3://d/train", "version": "v1 "}]}
    assert canon.lineage_hash(as_record) == canon.lineage_hash(
        {"image_digest": img, "code_revision": "c0ffee1",
         "datasets": [{"uri": "s3://d/train", "version": "v1"}]})
    assert lin.diff(lin.normalize(ref), lin.normalize(same)) == []
    dirty = dict(same, code_dirty=True)
    (change,) = lin.diff(lin.normalize(ref), lin.normalize(dirty))
    assert (change.kind, change.new) == ("code", "C0FFEE1 (dirty)")
    got = investigate(_evidence(manifests=[dict(dirty, run_id="b")],
                                family_runs=[{"run_id": "a", "ts_ms": T0 - MIN,
                                              "state": "succeeded", "bad_alerts": 0,
                                              "manifest": ref}]), OWN)
    assert got["affected_runs"]["suspects"] == [
        {"kind": "code", "value": "C0FFEE1 (dirty)",
         "why": "uncommitted changes since the reference run"}]
    moved = dict(ref, image_digest="registry.local/train@sha256:" + "cd" * 32)
    assert [c.kind for c in lin.diff(lin.normalize(ref), lin.normalize(moved))] == ["image"]
