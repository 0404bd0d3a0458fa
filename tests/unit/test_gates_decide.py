"""Gate decisions from evidence: each check's failure, missing evidence, review, and a pass."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from runwatch.core.gates import registry, sketch
from runwatch.core.gates.evaluate import decide
from runwatch.core.gates.evidence import Evaluation, Evidence, RunEvidence
from runwatch.core.gates.policy import parse_policies
from runwatch.resources import resource

DAY = 86_400_000
T = 1_800_000_000_000
POLICY = parse_policies(resource("schemas", "gates.yaml").read_text()).policies[0]
EVAL = "s3://eval/credit@v3"


def run(run_id: str, auc: float, *, lineage: str = "L1", slices: dict[str, float] | None = None,
        dataset: str = EVAL, incumbent: str = "inc", training: tuple[str, ...] = ("s3://train@v9",),
        dirty: bool = False, ci: tuple[float, float] | None = None) -> RunEvidence:
    evals = {"": Evaluation("", {"auc": auc, "log_loss": 0.4}, dataset, 5000,
                            {"auc": ci[0]} if ci else {}, {"auc": ci[1]} if ci else {},
                            incumbent, T)}
    for name, v in (slices if slices is not None else {"age_65_plus": auc - 0.02,
                                                        "income_low": auc - 0.03}).items():
        evals[name] = Evaluation(name, {"auc": v}, dataset, 800, at_ms=T)
    return RunEvidence(run_id=run_id, family="credit-risk", training=training,
                       code_revision="abc", code_dirty=dirty, repeat_group="G", lineage=lineage,
                       evaluations=evals)


def good(**over) -> Evidence:
    inc = run("inc", 0.80, lineage="I", incumbent="")
    cand = run("cand", 0.81)
    ev = Evidence(candidate=cand, incumbent=inc, incumbent_run_id="inc",
                  repeats=(run("seed2", 0.805, lineage="L2"), run("seed3", 0.812, lineage="L3"),
                           run("rerun", 0.811, lineage="L1")),
                  eval_data_as_of_ms=T - 10 * DAY)
    return dataclasses.replace(ev, **over)


def test_all_evidence_in_order_passes_with_every_measurement() -> None:
    d = decide(POLICY, good())
    assert (d.decision, d.reasons) == ("pass", [])
    assert d.measured["auc"] == 0.81
    assert d.measured["incumbent.auc"] == 0.80
    assert d.measured["seeds"] == 3
    assert d.measured["seed_spread.auc"] == pytest.approx(0.007)
    assert d.measured["rerun_diff.auc"] == pytest.approx(0.001)
    assert d.measured["eval_age_ms"] == 10 * DAY
    assert [(s.name, s.passed) for s in d.slices] == [("age_65_plus", True), ("income_low", True)]


def test_every_bound_the_policy_sets_is_printed_beside_its_measurement() -> None:
    # the text output matched identical keys only: auc.min, margin.auc, seeds.min, ... were
    # never shown although the docs promise every measurement with its bound
    from runwatch.commands.gate import bound_names, bounds_of

    cand = run("cand", 0.81, ci=(0.80, 0.82))
    d = decide(POLICY, good(candidate=cand))
    paired = {k: bounds_of(k, d.thresholds) for k in d.measured if bounds_of(k, d.thresholds)}
    assert paired["seeds"] == [("at least", d.thresholds["seeds.min"])]
    assert paired["rerun_diff.auc"] == [("at most", d.thresholds["rerun_tolerance.auc"])]
    assert paired["slice.age_65_plus.deterioration"] == [
        ("at most", d.thresholds["slice.age_65_plus.max_deterioration"])]
    assert paired["ci_width.all"] == [("at most", d.thresholds["ci_width"])]
    assert paired["eval_age_ms"] == [("bound", d.thresholds["eval_age_ms"])]
    # every threshold that limits a measurement of this decision is printed with one
    limits_nothing = {"slice.min_samples"}  # a count the decision reads, not a measurement
    printed = {name for k in d.measured for name, _w in bound_names(k)}
    assert set(d.thresholds) - limits_nothing <= printed, set(d.thresholds) - printed


def test_a_protected_slice_deteriorating_fails_naming_the_slice_and_numbers() -> None:
    cand = run("cand", 0.815, slices={"age_65_plus": 0.76, "income_low": 0.78})  # aggregate up
    d = decide(POLICY, good(candidate=cand))
    assert d.decision == "fail"
    assert d.reasons == ["fail: slice age_65_plus: auc 0.76 vs incumbent 0.78, deteriorated by "
                         "0.02 (bound 0.01)"]
    assert [(s.name, s.passed) for s in d.slices] == [("age_65_plus", False),
                                                      ("income_low", True)]


@pytest.mark.parametrize(("over", "want"), [
    ({"candidate": run("cand", 0.81, training=("s3://train@v9", EVAL))},
     "fail: evaluation dataset s3://eval/credit@v3 overlaps the training data"),
    ({"candidate": run("cand", 0.81, training=("s3://eval/credit",))},  # unversioned: any version
     "fail: evaluation dataset s3://eval/credit@v3 overlaps the training data"),
    ({"eval_data_as_of_ms": T - 120 * DAY},  # T - 120 d: the time, not its epoch ms
     "fail: evaluation dataset s3://eval/credit@v3 is 120.0 days old (data up to "
     "2026-09-17T08:00:00Z), over the 90 days allowed"),
    ({"incumbent": run("inc", 0.80, lineage="I", dataset="s3://eval/credit@v2")},
     "fail: protocol violated: the candidate was evaluated on s3://eval/credit@v3, the incumbent "
     "inc on s3://eval/credit@v2"),
    ({"repeats": (run("seed2", 0.78, lineage="L2"), run("seed3", 0.812, lineage="L3"),
                  run("rerun", 0.811))},
     "fail: spread of auc across 3 seeds 0.032 (0.78 .. 0.812) above the bound 0.02"),
    ({"repeats": (run("seed2", 0.805, lineage="L2"), run("seed3", 0.812, lineage="L3"),
                  run("rerun", 0.79))},
     "fail: rerun rerun does not reproduce the candidate: auc 0.79 vs 0.81"),
    ({"candidate": run("cand", 0.79)}, "fail: auc 0.79 vs incumbent 0.8: change -0.01 below"),
    ({"candidate": run("cand", 0.81, ci=(0.70, 0.90))},
     "fail: confidence interval of auc on the whole set [0.7, 0.9] wider than 0.05"),
    ({"candidate": run("cand", math.nan)}, "fail: metric auc on the whole set is nan (non-finite)"),
])
def test_each_failed_check_fails_with_its_reason(over, want) -> None:
    d = decide(POLICY, good(**over))
    assert d.decision == "fail"
    assert any(r.startswith(want) for r in d.reasons), d.reasons


@pytest.mark.parametrize(("over", "want"), [
    ({"candidate": run("cand", 0.81, slices={"age_65_plus": 0.79})},
     "missing: required slice income_low not evaluated"),
    ({"eval_data_as_of_ms": None}, "missing: no data-quality report for the evaluation dataset"),
    ({"repeats": (run("rerun", 0.811),)}, "missing: 1 of the 3 repeats (seeds)"),
    ({"repeats": (run("seed2", 0.805, lineage="L2"), run("seed3", 0.812, lineage="L3"))},
     "missing: no evaluated rerun under the recorded lineage"),
    ({"incumbent": None}, "missing: incumbent inc has no recorded whole-set evaluation"),
    ({"candidate": run("cand", 0.81, incumbent=""), "incumbent": None},
     "missing: no incumbent named"),
    ({"candidate": run("cand", 0.81, dirty=True)}, "review: provenance contested"),
    ({"candidate": run("cand", 0.81, training=("s3://new-source@v1",))},
     "review: conditions changed: training data differs"),
])
def test_missing_evidence_or_a_review_condition_asks_for_review(over, want) -> None:
    d = decide(POLICY, good(**over))
    assert d.decision == "review"
    assert any(r.startswith(want) for r in d.reasons), d.reasons


def test_missing_evidence_fails_when_the_policy_says_so() -> None:
    strict = dataclasses.replace(POLICY, on_missing="fail")
    d = decide(strict, good(eval_data_as_of_ms=None))
    assert d.decision == "fail"
    assert d.missing and not d.failures


def test_no_evaluation_at_all_is_never_a_pass() -> None:
    bare = RunEvidence(run_id="cand", has_manifest=False)
    d = decide(POLICY, Evidence(candidate=bare))
    assert d.decision == "review"
    assert "missing: no run manifest stored for cand (lineage unknown)" in d.reasons
    assert any("no release evaluation of the whole set" in r for r in d.reasons)


@pytest.mark.parametrize(("decisions", "status", "allowed"), [
    ([], "registered", False),
    ([("release", "review")], "registered", False),
    ([("release", "review"), ("release", "pass")], "registered", True),  # approved
    ([("release", "pass"), ("release", "fail")], "registered", False),  # withdrawn
    ([("release", "fail")], "", True),  # not in the registry: nothing to control
    ([], "rejected", True),
])
def test_registry_control(decisions, status, allowed) -> None:
    why = registry.violation(status, registry.latest_by_gate(decisions))
    assert (why is None) == allowed, why


def _sketches(eval_keys: range, train_keys: range) -> dict[str, tuple[int, ...]]:
    return {EVAL: sketch.sketch(eval_keys), "s3://train@v9": sketch.sketch(train_keys)}


@pytest.mark.parametrize(("eval_keys", "train_keys", "overlap"), [
    (range(0, 5_000), range(5_000, 100_000), False),  # disjoint
    (range(0, 5_000), range(2_500, 100_000), True),  # half the evaluation rows were trained on
    (range(0, 50), range(40, 60), True),  # small sets: the sketches hold every key
])
def test_eval_rows_shared_with_training_rows_fail(eval_keys, train_keys, overlap) -> None:
    d = decide(POLICY, good(key_sketches=_sketches(eval_keys, train_keys)))
    want = ("evaluation dataset s3://eval/credit@v3 shares row keys with training dataset "
            "s3://train@v9")
    assert any(want in r for r in d.reasons) == overlap, d.reasons
    assert d.decision == ("fail" if overlap else "pass")
    shared = len(set(eval_keys) & set(train_keys))
    assert d.measured["shared_row_keys.s3://train@v9"] == pytest.approx(shared, rel=0.35, abs=0)


def test_sketches_merge_to_the_sketch_of_the_union() -> None:
    parts = [sketch.sketch(range(i, i + 3_000)) for i in range(0, 12_000, 3_000)]
    assert sketch.merge(parts) == sketch.sketch(range(12_000))
    assert sketch.sketch([None, "a", "a"]) == sketch.sketch(["a"])


def test_a_candidate_compared_against_another_incumbent_than_the_policys_fails() -> None:
    fixed = dataclasses.replace(POLICY, incumbent_run="inc-2026-10")
    d = decide(fixed, good())  # the candidate recorded incumbent "inc"
    assert d.decision == "fail"
    assert ("fail: protocol violated: the candidate was compared against inc, the policy's "
            "incumbent is inc-2026-10") in d.reasons


def test_a_loss_deteriorates_when_it_rises() -> None:
    loss = dataclasses.replace(POLICY, primary="log_loss", higher_is_better=False, metrics={},
                               required_slices=(), slice_bounds={}, max_deterioration=None,
                               max_slice_spread=None, seeds_min=0, max_seed_spread=None,
                               rerun_tolerance=None, max_ci_width=None, margin=0.0)
    worse = run("cand", 0.81, slices={})
    worse.evaluations[""].metrics["log_loss"] = 0.50  # the incumbent's is 0.4
    d = decide(loss, good(candidate=worse))
    assert d.decision == "fail"
    assert d.reasons == ["fail: log_loss 0.5 vs incumbent 0.4: change -0.1 below the margin +0"]


def test_a_non_finite_metric_is_a_reason_not_a_measurement() -> None:
    # gate check --json printed "auc": NaN, which strict JSON readers (JSON.parse, Go, serde)
    # refuse: CI read no decision at all
    cand = run("cand", math.nan, slices={"age_65_plus": math.inf, "income_low": 0.78},
               ci=(math.nan, 0.9))
    d = decide(POLICY, good(candidate=cand))
    assert d.decision == "fail"
    assert "fail: metric auc on the whole set is nan (non-finite): the evaluation is not usable" \
        in d.reasons
    assert "fail: metric auc on slice age_65_plus is inf (non-finite): the evaluation is not " \
        "usable" in d.reasons
    assert all(math.isfinite(v) for v in d.measured.values()), d.measured
    assert d.measured["slice.income_low.auc"] == 0.78
    json.loads(json.dumps(d.measured, allow_nan=False))


def test_a_primary_metric_no_run_recorded_is_missing_evidence_not_a_failure() -> None:
    # a policy naming a metric no run has (f1 for auc) failed every gate with "protocol
    # violated: incumbent inc recorded no f1", even a policy with no incumbent section
    shipped = resource("schemas", "gates.yaml").read_text()
    pol = parse_policies(shipped.replace("primary: auc", "primary: f1")).policies[0]
    d = decide(pol, good())
    assert d.decision == "review" and not d.failures, d.reasons
    assert d.reasons[:2] == ["missing: primary metric f1 not in the whole-set evaluation",
                             "missing: incumbent inc recorded no f1 on the whole set"]
    bare = parse_policies("version: 1\npolicies:\n  - name: p\n    match: {family: credit-risk}\n"
                          "    primary: f1\n    metrics: {f1: {min: 0.5}}\n").policies[0]
    d = decide(bare, good())  # no incumbent check configured: no incumbent reason
    assert (d.decision, d.reasons) == ("review", [
        "missing: required metric f1 not evaluated", "missing: slice age_65_plus: no f1",
        "missing: slice income_low: no f1"])
    assert decide(dataclasses.replace(bare, on_missing="fail"), good()).decision == "fail"


BOUNDARY_POLICY = """\
policies:
  - name: edge
    match: {family: credit-risk}
    primary: auc
    incumbent: {margin: -0.005}
    slices:
      required: [age_65_plus, income_low]
      max_deterioration: 0.02
      bounds: {age_65_plus: 0.01}
      max_spread: 0.02
    stability: {seeds: {min: 2, max_spread: 0.02}}
    reproducibility: {tolerance: 0.005}
"""


def test_a_candidate_meeting_every_bound_exactly_as_written_passes() -> None:
    # 0.795 - 0.8 is -0.0050000000000000044 in floats: the gate failed a release whose change
    # equals the margin, slices deteriorated exactly by their bounds, a rerun exactly within
    # the tolerance (docs/gates.md: candidate - incumbent >= margin, ... <= bound)
    policy = parse_policies(BOUNDARY_POLICY, "edge.yaml").policies[0]
    inc = run("inc", 0.80, lineage="I", incumbent="",
              slices={"age_65_plus": 0.78, "income_low": 0.77})
    cand = run("cand", 0.795, slices={"age_65_plus": 0.77, "income_low": 0.75})
    repeats = (run("rerun", 0.80, lineage="L1"), run("seed2", 0.815, lineage="L2"))
    d = decide(policy, Evidence(candidate=cand, incumbent=inc, incumbent_run_id="inc",
                                repeats=repeats))
    assert (d.decision, d.reasons) == ("pass", [])
    assert d.measured["delta.auc"] == pytest.approx(-0.005)
    assert d.measured["slice.income_low.deterioration"] == pytest.approx(0.02)
    # a hair beyond each bound still fails
    worse = run("cand", 0.7949, slices={"age_65_plus": 0.7699, "income_low": 0.7499})
    d = decide(policy, Evidence(candidate=worse, incumbent=inc, incumbent_run_id="inc",
                                repeats=(run("rerun", 0.80, lineage="L1"),
                                         run("seed2", 0.8150, lineage="L2"))))
    assert d.decision == "fail"
    wanted = ["below the margin", "slice age_65_plus", "slice income_low", "across 2 seeds",
              "rerun rerun does not reproduce"]
    assert [next(w for w in wanted if w in r) for r in d.failures] == wanted, d.failures
