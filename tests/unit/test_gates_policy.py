"""Gate policies (gates.yaml): the shipped file loads; bad files fail naming file, line and key."""

from __future__ import annotations

import pytest

from runwatch.core.gates.policy import PolicyError, parse_policies
from runwatch.resources import resource

GOOD = """\
version: 1
policies:
  - name: p
    match: {family: fam}
    primary: auc
"""


def test_the_shipped_policy_file_loads_with_every_section() -> None:
    path = resource("schemas", "gates.yaml")
    ps = parse_policies(path.read_text(), str(path))
    p = ps.for_run("credit-risk", {})
    assert p is not None and p.name == "credit-risk-release"
    assert p.required_slices == ("age_65_plus", "income_low")
    assert p.slice_bounds == {"age_65_plus": 0.01}
    assert (p.seeds_min, p.max_seed_spread, p.rerun_tolerance) == (3, 0.02, 0.005)
    assert p.max_eval_age_ms == 90 * 86_400_000
    assert p.source.endswith("gates.yaml#credit-risk-release")
    assert ps.for_run("other", {}) is None


def test_a_model_label_wins_over_the_family() -> None:
    ps = parse_policies(GOOD + "  - name: q\n    match: {model: m1}\n    primary: loss\n")
    assert ps.for_run("fam", {"model": "m1"}).name == "q"  # type: ignore[union-attr]
    assert ps.for_run("fam", {}).name == "p"  # type: ignore[union-attr]
    assert ps.policies[1].higher_is_better is False  # a loss: lower is better


@pytest.mark.parametrize(("text", "where"), [
    ("", "f.yaml:1: policies: the file is empty"),
    ("policies: [\n", "f.yaml:2: invalid YAML"),
    ("version: 2\npolicies: []\n", "f.yaml:1: version: unsupported version '2'"),
    ("policies: []\n", "f.yaml:1: policies: must be a non-empty list"),
    (GOOD + "    colour: red\n", "f.yaml:6: policies[0].colour: unknown key"),
    (GOOD.replace("    primary: auc\n", ""), "f.yaml:3: policies[0].primary: missing"),
    (GOOD + "    slices: {max_deterioration: high}\n",
     "f.yaml:6: policies[0].slices.max_deterioration: must be a finite number >= 0, got 'high'"),
    (GOOD + "    slices:\n      max_spread: -1\n",
     "f.yaml:7: policies[0].slices.max_spread: must be a finite number >= 0, got '-1'"),
    (GOOD + "    eval_data: {max_age: soon}\n",
     "f.yaml:6: policies[0].eval_data.max_age: bad duration 'soon' (use e.g. 30s"),
    (GOOD + "    metrics:\n      auc: {min: 0.9, max: 0.8}\n",
     "f.yaml:7: policies[0].metrics.auc: min 0.9 is above max 0.8"),
    (GOOD + "    metrics:\n      auc: {min: .nan}\n",
     "f.yaml:7: policies[0].metrics.auc.min: must be a finite number, got '.nan'"),
    (GOOD + "    review: {when: [sometimes]}\n",
     "f.yaml:6: policies[0].review.when[0]: unknown condition 'sometimes'"),
    (GOOD + "    review: {on_missing: ignore}\n",
     "f.yaml:6: policies[0].review.on_missing: must be review or fail, got 'ignore'"),
    (GOOD + "    slices:\n      required: [a]\n      bounds: {b: 0.1}\n",
     "f.yaml:8: policies[0].slices.bounds.b: unknown key (expected one of: a)"),
    (GOOD + "    stability: {seeds: {min: three}}\n",
     "f.yaml:6: policies[0].stability.seeds.min: must be a whole number >= 0, got 'three'"),
    (GOOD + "    reproducibility: {}\n",
     "f.yaml:6: policies[0].reproducibility.tolerance: missing"),
    (GOOD + "  - name: p\n    match: {family: g}\n    primary: auc\n",
     "f.yaml:6: policies[1].name: duplicate policy name 'p'"),
    (GOOD.replace("{family: fam}", "{family: fam, model: m}"),
     "f.yaml:4: policies[0].match: give exactly one of family or model"),
    # the first of two policies of one family won silently: the second was never applied
    (GOOD + "  - name: q\n    match: {family: fam}\n    primary: auc\n",
     "f.yaml:7: policies[1].match: family 'fam' is already matched by policy 'p' "
     "(policies[0], line 3)"),
    (GOOD + "  - name: q\n    match: {model: m}\n    primary: auc\n"
     "  - name: r\n    match: {model: m}\n    primary: loss\n",
     "f.yaml:10: policies[2].match: model 'm' is already matched by policy 'q'"),
])
def test_an_invalid_policy_fails_at_load_naming_file_line_and_key(text: str, where: str) -> None:
    with pytest.raises(PolicyError) as err:
        parse_policies(text, "f.yaml")
    assert str(err.value).startswith(where), str(err.value)


@pytest.mark.parametrize("action", [["check", "r1", "--no-publish"],
                                    ["approve", "r1", "--by", "ana", "--reason", "ok"]])
@pytest.mark.parametrize("at", ["1764547200", "1764547200000000"])
def test_a_gate_decision_time_in_the_wrong_unit_exits_3(action: list[str], at: str, capsys,
                                                        monkeypatch) -> None:
    # --at-ms in seconds published a GateDecision of 1970 that the sink dead-letters: the gate
    # printed its decision and exit code, and no decision was ever stored
    from runwatch import cli

    monkeypatch.setenv("CLICKHOUSE_URL", "http://127.0.0.1:9")
    assert cli.main(["gate", *action, "--at-ms", at]) == 3
    err = capsys.readouterr().err
    assert f"error: --at-ms {at}: {at} ms is " in err and "give milliseconds" in err


def test_gate_check_refuses_a_policy_file_with_two_policies_of_one_family(
        tmp_path, capsys, monkeypatch) -> None:
    from runwatch import cli

    path = tmp_path / "gates.yaml"
    path.write_text(GOOD + "  - name: q\n    match: {family: fam}\n    primary: auc\n")
    monkeypatch.setenv("CLICKHOUSE_URL", "http://127.0.0.1:9")
    assert cli.main(["gate", "check", "r1", "--policy", str(path), "--no-publish"]) == 3
    assert (f"error: {path}:7: policies[1].match: family 'fam' is already matched by policy "
            "'p'") in capsys.readouterr().err


def test_gate_check_refuses_a_database_name_that_is_not_an_identifier(capsys,
                                                                      monkeypatch) -> None:
    # it said the database does not exist and to run `runwatch db migrate --database a b`
    from runwatch import cli

    monkeypatch.setenv("CLICKHOUSE_URL", "http://127.0.0.1:9")
    monkeypatch.delenv("RUNWATCH_GATES_FILE", raising=False)
    assert cli.main(["gate", "check", "r1", "--database", "a b", "--no-publish"]) == 3
    err = capsys.readouterr().err
    assert "error: database name 'a b' is not a plain identifier" in err
