"""The SLO evaluator's rounds with a store double: outage pause and resume, retried writes.

The store outage is tested here, with a double that answers like the store
(rows of the evaluator's own queries) and can be made to fail as
``ClickHouseUnavailable``; the live test (tests/integration/test_slo_live.py)
runs the same evaluator against the real store.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from runwatch.adapters.clickhouse import ClickHouseRejected, ClickHouseUnavailable
from runwatch.core.records import Alert, Source
from runwatch.core.slo.spec import parse_slos
from runwatch.slo.service import Evaluator, PublishFailed

H = 3_600_000
NOW = 1_796_000_000_000
SLO = """apiVersion: openslo/v1
kind: SLO
metadata: {name: window}
spec:
  owner: foundation
  indicator: {spec: {kind: training_window, family: f, maxDuration: 2h}}
  timeWindow: [{duration: 30d, isRolling: true}]
  objectives: [{target: 0.9}]
"""
SRC = Source(kind="slo", host="h", runwatch_version="0")


class StoreDouble:
    """Answers the evaluator's queries from a table of runs; ``down`` makes it fail."""

    def __init__(self, runs: list[tuple[str, int, int | None, str]]) -> None:
        self.runs = runs
        self.down = False
        self.fail_inserts = 0
        self.inserted: dict[str, list[tuple[Any, ...]]] = {}

    def query(self, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        if self.down:
            msg = "statement failed: [Errno 111] Connection refused"
            raise ClickHouseUnavailable(msg)
        if "slo_state" in sql:
            latest: dict[str, tuple[int, str]] = {}
            for name, at, book in self.inserted.get("db.slo_state", []):
                if name not in latest or at >= latest[name][0]:
                    latest[name] = (at, book)
            return [(n, b, at) for n, (at, b) in latest.items()]
        if "FROM db.alerts" in sql:
            assert NOW - 31 * 24 * H < params["since"] < NOW - 29 * 24 * H  # the window
            return [("r0", "data", NOW - 38 * H), ("elsewhere", "learning", NOW - 38 * H)]
        assert "db.job_events" in sql and "db.run_summaries" in sql
        return [(r, s, e, st, "f", 0) for r, s, e, st in self.runs
                if e is None or e <= params["now"]] + [("other-family", 0, 1, "failed", "g", 0)]

    def insert(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        if self.down or self.fail_inserts:
            self.fail_inserts = max(0, self.fail_inserts - 1)
            msg = "insert failed: timed out"
            raise ClickHouseUnavailable(msg)
        self.inserted.setdefault(table, []).extend(tuple(r) for r in rows)


def _runs(bad: int) -> list[tuple[str, int, int | None, str]]:
    out = []
    for i in range(20):
        start = NOW - 40 * H + i * H
        took = 3 * H if i < bad else H
        out.append((f"r{i}", start, start + took, "succeeded"))
    return out


def _evaluator(store: StoreDouble, sent: list[Alert]) -> Evaluator:
    return Evaluator(parse_slos(SLO, "slos.yaml"), store, "db", source=SRC, publish=sent.extend)


def test_outage_pauses_and_resumes_without_double_counting_or_false_alert() -> None:
    store = StoreDouble(_runs(3))
    sent: list[Alert] = []
    ev = _evaluator(store, sent)
    first = ev.evaluate(NOW)
    assert not first.paused and [(s.good, s.valid) for s in first.statuses] == [(17, 20)]
    assert len(sent) == 1 and sent[0].probable_cause == "data"  # r0's own alert names data
    assert {e.detail.split(":")[0] for e in sent[0].evidence} == {"run r0", "run r1", "run r2"}

    store.down = True
    paused = ev.evaluate(NOW + 60_000)
    assert paused.paused and "Connection refused" in paused.error
    assert paused.statuses == [] and len(sent) == 1

    store.down = False
    back = ev.evaluate(NOW + 120_000)
    assert [(s.good, s.valid) for s in back.statuses] == [(17, 20)]  # recomputed, not added
    assert len(sent) == 1  # the alert is still firing: not sent again
    points = store.inserted["db.slo_points"]
    assert [(p[1], p[4], p[5]) for p in points] == [(NOW, 17, 20), (NOW + 120_000, 17, 20)]


def test_a_restarted_evaluator_resumes_from_the_stored_book() -> None:
    store = StoreDouble(_runs(3))
    sent: list[Alert] = []
    _evaluator(store, sent).evaluate(NOW)
    assert len(sent) == 1
    book = json.loads(store.inserted["db.slo_state"][-1][2])
    assert book["fired"] == 1
    again: list[Alert] = []
    _evaluator(store, again).evaluate(NOW + 60_000)  # a new process: no second page
    assert again == []


def test_alerts_kafka_refused_are_not_booked_and_go_out_next_round() -> None:
    # a mistyped alerts topic: the round must not book the alert as sent (no page, ever)
    store = StoreDouble(_runs(3))
    sent: list[Alert] = []
    refuse = [True]

    def publish(alerts: list[Alert]) -> None:
        if refuse[0]:
            msg = "1 of 1 alert(s) not delivered: topic 'x' does not exist"
            raise PublishFailed(msg)
        sent.extend(alerts)

    ev = Evaluator(parse_slos(SLO, "slos.yaml"), store, "db", source=SRC, publish=publish)
    lost = ev.evaluate(NOW)
    assert lost.alerts == [] and len(lost.undelivered) == 1 and "does not exist" in lost.error
    assert "db.slo_state" not in store.inserted  # no book says it fired
    assert [p[1] for p in store.inserted["db.slo_points"]] == [NOW]  # the SLI point is kept
    refuse[0] = False
    again = ev.evaluate(NOW + 60_000)  # the same process: its books were put back
    assert len(again.alerts) == 1 and len(sent) == 1
    fresh: list[Alert] = []
    _evaluator(store, fresh).evaluate(NOW + 120_000)  # a new process reads the booked page
    assert fresh == []


def test_a_restarted_evaluator_after_a_refused_round_sends_the_alert() -> None:
    store = StoreDouble(_runs(3))

    def refuse(alerts: list[Alert]) -> None:
        raise PublishFailed("refused")

    Evaluator(parse_slos(SLO, "slos.yaml"), store, "db", source=SRC,
              publish=refuse).evaluate(NOW)
    sent: list[Alert] = []
    assert len(_evaluator(store, sent).evaluate(NOW + 60_000).alerts) == 1 and len(sent) == 1


def test_a_backfill_round_writes_points_but_never_decides_a_page_of_the_present() -> None:
    store = StoreDouble(_runs(3))
    sent: list[Alert] = []
    assert len(_evaluator(store, sent).evaluate(NOW).alerts) == 1  # firing now
    store.runs = _runs(0)  # the past: every run in its window (no run overran yet)
    past: list[Alert] = []
    r = _evaluator(store, past).evaluate(NOW - 20 * H)  # `slo evaluate --at <earlier>`
    assert r.past == ["window"] and r.alerts == [] and past == []  # no resolve of today's page
    assert [p[1] for p in store.inserted["db.slo_points"]] == [NOW, NOW - 20 * H]
    assert [s[1] for s in store.inserted["db.slo_state"]] == [NOW]  # the book is today's
    store.runs = _runs(3)
    later: list[Alert] = []
    assert _evaluator(store, later).evaluate(NOW + 60_000).alerts == [] and later == []


def test_a_store_that_is_down_at_start_raises_no_alert() -> None:
    store = StoreDouble(_runs(3))
    store.down = True
    sent: list[Alert] = []
    ev = _evaluator(store, sent)
    assert ev.evaluate(NOW).paused and sent == [] and ev.books is None
    store.down = False
    assert len(ev.evaluate(NOW + 60_000).alerts) == 1


def test_failed_writes_are_kept_for_the_next_round() -> None:
    store = StoreDouble(_runs(0))
    sent: list[Alert] = []
    ev = _evaluator(store, sent)
    store.fail_inserts = 1
    ev.evaluate(NOW)
    assert "db.slo_points" not in store.inserted
    ev.evaluate(NOW + 60_000)
    assert [p[1] for p in store.inserted["db.slo_points"]] == [NOW, NOW + 60_000]
    assert sent == []  # 20/20: no condition, no alert


def test_no_data_reports_no_data_and_no_alert() -> None:
    store = StoreDouble([])
    sent: list[Alert] = []
    r = _evaluator(store, sent).evaluate(NOW)
    assert [(s.state, s.sli) for s in r.statuses] == [("no_data", None)] and sent == []
    assert store.inserted["db.slo_points"][0][6] is None


def test_a_database_without_the_tables_pauses_with_a_reason() -> None:
    class Unmigrated(StoreDouble):
        def query(self, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
            msg = "Code: 60. DB::Exception: Unknown table expression identifier 'db.slo_state'"
            raise ClickHouseRejected(msg)

    sent: list[Alert] = []
    r = _evaluator(Unmigrated([]), sent).evaluate(NOW)
    assert r.paused and r.error == ("database 'db' holds no runwatch tables (run `runwatch db "
                                    "migrate --database db`, or pass --database)")
    assert sent == []


@pytest.mark.parametrize(("argv", "want"), [
    (["slo", "status", "--at", "1764547200"], "error: --at '1764547200': 1764547200 ms is "
     "before 2000-01-01 (epoch seconds? give milliseconds)"),
    (["slo", "evaluate", "--at", "1764547200000000"], "ms is more than a day ahead"),
    (["slo", "status", "--at", "1969-12-31T00:00:00Z"], "before 2000-01-01"),
])
def test_an_slo_instant_in_the_wrong_unit_is_refused_before_the_store(
        argv: list[str], want: str, capsys, monkeypatch) -> None:
    # epoch seconds for --at evaluated 1970-01-21: every objective "no data", said nowhere
    from runwatch import cli

    monkeypatch.setenv("CLICKHOUSE_URL", "http://127.0.0.1:9")  # nothing answers: not reached
    assert cli.main(argv) == 2
    assert want in capsys.readouterr().err


def test_a_runs_job_events_win_over_its_summary_in_any_row_order() -> None:
    # UNION ALL returns its parts in no fixed order: the summary's row of a run (which began
    # at its first event, a queued one) won over the job events' whenever it came first
    from runwatch.slo.queries import to_rows

    events = ("r1", NOW - 3 * H, NOW - H, "succeeded", "f", 0)  # 2 h from its first running
    summary = ("r1", NOW - 4 * H, NOW - H, "succeeded", "f", 1)
    only_summary = ("r2", NOW - 5 * H, NOW - 2 * H, "failed", "f", 1)
    for raw in ([events, summary, only_summary], [summary, only_summary, events]):
        rows = {r.run_id: (r.started_ms, r.state) for r in to_rows("training_window", raw)}
        assert rows == {"r1": (NOW - 3 * H, "succeeded"), "r2": (NOW - 5 * H, "failed")}


def test_status_table_prints_run_ids_as_written(capsys) -> None:
    # a run id such as 'exp[/x]' was read as rich markup: MarkupError traceback, no table
    from runwatch.commands.slo import print_statuses
    from runwatch.core.slo import indicators as ind
    from runwatch.core.slo.evaluate import status

    obj = parse_slos(SLO, "slos.yaml")[0]
    ids = ["exp[/x]", "[bold]r2", "r3[/]"]
    events = [ind.SliEvent(r, NOW - H, False, (r,)) for r in ids]
    print_statuses([status(obj, events, NOW)])
    out = capsys.readouterr().out
    assert "exp[/x], [bold]r2, r3[/]" in out and "0/3 = 0.0%" in out


def test_a_fairness_breach_is_not_blamed_on_its_runs_unrelated_data_alerts() -> None:
    """Team a held 8 of 10 GPUs for an hour (quota 50 %); its run also carried a zero-rows
    alert, so the SLO alert's probable cause was ``data``: a GPU share is no data problem."""
    fair = SLO.replace("name: window", "name: share").replace(
        "{kind: training_window, family: f, maxDuration: 2h}",
        "{kind: fairness, team: a, quota: 0.5, bucket: 1h}")
    b = NOW - 3 * H - NOW % H

    class Usage(StoreDouble):
        def query(self, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
            if "FROM db.alerts" in sql or "slo_state" in sql:
                return super().query(sql, params)  # r0's alert names data
            assert "db.job_events" in sql and "db.run_manifests" in sql
            return [("r0", "a", ((b, "running", 8), (b + H, "succeeded", 0)), 8),
                    ("r9", "b", ((b, "running", 2), (b + H, "succeeded", 0)), 2)]

    sent: list[Alert] = []
    r = Evaluator(parse_slos(fair, "slos.yaml"), Usage([]), "db", source=SRC,
                  publish=sent.extend).evaluate(NOW)
    assert [(s.good, s.valid) for s in r.statuses] == [(0, 1)]
    assert len(sent) == 1 and sent[0].probable_cause == "execution"


def test_the_probable_cause_is_one_that_can_explain_the_kinds_bad_events() -> None:
    from runwatch.core.slo.evaluate import probable_cause

    assert probable_cause("fairness", ["data", "data", "learning"]) == "execution"
    assert probable_cause("registry_control", ["data", "execution"]) == "artifact"
    assert probable_cause("resumability", ["data", "infrastructure"]) == "infrastructure"
    assert probable_cause("training_window", ["data", "execution", "data"]) == "data"
    assert probable_cause("reproducibility", ["data"]) == "data"


def test_status_table_lists_each_bad_run_once_in_order(capsys) -> None:
    """A run behind several bad events (a team's run in many fairness buckets) was listed
    once per event: "r1, r2, r1, r2, r1"."""
    from runwatch.commands.slo import print_statuses
    from runwatch.core.slo import indicators as ind
    from runwatch.core.slo.evaluate import status

    obj = parse_slos(SLO, "slos.yaml")[0]
    events = [ind.SliEvent(f"a@{i}", NOW - H + i, False, ("r2", "r1") if i % 2 else ("r1",))
              for i in range(3)]
    print_statuses([status(obj, events, NOW)])
    out = capsys.readouterr().out
    assert "│ r1, r2 " in out and out.count("r1") == 1


@pytest.mark.parametrize(("argv", "env", "shown"), [
    (["--interval", "0"], {}, "0"), (["--interval", "-5"], {}, "-5"),
    ([], {"RUNWATCH_SLO_INTERVAL_S": "0"}, "0"), (["--interval", "nan"], {}, "nan"),
    (["--interval", "inf"], {}, "inf"), ([], {"RUNWATCH_SLO_INTERVAL_S": "1e300"}, "1e+300")])
def test_serve_refuses_an_interval_that_is_not_positive(argv: list[str], env: dict[str, str],
                                                       shown: str, capsys, monkeypatch) -> None:
    # --interval 0 evaluated round after round without a pause, hammering the shared store
    from runwatch import cli

    monkeypatch.setenv("CLICKHOUSE_URL", "http://127.0.0.1:9")  # not reached
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert cli.main(["slo", "serve", *argv]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: slo serve: the interval must be a positive number of seconds, got {shown} "
        "(--interval or RUNWATCH_SLO_INTERVAL_S)")


@pytest.mark.parametrize("action", ["status", "evaluate"])
def test_a_database_name_that_is_no_identifier_is_refused_before_the_store(
        action: str, capsys, monkeypatch) -> None:
    # the name is written into the queries: a quote used to reach the store as broken SQL
    from runwatch import cli

    monkeypatch.setenv("CLICKHOUSE_URL", "http://127.0.0.1:9")  # not reached
    assert cli.main(["slo", action, "--database", "x'; DROP"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: database name \"x'; DROP\" is not a plain identifier (letters, digits and _)")


def test_an_slo_file_that_is_not_utf8_is_one_error_line(tmp_path, capsys, monkeypatch) -> None:
    from runwatch import cli

    monkeypatch.setenv("CLICKHOUSE_URL", "http://127.0.0.1:9")  # not reached
    bad = tmp_path / "slos.yaml"
    bad.write_bytes(b"metadata: {displayName: Zo\xeb}\n")  # Latin-1
    assert cli.main(["slo", "status", "--file", str(bad)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: cannot read {bad}: not UTF-8 text (byte 26: 0xeb); save the file as UTF-8")


def test_status_on_a_database_without_runwatch_tables_is_one_clean_line(
        tmp_path, capsys, monkeypatch) -> None:
    # the store's UNKNOWN_TABLE exception was printed whole, with its SQL
    from runwatch import cli
    from runwatch.adapters import clickhouse as ch
    from runwatch.slo.service import ClickHouseStore

    def unknown_table(self: Any, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        msg = ("Received ClickHouse exception, code: 60, server response: Code: 60. "
               "DB::Exception: Unknown table expression identifier 'default.artifacts'. "
               "(UNKNOWN_TABLE) SELECT ... FROM default.artifacts")
        raise ch.ClickHouseRejected(msg)

    # past the shared check (runwatch.adapters.clickhouse.open_database, tested on a real
    # store in tests/integration/test_store.py), a query that finds no table
    monkeypatch.setattr(ch, "open_database", lambda *a, **k: object())
    monkeypatch.setattr(ClickHouseStore, "query", unknown_table)
    path = tmp_path / "slos.yaml"
    path.write_text(SLO)
    assert cli.main(["slo", "status", "--database", "default", "--file", str(path)]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: database 'default' holds no runwatch tables (run `runwatch db migrate "
        "--database default`, or pass --database)")
