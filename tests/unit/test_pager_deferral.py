"""The pager's delivery over time: no head-of-line blocking, no page lost to a short outage.

The pager delivers one alert at a time, receiver after receiver. It used to sleep in-line
for every retry: one receiver's ``Retry-After: 3600`` held every other receiver's pages
for minutes (300 s per attempt), and a receiver down for a few seconds opened its breaker
and had the alert (and every alert in the next 30 s) dead-lettered at once, whatever
``RUNWATCH_PAGER_MAX_ATTEMPTS`` said. A delivery now waits in-line at most
``RUNWATCH_PAGER_INLINE_WAIT_MS`` and is otherwise deferred (``deferred.jsonl`` in the
state dir) and retried from the pager's loop when due. These tests run a real
:class:`~runwatch.pager.service.Pager` (no broker) over fake receivers and a fake clock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from runwatch.adapters.settings import KafkaSettings
from runwatch.core.codec import load_codec
from runwatch.core.paging.delivery import RetryPolicy, plan_retry
from runwatch.core.paging.silencing import parse_matcher
from runwatch.core.records import Alert, Evidence, Source
from runwatch.pager import service as pager_service
from runwatch.pager.service import Pager, PagerSettings

T0 = 1_700_000_000_000
CODEC = load_codec()


def make_alert(key: str, status: str = "firing", alert_id: str = "a1") -> Alert:
    return Alert(
        event_id=f"e-{key}-{status}-{alert_id}", run_id="run-42", emitted_at_ms=T0, seq=1,
        source=Source(kind="processor", host="h", runwatch_version="0.1.0"),
        alert_id=alert_id, dedup_key=key, status=status, severity="critical",
        detector="loss_divergence", indicator="loss_slope", observed=3.5, expected=0.1,
        score=9.1, probable_cause="learning",
        evidence=(Evidence(signal="learning", indicator="loss", observed=3.5, expected=0.1,
                           at_ms=T0 - 1000, detail="loss 35x baseline"),),
        title="Loss diverging on run-42", summary="loss rose 35x in 200 steps",
        team="ml-vision", experiment_family="resnet", node="gpu-node-3",
        labels={"env": "prod"}, first_seen_ms=T0 - 60_000, last_seen_ms=T0,
    )


@dataclass(frozen=True)
class Res:
    status: int | None
    body: str = ""
    retry_after: str | None = None


@dataclass
class Clock:
    t: int = T0
    waits: list[int] = field(default_factory=list)

    def now(self) -> int:
        return self.t


Send = tuple[str, str, str, str, int]  # receiver, dedup key, status, alert id, time


@dataclass
class FakeReceiver:
    """A receiver whose answer depends on the fake time (and what it is sent)."""

    name: str
    answer: Callable[[int], Res]
    sends: list[Send]
    kind: str = "webhook"
    repeat_interval_ms: int = 3_600_000

    def send(self, alert: Alert, now_ms: int) -> Res:
        res = self.answer(now_ms)
        self.sends.append((self.name, alert.dedup_key, alert.status, alert.alert_id, now_ms))
        return res


OK = Res(202, "{}")


@dataclass
class Harness:
    pager: Pager
    clock: Clock
    sends: list[Send]
    dead: list[tuple[str, str]]  # (dedup key, reason)
    offset: int = 0

    def publish(self, alert: Alert) -> None:
        self.offset += 1
        self.pager.handle("rw.alerts", 0, self.offset, alert.dedup_key.encode(),
                          CODEC.encode(alert))

    def run_for(self, ms: int) -> None:
        """Advance the clock in loop turns (0.5 s), retrying what is due each turn."""
        end = self.clock.t + ms
        while self.clock.t < end:
            self.clock.t = min(end, self.clock.t + 500)
            self.pager.retry_deferred()

    def delivered(self, receiver: str) -> list[tuple[str, str, str, int]]:
        """What ``receiver`` accepted: (dedup key, status, alert id, time)."""
        return [(k, s, a, t) for (r, k, s, a, t), ok in zip(self.sends, self._ok, strict=True)
                if r == receiver and ok]

    _ok: list[bool] = field(default_factory=list)


def make_pager(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answers: dict[str, Callable[[int], Res]],
    clock: Clock | None = None, state: str = "state", kinds: dict[str, str] | None = None,
    **settings: object,
) -> Harness:
    """A pager routing every alert to ``answers``' receivers in order, on a fake clock."""
    names = list(answers)
    rules = tmp_path / "routes.yaml"
    rules.write_text(
        "receivers:\n"
        + "".join(f"  - name: {n}\n    kind: alertmanager\n    url: http://127.0.0.1:9/{n}\n"
                  for n in names)
        + f"route:\n  receiver: {names[0]}\n  routes:\n"
        + "".join(f"    - receiver: {n}\n      continue: true\n" for n in names)
    )
    clock = clock or Clock()
    monkeypatch.setattr(pager_service, "_now_ms", clock.now)
    p = Pager(PagerSettings(rules_file=rules, state_dir=tmp_path / state, **settings),
              KafkaSettings(bootstrap_servers="127.0.0.1:1"))
    sends: list[Send] = []
    h = Harness(p, clock, sends, [])
    oks = h._ok

    def answering(fn: Callable[[int], Res]) -> Callable[[int], Res]:
        def answer(now: int) -> Res:
            res = fn(now)
            oks.append(res.status is not None and 200 <= res.status < 300)
            return res
        return answer

    p.receivers = {n: FakeReceiver(n, answering(answers[n]), sends,  # type: ignore[misc]
                                   kind=(kinds or {}).get(n, "webhook"))
                   for n in names}
    d = p.deliverer
    d.clock = clock.now
    d.rand = lambda: 0.5

    def sleep(ms: int) -> None:
        clock.waits.append(ms)
        clock.t += ms

    d._sleep = sleep  # type: ignore[method-assign]
    p.dead_letter = (  # type: ignore[method-assign]
        lambda *a, **kw: h.dead.append((str(getattr(kw.get("alert"), "dedup_key", "")), a[5])))
    return h


# ---------------------------------------------------------- (a) head of line


def test_a_long_retry_after_does_not_hold_other_receivers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A webhook answering 429 + ``Retry-After: 3600`` made the pager sleep 300 s per attempt
    before PagerDuty was even called, for this alert and every later one."""
    up_at = T0 + 200_000  # the webhook takes alerts again after 200 s
    h = make_pager(tmp_path, monkeypatch, {
        "hook": lambda now: OK if now >= up_at else Res(429, "slow down", "3600"),
        "pd": lambda _now: OK,
    })
    h.publish(make_alert("k1"))
    h.clock.t += 1000
    h.publish(make_alert("k2"))
    # PagerDuty paged at once for both alerts, after the webhook's one attempt each
    assert h.delivered("pd") == [("k1", "firing", "a1", T0), ("k2", "firing", "a1", T0 + 1000)]
    assert h.clock.waits == [] and h.dead == []
    assert [(s[0], s[1], s[4]) for s in h.sends] == [
        ("hook", "k1", T0), ("pd", "k1", T0), ("hook", "k2", T0 + 1000), ("pd", "k2", T0 + 1000)]
    assert h.pager.counters["deferred"] == 2
    # the webhook is asked again when its Retry-After (capped at 300 s) is over
    h.run_for(298_500)
    assert h.delivered("hook") == []
    h.run_for(2_500)
    assert [(k, t) for k, _s, _a, t in h.delivered("hook")] == [
        ("k1", T0 + 300_000), ("k2", T0 + 301_000)]
    assert h.dead == [] and len(h.pager.deliverer.pending) == 0
    h.pager.close()


# ------------------------------------------------- (b) a blip loses nothing


def test_a_receiver_down_for_seconds_loses_no_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """With MAX_ATTEMPTS=12 a webhook answering 500 for 20 s got 5 attempts in about 1 s,
    its breaker opened, the alert was dead-lettered, and alerts in the next 30 s went
    straight to rw.dlq (their resolves then skipped as never paged): pages lost for good."""
    caplog.set_level(logging.INFO)
    up_at = T0 + 20_000
    h = make_pager(tmp_path, monkeypatch, {
        "hook": lambda now: OK if now >= up_at else Res(500, "boom"),
        "pd": lambda _now: OK,
    }, max_attempts=12, backoff_cap_ms=2000)
    h.publish(make_alert("k1"))
    assert sum(h.clock.waits) <= 2000  # a quick in-line retry, no more
    assert h.delivered("pd") == [("k1", "firing", "a1", h.clock.t)]
    h.run_for(10_000)  # the breaker opens (5 failures in a row)
    assert h.pager.deliverer.breakers["hook"].mode == "open"
    h.publish(make_alert("k2"))  # arrives while the breaker is open: deferred, not dead
    assert h.delivered("pd")[-1][:2] == ("k2", "firing")
    h.run_for(60_000)
    assert h.dead == []
    hook = h.delivered("hook")
    assert [k for k, *_ in hook] == ["k1", "k2"]
    assert all(t >= up_at for *_, t in hook)
    assert len(h.pager.deliverer.pending) == 0
    h.publish(make_alert("k2", "resolved"))  # paged, so its resolve is sent
    assert h.delivered("hook")[-1][:2] == ("k2", "resolved")
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "receiver hook: firing k1 attempt 1 failed (HTTP 500: boom)" in text  # names the key
    h.pager.close()


# ------------------------------------------ (c) attempts and deadline bound it


@pytest.mark.parametrize(
    ("kw", "step", "at", "why"),
    [
        ({}, "retry", 1500, ""),
        ({"waited_ms": 1600}, "defer", 1500, ""),  # over the in-line budget
        ({"wait_ms": 300_000}, "defer", 300_500, ""),  # a long Retry-After
        ({"attempts": 6}, "dead", 0, "attempts"),
        ({"wait_ms": 600_000}, "dead", 0, "deadline"),  # the next attempt would come too late
        ({"inline_ms": 0}, "defer", 1500, ""),  # a deferred delivery never waits in-line
    ],
)
def test_plan_retry(kw: dict[str, int], step: str, at: int, why: str) -> None:
    args = {"attempts": 2, "first_ms": 0, "now_ms": 500, "wait_ms": 1000, "waited_ms": 0,
            "deadline_ms": 600_000, "inline_ms": 2000, **kw}
    plan = plan_retry(policy=RetryPolicy(max_attempts=6), **args)
    assert (plan.step, plan.at_ms, plan.why) == (step, at, why)


def test_out_of_attempts_or_time_is_dead_lettered_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MAX_ATTEMPTS is what bounds a delivery (the breaker opening after 5 failures used to
    dead-letter it, whatever MAX_ATTEMPTS said), and so is the deadline, while the other
    receivers are paged at once."""
    h = make_pager(tmp_path, monkeypatch, {"hook": lambda _now: Res(503, "down"),
                                           "pd": lambda _now: OK}, max_attempts=8)
    h.publish(make_alert("k1"))
    assert h.delivered("pd") == [("k1", "firing", "a1", h.clock.t)]
    h.run_for(60_000)
    assert h.dead == []  # the breaker opened at the 5th failure: its probes go on
    h.run_for(120_000)
    assert len([s for s in h.sends if s[0] == "hook"]) == 8
    ((key, reason),) = h.dead
    assert key == "k1"
    assert reason.startswith("receiver hook: gave up after 8 attempts; last error: HTTP 503: "
                             "down (circuit opened for receiver hook after 8 failures")
    assert len(h.pager.deliverer.pending) == 0
    h.pager.close()
    h = make_pager(tmp_path, monkeypatch, {"hook": lambda _now: Res(503, "down", "4"),
                                           "pd": lambda _now: OK},
                   state="state2", max_attempts=50, breaker_failures=100,
                   delivery_deadline_ms=10_000)
    h.publish(make_alert("k2"))
    assert h.delivered("pd") == [("k2", "firing", "a1", T0)]
    h.run_for(60_000)
    hook = [t - T0 for r, *_, t in h.sends if r == "hook"]
    assert hook == [0, 4000, 8000]  # the next, at 12 s, would be past the deadline
    assert h.dead == [("k2", "receiver hook: delivery deadline passed; last error: HTTP 503: "
                             "down")]
    assert len(h.pager.deliverer.pending) == 0
    h.pager.close()


def test_a_deferred_delivery_stays_until_its_dead_letter_is_confirmed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = make_pager(tmp_path, monkeypatch, {"hook": lambda _now: Res(503, "down", "4")},
                   max_attempts=2, breaker_failures=100)
    h.publish(make_alert("k1"))

    def unconfirmed(*_a: object, **_kw: object) -> None:
        raise RuntimeError("dead letter not confirmed by Kafka")

    h.pager.dead_letter = unconfirmed  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        h.run_for(5_000)
    assert h.pager.deliverer.pending.get("hook", "k1") is not None  # the pager exits; kept
    h.pager.close()


# --------------------------------------------------- (d) resolve while deferred


def test_a_resolve_drops_a_firing_never_delivered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    up_at = T0 + 100_000
    h = make_pager(tmp_path, monkeypatch, {
        "hook": lambda now: OK if now >= up_at else Res(503, "down", "60"),
        "pd": lambda _now: OK,
    })
    h.publish(make_alert("k1"))
    h.clock.t += 5000
    h.publish(make_alert("k1", "resolved"))
    assert [s[:3] for s in h.sends] == [("hook", "k1", "firing"), ("pd", "k1", "firing"),
                                        ("pd", "k1", "resolved")]
    assert "resolve of k1 came while its firing delivery was deferred" in caplog.text
    h.run_for(200_000)  # the webhook is back: paged for neither
    assert h.delivered("hook") == [] and h.dead == []
    assert len(h.pager.deliverer.pending) == 0
    # a newer firing replaces an older deferred one: the receiver gets the newest once
    h.clock.t = T0 + 1_000_000
    up_at = T0 + 1_100_000
    h.publish(make_alert("k2", alert_id="old"))
    h.clock.t += 1000
    h.publish(make_alert("k2", alert_id="new"))
    h.run_for(200_000)
    assert [(k, a) for k, _s, a, _t in h.delivered("hook")] == [("k2", "new")]
    h.pager.close()


def test_a_deferred_resolve_is_sent_once_and_stops_the_refresh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    answers = [OK]
    h = make_pager(tmp_path, monkeypatch, {"am": lambda _now: answers.pop(0) if answers else OK},
                   kinds={"am": "alertmanager"})
    h.publish(make_alert("k1"))
    answers.append(Res(503, "down", "60"))
    h.publish(make_alert("k1", "resolved"))
    assert h.delivered("am") == [("k1", "firing", "a1", T0)]
    # half the repeat interval passed: the firing alert is not refreshed, its resolve waits
    assert h.pager.refresh(T0 + 31 * 60_000) == 0 and len(h.sends) == 2
    h.run_for(61_000)
    assert h.delivered("am")[-1][:2] == ("k1", "resolved")
    assert len(h.sends) == 3 and h.dead == []
    last = h.pager.notifications.last("am", "k1")
    assert last is not None and last.status == "resolved"
    h.publish(make_alert("k1", "resolved"))  # a replay: not sent again
    assert h.pager.refresh(T0 + 40 * 60_000) == 0 and len(h.sends) == 3
    h.pager.close()


# ------------------------------------------------------------ (e) a restart


def test_a_deferred_delivery_survives_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    h = make_pager(tmp_path, monkeypatch, {"hook": lambda _now: Res(503, "down", "20"),
                                           "pd": lambda _now: OK}, clock=clock)
    h.publish(make_alert("k1"))  # offset committed: the webhook's delivery is on disk
    assert (tmp_path / "state" / "deferred.jsonl").read_text().count('"k1"') == 1
    # kill -9: nothing closed; a new pager over the same state dir
    h2 = make_pager(tmp_path, monkeypatch, {"hook": lambda _now: OK, "pd": lambda _now: OK},
                    clock=clock)
    assert len(h2.pager.deliverer.pending) == 1
    h2.run_for(19_000)
    assert h2.sends == []
    h2.run_for(1_000)
    assert h2.delivered("hook") == [("k1", "firing", "a1", T0 + 20_000)]
    assert h2.dead == [] and len(h2.pager.deliverer.pending) == 0
    h2.pager.close()
    h3 = make_pager(tmp_path, monkeypatch, {"hook": lambda _now: OK, "pd": lambda _now: OK},
                    clock=clock)
    assert len(h3.pager.deliverer.pending) == 0  # delivered: gone from the state dir too
    h3.publish(make_alert("k1"))  # and in the notification log: not paged twice
    assert h3.sends == []
    h3.pager.close()
    h.pager.close()


# ------------------------------------------------- (f) a silence added meanwhile


@pytest.mark.parametrize("matcher", ["team=ml-vision", "team=ml-nlp"])
def test_a_silence_added_while_a_delivery_is_deferred_holds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, matcher: str
) -> None:
    """A webhook down for maintenance had its page deferred; the on-call engineer then
    silenced the team's alerts for the maintenance, and the deferred page was delivered
    anyway as soon as the webhook came back. A silence is checked at delivery time, as
    Alertmanager does: the page is held, and delivered when the silence ends if it still
    fires. (A silence of another team mutes nothing.)"""
    up_at = T0 + 100_000
    h = make_pager(tmp_path, monkeypatch, {
        "hook": lambda now: OK if now >= up_at else Res(503, "down", "60"),
        "pd": lambda _now: OK,
    })
    h.publish(make_alert("k1"))
    assert h.delivered("pd") == [("k1", "firing", "a1", T0)]  # paged before the silence
    h.clock.t += 10_000
    silence = h.pager.silences.add((parse_matcher(matcher),), h.clock.t, 3_600_000,
                                   "webhook maintenance")
    h.run_for(200_000)  # the webhook is back
    muted = matcher == "team=ml-vision"
    assert [k for k, *_ in h.delivered("hook")] == ([] if muted else ["k1"])
    assert h.dead == [] and len(h.pager.deliverer.pending) == 0
    assert h.pager.counters["silenced"] == (1 if muted else 0)
    # the silence ends while the alert still fires: the webhook is paged then, PagerDuty
    # (paged before) is not paged again
    h.pager.silences.expire(silence.silence_id, h.clock.t)
    h.pager.refresh(h.clock.t)
    assert [k for k, *_ in h.delivered("hook")] == ["k1"]
    assert h.delivered("pd") == [("k1", "firing", "a1", T0)]
    h.pager.close()
