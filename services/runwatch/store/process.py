"""Start a ``runwatch store`` child process on an ephemeral port (tests, benchmarks, tools).

The child gets a clean environment for its own settings (no inherited
``CLICKHOUSE_*``/``RUNWATCH_STORE_*``) and answers ``/ping`` before this returns.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path


def free_port() -> int:
    """Return a TCP port that is free on 127.0.0.1 right now.

    Returns:
        The port number.

    """
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class StoreProcess:
    """A running store child process."""

    proc: subprocess.Popen[bytes]
    port: int
    path: Path
    log: Path

    @property
    def url(self) -> str:
        """The store's base URL."""
        return f"http://127.0.0.1:{self.port}"

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        """Signal the process (SIGTERM: graceful) and wait for its exit code.

        Args:
            sig: The signal.
            timeout: Seconds to wait.

        Returns:
            The exit code.

        """
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=timeout)


def start_store(
    path: Path, log: Path, users: Path | None = None, timeout: float = 30.0
) -> StoreProcess:
    """Start ``python -m runwatch store`` on a free port and wait until it answers.

    Args:
        path: The data directory.
        log: File that receives the process's output.
        users: A users file, or None for the default.
        timeout: Seconds to wait for ``/ping``.

    Returns:
        The running store.

    Raises:
        RuntimeError: When it exits or does not answer in time (with its log tail).

    """
    port = free_port()
    cmd = [sys.executable, "-m", "runwatch", "store", "--port", str(port), "--path", str(path)]
    if users is not None:
        cmd += ["--users", str(users)]
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("CLICKHOUSE_", "RUNWATCH_STORE_"))
    }
    out = log.open("ab")
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    store = StoreProcess(proc, port, path, log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            msg = f"store exited with {proc.returncode}: {log.read_text()[-2000:]}"
            raise RuntimeError(msg)
        try:
            with urllib.request.urlopen(f"{store.url}/ping", timeout=1) as resp:  # noqa: S310
                if resp.read() == b"Ok.\n":
                    return store
        except OSError:
            time.sleep(0.1)
    store.stop(signal.SIGKILL)
    msg = f"store did not answer /ping within {timeout}s: {log.read_text()[-2000:]}"
    raise RuntimeError(msg)
