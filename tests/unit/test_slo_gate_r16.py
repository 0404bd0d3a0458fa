"""SLOs and release gates, round 16: cases a user meets, faults and healthy controls.

Registry control counts what the processor's ``rule:registry_without_gate`` pages on:
a model (any spelling of the kind) reaching a registry status in any spelling the
processor reads (``Production``, ``deployed `` from a template), never a dataset or a
tokenizer registered in a catalog. A burn-rate tier fires at its rate as written (3 bad
of 50 under 99 % is 5 % of a 30-day budget in 6 h), and a tier of no budget is refused
(its rate of 0 fired on windows of good events). The controls: a 100 % target, no events,
a window shorter than a run, a run still going, a budget spent then recovering as the
window rolls on, and gate decisions on missing, failed and passing evidence.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from runwatch.core.gates.evaluate import decide as gate_decide
from runwatch.core.gates.evidence import Evaluation, Evidence, RunEvidence
from runwatch.core.gates.policy import parse_policies
from runwatch.core.records import Source
from runwatch.core.slo import burn
from runwatch.core.slo import indicators as ind
from runwatch.core.slo.evaluate import decide, status
from runwatch.core.slo.spec import SloConfigError, parse_slos
from runwatch.slo.queries import to_rows

H = 3_600_000
M = 60_000
D = 24 * H
NOW = int(datetime(2026, 12, 1, 12, tzinfo=UTC).timestamp() * 1000)
START = NOW - 30 * D
SRC = Source(kind="slo", host="h", runwatch_version="0")


def doc(indicator: str, target: str = "0.9", window: str = "30d", extra: str = "") -> str:
    return f"""apiVersion: openslo/v1
kind: SLO
metadata: {{name: x}}
spec:
  owner: ml
  indicator: {{spec: {indicator}}}
  timeWindow: [{{duration: {window}, isRolling: true}}]
  objectives: [{{target: {target}}}]
{extra}"""


def one(indicator: str, **kw: Any) -> Any:
    return parse_slos(doc(indicator, **kw), "slos.yaml")[0]


# ----------------------------------------------------------- registry control


def _registry_rows(raw: list[tuple[Any, ...]]) -> list[ind.RegistryRow]:
    """Rows as the evaluator's registry query returns them (its column order)."""
    return to_rows("registry_control", raw)


def _pushed(event: str, run: str, kind: str, status: str, gates: tuple[Any, ...] = (),
            at: int = NOW - H) -> tuple[Any, ...]:
    times = [t for t, _g, _d in gates]
    names = [g for _t, g, _d in gates]
    decisions = [d for _t, _g, d in gates]
    return (event, run, at, f"s3://reg/{run}", status, times, names, decisions, "fam", kind)


def test_a_dataset_or_tokenizer_registered_in_a_catalog_is_no_release() -> None:
    obj = one("{kind: registry_control, family: fam}", target="0.99")
    rows = _registry_rows([
        _pushed("e1", "data-pipeline", "dataset", "registered"),
        _pushed("e2", "tok-build", "tokenizer", "production"),
        _pushed("e3", "gated", "model", "registered", ((NOW - 2 * H, "release", "pass"),)),
    ])
    events = ind.registry_control(obj.params, rows, START, NOW)
    # the processor pages on neither catalog entry: the SLO burns no budget on them either
    assert [(e.run_ids, e.good) for e in events] == [(("gated",), True)]
    assert status(obj, events, NOW).state == "ok"


@pytest.mark.parametrize(("kind", "reg_status"), [
    ("model", "Production "),      # a template's trailing space
    ("Model", "registered"),       # the kind as a registry spells it
    (" MODEL", "deployed"),
    ("model", "Staging"),
    ("model", "approved"),         # SageMaker's model approval status
])
def test_an_ungated_model_in_any_spelling_is_a_bad_event(kind: str, reg_status: str) -> None:
    obj = one("{kind: registry_control, family: fam}", target="0.99")
    rows = _registry_rows([_pushed("e1", "ungated", kind, reg_status)])
    events = ind.registry_control(obj.params, rows, START, NOW)
    assert [(e.key, e.good) for e in events] == [("e1", False)]
    st = status(obj, events, NOW)
    assert st.state == "exhausted" and st.bad[0].run_ids == ("ungated",)


def test_statuses_named_in_the_file_compare_as_the_processor_spells_them() -> None:
    obj = one("{kind: registry_control, statuses: [Production, In Production]}")
    assert obj.params["statuses"] == ("production", "in_production")
    rows = _registry_rows([
        _pushed("e1", "a", "model", "production "),
        _pushed("e2", "b", "model", "in-production"),
        _pushed("e3", "c", "model", "registered"),  # not one of this objective's statuses
    ])
    assert [e.key for e in ind.registry_control(obj.params, rows, START, NOW)] == ["e1", "e2"]


def test_an_approved_review_before_the_registration_allows_it() -> None:
    obj = one("{kind: registry_control}")
    rows = _registry_rows([
        _pushed("e1", "reviewed", "model", "registered",
                ((NOW - 3 * H, "release", "review"), (NOW - 2 * H, "release", "pass"))),
        _pushed("e2", "withdrawn", "model", "registered",
                ((NOW - 3 * H, "release", "pass"), (NOW - 2 * H, "release", "fail"))),
    ])
    got = {e.key: e.good for e in ind.registry_control(obj.params, rows, START, NOW)}
    assert got == {"e1": True, "e2": False}


# ----------------------------------------------------------- burn rates


def _spaced(n: int, bad: int, span_ms: int) -> list[ind.SliEvent]:
    """``n`` events spread over the last ``span_ms``, the first ``bad`` of them bad."""
    return [ind.SliEvent(f"r{i}", NOW - span_ms + (i + 1) * span_ms // (n + 1), i >= bad,
                         (f"r{i}",)) for i in range(n)]


def _tier_6h() -> str:
    return "  alertPolicy: {burnRates: [{budget: 0.05, longWindow: 6h}], minEvents: 10}\n"


def test_a_tier_fires_at_its_rate_as_written() -> None:
    # 3 bad of 50 within 6 h (and its 30-minute short window burning as fast) under 99 %:
    # a burn rate of 6.0, the rate of 5 % of a 30-day budget in 6 h
    obj = one("{kind: training_window, family: f, maxDuration: 1h}", target="0.99",
              extra=_tier_6h())
    events = _spaced(50, 0, 6 * H)
    late = [ind.SliEvent(f"s{i}", NOW - 30 * M + (i + 1) * 30 * M // 10, i >= 1, (f"s{i}",))
            for i in range(9)]  # 1 bad of 9 in the short window: 11.1, over 6
    bad_early = [ind.SliEvent(f"b{i}", NOW - 5 * H + i * M, False, (f"b{i}",)) for i in range(2)]
    events = events[:39] + bad_early + late  # 50 in 6 h, 3 bad
    assert len(events) == 50 and sum(not e.good for e in events) == 3
    st = status(obj, events, NOW)
    assert st.burn_rates["6h"] == pytest.approx(6.0)
    assert [c.name for c in st.conditions if c.name == "burn_rate"] == ["burn_rate"]


def test_a_tier_below_its_rate_stays_quiet() -> None:
    obj = one("{kind: training_window, family: f, maxDuration: 1h}", target="0.99",
              extra=_tier_6h())
    events = [*_spaced(48, 0, 6 * H),
              *(ind.SliEvent(f"b{i}", NOW - M * (i + 1), False, (f"b{i}",)) for i in range(2))]
    st = status(obj, events, NOW)
    assert st.burn_rates["6h"] == pytest.approx(4.0)
    assert not [c for c in st.conditions if c.name == "burn_rate"]


def test_the_workbook_tiers_are_unchanged() -> None:
    tiers = one("{kind: training_window, family: f, maxDuration: 1h}").alerting.tiers
    assert [round(t.rate(30 * D), 6) for t in tiers] == [14.4, 6.0, 1.0]
    assert burn.burn_threshold(0.05, 30 * D, 6 * H) == pytest.approx(6.0)


def test_a_tier_of_no_budget_is_refused() -> None:
    with pytest.raises(SloConfigError, match=r"slos.yaml:10: spec.alertPolicy.burnRates\[0\]"
                                             r".budget: must be a share of the budget above 0"):
        one("{kind: training_window, family: f, maxDuration: 1h}",
            extra="  alertPolicy:\n    burnRates: [{budget: 0, longWindow: 1h}]\n")


# ----------------------------------------------------------- controls


def test_a_100_percent_target() -> None:
    obj = one("{kind: training_window, family: f, maxDuration: 1h}", target="1")
    good = [ind.SliEvent("a", NOW - H, True, ("a",))]
    st = status(obj, good, NOW)
    assert (st.state, st.budget_consumed, st.conditions) == ("ok", 0.0, ())
    st = status(obj, [*good, ind.SliEvent("b", NOW - M, False, ("b",))], NOW)
    out = st.to_json()
    assert st.state == "exhausted" and out["budget_left"] is None and out["sli"] == 0.5


def test_no_events_is_no_data_and_a_firing_alert_stays() -> None:
    obj = one("{kind: training_window, family: f, maxDuration: 1h}", target="0.95")
    bad = [ind.SliEvent(f"r{i}", NOW - i * H, i > 2, (f"r{i}",)) for i in range(20)]
    book, fired = decide(obj, status(obj, bad, NOW), None, "execution", SRC, NOW)
    assert [a.status for a in fired] == ["firing"]
    st = status(obj, [], NOW + M)
    assert st.state == "no_data" and st.sli is None and st.budget_left is None
    book2, none = decide(obj, st, book, "execution", SRC, NOW + M)
    assert none == [] and book2 == book


def test_a_window_shorter_than_a_run_counts_the_run_at_its_end() -> None:
    p = one("{kind: training_window, family: f, maxDuration: 3h}", window="1h").params
    rows = [ind.RunRow("long", NOW - 2 * H, NOW - 10 * M, "succeeded", "f"),
            ind.RunRow("ended-before", NOW - 4 * H, NOW - 2 * H, "succeeded", "f"),
            ind.RunRow("going", NOW - 2 * H, None, "running", "f")]
    events = ind.training_window(p, rows, NOW - H, NOW)
    assert [(e.key, e.good) for e in events] == [("long", True)]


def test_a_budget_spent_recovers_as_the_window_rolls_on() -> None:
    obj = one("{kind: training_window, family: f, maxDuration: 1h}", target="0.9", window="1d")
    bad = [ind.SliEvent(f"b{i}", NOW - 20 * H + i * M, False, (f"b{i}",)) for i in range(3)]
    good = [ind.SliEvent(f"g{i}", NOW - 10 * H + i * H, True, (f"g{i}",)) for i in range(10)]
    book, fired = decide(obj, status(obj, [*bad, *good], NOW), None, "execution", SRC, NOW)
    assert [(a.status, a.labels["slo_condition"]) for a in fired] == [
        ("firing", "budget_exhausted")]
    later = NOW + 5 * H  # the bad runs left the day; ten good runs remain in it
    st = status(obj, [*bad, *good], later)
    assert (st.good, st.valid, st.state) == (10, 10, "ok")
    _book, resolved = decide(obj, st, book, "execution", SRC, later)
    assert [a.status for a in resolved] == ["resolved"]


# ----------------------------------------------------------- gates

POLICY = """version: 1
policies:
  - name: churn-release
    match: {family: churn}
    primary: log_loss
    metrics:
      auc: {min: 0.75}
      log_loss: {max: 0.5}
    incumbent: {margin: -0.01}
"""


def _gate(metrics: dict[str, float], incumbent: dict[str, float] | None = None) -> str:
    policy = parse_policies(POLICY, "gates.yaml").policies[0]
    cand = RunEvidence("cand", family="churn", code_revision="abc", evaluations={
        "": Evaluation("", metrics, dataset="s3://eval@v1", incumbent_run_id="inc")})
    inc = RunEvidence("inc", family="churn", code_revision="abc", evaluations={
        "": Evaluation("", incumbent or {}, dataset="s3://eval@v1")}) if incumbent else None
    return gate_decide(policy, Evidence(candidate=cand, incumbent=inc)).decision


@pytest.mark.parametrize(("metrics", "incumbent", "verdict"), [
    ({"auc": 0.8, "log_loss": 0.4}, {"auc": 0.79, "log_loss": 0.41}, "pass"),   # healthy
    ({"auc": 0.8}, {"auc": 0.79, "log_loss": 0.41}, "review"),                 # log_loss missing
    ({"auc": 0.7, "log_loss": 0.4}, {"auc": 0.79, "log_loss": 0.41}, "fail"),  # auc below min
    ({"auc": 0.8, "log_loss": 0.6}, {"auc": 0.79, "log_loss": 0.41}, "fail"),  # loss above max
    # lower is better for a loss: 0.43 vs 0.41 is a change of -0.02, below the margin
    ({"auc": 0.8, "log_loss": 0.43}, {"auc": 0.79, "log_loss": 0.41}, "fail"),
    ({"auc": 0.8, "log_loss": 0.42}, {"auc": 0.79, "log_loss": 0.41}, "pass"),  # -0.01: met
    ({"auc": 0.8, "log_loss": 0.4}, None, "review"),                            # no incumbent
])
def test_gate_decisions_on_missing_failed_and_passing_evidence(
        metrics: dict[str, float], incumbent: dict[str, float] | None, verdict: str) -> None:
    assert _gate(metrics, incumbent) == verdict


# ----------------------------------------------------------- escalation


def _twenty(bad: int) -> list[ind.SliEvent]:
    return [ind.SliEvent(f"r{i}", NOW - (i + 1) * H, i >= bad, (f"r{i}",), detail=f"run r{i}")
            for i in range(20)]


def test_a_warning_whose_budget_is_then_exhausted_pages_as_critical() -> None:
    # 95 % of 20 runs: one bad run warns (the next exhausts the budget); the next does
    obj = one("{kind: training_window, family: f, maxDuration: 2h}", target="0.95")
    book, warned = decide(obj, status(obj, _twenty(1), NOW), None, "execution", SRC, NOW)
    assert [(a.status, a.severity) for a in warned] == [("firing", "warning")]
    book, paged = decide(obj, status(obj, _twenty(2), NOW + M), book, "execution", SRC, NOW + M)
    assert [(a.status, a.severity) for a in paged] == [("resolved", "warning"),
                                                       ("firing", "critical")]
    assert paged[0].alert_id == warned[0].alert_id != paged[1].alert_id
    assert paged[1].labels["slo_condition"] == "budget_exhausted"
    assert paged[1].labels["bad_runs"] == "r0,r1" and paged[1].run_id is None
    # still exhausted: nothing new; back to a warning only: the critical alert stays firing
    book, again = decide(obj, status(obj, _twenty(2), NOW + 2 * M), book, "execution", SRC,
                         NOW + 2 * M)
    assert again == []
    recovered = [*_twenty(2), *(ind.SliEvent(f"x{i}", NOW + 2 * M, True, (f"x{i}",))
                                for i in range(20))]
    st = status(obj, recovered, NOW + 3 * M)
    assert st.state == "burning" and {c.severity for c in st.conditions} == {"warning"}
    _book, quiet = decide(obj, st, book, "execution", SRC, NOW + 3 * M)
    assert quiet == []


def test_a_critical_page_first_is_sent_once() -> None:
    obj = one("{kind: training_window, family: f, maxDuration: 2h}", target="0.95")
    book, paged = decide(obj, status(obj, _twenty(3), NOW), None, "execution", SRC, NOW)
    assert [(a.status, a.severity) for a in paged] == [("firing", "critical")]
    _book, again = decide(obj, status(obj, _twenty(4), NOW + M), book, "execution", SRC,
                          NOW + M)
    assert again == []


# ----------------------------------------------------------- a target's figures


def test_a_target_of_99_95_percent_is_not_shown_as_100(capsys: pytest.CaptureFixture[str],
                                                         ) -> None:
    from runwatch.commands.slo import print_statuses

    obj = one("{kind: registry_control}", target="0.9995")
    events = [ind.SliEvent(f"e{i}", NOW - i * M, i != 0, (f"r{i}",)) for i in range(100)]
    st = status(obj, events, NOW)
    _book, alerts = decide(obj, st, None, "artifact", SRC, NOW)
    assert alerts[0].title.endswith("SLI 99/100 = 99.0% (target 99.95%)"), alerts[0].title
    print_statuses([st])
    table = capsys.readouterr().out
    assert "99.95%" in table and "100.0%" not in table
