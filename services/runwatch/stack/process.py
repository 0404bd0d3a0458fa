"""Process supervision: spawn detached, record, verify and stop by PID."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

logger = logging.getLogger(__name__)

_CREATE_TIME_SLACK_S = 1.0


@dataclass(frozen=True, slots=True)
class ProcessRecord:
    """A process the stack started: enough to find it again and prove it is ours."""

    service: str
    pid: int
    argv: tuple[str, ...]
    create_time: float
    log: str
    started_ms: int
    #: Clock ticks from boot to the process's start (``/proc/PID/stat`` field
    #: 22), which wall-clock steps do not move; -1 where unknown (older records,
    #: other systems), when ``create_time`` is compared instead.
    start_ticks: int = -1


@dataclass(frozen=True, slots=True)
class PortHolder:
    """A process listening on a port."""

    port: int
    pid: int | None
    name: str

    def describe(self) -> str:
        """Return ``port 9092 is held by pid 123 (java kafka.Kafka ...)``."""
        who = f"pid {self.pid} ({self.name})" if self.pid is not None else self.name
        return f"port {self.port} is already in use by {who}"


def spawn(
    service: str,
    argv: Sequence[str],
    log: Path,
    cwd: Path,
    env: dict[str, str] | None = None,
) -> ProcessRecord:
    """Start a process in its own session so it outlives the caller.

    Args:
        service: The service name recorded with the process.
        argv: The command line (no shell).
        log: File receiving the process's stdout and stderr (the previous one
            is kept as ``<log>.prev``).
        cwd: Working directory of the process.
        env: Extra environment variables.

    Returns:
        The record of the started process.

    Raises:
        OSError: When the program cannot be executed.

    """
    log.parent.mkdir(parents=True, exist_ok=True)
    full_env = {**os.environ, **(env or {})}
    if log.exists():
        log.replace(log.with_name(log.name + ".prev"))
    with log.open("wb") as out:
        out.write(f"\n--- {service} starting: {' '.join(argv)}\n".encode())
        out.flush()
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    ps = psutil.Process(proc.pid)
    _await_exec(ps)
    create_time = ps.create_time()
    return ProcessRecord(
        service=service,
        pid=proc.pid,
        argv=tuple(argv),
        create_time=create_time,
        log=str(log),
        started_ms=int(time.time() * 1000),
        start_ticks=_start_ticks(proc.pid),
    )


def _start_ticks(pid: int) -> int:
    """Return when a process started, in clock ticks since boot (-1 when unknown).

    psutil's ``create_time`` adds the boot time as the wall clock sees it now,
    so a clock step (NTP, a resumed VM) moves it by the step and a long-running
    broker would stop looking like ours; the tick count never changes.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
        # Field 2 (the command) may hold spaces and parentheses: split after its last ')'.
        return int(stat[stat.rindex(b")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return -1


def _await_exec(proc: psutil.Process, timeout_s: float = 5.0) -> None:
    """Wait until the new program's command line is visible.

    Popen returns while the kernel is still inside exec; /proc/PID/cmdline is
    empty for that instant, which would make the process look like someone else's.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if proc.cmdline():
                return
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            return
        time.sleep(0.005)


def owned_process(record: ProcessRecord) -> psutil.Process | None:
    """Return the live process of a record, or None when it is gone or not ours.

    A PID counts as ours only if it is alive (not a zombie), started when we
    started it (same tick count since boot, or, for records without one, a
    wall-clock start time within a second), and runs the recorded command line.

    Args:
        record: The recorded process.

    Returns:
        The process, or None.

    """
    try:
        proc = psutil.Process(record.pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            _reap(record.pid)
            return None
        ticks = _start_ticks(record.pid) if record.start_ticks >= 0 else -1
        if ticks >= 0:
            if ticks != record.start_ticks:
                return None
        elif abs(proc.create_time() - record.create_time) > _CREATE_TIME_SLACK_S:
            return None
        if tuple(proc.cmdline()) != record.argv:
            return None
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None
    return proc


def _reap(pid: int) -> None:
    """Collect an exited child of ours so it does not linger as a zombie."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def exit_code(record: ProcessRecord) -> int | None:
    """Return the exit code of a child of this process that has ended, if known.

    Args:
        record: The recorded process.

    Returns:
        The exit status, or None when still running or not our child.

    """
    try:
        pid, status = os.waitpid(record.pid, os.WNOHANG)
    except ChildProcessError:
        return None
    if pid == 0:
        return None
    return os.waitstatus_to_exitcode(status)


def stop(record: ProcessRecord, timeout_s: float) -> str:
    """Stop a recorded process: SIGTERM, wait, then SIGKILL after ``timeout_s``.

    Args:
        record: The recorded process.
        timeout_s: Seconds to wait for a graceful exit before killing.

    Returns:
        What happened: ``not running``, ``stopped`` or ``killed``.

    """
    proc = owned_process(record)
    if proc is None:
        return "not running"
    try:
        proc.send_signal(signal.SIGTERM)
    except psutil.NoSuchProcess:
        return "stopped"
    if _gone(proc, timeout_s):
        return "stopped"
    logger.warning("%s (pid %d) ignored SIGTERM for %.0fs; killing", record.service,
                   record.pid, timeout_s)
    try:
        proc.kill()
    except psutil.NoSuchProcess:
        pass
    _gone(proc, 10.0)
    return "killed"


def _gone(proc: psutil.Process, timeout_s: float) -> bool:
    """Wait until a process has exited; return whether it did within ``timeout_s``.

    An exited process that its parent has not collected yet (a zombie) has exited:
    ``psutil.wait_procs`` counts it as alive when the parent is another process (the
    one that started the stack and still runs, as a test session's other worker), and
    each service then waited the whole timeout and was "killed" (40 s a service).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                _reap(proc.pid)  # ours to collect, when we are its parent
                return True
            if not proc.is_running():
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def port_holder(host: str, port: int) -> PortHolder | None:
    """Return who listens on ``host:port``, or None when the port is free.

    Args:
        host: The address the service would bind.
        port: The TCP port.

    Returns:
        The holder (pid and command when visible), or None.

    """
    try:
        conns = psutil.net_connections(kind="tcp")
    except psutil.AccessDenied:
        conns = []
    for conn in conns:
        if conn.status != psutil.CONN_LISTEN or not conn.laddr or conn.laddr.port != port:
            continue
        if conn.laddr.ip not in (host, "0.0.0.0", "::", "::ffff:127.0.0.1", "::1"):  # noqa: S104
            continue
        return PortHolder(port=port, pid=conn.pid, name=_describe_pid(conn.pid))
    if _bind_fails(host, port):
        return PortHolder(port=port, pid=None, name="an unknown process")
    return None


def _describe_pid(pid: int | None) -> str:
    if pid is None:
        return "an unknown process"
    try:
        proc = psutil.Process(pid)
        cmd = " ".join(proc.cmdline()) or proc.name()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return "an unknown process"
    return cmd if len(cmd) <= 120 else cmd[:117] + "..."


def _bind_fails(host: str, port: int) -> bool:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def tail(path: Path, lines: int = 30) -> str:
    """Return the last ``lines`` lines of a log file ('' when missing).

    Args:
        path: The log file.
        lines: How many lines.

    Returns:
        The tail of the file.

    """
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


class Registry:
    """The PID file of the stack: ``<state>/stack.json``, one record per service."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict[str, ProcessRecord]:
        """Return the recorded processes by service name."""
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            logger.warning("ignoring unreadable %s: %s", self.path, exc)
            return {}
        out: dict[str, ProcessRecord] = {}
        for name, item in raw.get("services", {}).items():
            try:
                out[name] = ProcessRecord(**{**item, "argv": tuple(item["argv"])})
            except (TypeError, KeyError) as exc:
                logger.warning("ignoring bad record %s in %s: %s", name, self.path, exc)
        return out

    def put(self, record: ProcessRecord) -> None:
        """Record (or replace) a service's process."""
        records = self.load()
        records[record.service] = record
        self._save(records)

    def drop(self, service: str) -> None:
        """Forget a service's process."""
        records = self.load()
        if records.pop(service, None) is not None:
            self._save(records)

    def _save(self, records: dict[str, ProcessRecord]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        payload = {"services": {k: asdict(v) for k, v in sorted(records.items())}}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(payload, indent=2), encoding="utf-8")
        tmp.replace(self.path)
