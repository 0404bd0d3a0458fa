"""Helpers for the sink/db/sql integration tests: an own store, topics, a sink process."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from runwatch.adapters import clickhouse as ch
from runwatch.adapters.settings import ClickHouseSettings
from runwatch.adapters.topics import ensure_topics
from runwatch.core.codec import load_codec
from runwatch.core.storage.retention import RetentionRules, parse_rules
from runwatch.core.storage.rows import Origin, record_rows
from runwatch.core.topics import load_topics
from runwatch.sink.settings import default_topics
from runwatch.stack.manager import Stack
from runwatch.stack.settings import StackSettings
from runwatch.testing.synth import TOPIC_OF, Event

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_DIR = ROOT / "schemas" / "clickhouse"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def own_broker(state_dir: Path, *, secure: bool = False) -> Iterator[Stack]:
    """A broker of a test module's own (ephemeral ports, ``state_dir``), stopped afterwards.

    The shared stack serves other test sessions at the same time: a test that stops or
    restarts its broker, or secures it, needs one of its own.
    """
    settings = StackSettings(state_dir=state_dir, secure=secure, kafka_port=free_port(),
                             controller_port=free_port())
    stack = Stack(settings)
    result = stack.up(services=["kafka"])
    if not result.ok:
        stack.down()
        pytest.fail(f"own broker did not start: {result.failed['kafka']}", pytrace=False)
    try:
        yield stack
    finally:
        stack.down()


class Store:
    """A `runwatch store` process of our own (stoppable), on an ephemeral port."""

    def __init__(self, path: Path, users_file: Path | None = None) -> None:
        self.path = path
        self.users_file = users_file
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = path.parent / f"store-{self.port}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "runwatch",
                "store",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--path",
                str(self.path),
            ],
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("ab"),
            cwd=ROOT,
            env={**os.environ, **({"RUNWATCH_STORE_USERS_FILE": str(self.users_file)}
                                  if self.users_file else {})},
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                ch.make_client(ClickHouseSettings(url=self.url), database="").command("SELECT 1")
                return
            except Exception:  # noqa: BLE001
                assert self.proc.poll() is None, self.log.read_text()[-2000:]
                time.sleep(0.3)
        raise AssertionError(f"store did not start: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def settings(store_url: str, db: str) -> ClickHouseSettings:
    return ClickHouseSettings(url=store_url, database=db)


def migrate(store_url: str, db: str, rules: RetentionRules | None = None) -> Any:
    client = ch.make_client(settings(store_url, db), database="")
    rules = rules or parse_rules((ROOT / "schemas" / "retention.yaml").read_text())
    ch.migrate(client, db, SCHEMA_DIR, rules)
    return client


def make_topics(bootstrap: str, partitions: int = 4) -> dict[str, str]:
    """Create the sink's topics of schemas/topics.yaml under a fresh prefix.

    Uses the shared provisioning helper (``ensure_topics``); returns
    ``{map name: broker name}``. Delete them with :func:`delete_topics`.
    """
    wanted = set(default_topics())
    specs = [s for s in load_topics().values() if s.name in wanted]
    prefix = f"t{uuid.uuid4().hex[:10]}."
    ensure_topics(
        {"bootstrap.servers": bootstrap}, prefix=prefix, specs=specs, partitions=partitions
    )
    return {s.name: prefix + s.name for s in specs}


def delete_topics(bootstrap: str, names: list[str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for name, fut in admin.delete_topics(names, operation_timeout=30).items():
        try:
            fut.result(timeout=30)
        except Exception as exc:  # noqa: BLE001 - cleanup must not mask the test result
            print(f"could not delete topic {name}: {exc}")


def publish(
    bootstrap: str,
    topics: dict[str, str],
    events: list[Event],
    garbage: int = 0,
    duplicates: int = 0,
) -> list[bytes]:
    codec = load_codec()
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "compression.type": "lz4",
            "queue.buffering.max.messages": 500000,
        }
    )
    encoded = codec.encode_many(e.record for e in events)
    for i, (e, value) in enumerate(zip(events, encoded, strict=True)):
        # The first `duplicates` records are sent twice in a row, as a producer
        # replaying its spool would (same event_id, a later offset).
        for _copy in range(2 if i < duplicates else 1):
            while True:
                try:
                    producer.produce(topics[TOPIC_OF[e.kind]], value=value, key=e.key.encode())
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.poll(0)
    for i in range(garbage):
        producer.produce(topics["rw.exec.job"], value=b"\x00garbage" + bytes([i % 256]), key=b"x")
    assert producer.flush(60) == 0
    return encoded


def expected_counts(events: list[Event]) -> Counter[str]:
    """Distinct event_ids per table (rows per table, GPU rows per GPU)."""
    out: Counter[str] = Counter()
    seen: set[str] = set()
    for e in events:
        if e.record.event_id in seen:
            continue
        seen.add(e.record.event_id)
        for table, _row in record_rows(e.record, Origin("t", 0, 0)):
            out[table] += 1
    return out


def table_counts(client: Any, db: str, tables: list[str]) -> dict[str, int]:
    return {
        t: int(client.query(f"SELECT count() FROM {db}.{t} FINAL").result_rows[0][0])
        for t in tables
    }


class SinkProc:
    """`runwatch sink` as a subprocess."""

    def __init__(
        self, bootstrap: str, topics: dict[str, str], store_url: str, db: str, log: Path, **env: str
    ) -> None:
        self.args = [
            sys.executable,
            "-m",
            "runwatch",
            "sink",
            "--group",
            f"sink-{uuid.uuid4().hex[:8]}",
            "--topics",
            ",".join(topics.values()),
            "--database",
            db,
            "--bootstrap",
            bootstrap,
        ]
        self.env = {
            **os.environ,
            "CLICKHOUSE_URL": store_url,
            "RUNWATCH_SINK_BACKOFF_MAX_S": "2",
            **env,
        }
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            self.args, env=self.env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=self.log.open("ab")
        )

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def wait(cond: Callable[[], Any], timeout: float, what: str, every: float = 0.5) -> Any:
    """Poll ``cond`` every ``every`` seconds until it returns something true; fail the test
    after ``timeout`` seconds, naming ``what`` it waited for."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(every)
    pytest.fail(f"timed out after {timeout} s waiting for {what}")
