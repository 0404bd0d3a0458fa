"""The secured broker (``runwatch stack up --secure``): the pipeline, ACL refusals, bad logins.

A broker of this module's own (free ports, temporary state) is started
through :class:`runwatch.stack.manager.Stack` with ``secure=True``, the code
``runwatch stack up --secure`` runs: SASL_SSL with SCRAM-SHA-512, a CA and
broker certificate generated on first use, the StandardAuthorizer and the
ACLs of :func:`runwatch.stack.secure.acl_table`. Every client connects with
the settings ``runwatch stack env --role ROLE`` prints.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sinkkit import own_broker

from runwatch.adapters.kafka import BatchConsumer, KafkaTransport, ProducerSettings
from runwatch.adapters.kafka_security import KafkaAuthError, KafkaAuthorizationError
from runwatch.adapters.settings import KafkaSettings
from runwatch.stack.manager import Stack
from runwatch.stack.prepare import ensure_topics
from runwatch.stack.secure import SecureFiles, role_env

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def secure_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A secured broker of this module's own, with the topics of the map."""
    with own_broker(tmp_path_factory.mktemp("kafka-secure"), secure=True) as stack:
        ensure_topics(stack.settings)
        yield stack


def _env(stack: Stack, role: str, **override: str) -> dict[str, str]:
    files = SecureFiles(stack.settings.secure_dir)
    return {**role_env(files, stack.settings.bootstrap_servers, role), **override}  # type: ignore[arg-type]


def _kafka(stack: Stack, role: str, **override: str) -> KafkaSettings:
    env = _env(stack, role, **override)
    return KafkaSettings.model_validate({k.removeprefix("KAFKA_").lower(): v
                                         for k, v in env.items()})


def _wrong(stack: Stack, role: str, tmp_path: Path) -> dict[str, str]:
    bad = tmp_path / f"{role}-wrong-password"
    bad.write_text("not-the-password\n")
    return _env(stack, role, KAFKA_SASL_PASSWORD_FILE=str(bad))


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_")}
    return {**env, **extra}


SDK_JOB = textwrap.dedent("""
    import math, sys
    import runwatch
    run = runwatch.init("secure-fam", team="ml", run_id=sys.argv[1], strict=True,
                        install_hooks=False, capture_lineage=False)
    for i in range(41):
        run.step(i, loss=math.nan if i == 40 else 2.0 - 0.01 * i)
    run.finish()
""")


def test_the_pipeline_runs_secured(secure_stack: Stack, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """An SDK job (producer) reaches the processor (its own user); the pager user reads it."""
    from runwatch.core.codec import load_codec
    from runwatch.core.records import Alert

    monkeypatch.setenv("RUNWATCH_PROCESSOR_CORRELATION_DELAY_MS", "500")
    monkeypatch.setenv("RUNWATCH_PROCESSOR_TIMER_INTERVAL_S", "0.5")
    up = secure_stack.up(services=["processor"])
    assert up.ok, up.failed
    run_id = f"secure-{uuid.uuid4().hex[:8]}"
    try:
        job = subprocess.run(  # noqa: S603 - a plain SDK script, as a user runs one
            [sys.executable, "-c", SDK_JOB, run_id], capture_output=True, text=True,
            timeout=60, check=False, env=_clean_env(
                **_env(secure_stack, "producer"),
                RUNWATCH_PRODUCER_SPOOL_DIR=str(tmp_path / "spool")))
        assert job.returncode == 0, job.stderr
        codec = load_codec()
        consumer = BatchConsumer(_kafka(secure_stack, "pager"), "runwatch-pager", ["rw.alerts"])
        alerts: list[Alert] = []
        deadline = time.monotonic() + 45
        try:
            while time.monotonic() < deadline and not alerts:
                for msg in consumer.poll_batch(100, 0.5):
                    rec = codec.decode(msg.value() or b"")
                    if isinstance(rec, Alert) and rec.run_id == run_id:
                        alerts.append(rec)
        finally:
            consumer.close()
        assert alerts, secure_stack.log_tail("processor", 60)
        assert "rule:non_finite" in {a.detector for a in alerts}
    finally:
        secure_stack.down(services=["processor"])


@pytest.mark.parametrize("role", ["producer", "pager"])
def test_only_the_processor_writes_alerts(secure_stack: Stack, role: str,
                                          caplog: pytest.LogCaptureFixture) -> None:
    """A forged alert is refused for good with the broker's reason, not spooled."""
    caplog.set_level(logging.ERROR, logger="runwatch.adapters.kafka")
    transport = KafkaTransport(_kafka(secure_stack, role), ProducerSettings(spool_dir=None),
                               name=f"forger-{role}")
    try:
        transport.produce("rw.alerts", b"k", b"forged")
        assert transport.flush(20) == 0
        counters = transport.counters()
    finally:
        transport.close(1)
    assert (counters.failed, counters.sent, counters.in_spool) == (1, 0, 0)
    assert "TOPIC_AUTHORIZATION_FAILED" in caplog.text


def test_a_role_without_any_write_acl_is_told_so(secure_stack: Stack) -> None:
    """The sink may write nothing: its producer is refused at once, with the reason."""
    transport = KafkaTransport(_kafka(secure_stack, "sink"), ProducerSettings(spool_dir=None),
                               name="forger-sink")
    t0 = time.monotonic()
    try:
        transport.produce("rw.alerts", b"k", b"forged")
        while transport.auth_error is None and time.monotonic() - t0 < 15:
            time.sleep(0.1)
        assert transport.flush(30) == 1
    finally:
        counters = transport.close(1)
    assert "Cluster authorization failed" in (transport.auth_error or "")
    assert "refused user 'sink'" in (transport.auth_error or "")
    assert counters.sent == 0
    assert time.monotonic() - t0 < 15


def test_the_producer_writes_telemetry_and_reads_nothing(secure_stack: Stack) -> None:
    """Producing telemetry works; reading it back with the producer user is refused."""
    transport = KafkaTransport(_kafka(secure_stack, "producer"),
                               ProducerSettings(spool_dir=None), name="producer-ok")
    try:
        transport.produce("rw.learning", b"k", b"v")
        assert transport.flush(20) == 0
        assert transport.counters().sent == 1
    finally:
        transport.close(1)
    consumer = BatchConsumer(_kafka(secure_stack, "producer"), "runwatch-sink", ["rw.learning"])
    t0 = time.monotonic()
    try:
        with pytest.raises(KafkaAuthorizationError, match="refused user 'producer'"):
            while time.monotonic() - t0 < 30:
                consumer.poll_batch(10, 0.5)
    finally:
        consumer.close()


def test_a_wrong_password_fails_fast_in_producer_and_consumer(
        secure_stack: Stack, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The producer logs why and keeps the record; the consumer raises at once."""
    env = _wrong(secure_stack, "producer", tmp_path)
    kafka = KafkaSettings.model_validate({k.removeprefix("KAFKA_").lower(): v
                                          for k, v in env.items()})
    caplog.set_level(logging.ERROR, logger="runwatch.adapters.kafka")
    transport = KafkaTransport(kafka, ProducerSettings(spool_dir=tmp_path / "spool"),
                               name="bad-login")
    t0 = time.monotonic()
    try:
        transport.produce("rw.learning", b"k", b"v")
        while transport.auth_error is None and time.monotonic() - t0 < 15:
            time.sleep(0.1)
        assert transport.auth_error is not None
        assert transport.flush(30) == 1  # returns at once: no retry fixes a password
        assert time.monotonic() - t0 < 15
    finally:
        counters = transport.close(1)
    assert (counters.sent, counters.failed, counters.in_spool) == (0, 0, 1)  # kept on disk
    assert "refused the login of user 'producer'" in caplog.text
    assert "not-the-password" not in caplog.text

    sink = _wrong(secure_stack, "sink", tmp_path)
    t0 = time.monotonic()
    with pytest.raises(KafkaAuthError, match="refused the login of user 'sink'"):
        BatchConsumer(KafkaSettings.model_validate(
            {k.removeprefix("KAFKA_").lower(): v for k, v in sink.items()}),
            "runwatch-sink", ["rw.learning"])
    assert time.monotonic() - t0 < 15


@pytest.mark.parametrize(("role", "argv"), [
    ("processor", ["-m", "runwatch.processor", "worker", "-l", "info"]),
    ("sink", ["-m", "runwatch", "sink"]),
    ("pager", ["-m", "runwatch", "pager"]),
])
def test_a_wrong_password_stops_a_service_at_start(secure_stack: Stack, tmp_path: Path,
                                                   role: str, argv: list[str]) -> None:
    """Each service exits within seconds, naming the user and what to check."""
    env = _clean_env(**_wrong(secure_stack, role, tmp_path),
                     RUNWATCH_PROCESSOR_DATA_DIR=str(tmp_path / "proc"),
                     RUNWATCH_PAGER_STATE_DIR=str(tmp_path / "pager"),
                     CLICKHOUSE_URL="http://127.0.0.1:1")
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, *argv], capture_output=True, text=True,  # noqa: S603
                         timeout=60, check=False, env=env)
    assert res.returncode != 0
    assert time.monotonic() - t0 < 30
    assert f"refused the login of user '{role}'" in res.stderr + res.stdout
    assert "not-the-password" not in res.stderr + res.stdout


def test_a_rotated_password_replaces_the_old_one(secure_stack: Stack) -> None:
    """`runwatch stack rotate sink`: the broker takes the new password, refuses the old."""
    from runwatch.adapters.kafka_security import check_credentials
    from runwatch.stack.prepare import secure_broker

    files = SecureFiles(secure_stack.settings.secure_dir)
    old = files.password("sink")
    new = files.rotate("sink")
    assert new != old
    secure_broker(secure_stack.settings, lambda _line: None)
    check_credentials(_kafka(secure_stack, "sink").client_config())
    stale = {**_kafka(secure_stack, "sink").client_config(), "sasl.password": old}
    with pytest.raises(KafkaAuthError, match="user 'sink'"):
        check_credentials(stale)
