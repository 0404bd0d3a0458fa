"""Receivers against a real local HTTP server that records requests (no mocked clients).

Payload shapes follow the public API docs of PagerDuty Events v2, Opsgenie's
Alert API, Slack incoming webhooks and Alertmanager's API v2; the retry paths
(429 + Retry-After, 5xx, 4xx) run the real Deliverer over real HTTP.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

import runwatch
from runwatch.adapters.publisher import CaptureTransport
from runwatch.adapters.receivers import (
    HttpReceiver,
    ReceiverConfigError,
    ReceiverOptions,
    build_client,
    build_receivers,
    resolve_settings,
)
from runwatch.core.paging.delivery import BreakerPolicy, RetryPolicy
from runwatch.core.paging.routes import parse_rules
from runwatch.core.paging.signing import SIGNATURE_HEADER, TIMESTAMP_HEADER, verify
from runwatch.core.records import Alert, Evidence, Source
from runwatch.pager.deliver import Deliverer
from runwatch.pager.service import Pager
from runwatch.pager.state import NotificationLog
from runwatch.pager.tail import json_line
from runwatch.processor.memory import MemoryProcessor
from runwatch.processor.settings import ProcessorSettings

NOW = 1_700_000_000_000


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> object:
        return json.loads(self.body)


@dataclass
class Recorder:
    url: str = ""
    requests: list[Recorded] = field(default_factory=list)
    # scripted answers: (status, headers, body); when empty, 202 {}
    answers: list[tuple[int, dict[str, str], bytes]] = field(default_factory=list)


@pytest.fixture
def server() -> Iterator[Recorder]:
    rec = Recorder()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            with lock:
                rec.requests.append(Recorded("POST", self.path, dict(self.headers), body))
                status, headers, out = rec.answers.pop(0) if rec.answers else (202, {}, b"{}")
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    rec.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    t = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    yield rec
    httpd.shutdown()
    httpd.server_close()


def make_alert(status: str = "firing", **kw: object) -> Alert:
    base: dict = dict(
        event_id="e1", run_id="run-42", emitted_at_ms=NOW, seq=1,
        source=Source(kind="processor", host="h", runwatch_version="0.1.0"),
        alert_id="a1", dedup_key="run-42/loss_divergence", status=status, severity="critical",
        detector="loss_divergence", indicator="loss_slope", observed=3.5, expected=0.1,
        score=9.1, probable_cause="learning",
        evidence=(Evidence(signal="learning", indicator="loss", observed=3.5, expected=0.1,
                           at_ms=NOW - 1000, detail="loss 35x baseline"),),
        title="Loss diverging on run-42", summary="loss rose 35x in 200 steps",
        team="ml-vision", experiment_family="resnet", node="gpu-node-3",
        labels={"env": "prod"}, first_seen_ms=NOW - 60_000, last_seen_ms=NOW,
    )
    base.update(kw)
    return Alert(**base)


def receiver(kind: str, url: str, tmp_path: Path, repeat: str = "1h", **env: str) -> HttpReceiver:
    extra = {
        "alertmanager": "    url: {url}\n",
        "pagerduty": "    url: {url}/v2/enqueue\n    routing_key_env: PD_KEY\n",
        "opsgenie": "    url: {url}\n    api_key_file: {tmp}/og_key\n",
        "slack": "    url_env: SLACK_URL\n",
        "webhook": "    url: {url}/hook\n    secret_env: HOOK_SECRET\n",
    }[kind].format(url=url, tmp=tmp_path)
    (tmp_path / "og_key").write_text("og-secret-key\n")
    text = (f"receivers:\n  - name: r\n    kind: {kind}\n    repeat_interval: {repeat}\n{extra}"
            "route:\n  receiver: r\n")
    rules = parse_rules(text, "t.yaml")
    environ = {"PD_KEY": "pd-routing-key", "SLACK_URL": f"{url}/services/T0/B0/xyz",
               "HOOK_SECRET": "hook-secret", **env}
    return build_receivers(rules.receivers, build_client(5.0),
                           ReceiverOptions("http://ch:8123/play?user=analyst#{query_b64}"),
                           environ)["r"]


@pytest.mark.parametrize("status", ["firing", "resolved"])
def test_pagerduty_events_v2(server: Recorder, tmp_path: Path, status: str) -> None:
    res = receiver("pagerduty", server.url, tmp_path).send(make_alert(status), NOW)
    assert res.status == 202
    (req,) = server.requests
    assert req.path == "/v2/enqueue"
    assert req.headers["Content-Type"] == "application/json"
    body = req.json()
    assert isinstance(body, dict)
    assert body["routing_key"] == "pd-routing-key"
    assert body["dedup_key"] == "run-42/loss_divergence"
    if status == "resolved":
        assert body == {"routing_key": "pd-routing-key", "event_action": "resolve",
                        "dedup_key": "run-42/loss_divergence"}
        return
    assert body["event_action"] == "trigger"
    p = body["payload"]
    assert p["summary"] == "Loss diverging on run-42"
    assert p["severity"] in {"critical", "error", "warning", "info"}
    assert p["source"] == "gpu-node-3"
    assert p["class"] == "learning" and p["group"] == "ml-vision"
    assert p["timestamp"].endswith("Z")
    assert p["custom_details"]["run_id"] == "run-42"
    assert "loss 35x baseline" in p["custom_details"]["evidence"][0]
    assert body["links"][0]["href"].startswith("http://ch:8123/play")


def test_opsgenie_create_and_close_by_alias(server: Recorder, tmp_path: Path) -> None:
    rx = receiver("opsgenie", server.url, tmp_path)
    rx.send(make_alert("firing", title="x" * 200), NOW)
    rx.send(make_alert("resolved"), NOW)
    create, close = server.requests
    assert create.path == "/v2/alerts"
    assert create.headers["Authorization"] == "GenieKey og-secret-key"
    body = create.json()
    assert isinstance(body, dict)
    assert len(body["message"]) == 130
    assert body["alias"] == "run-42/loss_divergence"
    assert body["priority"] == "P1"
    assert "probable_cause:learning" in body["tags"]
    assert body["details"]["run_id"] == "run-42"
    assert "loss 35x baseline" in body["description"]
    parts = urlsplit(close.path)
    assert unquote(parts.path) == "/v2/alerts/run-42/loss_divergence/close"
    assert parts.path == "/v2/alerts/run-42%2Floss_divergence/close"
    assert parts.query == "identifierType=alias"
    assert close.headers["Authorization"] == "GenieKey og-secret-key"
    assert close.json() == {"source": "runwatch", "note": "resolved: loss rose 35x in 200 steps"}


def test_slack_message_is_readable(server: Recorder, tmp_path: Path) -> None:
    receiver("slack", server.url, tmp_path).send(make_alert(), NOW)
    (req,) = server.requests
    assert req.path == "/services/T0/B0/xyz"
    body = req.json()
    assert isinstance(body, dict)
    assert "Loss diverging on run-42" in body["text"]
    assert "probable cause: learning" in body["text"]
    flat = json.dumps(body["blocks"])
    assert "*Probable cause*\\nlearning" in flat
    assert "loss 35x baseline" in flat
    assert "<http://ch:8123/play" in flat and "run-42" in flat
    assert {b["type"] for b in body["blocks"]} >= {"header", "section", "context"}


def test_an_slo_alert_names_its_objective_not_a_run(server: Recorder, tmp_path: Path) -> None:
    # SLO alerts (detector slo:<name>) concern an objective: they carry no run id
    alert = make_alert(run_id=None, detector="slo:nightly-window", dedup_key="slo:nightly-window",
                       title="nightly-window: error budget exhausted")
    receiver("slack", server.url, tmp_path).send(alert, NOW)
    body = server.requests[0].json()
    assert isinstance(body, dict)
    flat = json.dumps(body)
    assert "None" not in flat
    assert "objective slo:nightly-window" in body["text"]
    assert "*Objective*\\n`slo:nightly-window`" in flat


def test_alertmanager_v2_body(server: Recorder, tmp_path: Path) -> None:
    rx = receiver("alertmanager", server.url, tmp_path, repeat="2h")
    rx.send(make_alert(), NOW)
    rx.send(make_alert("resolved"), NOW + 5000)
    fire, resolve = (r.json() for r in server.requests)
    assert server.requests[0].path == "/api/v2/alerts"
    assert isinstance(fire, list) and isinstance(resolve, list)
    a = fire[0]
    assert a["labels"]["alertname"] == "loss_divergence"
    assert a["labels"]["run_id"] == "run-42" and a["labels"]["probable_cause"] == "learning"
    assert a["labels"]["env"] == "prod" and a["labels"]["team"] == "ml-vision"
    assert a["annotations"]["summary"] == "Loss diverging on run-42"
    assert "loss 35x baseline" in a["annotations"]["evidence"]
    assert a["startsAt"] == "2023-11-14T22:12:20.000Z"
    assert a["endsAt"] == "2023-11-15T00:13:20.000Z"  # now + repeat interval
    sql = base64.b64decode(a["generatorURL"].split("#", 1)[1]).decode()
    assert "run_id = 'run-42'" in sql
    assert resolve[0]["endsAt"] == "2023-11-14T22:13:25.000Z"
    assert resolve[0]["labels"] == a["labels"]


def test_webhook_signature_verifies(server: Recorder, tmp_path: Path) -> None:
    receiver("webhook", server.url, tmp_path).send(make_alert(), NOW)
    (req,) = server.requests
    ts, sig = req.headers[TIMESTAMP_HEADER], req.headers[SIGNATURE_HEADER]
    assert ts == str(NOW)
    assert verify(b"hook-secret", ts, req.body, sig, NOW + 1000)
    assert not verify(b"wrong-secret", ts, req.body, sig, NOW + 1000)
    assert not verify(b"hook-secret", ts, req.body, sig, NOW + 10 * 60_000)  # replay later
    body = req.json()
    assert isinstance(body, dict)
    assert body["status"] == "firing" and body["alert"]["dedup_key"] == "run-42/loss_divergence"
    # a delivery sent again (the pager killed mid-request) carries the same key
    assert req.headers["Idempotency-Key"] == body["alert"]["event_id"] == make_alert().event_id


def _deliverer(tmp_path: Path, waits: list[int]) -> Deliverer:
    d = Deliverer(NotificationLog(tmp_path / "state"),
                  RetryPolicy(max_attempts=4, base_ms=100, cap_ms=1000),
                  BreakerPolicy(failure_threshold=10), rand=lambda: 0.5,
                  inline_wait_ms=10_000)  # every retry in-line here (the retry paths)
    d._sleep = waits.append  # type: ignore[method-assign]
    return d


@pytest.mark.parametrize("kind", ["pagerduty", "opsgenie", "slack", "webhook", "alertmanager"])
@pytest.mark.parametrize(
    ("answers", "result", "n_requests", "waits", "reason"),
    [
        ([(429, {"Retry-After": "3"}, b"slow down"), (503, {"Retry-After": "1"}, b""),
          (500, {}, b"oops"), (202, {}, b"{}")], "sent", 4, [3000, 1000, 200], ""),
        ([(502, {}, b"bad gateway")] * 4, "dead", 4, [50, 100, 200],
         "last error: HTTP 502: bad gateway"),
        ([(400, {}, b'{"status":"invalid event","errors":["x"]}')], "dead", 1, [],
         'HTTP 400: {"status":"invalid event"'),
        ([(403, {}, b"forbidden")], "dead", 1, [], "rejected the alert: HTTP 403: forbidden"),
    ],
)
def test_retry_paths(
    server: Recorder, tmp_path: Path, kind: str, answers: list, result: str, n_requests: int,
    waits: list[int], reason: str,
) -> None:
    server.answers.extend(answers)
    got_waits: list[int] = []
    rx = receiver(kind, server.url, tmp_path)
    out = _deliverer(tmp_path, got_waits).deliver(make_alert(), rx)
    assert out.result == result
    assert len(server.requests) == n_requests
    assert got_waits == waits
    assert reason in out.reason
    # every attempt carried the same body (same dedup key, idempotent retries); the
    # webhook signs a fresh timestamp and Alertmanager's endsAt moves with the clock
    if kind not in ("webhook", "alertmanager"):
        assert len({r.body for r in server.requests}) == 1


def test_transport_error_is_retried_then_dead(tmp_path: Path) -> None:
    rx = receiver("pagerduty", "http://127.0.0.1:9", tmp_path)  # discard port: refused
    waits: list[int] = []
    out = _deliverer(tmp_path, waits).deliver(make_alert(), rx)
    assert out.result == "dead" and out.attempts == 4
    assert "ConnectError" in out.reason


@pytest.mark.parametrize(
    ("yaml_line", "environ", "fragment"),
    [
        ("routing_key_env: PD_KEY", {}, "environment variable PD_KEY is not set"),
        ("routing_key_file: /nonexistent/pd", {}, "cannot read /nonexistent/pd"),
    ],
)
def test_unresolvable_secret(yaml_line: str, environ: dict, fragment: str) -> None:
    text = (f"receivers:\n  - name: pd\n    kind: pagerduty\n    {yaml_line}\n"
            "route:\n  receiver: pd\n")
    spec = parse_rules(text, "t.yaml").receivers["pd"]
    with pytest.raises(ReceiverConfigError, match=fragment) as err:
        resolve_settings(spec, environ)
    assert "receiver 'pd' (rules line 2)" in str(err.value)


@pytest.mark.parametrize(("kind", "yaml_line", "content", "fragment"), [
    # an empty key signs every webhook with "": anyone can forge the signature
    ("webhook", "    url: http://127.0.0.1:9/h\n    secret_file: {f}\n", "\n", "is empty"),
    # a URL from the environment or a file was never checked: the pager stopped at its
    # first alert with httpx.InvalidURL
    ("slack", "    url_file: {f}\n", "http://[::1\n", "the URL is not a valid URL"),
    ("slack", "    url_file: {f}\n", "https://hooks.example/x:abc\n", None),
])
def test_secrets_and_urls_from_files_are_checked(tmp_path: Path, kind: str, yaml_line: str,
                                                 content: str, fragment: str | None) -> None:
    f = tmp_path / "value"
    f.write_text(content)
    text = (f"receivers:\n  - name: r\n    kind: {kind}\n{yaml_line.format(f=f)}"
            "route:\n  receiver: r\n")
    spec = parse_rules(text, "t.yaml").receivers["r"]
    if fragment is None:
        assert resolve_settings(spec, {})["url"] == content.strip()
        return
    with pytest.raises(ReceiverConfigError, match=fragment) as err:
        resolve_settings(spec, {})
    assert "[::1" not in str(err.value)  # a URL from a secret file is not echoed


def test_a_url_the_http_client_refuses_is_a_transport_error_not_a_crash(
        tmp_path: Path) -> None:
    rx = receiver("pagerduty", "http://127.0.0.1:9", tmp_path)
    rx._settings["url"] = "http://[::1"  # as an older release let through
    res = rx.send(make_alert(), 1_800_000_000_000)
    assert res.status is None and "InvalidURL" in res.body


def _sdk_alerts(run_id: str, loss_after: float) -> list[Alert]:
    """The alerts a run raises: published by the SDK (explicit times), folded in memory."""
    t = CaptureTransport()
    run = runwatch.init("fam", team="ml", run_id=run_id, transport=t, install_hooks=False,
                        capture_lineage=False)
    for i in range(5):
        run.step(i, loss=1.0 if i < 3 else loss_after, now_ms=NOW + i * 1000)
    run.finish(now_ms=NOW + 10_000)
    m = MemoryProcessor(ProcessorSettings(save_interval_s=0))
    m.feed(t.messages)
    m.tick(NOW + 120_000)
    return list(m.alerts)


def _strict(body: bytes) -> object:
    def refuse(word: str) -> object:
        raise ValueError(f"{word} is not JSON")
    return json.loads(body, parse_constant=refuse)


@pytest.mark.parametrize("loss", [math.nan, math.inf])
@pytest.mark.parametrize("kind", ["pagerduty", "opsgenie", "slack", "webhook", "alertmanager"])
def test_a_non_finite_loss_alert_is_strict_json(
    server: Recorder, tmp_path: Path, kind: str, loss: float
) -> None:
    """Before the fix the NaN-loss alert's PagerDuty and webhook bodies held a bare ``NaN``
    (``json.dumps`` default): not JSON, so PagerDuty answered 400 and the pager dead-lettered
    the one alert that matters; ``alerts tail --json`` printed it too."""
    (alert,) = [a for a in _sdk_alerts("run-nan", loss) if a.detector == "rule:non_finite"]
    assert not math.isfinite(alert.observed)
    rx = receiver(kind, server.url, tmp_path)
    assert rx.send(alert, NOW + 120_000).status == 202
    body = _strict(server.requests[0].body)
    word = "NaN" if math.isnan(loss) else "Infinity"
    if kind == "pagerduty":
        assert isinstance(body, dict) and body["payload"]["custom_details"]["observed"] == word
    if kind == "webhook":
        assert isinstance(body, dict) and body["alert"]["observed"] == word
        assert body["alert"]["evidence"][-1]["observed"] == word
        headers = server.requests[0].headers
        assert verify(b"hook-secret", headers[TIMESTAMP_HEADER], server.requests[0].body,
                      headers[SIGNATURE_HEADER], NOW + 120_500)
    line = _strict(json_line(alert).encode())
    assert isinstance(line, dict) and line["observed"] == word


def _fire_and_resolve(run_id: str, team: str = "ml") -> tuple[Alert, Alert]:
    """A NaN-loss run that then trains on: its rule:non_finite alert fires, then resolves."""
    t = CaptureTransport()
    run = runwatch.init("fam", team=team, run_id=run_id, transport=t, install_hooks=False,
                        capture_lineage=False)
    for i in range(400):
        run.step(i, loss=math.nan if i in (3, 4) else 1.0, now_ms=NOW + i * 10_000)
    run.finish(now_ms=NOW + 4_000_000)
    m = MemoryProcessor(ProcessorSettings(save_interval_s=0))
    m.feed(t.messages)
    m.tick(NOW + 4_100_000)
    fire, resolve = [a for a in m.alerts if a.detector == "rule:non_finite"]
    assert (fire.status, resolve.status) == ("firing", "resolved")
    return fire, resolve


@pytest.mark.parametrize("run_len", [20, 300, 600])
def test_a_long_run_id_resolves_what_it_triggered(
    server: Recorder, tmp_path: Path, run_len: int
) -> None:
    """Before the fix PagerDuty's trigger sent ``dedup_key[:255]`` and its resolve the whole
    key (over PagerDuty's 255 characters: refused, or an incident never resolved), and the cut
    dropped the key's hash, so every condition of a run past 230 characters shared one
    incident; Opsgenie likewise (alias cut at 512, closed by the whole key)."""
    fire, resolve = _fire_and_resolve("r" * run_len, team="t" * 80)
    for kind, limit in (("pagerduty", 255), ("opsgenie", 512)):
        server.requests.clear()
        rx = receiver(kind, server.url, tmp_path)
        rx.send(fire, NOW + 4_100_000)
        rx.send(resolve, NOW + 4_100_000)
        trigger, close = (_strict(r.body) for r in server.requests)
        assert isinstance(trigger, dict) and isinstance(close, dict)
        if kind == "pagerduty":
            key, again = trigger["dedup_key"], close["dedup_key"]
        else:
            key = trigger["alias"]
            again = unquote(urlsplit(server.requests[1].path).path).split("/")[3]
            assert len(trigger["entity"]) <= 512 and all(len(t) <= 50 for t in trigger["tags"])
            assert sum(len(k) + len(v) for k, v in trigger["details"].items()) <= 8000
        assert key == again and len(key) <= limit
        if len(fire.dedup_key) <= limit:
            assert key == fire.dedup_key
        else:  # distinct per condition: the shortening ends with a hash of the whole key
            assert key != fire.dedup_key[:limit] and key.startswith(fire.dedup_key[:limit - 17])


def _alertmanager_pager(server: Recorder, tmp_path: Path) -> Callable[[], Pager]:
    """A factory of pagers (one state directory, so a second is a restart) routing every alert
    to one Alertmanager receiver at ``server`` with a 1 h repeat interval (no broker)."""
    from runwatch.adapters.settings import KafkaSettings
    from runwatch.pager.service import Pager, PagerSettings

    rules = tmp_path / "routes.yaml"
    rules.write_text(f"receivers:\n  - name: am\n    kind: alertmanager\n    url: {server.url}\n"
                     "    repeat_interval: 1h\nroute:\n  receiver: am\n")
    settings = PagerSettings(rules_file=rules, state_dir=tmp_path / "state")
    return lambda: Pager(settings, KafkaSettings(bootstrap_servers="127.0.0.1:1"))


def test_a_long_firing_alert_stays_active_in_alertmanager(server: Recorder, tmp_path: Path) -> None:
    """Before the fix a firing alert reached Alertmanager once, with ``endsAt = now + repeat
    interval``, and the processor does not publish it again while it keeps firing (a NaN loss
    for 6 hours is one record): Alertmanager resolved it, and told its receivers so, after
    the repeat interval. Now the pager sends it again at half the interval, also after a
    restart (the notification log keeps the record), and stops once the resolve is sent."""
    import time

    from runwatch.core.codec import load_codec

    fire, resolve = _fire_and_resolve("run-long-nan")
    pager = _alertmanager_pager(server, tmp_path)
    codec = load_codec()
    p = pager()
    p.handle("rw.alerts", 0, 0, fire.dedup_key.encode(), codec.encode(fire))
    (first,) = server.requests
    now = int(time.time() * 1000)
    assert p.refresh(now + 60_000) == 0 and len(server.requests) == 1  # not due yet
    p.close()
    p = pager()  # a restart: the firing alert is still known
    assert p.refresh(now + 31 * 60_000) == 1
    again = _strict(server.requests[1].body)
    assert isinstance(again, list)
    body = _strict(first.body)
    assert isinstance(body, list)
    assert again[0]["labels"] == body[0]["labels"]
    assert again[0]["endsAt"] > body[0]["endsAt"]  # its end moved on: still active
    assert p.refresh(now + 32 * 60_000) == 0  # refreshed: not due again for 30 minutes
    p.handle("rw.alerts", 0, 1, resolve.dedup_key.encode(), codec.encode(resolve))
    assert len(server.requests) == 3
    assert p.refresh(now + 5 * 3_600_000) == 0 and len(server.requests) == 3  # resolved
    p.close()


def test_a_resolve_alertmanager_refused_stops_the_refresh(server: Recorder, tmp_path: Path) -> None:
    """A resolve that Alertmanager refuses (a 4xx: dead-lettered at once) used to leave the
    firing notification in place, so the refresh kept the alert active in Alertmanager for
    ever after the processor had resolved it. Now the refresh stops (the alert ends there at
    its last ``endsAt``), and the dead-lettered resolve, sent again, is still delivered."""
    import time

    from runwatch.core.codec import load_codec

    fire, resolve = _fire_and_resolve("run-refused-resolve")
    codec = load_codec()
    p = _alertmanager_pager(server, tmp_path)()
    dead: list[str] = []  # the dead-letter producer is the pager's Kafka I/O: recorded here
    p.dead_letter = lambda *args, **_kw: dead.append(args[5])  # type: ignore[method-assign]
    now = int(time.time() * 1000)
    p.handle("rw.alerts", 0, 0, fire.dedup_key.encode(), codec.encode(fire))
    assert len(server.requests) == 1
    server.answers.append((400, {}, b"bad request"))
    p.handle("rw.alerts", 0, 1, resolve.dedup_key.encode(), codec.encode(resolve))
    assert len(server.requests) == 2 and len(dead) == 1 and "HTTP 400" in dead[0]
    assert p.refresh(now + 31 * 60_000) == 0 and len(server.requests) == 2  # not kept firing
    p.handle("rw.alerts", 0, 2, resolve.dedup_key.encode(), codec.encode(resolve))  # redriven
    assert len(server.requests) == 3
    refused, sent = (_strict(r.body) for r in server.requests[1:])
    assert isinstance(refused, list) and isinstance(sent, list)
    assert sent[0]["labels"] == refused[0]["labels"]
    assert len(dead) == 1 and p.counters["sent"] == 2
    p.close()


def test_an_alert_still_firing_when_its_silence_ends_is_paged(
    server: Recorder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before the fix a firing alert that came in during a silence was dropped for good: the
    processor does not publish it again while it fires, so it never paged after the
    maintenance window, though still firing. One resolved during the silence stays quiet."""
    import time

    from runwatch import cli
    from runwatch.adapters.settings import KafkaSettings
    from runwatch.core.codec import load_codec
    from runwatch.pager.service import Pager, PagerSettings

    state = tmp_path / "state"
    assert cli.main(["silence", "--state-dir", str(state), "add", "--match", "team=ml",
                     "--for", "2h", "--reason", "maintenance"]) == 0
    fire, _resolve = _fire_and_resolve("run-a")
    fire_b, resolve_b = _fire_and_resolve("run-b")
    rules = tmp_path / "routes.yaml"
    rules.write_text(f"receivers:\n  - name: pd\n    kind: pagerduty\n"
                     f"    url: {server.url}/v2/enqueue\n    routing_key_env: PD_KEY\n"
                     "route:\n  receiver: pd\n")
    monkeypatch.setenv("PD_KEY", "pd-routing-key")
    codec = load_codec()
    p = Pager(PagerSettings(rules_file=rules, state_dir=state),
              KafkaSettings(bootstrap_servers="127.0.0.1:1"))
    for i, a in enumerate((fire, fire_b, resolve_b)):
        p.handle("rw.alerts", 0, i, a.dedup_key.encode(), codec.encode(a))
    assert server.requests == []  # silenced
    now = int(time.time() * 1000)
    assert p.refresh(now + 60_000) == 0 and server.requests == []  # still silenced
    p.close()
    p = Pager(PagerSettings(rules_file=rules, state_dir=state),  # a restart keeps them held
              KafkaSettings(bootstrap_servers="127.0.0.1:1"))
    assert p.refresh(now + 2 * 3_600_000 + 1000) == 1
    (req,) = server.requests
    body = _strict(req.body)
    assert isinstance(body, dict)
    assert (body["event_action"], body["dedup_key"]) == ("trigger", fire.dedup_key)
    assert p.refresh(now + 3 * 3_600_000) == 0 and len(server.requests) == 1  # once
    p.close()


def test_slack_text_from_a_run_cannot_mention_or_link(server: Recorder, tmp_path: Path) -> None:
    """Before the fix a run id or team holding Slack's control sequences went into the mrkdwn
    as written: ``<!channel>`` notified the whole channel, ``<@U0LAN0Z89>`` a person, and
    ``<http://evil|...>`` made a link."""
    fire, _resolve = _fire_and_resolve("run-<!channel>-a&b", team="<@U0LAN0Z89><http://evil|x>")
    receiver("slack", server.url, tmp_path).send(fire, NOW)
    body = _strict(server.requests[0].body)
    assert isinstance(body, dict)
    texts = [body["text"]]
    for block in body["blocks"]:
        if block["type"] in ("section", "context"):
            texts += [block.get("text", {}).get("text", "")]
            texts += [f["text"] for f in block.get("fields", []) + block.get("elements", [])]
    flat = "\n".join(texts)
    assert "<!channel>" not in flat and "<@U0LAN0Z89>" not in flat and "<http://evil" not in flat
    assert "run-&lt;!channel&gt;-a&amp;b" in flat and "&lt;@U0LAN0Z89&gt;" in flat
    assert "<http://ch:8123/play" in flat  # runwatch's own link is still a link
    assert all(len(t) <= 3000 for t in texts)


def test_a_firing_alert_outlives_the_pagers_refresh_round_in_alertmanager() -> None:
    """A receiver's repeat_interval of one minute gave endsAt one minute on, and the pager's
    refresh (checked once a minute) came just after it: the alert ended between refreshes."""
    from runwatch.core.paging.payloads import alertmanager_alert, iso_ms

    short = alertmanager_alert(make_alert(), NOW, "http://x", ttl_ms=60_000)
    usual = alertmanager_alert(make_alert(), NOW, "http://x", ttl_ms=4 * 3_600_000)
    assert short["endsAt"] == iso_ms(NOW + 3 * 60_000)  # three refresh rounds
    assert usual["endsAt"] == iso_ms(NOW + 4 * 3_600_000)


def _pager_to(tmp_path: Path, receivers_yaml: str, receiver_name: str) -> Pager:
    """A pager (no broker) routing every alert to the receivers of ``receivers_yaml``."""
    from runwatch.adapters.settings import KafkaSettings
    from runwatch.pager.service import PagerSettings

    rules = tmp_path / "routes.yaml"
    rules.write_text(f"receivers:\n{receivers_yaml}route:\n  receiver: {receiver_name}\n")
    return Pager(PagerSettings(rules_file=rules, state_dir=tmp_path / "state"),
                 KafkaSettings(bootstrap_servers="127.0.0.1:1"))


@pytest.mark.parametrize("level", [logging.INFO, logging.DEBUG])
def test_a_secret_url_is_never_logged(server: Recorder, tmp_path: Path, level: int,
                                      monkeypatch: pytest.MonkeyPatch,
                                      caplog: pytest.LogCaptureFixture) -> None:
    """Before the fix httpx's INFO line ``HTTP Request: POST http://.../T0123/B0456/<token>``
    gave every Slack webhook's secret URL (read from ``url_env``) to the pager's log on each
    delivery, and the same for a webhook URL read from the environment."""
    from runwatch.core.codec import load_codec

    caplog.set_level(level)
    caplog.set_level(level, logger="httpx")  # the CLI quiets it (LIBRARY_CHATTER): not here
    slack_url = f"{server.url}/services/T0123/B0456/SeCrEtToKeN"
    monkeypatch.setenv("SLACK_URL", slack_url)
    monkeypatch.setenv("HOOK_URL", f"{server.url}/hooks/HoOkToKeN?x=1")
    monkeypatch.setenv("HOOK_SECRET", "hook-secret-value")
    p = _pager_to(tmp_path, "  - name: slack\n    kind: slack\n    url_env: SLACK_URL\n"
                  "  - name: hook\n    kind: webhook\n    url_env: HOOK_URL\n"
                  "    secret_env: HOOK_SECRET\n",
                  "slack\n  routes:\n    - receiver: slack\n      continue: true\n"
                  "    - receiver: hook\n")
    fire, _resolve = _fire_and_resolve("run-secret")
    codec = load_codec()
    server.answers.append((500, {}, b"down"))  # a retry logs the failure too
    p.handle("rw.alerts", 0, 0, fire.dedup_key.encode(), codec.encode(fire))
    assert len(server.requests) == 3
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "HTTP Request: POST" in text  # httpx did log its requests
    for secret in ("SeCrEtToKeN", "T0123/B0456", "HoOkToKeN", "hook-secret-value"):
        assert secret not in text, text
    assert "<secret: slack url>" in text
    p.close()


def test_a_dead_letter_log_line_names_the_alert(server: Recorder, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                caplog: pytest.LogCaptureFixture) -> None:
    """Before the fix a dead letter was logged as ``dead-lettering rw.alerts[3]@0: receiver
    pd rejected the alert: HTTP 400 ...``: which alert was dropped was not said, and one that
    a silence held back (delivered when it ended) showed ``rw.alerts[-1]@-1``."""
    import time

    from runwatch import cli
    from runwatch.core.codec import load_codec

    monkeypatch.setenv("PD_KEY", "pd-routing-key")
    p = _pager_to(tmp_path, f"  - name: pd\n    kind: pagerduty\n    url: {server.url}/v2/enqueue\n"
                  "    routing_key_env: PD_KEY\n", "pd")

    class Dlq:
        def produce(self, *_args: object) -> None:
            pass

        def flush(self, _timeout: float) -> int:
            return 0

        def close(self) -> None:
            pass

    p.dlq = Dlq()  # type: ignore[assignment]
    codec = load_codec()
    fire, _resolve = _fire_and_resolve("run-dropped")
    server.answers.append((400, {}, b'{"message":"Invalid routing key"}'))
    p.handle("rw.alerts", 3, 7, fire.dedup_key.encode(), codec.encode(fire))
    line = next(r.getMessage() for r in caplog.records if "dead-lettering" in r.getMessage())
    assert f"firing alert of run run-dropped (dedup key {fire.dedup_key})" in line
    assert "(rw.alerts[3]@7)" in line and "HTTP 400" in line
    caplog.clear()
    assert cli.main(["silence", "--state-dir", str(tmp_path / "state"), "add", "--match",
                     "run_id=run-held", "--for", "1m", "--reason", "maintenance"]) == 0
    held, _ = _fire_and_resolve("run-held")
    p.handle("rw.alerts", 0, 8, held.dedup_key.encode(), codec.encode(held))
    server.answers.append((400, {}, b'{"message":"Invalid routing key"}'))
    assert p.refresh(int(time.time() * 1000) + 120_000) == 1
    line = next(r.getMessage() for r in caplog.records if "dead-lettering" in r.getMessage())
    assert "firing alert of run run-held" in line
    assert "held by a silence, delivered when it ended" in line and "[-1]@-1" not in line
    p.close()
