"""The pager against the real stack: Kafka, Debian's Alertmanager, and a recording HTTP server.

- an alert that fires appears in Alertmanager's GET /api/v2/alerts with the
  right labels and annotations; its resolve sets endsAt;
- undecodable records and receivers answering 4xx go to rw.dlq with the reason;
- kill -9 of the pager (a subprocess) in the middle of a retry, then a restart:
  no alert lost, none paged twice for the same dedup key within the repeat interval.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from confluent_kafka import Consumer, Producer
from sinkkit import wait

from runwatch.adapters import kafka as kafka_adapter
from runwatch.adapters.settings import KafkaSettings
from runwatch.core.codec import load_codec
from runwatch.core.records import Alert, DeadLetter, Evidence, Source
from runwatch.pager import service as pager_service
from runwatch.pager.service import Pager, PagerSettings

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def make_alert(
    dedup_key: str, status: str = "firing", run_id: str = "run-it", **kw: object
) -> Alert:
    t = now_ms()
    base: dict = dict(
        event_id=str(uuid.uuid4()), run_id=run_id, emitted_at_ms=t, seq=1,
        source=Source(kind="processor", host="test", runwatch_version="0.1.0"),
        alert_id=str(uuid.uuid4()), dedup_key=dedup_key, status=status, severity="critical",
        detector="loss_divergence", indicator="loss_slope", observed=3.5, expected=0.1,
        score=9.0, probable_cause="learning",
        evidence=(Evidence(signal="learning", indicator="loss", observed=3.5, expected=0.1,
                           at_ms=t - 1000, detail="loss 35x baseline"),),
        title=f"Loss diverging ({dedup_key})", summary="loss rose 35x in 200 steps",
        team="ml-vision", experiment_family="resnet", node="gpu-3", labels={"env": "it"},
        first_seen_ms=t - 60_000, last_seen_ms=t,
    )
    base.update(kw)
    return Alert(**base)


def publish(stack, topic: str, items: list[tuple[str, bytes]]) -> None:
    p = Producer(stack.kafka_config())
    for key, value in items:
        p.produce(topic, value, key.encode())
    assert p.flush(30) == 0


FIRST_DELIVERY_S = 120
"""How long a test waits for a pager it has just started to deliver its first alert: the
pager's consumer group join shares the machine's two cores with the other tests' brokers
(in one CI run a 60 s wait ran out while another test started three brokers)."""


def wait_until(cond: Callable[[], object], timeout: float, what: str) -> object:
    return wait(cond, timeout, what, every=0.2)


def read_dlq(stack, topic: str, n: int, timeout: float = 30) -> list[DeadLetter]:
    codec = load_codec()
    c = Consumer(stack.kafka_config(group_id=f"t-{uuid.uuid4().hex}", auto_offset_reset="earliest"))
    c.subscribe([topic])
    out: list[DeadLetter] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            out.append(codec.decode(m.value()))
    finally:
        c.close()
    return out


@dataclass
class Recorder:
    url: str = ""
    requests: list[tuple[str, bytes]] = field(default_factory=list)
    rule: Callable[[str], tuple[int, dict[str, str], bytes]] = lambda _p: (202, {}, b"{}")
    lock: threading.Lock = field(default_factory=threading.Lock)

    def bodies(self, prefix: str) -> list[dict]:
        with self.lock:
            return [json.loads(b) for p, b in self.requests if p.startswith(prefix)]


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    rec = Recorder()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            with rec.lock:
                rec.requests.append((self.path, body))
            status, headers, out = rec.rule(self.path)
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
    threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    yield rec
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def run_pager(stack, tmp_path: Path) -> Iterator[Callable[..., Pager]]:
    started: list[tuple[Pager, threading.Thread]] = []

    def start(rules: str, alerts_topic: str, dlq_topic: str, bootstrap: str | None = None,
              **kw: object) -> Pager:
        rules_file = tmp_path / f"routes-{uuid.uuid4().hex[:6]}.yaml"
        rules_file.write_text(rules)
        kw.setdefault("group_id", f"pager-{uuid.uuid4().hex[:8]}")
        settings = PagerSettings(
            rules_file=rules_file, state_dir=tmp_path / "state", alerts_topic=alerts_topic,
            dlq_topic=dlq_topic, **kw,  # type: ignore[arg-type]
        )
        pager = Pager(settings,
                      KafkaSettings(bootstrap_servers=bootstrap or stack.bootstrap_servers))
        t = threading.Thread(target=pager.run, daemon=True)
        t.start()
        started.append((pager, t))
        return pager

    yield start
    for pager, t in started:
        pager.stop.set()
        t.join(30)
        assert not t.is_alive(), "pager thread did not stop"


def _am_alerts(url: str, key: str) -> list[dict]:
    got = httpx.get(f"{url}/api/v2/alerts", params={"filter": f'dedup_key="{key}"'}, timeout=5)
    assert got.status_code == 200, got.text
    return got.json()


def _am_pager(stack, fresh_topic, run_pager) -> tuple[str, str, str]:
    """Start a pager on fresh topics that routes every alert to the stack's Alertmanager.

    Returns:
        The Alertmanager URL, the alerts topic and the DLQ topic.

    """
    am = stack.alertmanager_url
    alerts, dlq = fresh_topic(prefix="rw.alerts"), fresh_topic(partitions=1, prefix="rw.dlq")
    rules = (f"receivers:\n  - name: am\n    kind: alertmanager\n    url: {am}\n"
             "route:\n  receiver: am\n")
    run_pager(rules, alerts, dlq)
    return am, alerts, dlq


def _am_ended(am: str, key: str) -> bool:
    """Whether Alertmanager shows the alert ended (endsAt passed, or no longer listed)."""
    got = _am_alerts(am, key)
    if not got:  # Alertmanager lists only unresolved alerts: gone means endsAt passed
        return True
    ends = datetime.fromisoformat(got[0]["endsAt"].replace("Z", "+00:00"))
    return ends <= datetime.now(UTC)


def test_alertmanager_fire_and_resolve(stack, fresh_topic, run_pager) -> None:
    am, alerts, dlq = _am_pager(stack, fresh_topic, run_pager)
    key = f"run-it/{uuid.uuid4().hex[:8]}"
    codec = load_codec()
    publish(stack, alerts, [(key, codec.encode(make_alert(key)))])
    found = wait_until(lambda: _am_alerts(am, key), FIRST_DELIVERY_S, "the alert in Alertmanager")
    assert isinstance(found, list) and len(found) == 1
    a = found[0]
    assert a["labels"]["alertname"] == "loss_divergence"
    assert a["labels"]["severity"] == "critical"
    assert a["labels"]["run_id"] == "run-it"
    assert a["labels"]["probable_cause"] == "learning"
    assert a["labels"]["team"] == "ml-vision" and a["labels"]["env"] == "it"
    assert a["annotations"]["summary"] == f"Loss diverging ({key})"
    assert "loss 35x baseline" in a["annotations"]["evidence"]
    assert a["generatorURL"].startswith("http://127.0.0.1:8123/play")
    assert a["status"]["state"] == "active"
    ends_before = datetime.fromisoformat(a["endsAt"].replace("Z", "+00:00"))
    assert ends_before > datetime.now(UTC)

    publish(stack, alerts, [(key, codec.encode(make_alert(key, status="resolved")))])

    wait_until(lambda: _am_ended(am, key), 60, "the resolve to set endsAt")
    assert not read_dlq(stack, dlq, 1, timeout=2)


def test_bad_input_goes_to_dlq(stack, fresh_topic, run_pager, recorder) -> None:
    alerts = fresh_topic(partitions=1, prefix="rw.alerts")
    dlq = fresh_topic(partitions=1, prefix="rw.dlq")
    recorder.rule = lambda _p: (400, {}, b'{"error":"bad payload: unknown field"}')
    rules = (f"receivers:\n  - name: hook\n    kind: webhook\n    url: {recorder.url}/hook\n"
             f"    secret_env: IT_HOOK_SECRET\nroute:\n  receiver: hook\n")
    os.environ["IT_HOOK_SECRET"] = "s"
    run_pager(rules, alerts, dlq)
    codec = load_codec()
    garbage = b"\xc3\x01not-an-avro-record"
    good = codec.encode(make_alert("k-4xx"))
    publish(stack, alerts, [("k-bad", garbage), ("k-4xx", good)])
    letters = read_dlq(stack, dlq, 2, timeout=60)
    assert len(letters) == 2
    by_key = {(d.key or b"").decode(): d for d in letters}
    assert by_key["k-bad"].original == garbage
    assert "undecodable alert" in by_key["k-bad"].reason
    assert by_key["k-bad"].topic == alerts and by_key["k-bad"].offset == 0
    assert by_key["k-4xx"].original == good
    assert "HTTP 400" in by_key["k-4xx"].reason and "unknown field" in by_key["k-4xx"].reason
    assert len(recorder.requests) == 1  # a 4xx is not retried


def test_a_new_consumer_group_does_not_page_the_history(
    stack, fresh_topic, run_pager, recorder
) -> None:
    """Before the fix a pager with a new consumer group (its first start, or a changed
    RUNWATCH_PAGER_GROUP_ID) started at offset 0 and paged the whole history of rw.alerts:
    alerts resolved long ago, as firing then resolved. It now starts at the alerts published
    in the last ``RUNWATCH_PAGER_START`` (15m); a group with committed offsets goes on from
    them, however old what it has not read yet is (at least once)."""
    alerts = fresh_topic(partitions=1, prefix="rw.alerts")
    dlq = fresh_topic(partitions=1, prefix="rw.dlq")
    rules = (f"receivers:\n  - name: hook\n    kind: webhook\n    url: {recorder.url}/hook\n"
             f"    secret_env: IT_HOOK_SECRET\nroute:\n  receiver: hook\n")
    os.environ["IT_HOOK_SECRET"] = "s"
    codec = load_codec()
    old_ts = now_ms() - 3 * 3_600_000
    p = Producer(stack.kafka_config())
    for key, status in (("k-old", "firing"), ("k-old", "resolved")):
        p.produce(alerts, codec.encode(make_alert(key, status)), key.encode(), timestamp=old_ts)
    p.produce(alerts, codec.encode(make_alert("k-new")), b"k-new")
    assert p.flush(30) == 0
    group = f"pager-{uuid.uuid4().hex[:8]}"
    pager = run_pager(rules, alerts, dlq, group_id=group)
    wait_until(lambda: recorder.bodies("/hook"), FIRST_DELIVERY_S, "the recent alert")
    assert [b["alert"]["dedup_key"] for b in recorder.bodies("/hook")] == ["k-new"]
    pager.stop.set()
    wait_until(lambda: pager.dlq is None, 30, "the pager to stop")
    # an existing group: an alert it has not read is delivered, whatever its age
    p.produce(alerts, codec.encode(make_alert("k-late")), b"k-late", timestamp=old_ts)
    assert p.flush(30) == 0
    run_pager(rules, alerts, dlq, group_id=group)
    wait_until(lambda: len(recorder.bodies("/hook")) == 2, 60, "the unread alert")
    assert [b["alert"]["dedup_key"] for b in recorder.bodies("/hook")] == ["k-new", "k-late"]


class LateBroker:
    """The broker behind a port that nothing listens on until :meth:`open`.

    A client bootstrapped there finds no broker (as during a broker restart) until the
    port opens; then each connection is forwarded to the real broker, whose metadata sends
    the client on to it directly.
    """

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.address = f"127.0.0.1:{self.port}"
        self._closed = threading.Event()
        self._server: socket.socket | None = None

    def open(self) -> None:
        self._server = socket.create_server(("127.0.0.1", self.port))
        self._server.settimeout(0.2)
        threading.Thread(target=self._accept, daemon=True).start()

    def open_after(self, seconds: float) -> None:
        timer = threading.Timer(seconds, self.open)
        timer.daemon = True
        timer.start()

    def _accept(self) -> None:
        assert self._server is not None
        while not self._closed.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._closed.set()
        if self._server is not None:
            self._server.close()


def test_a_new_group_placed_while_the_broker_is_away_waits_for_it(stack, fresh_topic) -> None:
    """Placing a new group while no broker answers used to give up after one try and
    leave the group at ``auto.offset.reset`` (earliest): the pager paged the whole history.
    It now tries again until the broker answers and commits the start it was asked for."""
    topic = fresh_topic(partitions=2, prefix="rw.alerts")
    p = Producer(stack.kafka_config())
    for i in range(6):
        p.produce(topic, b"old", f"k{i}".encode(), partition=i % 2)
    assert p.flush(30) == 0
    late = LateBroker(stack.bootstrap_servers)
    late.open_after(4.0)
    group = f"pager-{uuid.uuid4().hex[:8]}"
    try:
        t0 = time.monotonic()
        started = kafka_adapter.start_new_group(
            KafkaSettings(bootstrap_servers=late.address), group, topic, now_ms(), timeout=2.0)
        assert time.monotonic() - t0 >= 3.5  # it waited for the broker
    finally:
        late.close()
    assert started == {0: 3, 1: 3}  # the end: "latest"
    c = Consumer(stack.kafka_config(group_id=group))
    try:
        committed = c.committed([kafka_adapter.TopicPartition(topic, i) for i in (0, 1)],
                                timeout=10)
    finally:
        c.close()
    assert [tp.offset for tp in committed] == [3, 3]


def test_placing_a_group_gives_up_only_when_told() -> None:
    """No broker at all: the placement raises once its wait or its stop says so; it never
    returns as if placed (which left the group to read everything)."""
    nobody = KafkaSettings(bootstrap_servers="127.0.0.1:1")
    t0 = time.monotonic()
    with pytest.raises(kafka_adapter.GroupNotPlaced, match="could not place"):
        kafka_adapter.start_new_group(nobody, "g-none", "rw.alerts", now_ms(), timeout=0.5,
                                      wait_s=2.0, backoff_s=(0.2, 0.5))
    assert 1.0 <= time.monotonic() - t0 < 10
    stop = threading.Event()
    threading.Timer(1.0, stop.set).start()
    with pytest.raises(kafka_adapter.GroupNotPlaced, match="stopped"):
        kafka_adapter.start_new_group(nobody, "g-none", "rw.alerts", now_ms(), timeout=0.5,
                                      stop=stop, backoff_s=(0.2, 0.5))


def test_a_pager_started_while_the_broker_is_away_pages_no_history(
    stack, fresh_topic, run_pager, recorder, monkeypatch
) -> None:
    """The repro of the ops report (D3): a pager with a new group and
    ``RUNWATCH_PAGER_START=latest`` started while the broker did not answer logged
    "could not place new consumer group ...; it starts at auto.offset.reset" and paged
    every alert of rw.alerts' history. Each broker round trip is cut to 2 s here so
    that the broker, back after 5 s, comes after the first try gave up."""
    monkeypatch.setattr(pager_service, "start_new_group",
                        functools.partial(kafka_adapter.start_new_group, timeout=2.0))
    alerts = fresh_topic(partitions=1, prefix="rw.alerts")
    dlq = fresh_topic(partitions=1, prefix="rw.dlq")
    rules = (f"receivers:\n  - name: hook\n    kind: webhook\n    url: {recorder.url}/hook\n"
             f"    secret_env: IT_HOOK_SECRET\nroute:\n  receiver: hook\n")
    monkeypatch.setenv("IT_HOOK_SECRET", "s")
    codec = load_codec()
    p = Producer(stack.kafka_config())
    for key, status in (("k-old", "firing"), ("k-old", "resolved"), ("k-older", "firing")):
        p.produce(alerts, codec.encode(make_alert(key, status)), key.encode())
    assert p.flush(30) == 0
    late = LateBroker(stack.bootstrap_servers)
    late.open_after(5.0)
    try:
        run_pager(rules, alerts, dlq, bootstrap=late.address, start="latest")
        time.sleep(1.0)  # after the pager started: "latest" includes it
        p.produce(alerts, codec.encode(make_alert("k-new")), b"k-new")
        assert p.flush(30) == 0
        wait_until(lambda: recorder.bodies("/hook"), FIRST_DELIVERY_S, "the new alert")
        time.sleep(2.0)  # anything older would have come first
        assert [b["alert"]["dedup_key"] for b in recorder.bodies("/hook")] == ["k-new"]
    finally:
        late.close()


def test_kill_9_mid_retry_loses_nothing_and_pages_once(
    stack, fresh_topic, recorder, tmp_path: Path
) -> None:
    alerts = fresh_topic(partitions=1, prefix="rw.alerts")
    dlq = fresh_topic(partitions=1, prefix="rw.dlq")
    hook_ok = threading.Event()

    def rule(path: str) -> tuple[int, dict[str, str], bytes]:
        if path.startswith("/hook") and not hook_ok.is_set():
            return 503, {"Retry-After": "30"}, b"down for maintenance"
        return 202, {}, b'{"status":"success"}'

    recorder.rule = rule
    rules_file = tmp_path / "routes.yaml"
    rules_file.write_text(
        "receivers:\n"
        f"  - name: pd\n    kind: pagerduty\n    url: {recorder.url}/pd\n"
        "    routing_key_env: IT_PD_KEY\n    repeat_interval: 1h\n"
        f"  - name: hook\n    kind: webhook\n    url: {recorder.url}/hook\n"
        "    secret_env: IT_HOOK_SECRET\n    repeat_interval: 1h\n"
        "route:\n  receiver: pd\n  routes:\n    - receiver: pd\n      continue: true\n"
        "    - receiver: hook\n"
    )
    env = {
        **os.environ, "IT_PD_KEY": "k", "IT_HOOK_SECRET": "s",
        "KAFKA_BOOTSTRAP_SERVERS": stack.bootstrap_servers,
        "RUNWATCH_PAGER_RULES_FILE": str(rules_file),
        "RUNWATCH_PAGER_STATE_DIR": str(tmp_path / "state"),
        "RUNWATCH_PAGER_ALERTS_TOPIC": alerts, "RUNWATCH_PAGER_DLQ_TOPIC": dlq,
        "RUNWATCH_PAGER_GROUP_ID": f"pager-{uuid.uuid4().hex[:8]}",
        "RUNWATCH_PAGER_BACKOFF_BASE_MS": "200", "RUNWATCH_PAGER_MAX_ATTEMPTS": "20",
    }
    cmd = [sys.executable, "-m", "runwatch", "pager"]
    log1 = (tmp_path / "pager1.log").open("wb")
    p1 = subprocess.Popen(cmd, env=env, stdout=log1, stderr=subprocess.STDOUT, cwd=REPO)
    codec = load_codec()
    try:
        publish(stack, alerts, [("k1", codec.encode(make_alert("k1")))])
        # pd paged, the webhook answered 503 + Retry-After 30: its delivery is deferred
        # (deferred.jsonl, fsynced) and the offset committed; the restart goes on from it
        wait_until(lambda: recorder.bodies("/pd") and recorder.bodies("/hook"), FIRST_DELIVERY_S,
                   "the first delivery attempts")
        time.sleep(0.5)
        os.kill(p1.pid, signal.SIGKILL)
        assert p1.wait(10) == -signal.SIGKILL
    finally:
        if p1.poll() is None:
            p1.kill()
            p1.wait()
    hook_ok.set()
    # the same incident again (within the repeat interval) and a new one
    publish(stack, alerts, [("k1", codec.encode(make_alert("k1"))),
                            ("k2", codec.encode(make_alert("k2")))])
    log2 = (tmp_path / "pager2.log").open("wb")
    p2 = subprocess.Popen(cmd, env=env, stdout=log2, stderr=subprocess.STDOUT, cwd=REPO)
    try:
        def done() -> bool:
            hook_keys = [b["alert"]["dedup_key"] for b in recorder.bodies("/hook")]
            pd_keys = [b["dedup_key"] for b in recorder.bodies("/pd")]
            return "k2" in hook_keys and "k2" in pd_keys and hook_keys.count("k1") >= 2
        wait_until(done, 90, "delivery after the restart")
        time.sleep(2)  # room for any (wrong) duplicate page to show up
    finally:
        p2.send_signal(signal.SIGTERM)
        try:
            p2.wait(30)
        except subprocess.TimeoutExpired:
            p2.kill()
            p2.wait()
    pd_keys = [b["dedup_key"] for b in recorder.bodies("/pd")]
    assert sorted(pd_keys) == ["k1", "k2"], (tmp_path / "pager2.log").read_text()
    with recorder.lock:
        hook_requests = [p for p, _ in recorder.requests if p.startswith("/hook")]
    hook_keys = [b["alert"]["dedup_key"] for b in recorder.bodies("/hook")]
    # k1: one 503 before the kill, then one accepted delivery; k2: one delivery
    assert hook_keys.count("k2") == 1
    assert hook_keys.count("k1") == 2 and len(hook_requests) == 3
    assert not read_dlq(stack, dlq, 1, timeout=2)
    state = (tmp_path / "state" / "notifications.jsonl").read_text().splitlines()
    sent = sorted((json.loads(x)["receiver"], json.loads(x)["dedup_key"]) for x in state)
    assert sent == [("hook", "k1"), ("hook", "k2"), ("pd", "k1"), ("pd", "k2")]


def test_alertmanager_fire_resolve_refire_resolve_across_clocks(
    stack, fresh_topic, run_pager
) -> None:
    """Event time ahead of and behind the pager's clock: every transition is accepted.

    The first episode was first seen two minutes ahead of the pager's clock (a
    replay or a producer clock ahead); its resolve is stamped now, before that
    first sighting. The second episode was first seen before the first resolve's
    stamp. Alertmanager must show each firing alert active and end it on each
    resolve, and nothing goes to the DLQ.
    """
    am, alerts, dlq = _am_pager(stack, fresh_topic, run_pager)
    key = f"run-it/{uuid.uuid4().hex[:8]}"
    codec = load_codec()

    def active() -> bool:
        got = _am_alerts(am, key)
        return bool(got) and got[0]["status"]["state"] == "active" and datetime.fromisoformat(
            got[0]["endsAt"].replace("Z", "+00:00")) > datetime.now(UTC)

    def ended() -> bool:
        return _am_ended(am, key)

    t = now_ms()
    episodes = [(str(uuid.uuid4()), t + 120_000), (str(uuid.uuid4()), t - 30_000)]
    for alert_id, first_seen in episodes:
        for status, check in (("firing", active), ("resolved", ended)):
            alert = make_alert(key, status=status, alert_id=alert_id, first_seen_ms=first_seen,
                               last_seen_ms=first_seen)
            publish(stack, alerts, [(key, codec.encode(alert))])
            wait_until(check, 60, f"Alertmanager to show the {status} alert")
    assert not read_dlq(stack, dlq, 1, timeout=2)


def test_a_cause_change_before_the_resolve_leaves_nothing_open(
        stack, fresh_topic, run_pager, recorder) -> None:
    """The processor re-sends an alert when its probable cause changes (new cause, new
    owner), then resolves it. The resolve went only where its new cause routes, so the
    receiver paged for the first cause (a PagerDuty incident) was never told; and the
    update reached Alertmanager with new labels: its resolve matched nothing, the first
    alert stayed active, and the pager refreshed it there for ever."""
    am = stack.alertmanager_url
    alerts, dlq = fresh_topic(prefix="rw.alerts"), fresh_topic(partitions=1, prefix="rw.dlq")
    rules = (f"receivers:\n  - name: am\n    kind: alertmanager\n    url: {am}\n"
             f"  - name: first\n    kind: webhook\n    url: {recorder.url}/first\n"
             "    secret_env: RW_IT_SECRET\n"
             f"  - name: second\n    kind: webhook\n    url: {recorder.url}/second\n"
             "    secret_env: RW_IT_SECRET\n"
             "route:\n  receiver: second\n  routes:\n"
             "    - match: {probable_cause: learning}\n      receiver: am\n      continue: true\n"
             "    - match: {probable_cause: learning}\n      receiver: first\n"
             "    - match: {probable_cause: execution}\n      receiver: am\n"
             "      continue: true\n"
             "    - receiver: second\n")
    os.environ["RW_IT_SECRET"] = "s3cret-for-the-test"
    pager = run_pager(rules, alerts, dlq)
    key = f"run-it/{uuid.uuid4().hex[:8]}"
    codec = load_codec()
    fired = make_alert(key)
    publish(stack, alerts, [(key, codec.encode(fired))])
    wait_until(lambda: _am_alerts(am, key) and recorder.bodies("/first"), FIRST_DELIVERY_S,
               "the first cause's pages")
    moved = dict(probable_cause="execution", owner="platform-engineering",
                 alert_id=fired.alert_id)
    publish(stack, alerts, [(key, codec.encode(make_alert(key, **moved))),
                            (key, codec.encode(make_alert(key, status="resolved", **moved)))])
    wait_until(lambda: [b for b in recorder.bodies("/first") if b.get("status") == "resolved"],
               60, "the resolve at the receiver paged for the first cause")
    wait_until(lambda: _am_ended(am, key), 60, "Alertmanager to end the alert")
    listed = _am_alerts(am, key)
    assert all(a["labels"]["probable_cause"] == "learning" for a in listed), listed
    assert [b["status"] for b in recorder.bodies("/second")] == ["firing", "resolved"]
    assert pager.refresh(now_ms() + 10 * 3_600_000) == 0  # nothing left firing to refresh
    assert not read_dlq(stack, dlq, 1, timeout=2)
