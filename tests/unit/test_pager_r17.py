"""Stranger round r17 on alert delivery: what each receiver is sent, through a real Pager.

A real :class:`~runwatch.pager.service.Pager` (no broker) with its real receivers, whose
HTTP goes to an in-process transport standing in for PagerDuty, Opsgenie, Slack, a
webhook and Alertmanager:

- the processor re-sends a firing alert when its probable cause changes (same alert id and
  dedup key, new cause, owner, summary and evidence). The pager skipped it at every
  receiver within the repeat interval, so every page kept showing the first cause, and
  Alertmanager's refreshes re-sent the first record for as long as the alert fired;
- the owning team (``Alert.owner``) reached only Alertmanager (a label) and the webhook:
  PagerDuty, Opsgenie and Slack did not show who owns the alert;
- ``runwatch silence add --match team=`` (``team=$TEAM`` with the variable unset) was
  accepted and muted every alert of every run without a team;
- a stop (SIGTERM) while the pager retried, in-line, an alert a silence had held back raised
  out of ``Pager.run`` (a traceback, exit 1).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import httpx
import pytest

from runwatch import cli
from runwatch.adapters.receivers import ReceiverOptions, build_receivers
from runwatch.adapters.settings import KafkaSettings
from runwatch.core.codec import load_codec
from runwatch.core.paging.routes import alert_attributes
from runwatch.core.paging.silencing import Silence, find_silence, parse_matcher
from runwatch.core.records import Alert, Evidence, Source
from runwatch.pager.service import Pager, PagerSettings
from runwatch.pager.state import SilenceStore

T0 = 1_700_000_000_000
CODEC = load_codec()
KINDS = ("pd", "og", "slack", "hook", "am")

RULES = """receivers:
  - name: pd
    kind: pagerduty
    url: http://rx.test/pd
    routing_key_env: R17_PD_KEY
  - name: og
    kind: opsgenie
    url: http://rx.test/og
    api_key_env: R17_OG_KEY
  - name: slack
    kind: slack
    url_env: R17_SLACK_URL
  - name: hook
    kind: webhook
    url: http://rx.test/hook
    secret_env: R17_HOOK_SECRET
  - name: am
    kind: alertmanager
    url: http://rx.test/am
route:
  receiver: hook
  routes:
    - {receiver: pd, continue: true}
    - {receiver: og, continue: true}
    - {receiver: slack, continue: true}
    - {receiver: am, continue: true}
    - {receiver: hook}
"""


def alert(status: str = "firing", at: int = T0, **kw: object) -> Alert:
    base: dict = dict(
        event_id=f"e-{status}-{at}", run_id="run-r17", emitted_at_ms=at, seq=1,
        source=Source(kind="processor", host="h", runwatch_version="0.1.0"),
        alert_id="a-r17", dedup_key="run-r17:0123456789abcdef01234567", status=status,
        severity="critical", detector="rule:non_finite", indicator="loss",
        observed=float("nan"), expected=0.0, score=1.0, probable_cause="learning",
        evidence=(Evidence(signal="learning", indicator="loss", observed=float("nan"),
                           expected=0.0, at_ms=T0 - 1000, detail="loss=nan"),),
        title="Non-finite loss (nan)",
        summary="Non-finite loss (nan) (probable cause: learning, run run-r17)",
        team="ml-vision", experiment_family="resnet", node="gpu-3", labels={},
        owner="ml-engineering", first_seen_ms=T0 - 60_000, last_seen_ms=at,
    )
    base.update(kw)
    return Alert(**base)


MOVED = dict(
    probable_cause="execution", owner="platform-engineering",
    summary="Non-finite loss (nan) (probable cause: execution, run run-r17)",
    evidence=(Evidence(signal="execution", indicator="xid", observed=79.0, expected=0.0,
                       at_ms=T0 - 2000, detail="Xid 79 on gpu-3"),),
)


@dataclasses.dataclass
class Rx:
    pager: Pager
    sent: list[tuple[str, dict]]
    offset: int = 0

    def publish(self, a: Alert) -> None:
        self.offset += 1
        self.pager.handle("rw.alerts", 0, self.offset, a.dedup_key.encode(), CODEC.encode(a))

    def bodies(self, receiver: str) -> list[dict]:
        return [b for r, b in self.sent if r == receiver]


@pytest.fixture
def rx(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Rx:
    for var, value in (("R17_PD_KEY", "k" * 32), ("R17_OG_KEY", "og-key"),
                       ("R17_SLACK_URL", "http://rx.test/slack"),
                       ("R17_HOOK_SECRET", "hook-secret")):
        monkeypatch.setenv(var, value)
    rules = tmp_path / "routes.yaml"
    rules.write_text(RULES)
    pager = Pager(PagerSettings(rules_file=rules, state_dir=tmp_path / "state"),
                  KafkaSettings(bootstrap_servers="127.0.0.1:1"))
    sent: list[tuple[str, dict]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        path = request.url.path.split("/")[1]
        body = json.loads(request.content)
        for one in body if isinstance(body, list) else [body]:  # Alertmanager: a list
            sent.append((path, one))
        return httpx.Response(202, json={})

    client = httpx.Client(transport=httpx.MockTransport(answer))
    pager.receivers = build_receivers(pager.rules.receivers, client,
                                      ReceiverOptions("http://ch/play#{query_b64}", "runwatch"))
    yield Rx(pager, sent)
    pager.close()


def _shown_cause(receiver: str, body: dict) -> str:
    """The probable cause a receiver's page shows (for Alertmanager: its description)."""
    if receiver == "pd":
        return str(body["payload"]["class"])
    if receiver == "og":
        return next(t for t in body["tags"] if t.startswith("probable_cause:")).split(":")[1]
    if receiver == "slack":
        return str(body["blocks"][1]["fields"][0]["text"]).split("\n")[1]
    if receiver == "hook":
        return str(body["alert"]["probable_cause"])
    return str(body["annotations"]["description"]).split("probable cause: ")[1].split(",")[0]


def test_a_new_probable_cause_reaches_every_receiver_once(rx: Rx) -> None:
    """The cause moved from learning to execution (a node's Xid behind the NaN): each
    receiver kept the first cause, the update was skipped as a repeat."""
    rx.publish(alert())
    assert {r: len(rx.bodies(r)) for r in KINDS} == dict.fromkeys(KINDS, 1)
    rx.publish(alert(at=T0 + 5_000, **MOVED))
    for r in KINDS:
        assert [_shown_cause(r, b) for b in rx.bodies(r)] == ["learning", "execution"], r
    pd = rx.bodies("pd")
    assert pd[0]["dedup_key"] == pd[1]["dedup_key"]  # PagerDuty folds it into its incident
    assert rx.bodies("og")[1]["alias"] == rx.bodies("og")[0]["alias"]
    am = rx.bodies("am")
    assert am[1]["labels"] == am[0]["labels"]  # the same Alertmanager alert, updated
    assert "Xid 79" in am[1]["annotations"]["evidence"]


def test_replays_of_either_record_send_nothing(rx: Rx) -> None:
    """At least once: the first record read again after the update (older) and the update
    read again are no news."""
    first, moved = alert(), alert(at=T0 + 5_000, **MOVED)
    rx.publish(first)
    rx.publish(moved)
    before = len(rx.sent)
    rx.publish(moved)
    rx.publish(first)
    assert len(rx.sent) == before


def test_alertmanager_refresh_and_resolve_carry_the_update(rx: Rx) -> None:
    """Alertmanager's refresh re-sent the first record (first cause, first evidence) for as
    long as the alert fired; the resolve goes once everywhere."""
    rx.publish(alert())
    rx.publish(alert(at=T0 + 5_000, **MOVED))
    last_sent = max(n.sent_at_ms for n in rx.pager.notifications.entries())
    assert rx.pager.refresh(last_sent + 3 * 3_600_000) == 1  # past half the 4 h interval
    refreshed = rx.bodies("am")[-1]
    assert _shown_cause("am", refreshed) == "execution"
    assert "Xid 79" in refreshed["annotations"]["evidence"]
    rx.publish(alert("resolved", at=T0 + 9_000, **MOVED))
    for r in ("pd", "og", "slack", "hook"):
        resolves = [b for b in rx.bodies(r) if b.get("event_action") == "resolve"
                    or b.get("status") == "resolved" or "RESOLVED" in str(b.get("text"))
                    or "note" in b]
        assert len(resolves) == 1, r


def test_the_owner_is_on_every_page(rx: Rx) -> None:
    """An on-call engineer reading PagerDuty, Opsgenie or Slack could not see which team
    owns the alert (the ownership file's answer reached only Alertmanager and webhooks)."""
    rx.publish(alert(owner="data-engineering"))
    assert rx.bodies("pd")[0]["payload"]["custom_details"]["owner"] == "data-engineering"
    og = rx.bodies("og")[0]
    assert "owner:data-engineering" in og["tags"]
    assert og["details"]["owner"] == "data-engineering"
    fields = [f["text"] for f in rx.bodies("slack")[0]["blocks"][1]["fields"]]
    assert "*Owner*\ndata-engineering" in fields
    assert rx.bodies("am")[0]["labels"]["owner"] == "data-engineering"
    assert rx.bodies("hook")[0]["alert"]["owner"] == "data-engineering"


@pytest.mark.parametrize("matches", [
    ["team="],  # --match team=$TEAM with TEAM unset
    ["run_id!=run-7"], ["severity!=info"], ["labels.env=~.*"],
    ["team=", "severity!=info"],
])
def test_a_silence_that_mutes_every_alert_without_a_value_is_refused(
        matches: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Accepted, ``team=`` muted every alert of every run without a team (critical NaN
    losses too); Alertmanager refuses a silence whose matchers all match the empty string."""
    args = [a for m in matches for a in ("--match", m)]
    code = cli.main(["silence", "--state-dir", str(tmp_path), "add", *args, "--for", "1h",
                     "--reason", "x"])
    assert code == 2
    assert "at least one matcher must not match the empty string" in capsys.readouterr().err
    assert SilenceStore(tmp_path).load() == []
    silence = Silence("s", tuple(parse_matcher(m) for m in matches), 0, 10**13, "x")
    teamless = alert(team=None, owner=None)
    assert find_silence([silence], alert_attributes(teamless), T0) is silence  # what it did


@pytest.mark.parametrize("matches", [
    ["team=", "severity=~warning|critical"], ["run_id!=run-7", "team=ml-vision"],
    ["severity=critical"],
])
def test_a_silence_with_a_matcher_that_needs_a_value_is_kept(
        matches: list[str], tmp_path: Path) -> None:
    args = [a for m in matches for a in ("--match", m)]
    assert cli.main(["silence", "--state-dir", str(tmp_path), "add", *args, "--for", "1h",
                     "--reason", "x"]) == 0
    assert len(SilenceStore(tmp_path).load()) == 1


class _NoKafka:
    """Stands in for the consumer and the dead-letter producer (no broker in unit tests)."""

    def __init__(self, *_args: object, **_kwargs: object) -> None:
        pass

    def poll_batch(self, **_kwargs: object) -> list[object]:
        return []

    def close(self, *_args: object) -> None:
        pass


def test_a_stop_while_a_held_alert_is_retried_is_a_clean_stop(
        rx: Rx, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A SIGTERM while the pager retried, in-line, an alert a silence had held back (its
    silence over) raised ``Interrupted`` out of ``Pager.run``: a traceback and exit 1 instead
    of the clean stop the same signal gives during any other delivery. The alert stays held
    and is delivered after the restart."""
    from runwatch.pager import service as pager_service

    pager = rx.pager
    store = SilenceStore(pager.settings.state_dir)
    silence = store.add((parse_matcher("team=ml-vision"),), T0, 3_600_000, "maintenance", "me")
    monkeypatch.setattr(pager_service, "_now_ms", lambda: T0 + 1_000)
    rx.publish(alert())
    assert rx.sent == [] and len(list(pager.held.entries())) == 1  # held by the silence
    store.expire(silence.silence_id, T0 + 2_000)
    monkeypatch.setattr(pager_service, "_now_ms", lambda: T0 + 3_000)

    def down(request: httpx.Request) -> httpx.Response:
        pager.stop.set()  # SIGTERM arrives while the receiver answers
        return httpx.Response(500, text="down")

    pager.receivers = build_receivers(
        pager.rules.receivers, httpx.Client(transport=httpx.MockTransport(down)),
        ReceiverOptions("http://ch/play#{query_b64}", "runwatch"))
    monkeypatch.setattr(pager_service, "start_new_group", lambda *_a, **_kw: {})
    monkeypatch.setattr(pager_service, "BatchConsumer", _NoKafka)
    monkeypatch.setattr(pager_service, "KafkaTransport", _NoKafka)
    caplog.set_level("INFO", logger="runwatch.pager.service")
    assert pager.run() == 0
    assert [h.status for h in pager.held.entries()] == ["firing"]  # still held: not lost
