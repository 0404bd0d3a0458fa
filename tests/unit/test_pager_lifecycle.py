"""An alert's lifecycle as Alertmanager sees it: stamps and identity for every transition.

Alertmanager refuses an alert whose ``endsAt`` precedes its ``startsAt`` (HTTP
400, which the pager treats as permanent) and identifies alerts by their label
set alone. These tests hold the pager's payloads and the processor's alert
records to both rules for fire, resolve, re-fire and resolve, with the run's
event time before, at and after the pager's clock.
"""

from __future__ import annotations

from datetime import datetime

import pytest

from runwatch.core.paging import lifecycle as alerting
from runwatch.core.paging.lifecycle import AlertBook, AlertContext, AlertPolicy
from runwatch.core.paging.payloads import alertmanager_alert, alertmanager_window
from runwatch.core.records import Alert, Source
from runwatch.core.signals.cause import Verdict
from runwatch.core.signals.rules import Finding

NOW = 1_700_000_000_000
TTL = 4 * 3_600_000
SRC = Source(kind="processor", host="t", runwatch_version="0")


def _ms(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def finding(at_ms: int) -> Finding:
    return Finding("watch:loader_share", "loader_share", "execution", "warning", 0.6, 0.2, 0.8,
                   at_ms, "loader_share rose to 0.6 (baseline 0.2)")


@pytest.mark.parametrize("offset", [-86_400_000, -60_000, 0, 60_000, TTL + 60_000])
@pytest.mark.parametrize("resolved", [False, True])
def test_window_never_ends_before_it_starts(offset: int, resolved: bool) -> None:
    starts, ends = alertmanager_window(NOW + offset, resolved, NOW, TTL)
    assert starts <= ends
    assert starts == min(NOW + offset, NOW)  # the first sighting, never later than now
    assert ends == (NOW if resolved else NOW + TTL)


def test_unknown_first_sighting_starts_now() -> None:
    assert alertmanager_window(0, False, NOW, TTL) == (NOW, NOW + TTL)


def _alerts(offset: int) -> list[Alert]:
    """Fire → resolve → re-fire → resolve of one condition, with event times ``offset`` from now."""
    book = AlertBook()
    ctx = AlertContext("run-1", SRC, team="ml", experiment_family="fam", node="node-7",
                       labels={"workload": "fam|h100|8"})
    later = AlertContext("run-1", SRC, team="ml-platform", experiment_family="fam",
                         labels={"workload": "fam|h100|16"})  # what the timer's context says
    policy = AlertPolicy(quiet_ms=60_000, cooldown_ms=0)
    verdict = Verdict("execution", 1.0, ())
    out: list[Alert] = []
    t = NOW + offset
    out += alerting.fire(book, finding(t), verdict, ctx, NOW, policy, one_shot=True)
    out += alerting.expire(book, later, NOW + 120_000, policy, t + 120_000)
    out += alerting.fire(book, finding(t + 180_000), verdict, ctx, NOW + 180_000, policy,
                         one_shot=True)
    out += alerting.expire(book, later, NOW + 400_000, policy, t + 400_000)
    return out


@pytest.mark.parametrize("offset", [-3_600_000, 0, 600_000])
def test_every_transition_is_acceptable_to_alertmanager(offset: int) -> None:
    seq = _alerts(offset)
    assert [a.status for a in seq] == ["firing", "resolved", "firing", "resolved"]
    for a in seq:
        body = alertmanager_alert(a, a.emitted_at_ms, "http://x", TTL)
        starts, ends = _ms(body["startsAt"]), _ms(body["endsAt"])
        assert starts <= ends, (a.status, body["startsAt"], body["endsAt"])
        if a.status == "resolved":
            assert ends == a.emitted_at_ms


def test_resolve_carries_the_identity_the_alert_fired_with() -> None:
    seq = _alerts(0)
    bodies = [alertmanager_alert(a, a.emitted_at_ms, "http://x", TTL) for a in seq]
    # Alertmanager's fingerprint is the label set: the resolve must end the alert it got
    assert bodies[0]["labels"] == bodies[1]["labels"]
    assert bodies[2]["labels"] == bodies[3]["labels"]
    assert bodies[1]["labels"]["node"] == "node-7" and bodies[1]["labels"]["team"] == "ml"
    assert seq[1].node == "node-7" and seq[1].labels == {"workload": "fam|h100|8"}
    assert seq[0].alert_id == seq[1].alert_id != seq[2].alert_id == seq[3].alert_id
