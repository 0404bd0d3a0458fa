"""Delivery decisions: backoff, Retry-After, breaker, dedup window, silences, durable state."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from runwatch.core.paging.delivery import (
    BreakerPolicy,
    BreakerState,
    Notification,
    RetryPolicy,
    backoff_ms,
    breaker_allow,
    breaker_record,
    classify_status,
    decide_send,
    parse_retry_after,
)
from runwatch.core.paging.signing import sign, verify
from runwatch.core.paging.silencing import Silence, expire_silence, find_silence, parse_matcher
from runwatch.pager.deliver import Deliverer, Interrupted
from runwatch.pager.state import NotificationLog, SilenceStore

H = 3_600_000


@pytest.mark.parametrize(
    ("status", "outcome"),
    [(200, "ok"), (202, "ok"), (204, "ok"), (None, "retry"), (429, "retry"), (500, "retry"),
     (502, "retry"), (503, "retry"), (408, "retry"), (400, "fatal"), (401, "fatal"),
     (403, "fatal"), (404, "fatal"), (422, "fatal"), (301, "fatal")],
)
def test_classify_status(status: int | None, outcome: str) -> None:
    assert classify_status(status) == outcome


NOW = 1_700_000_000_000


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("7", 7000),
        (" 0 ", 0),
        (None, None),
        ("", None),
        ("soon", None),
        ("Tue, 14 Nov 2023 22:13:30 GMT", 10_000),  # NOW + 10 s
        ("Tue, 14 Nov 2023 22:13:00 GMT", 0),  # in the past: no wait
    ],
)
def test_parse_retry_after(value: str | None, expected: int | None) -> None:
    assert parse_retry_after(value, NOW) == expected


POLICY = RetryPolicy(max_attempts=5, base_ms=100, cap_ms=1000, max_retry_after_ms=5000)


@pytest.mark.parametrize(
    ("attempt", "rand", "retry_after", "expected"),
    [
        (1, 0.999999, None, 99),  # ceiling 100
        (2, 0.5, None, 100),  # ceiling 200
        (3, 0.5, None, 200),  # ceiling 400
        (5, 0.5, None, 500),  # ceiling capped at 1000
        (9, 0.5, None, 500),
        (1, 0.0, None, 0),  # full jitter reaches zero
        (1, 0.5, 3000, 3000),  # Retry-After longer than jitter wins
        (4, 0.9, 10, 720),  # short Retry-After: jitter wins
        (1, 0.5, 60_000, 5000),  # Retry-After capped by policy
    ],
)
def test_backoff(attempt: int, rand: float, retry_after: int | None, expected: int) -> None:
    assert backoff_ms(attempt, POLICY, rand, retry_after) == expected


BP = BreakerPolicy(failure_threshold=3, open_ms=10_000)


def _run_breaker(events: list[tuple[str, int]]) -> list[object]:
    state = BreakerState()
    out: list[object] = []
    for ev, t in events:
        if ev == "allow":
            state, ok, wait = breaker_allow(state, BP, t)
            out.append((state.mode, ok, wait))
        else:
            state = breaker_record(state, BP, success=ev == "ok", now_ms=t)
            out.append(state.mode)
    return out


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        ([("fail", 0), ("fail", 1), ("allow", 2)], ["closed", "closed", ("closed", True, 0)]),
        ([("fail", 0), ("fail", 1), ("fail", 2), ("allow", 3)],
         ["closed", "closed", "open", ("open", False, 9_999)]),
        # cool-down over: half-open probe; success closes
        ([("fail", 0), ("fail", 0), ("fail", 0), ("allow", 10_000), ("ok", 10_001)],
         ["closed", "closed", "open", ("half_open", True, 0), "closed"]),
        # probe fails: open again for a full period
        ([("fail", 0), ("fail", 0), ("fail", 0), ("allow", 10_000), ("fail", 10_001),
          ("allow", 15_000)],
         ["closed", "closed", "open", ("half_open", True, 0), "open", ("open", False, 5_001)]),
        # success resets the failure count
        ([("fail", 0), ("fail", 0), ("ok", 0), ("fail", 0), ("fail", 0), ("allow", 1)],
         ["closed", "closed", "closed", "closed", "closed", ("closed", True, 0)]),
    ],
)
def test_breaker(events: list[tuple[str, int]], expected: list[object]) -> None:
    assert _run_breaker(events) == expected


@pytest.mark.parametrize(
    ("last", "status", "now", "decision"),
    [
        (None, "firing", 0, "send"),
        (("firing", 0), "firing", H - 1, "skip_repeat"),
        (("firing", 0), "firing", H, "send"),  # repeat interval elapsed
        (("resolved", 0), "firing", 1, "send"),  # re-fired after a resolve
        (None, "resolved", 0, "skip_not_paged"),
        (("firing", 0), "resolved", 1, "send"),
        (("resolved", 0), "resolved", 1, "skip_already_resolved"),
    ],
)
def test_decide_send(
    last: tuple[str, int] | None, status: str, now: int, decision: str
) -> None:
    entry = Notification("r", "k", last[0], last[1]) if last else None
    assert decide_send(entry, status, now, H) == decision


ATTRS = {"severity": "critical", "team": "ml-vision", "run_id": "run-7", "labels.env": "prod"}


@pytest.mark.parametrize(
    ("matchers", "window", "now", "silenced"),
    [
        (["team=ml-vision"], (0, H), 10, True),
        (["team=ml-vision"], (0, H), H, False),  # ended
        (["team=ml-vision"], (100, H), 10, False),  # not started
        (["team=ml-vision", "severity=warning"], (0, H), 10, False),  # all must match
        (["team=~ml-.*"], (0, H), 10, True),
        (["team=~ml"], (0, H), 10, False),  # anchored
        (["severity!=info"], (0, H), 10, True),
        (["env=prod"], (0, H), 10, True),  # bare label names reach labels.*
        (["labels.env=dev"], (0, H), 10, False),
        (["missing=x"], (0, H), 10, False),
    ],
)
def test_silences(matchers: list[str], window: tuple[int, int], now: int, silenced: bool) -> None:
    s = Silence("s1", tuple(parse_matcher(m) for m in matchers), window[0], window[1], "why")
    assert (find_silence([s], ATTRS, now) is not None) is silenced


@pytest.mark.parametrize("text", ["team", "=x", "team=~((", "1team=x", ""])
def test_bad_matchers(text: str) -> None:
    with pytest.raises(ValueError, match="bad matcher"):
        parse_matcher(text)


def test_expire_silence_ends_it_now() -> None:
    s = Silence("s1", (parse_matcher("team=a"),), 0, H, "x")
    assert not expire_silence(s, 50).active(50)
    assert expire_silence(s, 2 * H).ends_at_ms == H


def test_silence_store_roundtrip_and_expire(tmp_path: Path) -> None:
    store = SilenceStore(tmp_path)
    a = store.add((parse_matcher("team=a"), parse_matcher("severity=~crit.*")), 1000, H, "maint")
    b = store.add((parse_matcher("run_id=r9"),), 1000, H, "noisy", "bob")
    again = SilenceStore(tmp_path).load()
    assert again == [a, b]
    store.expire(b.silence_id[:6], 2000)
    loaded = {s.silence_id: s for s in SilenceStore(tmp_path).current()}
    assert loaded[b.silence_id].ends_at_ms == 2000
    assert loaded[a.silence_id].ends_at_ms == 1000 + H
    with pytest.raises(KeyError):
        store.expire("nope", 3000)


def test_notification_log_survives_reopen_and_torn_line(tmp_path: Path) -> None:
    log = NotificationLog(tmp_path)
    log.record(Notification("pd", "k1", "firing", 10, "a1"))
    log.record(Notification("pd", "k1", "resolved", 20, "a2"))
    log.record(Notification("slack", "k1", "firing", 30, "a1"))
    log.close()
    with (tmp_path / "notifications.jsonl").open("ab") as fh:
        fh.write(b'{"receiver":"pd","dedup_k')  # crash mid-write
    again = NotificationLog(tmp_path)
    assert again.last("pd", "k1") == Notification("pd", "k1", "resolved", 20, "a2")
    assert again.last("slack", "k1") == Notification("slack", "k1", "firing", 30, "a1")
    assert again.last("pd", "k2") is None
    again.close()


def test_notification_log_compacts(tmp_path: Path) -> None:
    log = NotificationLog(tmp_path, compact_factor=2)
    for i in range(300):
        log.record(Notification("pd", f"k{i % 3}", "firing", i))
    log.close()
    lines = (tmp_path / "notifications.jsonl").read_text().splitlines()
    assert len(lines) < 300
    assert {json.loads(x)["dedup_key"] for x in lines} == {"k0", "k1", "k2"}
    again = NotificationLog(tmp_path)
    assert again.last("pd", "k2") == Notification("pd", "k2", "firing", 299)
    again.close()


@pytest.mark.parametrize(
    ("ts_delta", "tamper", "ok"),
    [(0, False, True), (299_000, False, True), (301_000, False, False), (0, True, False)],
)
def test_webhook_signature(ts_delta: int, tamper: bool, ok: bool) -> None:
    body = b'{"a":1}'
    sig = sign(b"s3cret", NOW, body)
    assert sig.startswith("sha256=") and len(sig) == 7 + 64
    received = body + b" " if tamper else body
    assert verify(b"s3cret", str(NOW), received, sig, NOW + ts_delta) is ok
    assert not verify(b"other", str(NOW), body, sig, NOW)


# ------------------------------------------------------- deliverer loop


@dataclass(frozen=True)
class Res:
    status: int | None
    body: str = ""
    retry_after: str | None = None


class ScriptedReceiver:
    def __init__(self, name: str, answers: list[Res], repeat_ms: int = H) -> None:
        self.name = name
        self.repeat_interval_ms = repeat_ms
        self.answers = list(answers)
        self.calls: list[int] = []

    def send(self, alert: object, now_ms: int) -> Res:
        self.calls.append(now_ms)
        return self.answers.pop(0)


@dataclass
class A:
    dedup_key: str = "k"
    status: str = "firing"
    alert_id: str = "a1"


class FakeTime:
    def __init__(self) -> None:
        self.t = NOW
        self.waits: list[int] = []

    def clock(self) -> int:
        return self.t


def _deliverer(tmp_path: Path, ft: FakeTime, **kw: object) -> Deliverer:
    d = Deliverer(
        NotificationLog(tmp_path), RetryPolicy(max_attempts=4, base_ms=100, cap_ms=1000),
        BreakerPolicy(failure_threshold=3, open_ms=5000), clock=ft.clock, rand=lambda: 0.5,
        **kw,  # type: ignore[arg-type]
    )

    def sleep(ms: int) -> None:
        ft.waits.append(ms)
        ft.t += ms

    d._sleep = sleep  # type: ignore[method-assign]
    return d


@pytest.mark.parametrize(
    ("answers", "result", "attempts", "waits", "reason"),
    [
        ([Res(202)], "sent", 1, [], ""),
        ([Res(503), Res(502), Res(200)], "sent", 3, [50, 100], ""),
        ([Res(429, retry_after="2"), Res(200)], "sent", 2, [2000], ""),
        ([Res(None, "ConnectError"), Res(200)], "sent", 2, [50], ""),
        ([Res(400, '{"message":"Invalid routing key"}')], "dead", 1, [],
         "Invalid routing key"),
        # 3 failures open the breaker: the delivery stops there, it never waits out the
        # cool-down (that held every other receiver's pages behind it): it is deferred
        ([Res(500)] * 3 + [Res(500)], "deferred", 3, [50, 100],
         "circuit opened for receiver pd after 3 failures in a row"),
        ([Res(500)] * 2 + [Res(200)], "sent", 3, [50, 100], ""),
    ],
)
def test_deliverer(
    tmp_path: Path, answers: list[Res], result: str, attempts: int, waits: list[int], reason: str
) -> None:
    ft = FakeTime()
    d = _deliverer(tmp_path, ft)
    rx = ScriptedReceiver("pd", answers)
    out = d.deliver(A(), rx)
    assert (out.result, out.attempts) == (result, attempts)
    assert ft.waits == waits
    assert reason in out.reason
    logged = d.notifications.last("pd", "k")
    assert (logged is not None) is (result == "sent")


def test_an_open_breaker_defers_later_alerts_without_a_call_and_probes_once(
    tmp_path: Path,
) -> None:
    """Every alert that found a receiver's breaker open waited out the cool-down before each
    of its attempts (3 minutes with the defaults), holding every other receiver's pages; then
    it was dead-lettered at once (a page lost to a short outage). Now it is deferred without a
    call and without a wait, and the first deferred delivery due after the cool-down is the
    one probe: a failed probe defers them all to the next, an accepted one sends them."""
    ft = FakeTime()
    d = _deliverer(tmp_path, ft)
    d.retry = RetryPolicy(max_attempts=10, base_ms=100, cap_ms=1000)
    down = ScriptedReceiver("slack", [Res(503, "down")] * 20)
    first = d.deliver(A(dedup_key="k0"), down, b"k0")
    assert (first.result, first.attempts, ft.waits) == ("deferred", 3, [50, 100])
    ft.waits.clear()
    calls = len(down.calls)
    for i in range(1, 4):  # within the cool-down: not sent, no wait
        out = d.deliver(A(dedup_key=f"k{i}"), down, f"k{i}".encode())
        assert (out.result, out.attempts) == ("deferred", 0)
        assert out.reason.startswith("circuit open for receiver slack after 3 failures")
    assert len(down.calls) == calls and ft.waits == []
    decode = lambda raw: A(dedup_key=raw.decode())  # noqa: E731
    assert d.retry_due({"slack": down}, decode) == []  # nothing due before the probe
    ft.t += 5000  # the cool-down is over: one probe, and it fails; the rest wait again
    tried = d.retry_due({"slack": down}, decode)
    assert [(e.dedup_key, o.result, o.attempts) for e, o in tried] == [
        ("k0", "deferred", 4), ("k1", "deferred", 0), ("k2", "deferred", 0),
        ("k3", "deferred", 0)]
    assert len(down.calls) == calls + 1 and ft.waits == []
    ft.t += 5000  # the receiver is back: the probe is delivered, the breaker closes
    back = ScriptedReceiver("slack", [Res(202)] * 4)
    tried = d.retry_due({"slack": back}, decode)
    assert [(e.dedup_key, o.result) for e, o in tried] == [
        ("k0", "sent"), ("k1", "sent"), ("k2", "sent"), ("k3", "sent")]
    assert len(d.pending) == 0 and ft.waits == []


def test_the_delivery_that_opens_a_breaker_does_not_hold_other_receivers(tmp_path: Path) -> None:
    """The delivery whose failures opened a receiver's breaker waited out the whole cool-down
    (30 s by default) before its next attempt, and the pager, one alert at a time, held every
    other receiver's pages behind it (PagerDuty paged 35 s late while Slack answered 500).
    It now stops when the breaker opens: deferred to the breaker's probe, no cool-down
    waited, and the next receiver is called at once."""
    ft = FakeTime()
    d = _deliverer(tmp_path, ft)
    slack = ScriptedReceiver("slack", [Res(500, "boom")] * 10)
    pd = ScriptedReceiver("pd", [Res(202)] * 2)
    out = d.deliver(A(dedup_key="k0"), slack)
    assert (out.result, out.attempts) == ("deferred", 3)
    assert out.reason.startswith("circuit opened for receiver slack after 3 failures in a row")
    pending = d.pending.get("slack", "k0")
    assert pending is not None and pending.last_error == "HTTP 500: boom"
    assert pending.next_ms == ft.t + 5000
    assert sum(ft.waits) < 5000, ft.waits  # no cool-down waited out
    t_pd = ft.t
    assert d.deliver(A(dedup_key="k0"), pd).result == "sent"
    assert pd.calls == [t_pd]
    ft.waits.clear()
    assert d.deliver(A(dedup_key="k1"), slack).attempts == 0  # open: deferred, no call
    assert d.deliver(A(dedup_key="k1"), pd).result == "sent"
    assert ft.waits == []


def test_deliverer_dedups_within_repeat_interval_across_restart(tmp_path: Path) -> None:
    ft = FakeTime()
    rx = ScriptedReceiver("pd", [Res(202), Res(202), Res(202)], repeat_ms=H)
    d = _deliverer(tmp_path, ft)
    assert d.deliver(A(), rx).result == "sent"
    d.notifications.close()
    ft.t += H - 1
    d2 = _deliverer(tmp_path, ft)  # a restarted pager reads the log
    assert d2.deliver(A(), rx).reason == "skip_repeat"
    assert d2.deliver(A(status="resolved"), rx).result == "sent"
    assert d2.deliver(A(status="resolved"), rx).reason == "skip_already_resolved"
    assert len(rx.calls) == 2


def test_deliverer_deadline_and_interrupt(tmp_path: Path) -> None:
    ft = FakeTime()
    d = _deliverer(tmp_path, ft, deadline_ms=1000)
    out = d.deliver(A(), ScriptedReceiver("x", [Res(429, retry_after="60")]))
    assert out.result == "dead" and "deadline" in out.reason
    stop = threading.Event()
    stop.set()
    real = Deliverer(NotificationLog(tmp_path / "b"), stop=stop)
    with pytest.raises(Interrupted):
        real.deliver(A(), ScriptedReceiver("x", [Res(200)]))


@pytest.mark.parametrize(
    ("flt", "shown"),
    [
        ({}, True),
        ({"run_id": "r1"}, True),
        ({"run_id": "r2"}, False),
        ({"severity": "critical", "cause": "data"}, True),
        ({"severity": "critical", "cause": "learning"}, False),
    ],
)
def test_tail_filter_and_lines(flt: dict, shown: bool) -> None:
    from runwatch.pager.tail import TailFilter, json_line, rich_line

    @dataclass
    class T:
        run_id: str = "r1"
        severity: str = "critical"
        probable_cause: str = "data"
        status: str = "firing"
        title: str = "nulls [x] spiked"
        dedup_key: str = "k"
        emitted_at_ms: int = NOW

    assert TailFilter(**flt).accepts(T()) is shown
    assert json.loads(json_line(T()))["probable_cause"] == "data"
    assert "\\[x]" in rich_line(T())  # alert text is escaped for rich markup
