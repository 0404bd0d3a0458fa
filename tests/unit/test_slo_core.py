"""SLO core: the file, cutoffs and windows, burn-rate maths, every indicator kind, alerts.

Indicator kinds are tested on hand-made event tables (the rows the
evaluator's queries return), with window edges, time zones, empty windows
and late events. Burn-rate maths is checked against the worked examples of
the Google SRE workbook, chapter "Alerting on SLOs".
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from runwatch.core.records import Source
from runwatch.core.slo import burn
from runwatch.core.slo import indicators as ind
from runwatch.core.slo.evaluate import decide, probable_cause, status
from runwatch.core.slo.spec import KINDS, REQUIRED, SloConfigError, parse_slos
from runwatch.core.slo.timewin import Window, cutoffs, next_cutoff, parse_cron, zone

ROOT = Path(__file__).resolve().parents[2]
H = 3_600_000
M = 60_000
D = 24 * H


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


def doc(indicator: str, target: str = "0.9", extra: str = "", window: str = "30d") -> str:
    return f"""apiVersion: openslo/v1
kind: SLO
metadata:
  name: x
spec:
  indicator:
    spec: {indicator}
  timeWindow: [{{duration: {window}, isRolling: true}}]
  objectives: [{{target: {target}}}]
{extra}"""


def one(indicator: str, **kw: Any) -> Any:
    return parse_slos(doc(indicator, **kw), "slos.yaml")[0]


# ------------------------------------------------------------------ the file


def test_the_shipped_example_covers_every_kind() -> None:
    path = ROOT / "infra" / "slo" / "slos.yaml"
    objs = parse_slos(path.read_text(), str(path))
    assert {o.kind for o in objs} == set(KINDS)
    window = next(o for o in objs if o.kind == "training_window")
    assert window.params["family"] == "llm-pretrain" and window.params["max_duration_ms"] == H
    assert window.owner == "foundation" and window.window.duration_ms == 30 * D


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (doc("{kind: training_window, family: f, maxDuration: 2h, colour: red}"),
         "slos.yaml:7: spec.indicator.spec.colour: unknown key for kind training_window"),
        (doc("{kind: training_window, maxDuration: 2h}"),
         "slos.yaml:7: spec.indicator.spec: kind training_window needs 'family'"),
        (doc("{kind: training_window, family: f}"),
         "needs 'maxDuration' or 'deadline'"),
        (doc("{kind: data_availability, dataset: d, cutoff: '0 25 * * *'}"),
         "slos.yaml:7: spec.indicator.spec.cutoff: '25' is outside 0-23 in the hour field"),
        # a day no month it names has: the cutoff never came (no data for ever), a deadline
        # never bound a run (every run on time)
        (doc("{kind: data_availability, dataset: d, cutoff: '0 6 31 2 *'}"),
         "slos.yaml:7: spec.indicator.spec.cutoff: cron expression '0 6 31 2 *' never fires: "
         "no month it names has day 31"),
        (doc("{kind: training_window, family: f, deadline: '0 6 31 4,6,9,11 *'}"),
         "spec.indicator.spec.deadline: cron expression '0 6 31 4,6,9,11 *' never fires"),
        (doc("{kind: data_availability, dataset: d, cutoff: '0 6 * * *', timeZone: Mars/Base}"),
         "spec.indicator.spec.timeZone: unknown time zone 'Mars/Base'"),
        (doc("{kind: training_window, family: f, maxDuration: soon}"),
         "spec.indicator.spec.maxDuration: bad duration 'soon'"),
        (doc("{kind: teleport}"), "spec.indicator.spec.kind: unknown indicator kind 'teleport'"),
        (doc("{kind: fairness, team: t, quota: 1.5}"),
         "spec.indicator.spec.quota: must be between 0 and 1"),
        # a negative tolerance made every repeat group's spread a bad event
        (doc("{kind: reproducibility, family: f, metric: auc, tolerance: -1}"),
         "slos.yaml:7: spec.indicator.spec.tolerance: must be a finite number >= 0, got '-1'"),
        (doc("{kind: resumability, maxLoss: 30m}", target="99.9"),
         "slos.yaml:9: spec.objectives[0].target: 99.9: a target is a ratio in (0, 1]"),
        (doc("{kind: resumability, maxLoss: 30m}", window="forever"),
         "slos.yaml:8: spec.timeWindow[0].duration: bad duration 'forever'"),
        (doc("{kind: resumability, maxLoss: 30m}", extra="  alertPolicy: {minEvents: 0}\n"),
         "slos.yaml:10: spec.alertPolicy.minEvents: must be a positive integer"),
        (doc("{kind: resumability, maxLoss: 30m}").replace("openslo/v1", "openslo/v2"),
         "slos.yaml:1: apiVersion: 'openslo/v2': only 'openslo/v1' is read"),
        # both lines are the metadata.name lines, not the documents' first lines
        (doc("{kind: resumability, maxLoss: 30m}") + "---\n"
         + doc("{kind: resumability, maxLoss: 30m}"),
         "slos.yaml:14: metadata.name: 'x' is already defined at slos.yaml:4"),
        # a window reaching back before year 1 crashed `slo status --json` (its start date)
        (doc("{kind: resumability, maxLoss: 30m}", window="800000d"),
         "slos.yaml:8: spec.timeWindow[0].duration: '800000d' is longer than ten years"),
        (doc("{kind: resumability, maxLoss: 30m}", extra=(
            "  alertPolicy:\n    burnRates: [{budget: 0.1, longWindow: 800000d}]\n")),
         "slos.yaml:11: spec.alertPolicy.burnRates[0].longWindow: '800000d' is longer than ten"),
        ("apiVersion: [", "slos.yaml:1: invalid YAML"),
    ],
)
def test_invalid_files_name_file_line_and_key(text: str, expected: str) -> None:
    with pytest.raises(SloConfigError) as err:
        parse_slos(text, "slos.yaml")
    assert expected in str(err.value)


def test_alert_policy_tiers_and_calendar_window() -> None:
    text = doc("{kind: resumability, maxLoss: 30m}", extra=(
        "  alertPolicy:\n    burnRates: [{budget: 0.1, longWindow: 6h, severity: warning}]\n"))
    text = text.replace("[{duration: 30d, isRolling: true}]",
                        "[{duration: 1M, isRolling: false, calendar: {timeZone: Asia/Tokyo}}]")
    obj = parse_slos(text, "s.yaml")[0]
    assert obj.alerting.tiers == (burn.BurnTier(0.1, 6 * H, 30 * M, "warning"),)
    assert obj.window.calendar == "month" and obj.window.tz == "Asia/Tokyo"
    # 2026-12-01T00:00 in Tokyo is 2026-11-30T15:00Z: the window starts there
    now = ms("2026-12-10T00:00:00")
    assert obj.window.start(now) + 1 == ms("2026-11-30T15:00:00")
    assert obj.window.length_ms(now) == 31 * D
    # shown as the window's first instant (its exclusive start is a millisecond earlier,
    # which showed as 14:59:59Z)
    st = status(obj, [], now, obj.window.start(now))
    assert st.to_json()["window_start"] == "2026-11-30T15:00:00Z"


# ------------------------------------------------------------------ time


def test_cutoffs_follow_the_time_zone_across_daylight_saving() -> None:
    berlin = zone("Europe/Berlin")
    six = parse_cron("0 6 * * *")
    got = cutoffs(six, berlin, ms("2026-03-27T00:00:00"), ms("2026-03-31T00:00:00"))
    # 06:00 CET is 05:00Z until 29 March, 06:00 CEST 04:00Z from then on
    assert got == [ms("2026-03-27T05:00:00"), ms("2026-03-28T05:00:00"),
                   ms("2026-03-29T04:00:00"), ms("2026-03-30T04:00:00")]


def test_skipped_and_repeated_local_times() -> None:
    berlin = zone("Europe/Berlin")
    half_two = parse_cron("30 2 * * *")
    # 02:30 does not exist on 29 March (02:00 -> 03:00): it falls after the gap, once
    spring = cutoffs(half_two, berlin, ms("2026-03-29T00:00:00"), ms("2026-03-29T12:00:00"))
    assert spring == [ms("2026-03-29T01:30:00")]
    # 02:30 happens twice on 25 October: it counts once, at its first occurrence (CEST)
    autumn = cutoffs(half_two, berlin, ms("2026-10-25T00:00:00"), ms("2026-10-25T12:00:00"))
    assert autumn == [ms("2026-10-25T00:30:00")]


def test_window_edges_are_exclusive_inclusive_and_cron_day_rules() -> None:
    utc = zone("UTC")
    hourly = parse_cron("0 * * * *")
    assert cutoffs(hourly, utc, ms("2026-12-01T01:00:00"), ms("2026-12-01T03:00:00")) == [
        ms("2026-12-01T02:00:00"), ms("2026-12-01T03:00:00")]
    # day of month and day of week both restricted: either matches (cron)
    friday_13 = parse_cron("0 0 13 * 5")
    days = [datetime.fromtimestamp(t / 1000, UTC).day for t in
            cutoffs(friday_13, utc, ms("2026-11-01T00:00:00"), ms("2026-11-30T00:00:00"))]
    assert days == [6, 13, 20, 27]  # Fridays of November 2026, and the 13th (itself a Friday)
    weekdays = parse_cron("0 6 * * 1-5")
    assert next_cutoff(weekdays, utc, ms("2026-12-04T07:00:00")) == ms("2026-12-07T06:00:00")
    assert parse_cron("0 6 29 2 *").days == {29}  # leap days fire
    assert parse_cron("0 6 31 2 1").weekdays == {1}  # either day field: every Monday of February
    for bad in ("0 6 * *", "*/0 * * * *", "x * * * *", "5-1 * * * *", "0 6 30,31 2 *"):
        with pytest.raises(ValueError, match="cron expression|field"):
            parse_cron(bad)


# ------------------------------------------------------------------ burn-rate maths


def test_burn_thresholds_of_the_sre_workbook() -> None:
    # SRE workbook, table 5-8 (99.9 % over 30 days): 2 % of the budget in 1 h = 14.4,
    # 5 % in 6 h = 6, 10 % in 3 days = 1
    month = 30 * D
    assert burn.burn_threshold(0.02, month, H) == pytest.approx(14.4)
    assert burn.burn_threshold(0.05, month, 6 * H) == pytest.approx(6.0)
    assert burn.burn_threshold(0.10, month, 72 * H) == pytest.approx(1.0)
    assert [t.rate(month) for t in burn.default_tiers()] == pytest.approx([14.4, 6.0, 1.0])
    assert [t.short_ms for t in burn.default_tiers()] == [5 * M, 30 * M, 6 * H]
    # 99.9 %: an error ratio of 1.44 % burns at 14.4; of 0.1 % at exactly 1 (budget lasts
    # the window)
    assert burn.burn_rate(144, 10_000, 0.999) == pytest.approx(14.4)
    assert burn.burn_rate(1, 1000, 0.999) == pytest.approx(1.0)
    assert burn.burn_rate(0, 0, 0.999) is None
    assert burn.burn_rate(1, 10, 1.0) == float("inf")


def test_budget_exhausted_and_next_bad_event() -> None:
    assert burn.budget_consumed(3, 20, 0.9) == pytest.approx(1.5)
    assert burn.budget_consumed(0, 0, 0.9) is None
    assert burn.exhausted(3, 20, 0.9) and not burn.exhausted(2, 20, 0.9)
    # 2 bad of 20 at 90 %: exactly the budget; one more (3 of 21) exhausts it
    assert burn.next_bad_exhausts(2, 20, 0.9)
    assert not burn.next_bad_exhausts(0, 20, 0.9)
    assert not burn.next_bad_exhausts(3, 20, 0.9)  # already exhausted
    # 99 % of one good registration: a budget under one event, nothing spent yet: no warning
    assert not burn.next_bad_exhausts(0, 1, 0.99)
    assert burn.exhausted(1, 2, 0.99)


def _traffic(now: int, per_hour: int, hours: int, bad_share_last_h: float,
             bad_in_short: bool = True) -> list[tuple[int, bool]]:
    out = []
    step = H // per_hour
    for i in range(per_hour * hours):
        at = now - i * step
        recent = now - at < H
        short = now - at < 5 * M
        bad = recent and (i % int(1 / bad_share_last_h) == 0) and (bad_in_short or not short)
        out.append((at, not bad))
    return out


def test_multiwindow_tiers_fire_only_while_the_short_window_burns() -> None:
    now = ms("2026-12-01T12:00:00")
    tiers = burn.default_tiers()
    # 1000 events an hour, 2 % of them bad in the last hour: 20x over a 99.9 % budget
    burning = burn.burn_conditions(_traffic(now, 1000, 80, 0.02), now, 30 * D, 0.999, tiers, 10)
    assert [c.severity for c in burning] == ["critical"]
    assert "threshold 14.4" in burning[0].detail
    # the same hour, but the last 5 minutes clean: the problem ended, the page resets
    ended = burn.burn_conditions(_traffic(now, 1000, 80, 0.02, bad_in_short=False), now,
                                 30 * D, 0.999, tiers, 10)
    assert ended == []


def test_low_event_rates_need_min_events_for_a_burn_rate() -> None:
    now = ms("2026-12-01T12:00:00")
    events = [(now - 10 * M, False), (now - 2 * D, True)]  # two runs, the last one bad
    tiers = burn.default_tiers()
    assert burn.burn_conditions(events, now, 30 * D, 0.95, tiers, min_events=10) == []
    fired = burn.burn_conditions(events, now, 30 * D, 0.95, tiers, min_events=1)
    assert fired and fired[0].name == "burn_rate"


# ------------------------------------------------------------------ indicator kinds

NOW = ms("2026-12-01T12:00:00")
START = NOW - 30 * D


def _params(kind: str, **given: Any) -> dict[str, Any]:
    out = {}
    for _key, (name, _parse, default) in KINDS[kind].items():
        out[name] = None if default is REQUIRED else default
    out.update(given)
    return out


def test_training_window_runs() -> None:
    p = _params("training_window", family="f", max_duration_ms=2 * H, deadline=None)
    t0 = NOW - 10 * H
    rows = [
        ind.RunRow("ok", t0, t0 + 2 * H, "succeeded"),                 # exactly the limit: good
        ind.RunRow("late", t0, t0 + 2 * H + 1, "succeeded"),           # a millisecond over
        ind.RunRow("failed", t0, t0 + H, "failed"),
        ind.RunRow("going", NOW - H, None, "running"),                 # within its 2 h: no event
        ind.RunRow("stuck", NOW - 3 * H, None, "running"),             # overrunning now
        ind.RunRow("old", START - 3 * H, START - H, "succeeded"),      # ended before the window
        ind.RunRow("edge", START - 2 * H, START, "succeeded"),         # at the exclusive start
    ]
    events = {e.key: e for e in ind.training_window(p, rows, START, NOW)}
    assert set(events) == {"ok", "late", "failed", "stuck"}
    assert [k for k, e in events.items() if e.good] == ["ok"]
    assert events["stuck"].at_ms == NOW - H  # the instant it overran
    assert "still running" in events["stuck"].detail
    assert ind.training_window(p, [], START, NOW) == []


def test_training_window_deadline_in_a_time_zone() -> None:
    # nightly retrain done by 06:00 Berlin (05:00Z in December)
    p = _params("training_window", family="f", max_duration_ms=None,
                deadline=parse_cron("0 6 * * *"), tz="Europe/Berlin")
    start = ms("2026-12-01T01:00:00")
    rows = [ind.RunRow("on-time", start, ms("2026-12-01T04:59:00"), "succeeded"),
            ind.RunRow("after", start, ms("2026-12-01T05:01:00"), "succeeded")]
    got = {e.key: e.good for e in ind.training_window(p, rows, START, NOW)}
    assert got == {"on-time": True, "after": False}


def test_data_availability_cutoffs_late_and_failing_reports() -> None:
    p = _params("data_availability", dataset="s3://lake/ads/*", cutoff=parse_cron("0 6 * * *"),
                tz="Europe/Berlin", version_pattern="v*")
    now = ms("2026-12-04T12:00:00")
    start = ms("2026-12-01T12:00:00")  # cutoffs in the window: 2, 3 and 4 Dec, 05:00Z

    def rep(at: str, version: str = "v1", failures: int = 0, uri: str = "s3://lake/ads/a"):
        return ind.DataReportRow(ms(at), version, 100, failures, 0, "", uri)

    rows = [
        rep("2026-12-02T04:00:00"),                      # before the 2 Dec cutoff: good
        rep("2026-12-03T05:00:01"),                      # a second after the 3 Dec cutoff: late
        rep("2026-12-03T04:00:00", failures=3),          # on time but failing
        rep("2026-12-03T04:30:00", uri="s3://lake/perception/x"),  # another dataset
        rep("2026-12-04T01:00:00", version="draft"),     # on time, unapproved version
    ]
    events = ind.data_availability(p, rows, start, now)
    assert [(e.key.split("@")[1], e.good) for e in events] == [
        ("2026-12-02T05:00:00Z", True), ("2026-12-03T05:00:00Z", False),
        ("2026-12-04T05:00:00Z", True)]  # the late 3 Dec report counts for 4 Dec
    # a report stored late, timed before the 3 Dec cutoff: the next evaluation counts it
    events = ind.data_availability(p, [*rows, rep("2026-12-03T03:00:00")], start, now)
    assert all(e.good for e in events)
    assert ind.data_availability(p, [], start, now) == []  # no report at all: no data
    # a dataset first seen on 3 Dec: the 2 Dec cutoff is no event
    late_start = ind.data_availability(p, [rep("2026-12-03T04:00:00")], start, now)
    assert [(e.key.split("@")[1], e.good) for e in late_start] == [
        ("2026-12-03T05:00:00Z", True), ("2026-12-04T05:00:00Z", False)]


def test_data_availability_looks_up_one_previous_cutoff_per_evaluation(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # each cutoff's "since the previous cutoff" was searched afresh: a 15-minute cron over
    # 30 days took 8 s a round, every 5 minutes 70 s (longer than the evaluator's interval)
    p = _params("data_availability", dataset="s3://d", cutoff=parse_cron("*/15 * * * *"),
                tz="Europe/Berlin", version_pattern="*")
    now = ms("2026-10-27T12:00:00")  # the window holds the night clocks went back
    start = now - 7 * D
    rows = [ind.DataReportRow(start - D + i * 20 * M, "v1", 10, 0, 0, "r", "s3://d")
            for i in range(8 * 72) if i % 50]  # every 20 minutes, with gaps
    calls = []
    real = ind.previous_cutoff
    monkeypatch.setattr(ind, "previous_cutoff",
                        lambda *a, **k: calls.append(a) or real(*a, **k))
    events = ind.data_availability(p, rows, start, now)
    assert len(calls) == 1
    assert len(events) == 7 * 96 - 4  # the repeated hour's cutoffs count once
    # each event still judged since its own previous cutoff: the reports every 20 minutes
    # leave one 15-minute span in three without a report, the gaps one more
    prev = {e.at_ms: real(p["cutoff"], zone("Europe/Berlin"), e.at_ms) for e in events}
    times = [r.at_ms for r in rows]
    assert [e.good for e in events] == [any(prev[e.at_ms] < t <= e.at_ms for t in times)
                                        for e in events]
    assert 0 < sum(not e.good for e in events) < len(events)


def test_evaluation_retained_with_grace() -> None:
    p = _params("evaluation_retained", family="f")
    rows = [
        ind.RetainedRow("kept", NOW - 5 * H, "succeeded", 3, 1),
        ind.RetainedRow("no-gate", NOW - 5 * H, "succeeded", 3, 0),
        ind.RetainedRow("nothing", NOW - 5 * H, "succeeded", 0, 0),
        ind.RetainedRow("fresh", NOW - 30 * M, "succeeded", 0, 0),  # inside its 1 h grace
        ind.RetainedRow("failed", NOW - 5 * H, "failed", 0, 0),     # only successes count
    ]
    got = {e.key: (e.good, e.detail) for e in ind.evaluation_retained(p, rows, START, NOW)}
    assert set(got) == {"kept", "no-gate", "nothing"}
    assert got["kept"][0] and not got["no-gate"][0]
    assert got["nothing"][1] == "run nothing: no validation results and no gate decision stored"


def test_registry_control_needs_a_gate_before_registration() -> None:
    p = _params("registry_control")
    at = NOW - H
    rows = [
        ind.RegistryRow("e1", "gated", at, "s3://m/1", "registered", ((at - M, "eval", "pass"),)),
        ind.RegistryRow("e2", "ungated", at, "s3://m/2", "Registered", ()),
        ind.RegistryRow("e3", "gated-after", at, "s3://m/3", "registered",
                        ((at + M, "eval", "pass"),)),
        # a review approved by a human (runwatch gate approve: a pass naming the review)
        ind.RegistryRow("e4", "approved", at, "s3://m/4", "production",
                        ((at - 2 * M, "eval", "review"), (at - M, "eval", "pass"))),
        # a pass withdrawn by a later fail of the same gate
        ind.RegistryRow("e5", "withdrawn", at, "s3://m/5", "registered",
                        ((at - 2 * M, "eval", "pass"), (at - M, "eval", "fail"))),
        ind.RegistryRow("e6", "none", at, "s3://m/6", "archived", ()),  # not a registry status
        ind.RegistryRow("e7", "old", START, "s3://m/7", "registered", ()),  # at the window start
    ]
    got = {e.run_ids[0]: e.good for e in ind.registry_control(p, rows, START, NOW)}
    assert got == {"gated": True, "ungated": False, "gated-after": False, "approved": True,
                   "withdrawn": False}


def test_resumability_lost_work() -> None:
    p = _params("resumability", max_loss_ms=30 * M)
    pre = NOW - H
    rows = [
        ind.PreemptionRow("close", pre, (pre - 10 * M, pre - 40 * M), (pre - 2 * H,)),
        ind.PreemptionRow("far", pre, (pre - 45 * M,), (pre - 2 * H,)),
        ind.PreemptionRow("no-ckpt", pre, (), (pre - 20 * M,)),      # since its start: 20 min
        ind.PreemptionRow("later-ckpt", pre, (pre + M,), (pre - 50 * M,)),  # after: not counted
    ]
    got = {e.run_ids[0]: (e.good, e.observed) for e in ind.resumability(p, rows, START, NOW)}
    assert got == {"close": (True, 10.0), "far": (False, 45.0), "no-ckpt": (True, 20.0),
                   "later-ckpt": (False, 50.0)}


def test_reproducibility_groups() -> None:
    p = _params("reproducibility", family="f", metric="accuracy", tolerance=0.02)
    at = NOW - H
    rows = [ind.ReproRow("a1", "g1", at, 0.80), ind.ReproRow("a2", "g1", at, 0.81),
            ind.ReproRow("a3", "g1", at, 0.70), ind.ReproRow("solo", "g2", at, 0.1),
            ind.ReproRow("old", "g3", START - D, 0.5), ind.ReproRow("old2", "g3", at, 0.9)]
    got = {e.key: e.good for e in ind.reproducibility(p, rows, START, NOW)}
    # median of g1 is 0.80; a lone run (g2) and a group with one run in the window are no events
    assert got == {"a1": True, "a2": True, "a3": False}
    rel = _params("reproducibility", family="f", metric="loss", tolerance=0.1, relative=True)
    rows = [ind.ReproRow("b1", "g", at, 10.0), ind.ReproRow("b2", "g", at, 10.5),
            ind.ReproRow("b3", "g", at, 12.0)]
    assert {e.key: e.good for e in ind.reproducibility(rel, rows, START, NOW)} == {
        "b1": True, "b2": True, "b3": False}


def test_reproducibility_a_run_exactly_tolerance_from_the_median_is_good() -> None:
    # 0.81 - 0.80 is 0.010000000000000009 in floats: "0.01 from the median (at most 0.01)"
    # was a bad event
    p = one("{kind: reproducibility, family: f, metric: auc, tolerance: 0.01}").params
    values = [0.81] * 7 + [0.80, 0.7999]
    rows = [ind.ReproRow(f"r{i}", "g", NOW - H, v) for i, v in enumerate(values)]
    got = {e.key: e.good for e in ind.reproducibility(p, rows, START, NOW)}
    assert (got["r7"], got["r8"]) == (True, False)
    assert all(got[f"r{i}"] for i in range(7))


def test_the_longest_window_is_ten_years() -> None:
    assert one("{kind: resumability, maxLoss: 30m}", window="3660d").window.duration_ms == 3660 * D


@pytest.mark.parametrize("values", [
    (0.80, 0.81, math.nan), (math.nan, 0.80, 0.81), (0.80, math.nan, 0.81), (0.80, math.inf, 0.81)])
def test_reproducibility_a_non_finite_value_is_bad_and_moves_no_median(
        values: tuple[float, ...]) -> None:
    # one NaN accuracy among repeats made the median NaN (or not, by the rows' order):
    # every run of the group bad, or the NaN run compared with nothing
    p = _params("reproducibility", family="f", metric="acc", tolerance=0.02)
    rows = [ind.ReproRow(f"r{i}", "g", NOW - H, v) for i, v in enumerate(values)]
    events = {e.key: e for e in ind.reproducibility(p, rows, START, NOW)}
    bad = {f"r{i}" for i, v in enumerate(values) if not math.isfinite(v)}
    assert {k: e.good for k, e in events.items()} == {
        f"r{i}": f"r{i}" not in bad for i in range(len(values))}
    for k in bad:
        assert events[k].observed is None and "not a finite number" in events[k].detail
    assert sorted(round(e.observed or 0, 4) for k, e in events.items() if k not in bad) == [
        0.005, 0.005]  # median 0.805 of the two finite values


def _usage(run_id: str, team: str, start: int, end: int, gpus: int) -> ind.UsageRow:
    """A run of ``gpus`` GPUs running from ``start`` until it succeeded at ``end``."""
    return ind.UsageRow(run_id, team, ((start, "running", gpus), (end, "succeeded", 0)))


def test_fairness_shares_per_bucket() -> None:
    p = _params("fairness", team="a", quota=0.6)
    day = ms("2026-11-30T00:00:00")
    rows = [
        _usage("a1", "a", day, day + 12 * H, 8),         # 96 GPU-h of team a on the 30th
        _usage("b1", "b", day, day + 12 * H, 4),         # 48 of team b: a has 2/3
        _usage("b2", "b", day + D, day + D + 12 * H, 8),  # 1 Dec: only b (bucket unfinished)
        _usage("a2", "a", day - D, day - 12 * H, 1),     # 29 Nov: a alone, 100 %
        _usage("c1", "c", day - D, day - 12 * H, 1),
    ]
    now = ms("2026-12-01T13:00:00")
    got = {e.key: (e.good, round(e.observed or 0, 3)) for e in
           ind.fairness(p, rows, now - 30 * D, now)}
    assert got == {"a@2026-11-29T00:00:00Z": (True, 0.5), "a@2026-11-30T00:00:00Z": (False, 0.667)}


def test_fairness_bucket_cut_by_the_window_start_is_no_event() -> None:
    # a rolling window starting mid-bucket saw only part of that day: team a held 8 GPUs
    # 00:00-12:00 and team b 12:00-24:00 (a: 50 %, over its 40 % quota), but counted from
    # 13:00 or 11:00 the day showed a at 0 % or 8 %, a good event (and a different one by the hour)
    p = _params("fairness", team="a", quota=0.4)
    day = ms("2026-11-24T00:00:00")
    rows = [_usage("a1", "a", day, day + 12 * H, 8),
            _usage("b1", "b", day + 12 * H, day + 24 * H, 8),
            _usage("a2", "a", day + D, day + D + 12 * H, 8),
            _usage("b2", "b", day + D + 12 * H, day + 2 * D, 8)]
    for now in (ms("2026-12-01T11:00:00"), ms("2026-12-01T13:00:00")):
        got = {e.key: (e.good, round(e.observed or 0, 3)) for e in
               ind.fairness(p, rows, now - 7 * D, now)}
        assert got == {"a@2026-11-25T00:00:00Z": (False, 0.5)}
    # a window starting on a bucket's edge counts that bucket whole
    now = ms("2026-12-01T00:00:00")
    got = {e.key: e.good for e in ind.fairness(p, rows, now - 7 * D, now)}
    assert got == {"a@2026-11-24T00:00:00Z": False, "a@2026-11-25T00:00:00Z": False}


def test_fairness_counts_a_preempted_runs_running_time_not_its_wait_in_the_queue() -> None:
    """8 GPUs run 10 min, are preempted, wait 40 min queued, run 10 min more: 2.667 GPU-h,
    as ``runwatch cost`` bills it. Fairness counted first start to end x 8 GPUs: 8.0."""
    p = _params("fairness", team="a", quota=0.5)
    b = ms("2026-11-30T10:00:00")
    a1 = ind.UsageRow("a1", "a", (
        (b - M, "queued", 0), (b, "running", 8), (b + 10 * M, "preempted", 0),
        (b + 10 * M + 2000, "queued", 0), (b + 50 * M, "running", 8),
        (b + 60 * M, "succeeded", 0)))
    other = _usage("b1", "b", b, b + 20 * M, 8)  # 2.667 GPU-h of team b in the same hour
    p["bucket_ms"] = H
    now = ms("2026-12-01T00:00:00")
    got = ind.fairness(p, [a1, other], now - 7 * D, now)
    assert [(e.key, round(e.observed or 0, 3)) for e in got] == [("a@2026-11-30T10:00:00Z", 0.5)]
    assert "of 5.3 GPU-hours" in got[0].detail
    # a resumed attempt on another allocation: the GPUs of the latest event naming one
    # before each interval ends (a scheduled event's too), then the manifest's
    a2 = ind.UsageRow("a2", "a", ((b, "scheduled", 2), (b, "running", 0),
                                  (b + 30 * M, "preempted", 0), (b + 40 * M, "running", 0),
                                  (b + 60 * M, "failed", 0)), gpus=4)
    got = ind.fairness(p, [a2, other], now - 7 * D, now)
    assert "of 4.3 GPU-hours" in got[0].detail  # (30 + 20) min x 2 (the latest) + b's 2.667


# ------------------------------------------------------------------ status and alerts

SRC = Source(kind="slo", host="h", runwatch_version="0")


def _window_objective(target: float = 0.9) -> Any:
    return one("{kind: training_window, family: f, maxDuration: 2h}", target=str(target))


def _twenty(bad: int) -> list[ind.SliEvent]:
    return [ind.SliEvent(f"r{i}", NOW - (i + 1) * H, i >= bad, (f"r{i}",), detail=f"run r{i}")
            for i in range(20)]


def test_status_counts_budget_and_no_data() -> None:
    obj = _window_objective()
    st = status(obj, _twenty(3), NOW)
    assert (st.good, st.valid, st.sli) == (17, 20, 0.85)
    assert st.budget_consumed == pytest.approx(1.5) and st.budget_left == pytest.approx(-0.5)
    assert st.state == "exhausted" and [e.key for e in st.bad] == ["r2", "r1", "r0"]
    doubled = status(obj, _twenty(3) + _twenty(3)[:3], NOW)  # rows stored twice count once
    assert (doubled.good, doubled.valid) == (17, 20)
    empty = status(obj, [], NOW)
    assert empty.sli is None and empty.state == "no_data" and empty.budget_left is None
    assert empty.to_json()["sli"] is None


def test_one_alert_per_objective_fired_kept_and_resolved() -> None:
    obj = _window_objective()
    st = status(obj, _twenty(3), NOW)
    book, alerts = decide(obj, st, None, "execution", SRC, NOW)
    assert len(alerts) == 1
    a = alerts[0]
    assert a.detector == "slo:x" and a.run_id is None and a.status == "firing"
    assert a.severity == "critical" and a.probable_cause == "execution"
    assert [e.detail for e in a.evidence] == ["run r2", "run r1", "run r0"]
    assert a.labels["bad_runs"] == "r0,r1,r2" and a.labels["slo_condition"] == "budget_exhausted"
    assert "SLI 17/20 = 85.0%" in a.title
    # the next round, still bad: nothing new; no data: nothing, still firing
    book, again = decide(obj, status(obj, _twenty(3), NOW + M), book, "execution", SRC, NOW + M)
    assert again == []
    book, quiet = decide(obj, status(obj, [], NOW + 2 * M), book, "execution", SRC, NOW + 2 * M)
    assert quiet == []
    # healthy: resolved, same alert id
    book, resolved = decide(obj, status(obj, _twenty(0), NOW + 3 * M), book, "execution", SRC,
                            NOW + 3 * M)
    assert [r.status for r in resolved] == ["resolved"]
    assert resolved[0].alert_id == a.alert_id and resolved[0].dedup_key == a.dedup_key


def test_next_bad_event_warns() -> None:
    obj = _window_objective()
    _book, alerts = decide(obj, status(obj, _twenty(2), NOW), None, "execution", SRC, NOW)
    assert [(a.severity, a.labels["slo_condition"]) for a in alerts] == [
        ("warning", "next_bad_exhausts")]


def test_probable_cause_from_the_bad_events_alerts() -> None:
    assert probable_cause("training_window", ["data", "data", "execution", "unknown"]) == "data"
    assert probable_cause("training_window", []) == "execution"
    assert probable_cause("registry_control", ["unknown"]) == "artifact"


def test_window_rolling_start() -> None:
    assert Window(30 * D).start(NOW) == NOW - 30 * D


_EDGE_PARAMS = {
    "data_availability": {"dataset": "d", "cutoff": parse_cron("0 6 * * *")},
    "training_window": {"family": "f", "max_duration_ms": H},
    "evaluation_retained": {"family": "f"},
    "registry_control": {},
    "resumability": {"max_loss_ms": 30 * M},
    "reproducibility": {"family": "f", "metric": "m", "tolerance": 0.1},
    "fairness": {"team": "a", "quota": 0.5},
}
_OUTSIDE = {  # a bad row of each kind, timed at the window's exclusive start or after now
    "data_availability": [ind.DataReportRow(NOW + H, "v1", 0, 1, 0, "", "d")],
    "training_window": [ind.RunRow("r", START - 3 * H, START, "failed")],
    "evaluation_retained": [ind.RetainedRow("r", START, "succeeded", 0, 0)],
    "registry_control": [ind.RegistryRow("e", "r", START, "u", "registered", ())],
    "resumability": [ind.PreemptionRow("r", NOW + 1, (), (START,))],
    "reproducibility": [ind.ReproRow("a", "g", START, 0.0), ind.ReproRow("b", "g", START, 9.0)],
    "fairness": [_usage("r", "a", START - 2 * D, START, 8)],
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_empty_window_and_edges(kind: str) -> None:
    p = _params(kind, **_EDGE_PARAMS[kind])
    _row, compute = ind.COMPUTE[kind]
    assert compute(p, [], START, NOW) == []  # an empty window: no events (no data)
    assert compute(p, _OUTSIDE[kind], START, NOW) == []  # at the exclusive start / after now


def test_a_late_row_counts_from_the_next_evaluation() -> None:
    obj = _window_objective()
    p = obj.params
    rows = [ind.RunRow(f"r{i}", NOW - 10 * H + i * M, NOW - 9 * H + i * M, "succeeded")
            for i in range(9)]
    first = status(obj, ind.training_window(p, rows, obj.window.start(NOW), NOW), NOW)
    # a run's end is stored late (its sink was down); its event time is long past
    late = [*rows, ind.RunRow("late", NOW - 8 * H, NOW - 5 * H, "succeeded")]
    second = status(obj, ind.training_window(p, late, obj.window.start(NOW + M), NOW + M),
                    NOW + M)
    assert (first.good, first.valid) == (9, 9)
    assert (second.good, second.valid) == (9, 10) and second.bad[0].key == "late"


def test_the_alert_owner_is_the_objectives_else_the_ownership_files() -> None:
    from runwatch.core.paging.ownership import parse_ownership

    ownership = parse_ownership(
        "teams:\n  platform: {receiver: platform-oncall}\n  data-eng: {receiver: data-oncall}\n"
        "rules:\n  - probable_cause: data\n    owner: data-eng\ndefault: platform\n", "own.yaml")
    owned = _window_objective()
    assert owned.owner is None
    named = parse_slos(doc("{kind: training_window, family: f, maxDuration: 2h}").replace(
        "spec:\n  indicator", "spec:\n  owner: ml\n  indicator"), "s.yaml")[0]
    st = status(named, _twenty(3), NOW)
    _b, [a] = decide(named, st, None, "data", SRC, NOW, ownership)
    assert (a.owner, a.team) == ("ml", "ml")
    _b, [b] = decide(owned, status(owned, _twenty(3), NOW), None, "data", SRC, NOW, ownership)
    assert b.owner == "data-eng"
    _b, [c] = decide(owned, status(owned, _twenty(3), NOW), None, "execution", SRC, NOW,
                     ownership)
    assert c.owner == "platform"


def test_status_json_of_a_100_percent_target_is_strict_json() -> None:
    # target 1 allows no bad event: one spends an infinite share of a zero budget, and
    # slo status --json printed Infinity, which strict JSON readers refuse
    obj = one("{kind: training_window, family: f, maxDuration: 1h}", target="1")
    now = ms("2026-12-01T12:00:00")
    st = status(obj, [ind.SliEvent("a", now - 30 * M, False, ("a",)),
                      ind.SliEvent("b", now - 2 * H, True, ("b",))], now)
    assert st.state == "exhausted" and st.budget_consumed == math.inf
    out = json.loads(json.dumps(st.to_json(), allow_nan=False))
    assert (out["budget_consumed"], out["budget_left"]) == (None, None)
    assert out["burn_rates"] == {"1h": None, "6h": None, "3d": None}
    assert out["sli"] == 0.5 and out["conditions"][0]["name"] == "budget_exhausted"


def test_thousands_of_bad_runs_with_long_ids_make_an_alert_the_broker_takes() -> None:
    # 3,000 bad runs with 400-character ids: a bad_runs label of 1.17 MB, an Alert over the
    # broker's 1 MB record limit; the publisher refused it and slo serve ended on the error
    from runwatch.adapters.publisher import MAX_RECORD_BYTES, Publisher
    from runwatch.core.slo.evaluate import BAD_RUNS_LABEL_MAX

    obj = one("{kind: training_window, family: f, maxDuration: 1h}", target="0.95")
    now = ms("2026-12-01T12:00:00")
    ids = [f"run-{'x' * 390}-{i:05d}" for i in range(9000)]
    events = [ind.SliEvent(r, now - H - i * 1000, i % 3 != 0, (r,)) for i, r in enumerate(ids)]
    st = status(obj, events, now)
    _book, alerts = decide(obj, st, None, "execution", SRC, now)
    label = alerts[0].labels["bad_runs"]
    assert len(label) <= BAD_RUNS_LABEL_MAX
    shown, _, more = label.rpartition(",… ")
    assert shown.split(",") == sorted(ids[::3])[:len(shown.split(","))]
    assert more == f"{3000 - len(shown.split(','))} more (slo_points.bad_runs has all)"

    class Nowhere:
        def produce(self, *_a: Any) -> None: ...
        def flush(self, _t: float = 0) -> int: return 0
        def close(self, _t: float = 0) -> None: ...

    _rec, value = Publisher(Nowhere(), kind="slo").encode_one(alerts[0])
    assert len(value) < MAX_RECORD_BYTES
    few = decide(obj, status(obj, events[:30], now), None, "execution", SRC, now)[1][0]
    assert few.labels["bad_runs"] == ",".join(sorted(ids[:30:3]))  # a short list stays whole


def test_a_preemption_told_twice_counts_once() -> None:
    """The scheduler's hook and the SDK's SIGTERM handler both report a preemption (2 s
    apart): the resumability SLI counted two events, two bad ones for one lost hour
    (found by an independent case, 2026-12-07). Preempted again after a restart is a new
    preemption; a second report before a restart is the same one, whatever the window."""
    p = _params("resumability", max_loss_ms=30 * M)
    pre = NOW - H
    rows = [
        ind.PreemptionRow("twice", pre + 2_000, (pre - 40 * M,), (pre - 2 * H,)),  # the SDK
        ind.PreemptionRow("twice", pre, (pre - 40 * M,), (pre - 2 * H,)),          # the hook
        ind.PreemptionRow("again", pre - 30 * M, (pre - 35 * M,), (pre - 2 * H, pre - 20 * M)),
        ind.PreemptionRow("again", pre, (pre - 35 * M,), (pre - 2 * H, pre - 20 * M)),
        # first told before the window's start: its late twin inside it is no new event
        ind.PreemptionRow("edge", START - 1_000, (), (START - H,)),
        ind.PreemptionRow("edge", START + 1_000, (), (START - H,)),
    ]
    got = [(e.key, e.good, e.observed) for e in ind.resumability(p, rows, START, NOW)]
    assert got == [("again@" + str(pre - 30 * M), True, 5.0), ("again@" + str(pre), True, 20.0),
                   ("twice@" + str(pre), False, 40.0)]


def test_the_slo_cause_is_the_first_named_and_not_after_the_bad_event() -> None:
    """A run died of a NaN loss (``learning``) and its release gate failed after the end
    (``artifact``): one alert each, and the training-window page named ``artifact`` by the
    causes' alphabetical order (found by an independent case, 2026-12-07)."""
    from runwatch.core.slo.evaluate import Status, bad_event_causes

    end = NOW - H
    bad = (ind.SliEvent("r1", end, False, ("r1",), 600.0, 3600.0, "run r1: failed"),)
    st = Status("win", "training_window", 0.9, NOW, START, 0, 1, 0.0, 1.0, bad=bad)
    alerts = [("r1", "artifact", end + M), ("r1", "learning", end - 5 * M),
              ("other", "data", end - 9 * M)]
    assert bad_event_causes(st, alerts) == ["learning"]
    assert probable_cause("training_window", bad_event_causes(st, alerts)) == "learning"
    # kinds whose bad events are not the run's end keep later alerts, oldest first
    late = Status("kept", "evaluation_retained", 0.9, NOW, START, 0, 1, 0.0, 1.0, bad=bad)
    assert bad_event_causes(late, alerts) == ["learning", "artifact"]
    # a tie goes to the cause named first, not to the name that sorts first
    assert probable_cause("training_window", ["learning", "artifact"]) == "learning"
    assert probable_cause("training_window", ["execution", "data", "data"]) == "data"
