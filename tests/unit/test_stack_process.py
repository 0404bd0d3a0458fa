from __future__ import annotations

import os
import socket
import sys
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from runwatch.stack import process

SLEEPER = (sys.executable, "-c", "import time; time.sleep(60)")
STUBBORN = (sys.executable, "-c",
            "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('armed' + '-ok', flush=True); time.sleep(60)")


@pytest.fixture
def spawned(tmp_path: Path):
    records: list[process.ProcessRecord] = []

    def start(argv=SLEEPER) -> process.ProcessRecord:
        rec = process.spawn("svc", argv, tmp_path / "svc.log", tmp_path)
        records.append(rec)
        return rec

    yield start
    for rec in records:
        process.stop(rec, timeout_s=1)


def test_spawn_runs_in_its_own_session(spawned) -> None:
    rec = spawned()
    assert os.getsid(rec.pid) == rec.pid != os.getsid(0)
    assert process.owned_process(rec) is not None


@pytest.mark.parametrize(
    ("change", "ours"),
    [
        ({}, True),
        ({"argv": ("sleep", "60")}, False),  # another command on that pid
        ({"start_ticks": -2}, False),  # pid reused by a later process (marker below)
        ({"create_time": 1.0, "start_ticks": -1}, False),  # the same, in an older record
        ({"start_ticks": -1}, True),  # an older record of this process
        ({"pid": 2**22 + 7}, False),  # no such process
    ],
)
def test_owned_process_checks_pid_start_time_and_cmdline(spawned, change, ours) -> None:
    rec = spawned()
    assert rec.start_ticks > 0
    if change.get("start_ticks") == -2:
        change = {"start_ticks": rec.start_ticks + 1}
    rec = replace(rec, **change)
    assert (process.owned_process(rec) is not None) is ours


def test_a_wall_clock_step_does_not_disown_a_running_service(spawned, monkeypatch) -> None:
    """CI once found every stack service 'not ours' (port in use) after the clock stepped."""
    import psutil._pslinux as pslinux

    rec = spawned()
    boot = pslinux.boot_time()
    monkeypatch.setattr(pslinux, "boot_time", lambda: boot + 5.0)  # the clock stepped 5 s ahead
    assert abs(psutil.Process(rec.pid).create_time() - rec.create_time) > 4
    assert process.owned_process(rec) is not None
    assert process.owned_process(replace(rec, start_ticks=-1)) is None  # the old comparison


def test_stop_not_ours_signals_nothing(spawned) -> None:
    rec = spawned()
    assert process.stop(replace(rec, argv=("other",)), timeout_s=1) == "not running"
    assert process.owned_process(rec) is not None


@pytest.mark.parametrize(("argv", "outcome"), [(SLEEPER, "stopped"), (STUBBORN, "killed")])
def test_stop_terms_then_kills(spawned, tmp_path: Path, argv, outcome) -> None:
    rec = spawned(argv)
    deadline = time.monotonic() + 10
    while argv is STUBBORN and "armed-ok" not in (tmp_path / "svc.log").read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert process.stop(rec, timeout_s=1) == outcome
    assert process.owned_process(rec) is None
    assert process.stop(rec, timeout_s=1) == "not running"


def test_a_service_another_running_process_started_stops_at_once(tmp_path: Path) -> None:
    """The stack's services are children of whoever started them; when that process
    still runs and never collects them (a test session's other worker, a long-lived
    script), a stopped service stays a zombie: it was waited on for the whole timeout
    and reported "killed" (each service of the test session's stack 40 s)."""
    import json
    import subprocess

    starter = subprocess.Popen([sys.executable, "-c", (  # noqa: S603
        "import dataclasses, json, sys, time\n"
        "from pathlib import Path\n"
        "from runwatch.stack import process\n"
        f"rec = process.spawn('svc', {SLEEPER!r}, Path({str(tmp_path / 'svc.log')!r}), "
        f"Path({str(tmp_path)!r}))\n"
        "print(json.dumps(dataclasses.asdict(rec)), flush=True)\n"
        "time.sleep(60)\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert starter.stdout is not None
        fields = json.loads(starter.stdout.readline())
        rec = process.ProcessRecord(**{**fields, "argv": tuple(fields["argv"])})
        assert process.owned_process(rec) is not None
        assert process.stop(rec, timeout_s=20) == "stopped"
        assert process.owned_process(rec) is None
    finally:
        starter.kill()
        starter.wait()


def test_previous_log_is_kept(spawned, tmp_path: Path) -> None:
    spawned((sys.executable, "-c", "print('first run')"))
    time.sleep(0.5)
    spawned((sys.executable, "-c", "print('second')"))
    assert "first run" in (tmp_path / "svc.log.prev").read_text()
    assert "first run" not in (tmp_path / "svc.log").read_text()


def test_port_holder_names_the_process() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        holder = process.port_holder("127.0.0.1", port)
        assert holder is not None and holder.pid == os.getpid()
        assert holder.describe().startswith(f"port {port} is already in use by pid {os.getpid()}")
    assert process.port_holder("127.0.0.1", port) is None


def test_registry_roundtrip(tmp_path: Path) -> None:
    reg = process.Registry(tmp_path / "stack.json")
    assert reg.load() == {}
    rec = process.ProcessRecord("kafka", 123, ("java", "kafka.Kafka"), 1.5, "/x.log", 7)
    reg.put(rec)
    reg.put(replace(rec, service="store", pid=124))
    assert reg.load()["kafka"] == rec
    reg.drop("kafka")
    assert list(reg.load()) == ["store"]
    (tmp_path / "stack.json").write_text("{not json")
    assert reg.load() == {}


def test_tail_reads_the_last_lines(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    assert process.tail(log, 3) == "line 97\nline 98\nline 99"
    assert process.tail(tmp_path / "missing.log") == ""
