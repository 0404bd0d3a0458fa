"""The faults of a chaos run and how each one is injected and recovered from.

Every fault acts on the processes the stack supervisor started (their PIDs
come from its records, so nothing else on the machine is touched) and puts
the stack back: a killed process is started again, a stopped store restarted,
frozen brokers resumed.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import psutil

from runwatch.adapters.cluster import partition_leaders
from runwatch.stack.cluster import broker_name, broker_names
from runwatch.stack.manager import Stack
from runwatch.stack.services import ServiceName

logger = logging.getLogger(__name__)

#: How a fault's recovery is measured (see docs/chaos.md).
Probe = Literal["stored", "processor", "paged", "none"]


@dataclass(frozen=True, slots=True)
class Fault:
    """One fault of the run."""

    name: str
    probe: Probe
    spool_max_bytes: int | None = None
    description: str = ""
    nan_at_s: float | None = None  # when the NaN run's loss turns NaN (default: the run's)


FAULTS: tuple[Fault, ...] = (
    Fault("none (fault-free)", "none", description="the reference: same load, no fault"),
    Fault("kill -9 partition leader", "stored",
          description="kill -9 the broker leading rw.learning partition 0; restart it 15 s later"),
    Fault("kill -9 processor", "processor",
          description="kill -9 the processor worker; restart it 5 s later"),
    Fault("kill -9 sink", "stored", description="kill -9 the sink; restart it 5 s later"),
    Fault("store stopped 30 s", "stored",
          description="stop the ClickHouse store, start it again 30 s later"),
    Fault("kill -9 pager mid-retry", "paged",
          description="the webhook answers 503; once the pager retried twice, kill -9 it, "
          "let the webhook accept, restart the pager"),
    Fault("producer spool limit filled", "stored", spool_max_bytes=16 * 1024, nan_at_s=37.0,
          description="freeze every broker (SIGSTOP) for 25 s while the SDK runs have a "
          "16 KiB spool: the spool fills and evicts (counted); the NaN comes after"),
)


class Injector:
    """Injects faults into a stack's supervised processes."""

    def __init__(self, stack: Stack, report: Callable[[str], None]) -> None:
        self.stack = stack
        self.report = report
        #: Set the moment a fault's first action happened (a kill, a stop, a freeze).
        self.injected = threading.Event()
        self.injected_at = 0.0

    def arm(self) -> None:
        """Clear :attr:`injected` before the next fault."""
        self.injected.clear()

    def _mark(self, at: float | None = None) -> None:
        self.injected_at = time.monotonic() if at is None else at
        self.injected.set()

    def _pid(self, name: ServiceName) -> int:
        record = self.stack.running(name)
        if record is None:
            msg = f"{name} is not running: cannot inject a fault into it"
            raise RuntimeError(msg)
        return record.pid

    def kill(self, name: ServiceName) -> None:
        """Send SIGKILL to a supervised service."""
        pid = self._pid(name)
        at = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        try:  # SIGKILL is asynchronous: the recovery probe must not see the old process
            psutil.Process(pid).wait(timeout=10)
        except (psutil.NoSuchProcess, psutil.TimeoutExpired):
            pass
        self._mark(at)
        self.report(f"  fault: kill -9 {name} (pid {pid})")

    def restart(self, name: ServiceName) -> None:
        """Start a service again (it keeps its data)."""
        result = self.stack.up(self.report, [name])
        if not result.ok:
            msg = f"{name} did not come back: {result.failed}"
            raise RuntimeError(msg)

    def leader_broker(self, topic: str = "rw.learning", partition: int = 0) -> ServiceName:
        """Return the broker service leading a partition."""
        conf = self.stack.settings.kafka_client_config("admin")
        leader = partition_leaders(conf, topic)[partition]
        return broker_name(leader)

    def kill_leader(self, down_s: float = 15.0) -> None:
        """Send SIGKILL to the leader of rw.learning partition 0; restart it ``down_s`` later."""
        name = self.leader_broker()
        self.kill(name)
        time.sleep(down_s)
        self.restart(name)

    def kill_and_restart(self, name: ServiceName, down_s: float = 5.0) -> None:
        """Send SIGKILL to a service, restart it ``down_s`` later."""
        self.kill(name)
        time.sleep(down_s)
        self.restart(name)

    def stop_store(self, down_s: float = 30.0) -> None:
        """Stop the store (SIGTERM), start it again ``down_s`` later."""
        self.stack.down(self.report, ["store"])
        self._mark()
        self.report(f"  fault: store stopped for {down_s:.0f} s")
        time.sleep(down_s)
        self.restart("store")

    def freeze_brokers(self, frozen_s: float = 25.0) -> None:
        """SIGSTOP every broker for ``frozen_s``, then SIGCONT them."""
        pids = [self._pid(n) for n in broker_names(self.stack.settings)]
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        self._mark()
        self.report(f"  fault: every broker frozen (SIGSTOP) for {frozen_s:.0f} s")
        try:
            time.sleep(frozen_s)
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        self.report("  brokers resumed (SIGCONT)")

    def kill_pager_mid_retry(self, refused: Callable[[], int], accept: Callable[[], None],
                             timeout_s: float = 45.0) -> None:
        """Once the webhook refused two more deliveries, kill -9 the pager and restart it.

        Args:
            refused: How many deliveries the webhook refused so far.
            accept: Makes the webhook accept again.
            timeout_s: Bound on waiting for the retries.

        """
        start = refused()
        deadline = time.monotonic() + timeout_s
        while refused() < start + 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        self.report(f"  pager retried {refused() - start} time(s) against a failing webhook")
        self.kill("pager")
        time.sleep(2.0)
        accept()
        self.restart("pager")
