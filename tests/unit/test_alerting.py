import pytest

from runwatch.core.paging import lifecycle as alerting
from runwatch.core.paging.lifecycle import AlertBook, AlertContext, AlertPolicy, dedup_key
from runwatch.core.records import Source
from runwatch.core.signals.cause import classify
from runwatch.core.signals.rules import Finding

SRC = Source(kind="processor", host="h", runwatch_version="0")
CTX = AlertContext("run-1", SRC, team="t", experiment_family="fam")
POLICY = AlertPolicy(clear_after=3, resolve_ms=0, quiet_ms=1000, cooldown_ms=5000,
                     per_run_cap=3)


def finding(indicator: str = "loss", at: int = 0, detector: str = "rule:x") -> Finding:
    return Finding(detector, indicator, "learning", "critical", 1.0, 0.0, 1.0, at, "title")


def fire(book, f, now, one_shot=True, policy=POLICY):
    return alerting.fire(book, f, classify(f, [], 1000), CTX, now, policy, one_shot=one_shot)


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        (("r", "d", "i", ""), ("r", "d", "i", ""), True),
        (("r", "d", "i", ""), ("r2", "d", "i", ""), False),
        (("r", "d", "i", ""), ("r", "d2", "i", ""), False),
        (("r", "d", "i", "gpu0"), ("r", "d", "i", "gpu1"), False),
    ],
)
def test_dedup_key_table(a, b, same) -> None:
    assert (dedup_key(*a) == dedup_key(*b)) is same
    assert dedup_key(*a).startswith(a[0] + ":")


def test_repeat_is_deduplicated_and_ids_are_stable() -> None:
    book = AlertBook()
    first = fire(book, finding(at=10), 10)
    assert len(first) == 1 and first[0].status == "firing"
    assert fire(book, finding(at=20), 20) == []
    # a replay from scratch (restart) gives the same dedup key and alert id
    again = fire(AlertBook(), finding(at=10), 99)
    assert (again[0].dedup_key, again[0].alert_id, again[0].event_id) == (
        first[0].dedup_key,
        first[0].alert_id,
        first[0].event_id,
    )


def test_hysteresis_resolves_after_clear_after_healthy_evaluations() -> None:
    book = AlertBook()
    fire(book, finding(detector="watch:x", at=0), 0, one_shot=False)
    args = ("run-1", "watch:x", "loss", "", CTX)
    assert alerting.healthy(book, *args, 1, POLICY) == []
    assert alerting.healthy(book, *args, 2, POLICY) == []
    # a relapse resets the streak
    fire(book, finding(detector="watch:x", at=3), 3, one_shot=False)
    assert alerting.healthy(book, *args, 4, POLICY) == []
    assert alerting.healthy(book, *args, 5, POLICY) == []
    out = alerting.healthy(book, *args, 6, POLICY)
    assert [a.status for a in out] == ["resolved"]


def test_cooldown_after_resolve() -> None:
    book = AlertBook()
    fire(book, finding(at=0), 0)
    assert [a.status for a in alerting.expire(book, CTX, 1000, POLICY)] == ["resolved"]
    assert fire(book, finding(at=2000), 2000) == []  # inside cooldown
    assert len(fire(book, finding(at=7000), 7000)) == 1  # after cooldown


def test_one_shot_expires_only_after_quiet_time() -> None:
    book = AlertBook()
    fire(book, finding(at=0), 0)
    assert alerting.expire(book, CTX, 999, POLICY) == []
    assert len(alerting.expire(book, CTX, 1000, POLICY)) == 1


def warning(indicator: str, at: int = 0) -> Finding:
    return Finding("rule:x", indicator, "data", "warning", 1.0, 0.0, 1.0, at, "title")


def test_per_run_cap_mutes_and_announces_once() -> None:
    book = AlertBook()
    outs = [fire(book, warning(f"i{n}"), n) for n in range(6)]
    fired = [a for o in outs for a in o]
    assert [a.indicator for a in fired] == ["i0", "i1", "i2", "alert_cap"]
    assert book.fired == 3
    # a critical condition is never muted by a storm of warnings (a NaN loss, a stall)
    late = fire(book, finding(indicator="loss", at=10), 10)
    assert [(a.indicator, a.severity, a.status) for a in late] == [("loss", "critical", "firing")]


def test_the_cap_counts_conditions_not_their_repeats() -> None:
    # a report-driven condition resolving and firing again every hour muted the run
    book = AlertBook()
    sent = []
    for hour in range(10):
        at = hour * 3_600_000
        sent += fire(book, warning("schema", at), at)
        sent += alerting.expire(book, CTX, at + 2_000, POLICY)  # quiet: resolves
    assert [a.status for a in sent] == ["firing", "resolved"] * 10
    assert book.fired == 1 and not book.capped
    assert [a.indicator for o in (fire(book, warning(f"i{n}", 10**8), 10**8) for n in range(3))
            for a in o] == ["i0", "i1", "alert_cap"]


def test_book_round_trips() -> None:
    book = AlertBook()
    fire(book, finding(), 0)
    assert AlertBook.from_state(book.to_state()) == book


def test_resolution_needs_a_sustained_healthy_span_of_event_time() -> None:
    policy = AlertPolicy(clear_after=3, resolve_ms=60_000)
    book = AlertBook()
    fire(book, finding(detector="watch:x", at=0), 0, one_shot=False, policy=policy)
    args = ("run-1", "watch:x", "loss", "", CTX)
    # many healthy evaluations within a few seconds of event time do not resolve it,
    # however late the processor sees them (now_ms)
    for at in range(1_000, 10_000, 1_000):
        assert alerting.healthy(book, *args, 10**9 + at, policy, at) == []
    out = alerting.healthy(book, *args, 10**9, policy, 61_000)
    assert [a.status for a in out] == ["resolved"]


def test_an_out_of_range_evaluation_breaks_the_healthy_streak() -> None:
    book = AlertBook()
    fire(book, finding(detector="watch:x", at=0), 0, one_shot=False)
    args = ("run-1", "watch:x", "loss", "", CTX)
    assert alerting.healthy(book, *args, 1, POLICY) == []
    assert alerting.healthy(book, *args, 2, POLICY) == []
    alerting.hold(book, "run-1", "watch:x", "loss")
    assert alerting.healthy(book, *args, 3, POLICY) == []
    assert alerting.healthy(book, *args, 4, POLICY) == []
    assert [a.status for a in alerting.healthy(book, *args, 5, POLICY)] == ["resolved"]


@pytest.mark.parametrize("now", ["live", "replayed"])
def test_cooldown_is_measured_on_event_time(now) -> None:
    # live: the processor's clock moves with the events; replayed: a backlog read in one burst
    clock = (lambda at: at + 100) if now == "live" else (lambda at: 10**12)
    book = AlertBook()
    fire(book, finding(at=0), clock(0))
    assert len(alerting.expire(book, CTX, clock(1_000), POLICY, 1_000)) == 1
    assert fire(book, finding(at=2_000), clock(2_000)) == []  # inside cooldown
    assert len(fire(book, finding(at=7_000), clock(7_000))) == 1  # after cooldown


def test_quiet_time_is_measured_against_the_horizon_not_the_wall_clock() -> None:
    book = AlertBook()
    fire(book, finding(at=0), 0)
    # the processor's wall clock is far ahead (catching up), its input has reached 999
    assert alerting.expire(book, CTX, 10**12, POLICY, 999) == []
    assert len(alerting.expire(book, CTX, 10**12, POLICY, 1_000)) == 1
