"""Start, stop and report the local stack (the API behind ``runwatch stack``)."""

from __future__ import annotations

import fcntl
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

from runwatch.stack import process
from runwatch.stack.cluster import BROKER_NAMES, BrokerName, broker_names, node_of
from runwatch.stack.pagerroutes import write_stack_routes
from runwatch.stack.services import (
    OPTIONAL_SERVICES,
    ServiceName,
    ServiceSpec,
    StackError,
    build_specs,
    prepare_kafka,
)
from runwatch.stack.settings import StackSettings

logger = logging.getLogger(__name__)

State = Literal["healthy", "running", "stopped"]
Report = Callable[[str], None]

_POLL_S = 0.25


def _quiet(_line: str) -> None:
    """Discard progress lines."""


@dataclass(frozen=True, slots=True)
class ServiceStatus:
    """What one service is doing now."""

    name: str
    state: State
    pid: int | None
    port: int
    url: str
    detail: str = ""


@dataclass(frozen=True, slots=True)
class UpResult:
    """The outcome of :meth:`Stack.up`."""

    started: tuple[str, ...] = ()
    already_running: tuple[str, ...] = ()
    failed: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Whether every requested service is up."""
        return not self.failed


class Stack:
    """The local stack described by a :class:`StackSettings`."""

    def __init__(self, settings: StackSettings) -> None:
        self.settings = settings
        self.specs: dict[ServiceName, ServiceSpec] = build_specs(settings)
        self.registry = process.Registry(settings.state / "stack.json")
        #: The stack proper: every broker, the store, Alertmanager (start order).
        self.core: tuple[ServiceName, ...] = (*broker_names(settings), "store", "alertmanager")
        #: Everything this stack supervises, in start order.
        self.all: tuple[ServiceName, ...] = self.core + OPTIONAL_SERVICES

    # -- queries -----------------------------------------------------------------

    def url(self, name: ServiceName) -> str:
        """Return the address clients use for a service."""
        if name in BROKER_NAMES:
            return f"{self.settings.host}:{self.settings.broker_ports(node_of(name))[0]}"
        return {
            "kafka": self.settings.bootstrap_servers,
            "store": self.settings.clickhouse_url,
            "alertmanager": self.settings.alertmanager_url,
        }.get(name, "-")

    def running(self, name: ServiceName) -> process.ProcessRecord | None:
        """Return the record of a service if its recorded process is alive and ours."""
        record = self.registry.load().get(name)
        if record is not None and process.owned_process(record) is not None:
            return record
        return None

    def recorded_optional(self) -> list[ServiceName]:
        """Return the optional services this stack has a PID record of."""
        records = self.registry.load()
        return [s for s in OPTIONAL_SERVICES if s in records]

    def status(self, services: Iterable[ServiceName] | None = None) -> list[ServiceStatus]:
        """Report each service: healthy, running (not answering) or stopped.

        Args:
            services: Which services to report (default: the stack plus every
                optional service it has a record of).

        Returns:
            One status per service.

        """
        if services is None:
            services = (*self.core, *self.recorded_optional())
        out = []
        for name in services:
            spec = self.specs[name]
            record = self.running(name)
            if record is None:
                holder = process.port_holder(self.settings.host, spec.port) if spec.ports else None
                failure = self.last_failure(name)
                detail = holder.describe() if holder else ""
                detail = detail or (f"last start failed: {failure}" if failure else "")
                out.append(ServiceStatus(name, "stopped", None, spec.port, self.url(name), detail))
                continue
            state: State = "healthy" if spec.probe() else "running"
            detail = "" if state == "healthy" else "not answering its health check"
            if not spec.ports:
                detail = detail or f"log {spec.log}"
            out.append(ServiceStatus(name, state, record.pid, spec.port, self.url(name), detail))
        return out

    def healthy(self, name: ServiceName) -> bool:
        """Return whether a service answers its health check (whoever started it)."""
        return self.specs[name].probe()

    def log_tail(self, name: ServiceName, lines: int = 30) -> str:
        """Return the last lines of a service's logs."""
        spec = self.specs[name]
        parts = []
        for path in (spec.log, *spec.extra_logs):
            text = process.tail(path, lines)
            if text:
                parts.append(f"==> {path} <==\n{text}")
        return "\n".join(parts) or f"(no log at {spec.log})"

    # -- commands ----------------------------------------------------------------

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the stack's lock (``up`` and ``down`` take it; do not nest)."""
        with self._locked():
            yield

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.settings.state.mkdir(parents=True, exist_ok=True)
        with (self.settings.state / "stack.lock").open("w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def up(self, report: Report = _quiet,
           services: Iterable[ServiceName] | None = None) -> UpResult:
        """Start every service that is not running and wait until each is healthy.

        Ports are checked before anything starts; a port in use fails fast.
        A service that cannot start is reported in the result; the others still
        start. Optional services (processor, sink, pager) start after the
        stack services they need are healthy; a needed service that is not
        healthy is started too.

        Args:
            report: Progress callback (one line per call).
            services: Which services to start (default: the stack proper); one
                broker of a cluster starts them all (a quorum needs its voters).

        Returns:
            What was started, what was already running and what failed.

        Raises:
            StackError: When a port is in use or the broker jars are missing.

        """
        t0 = time.monotonic()
        asked = set(self.core if services is None else services)
        for name in list(asked):
            asked.update(n for n in self.specs[name].needs if not self.healthy(n))
        if asked & set(BROKER_NAMES):
            asked.update(broker_names(self.settings))
        wanted = [s for s in self.all if s in asked]
        with self._locked():
            already = [s for s in wanted if self.running(s) is not None]
            for name in already:
                rec = self.running(name)
                report(f"{name}: already running (pid {rec.pid if rec else '?'})")
            todo = [s for s in wanted if s not in already]
            if not todo:
                report("stack already running; nothing to do")
                return UpResult(already_running=tuple(already), seconds=time.monotonic() - t0)
            self._check_ports(todo)
            failed: dict[str, str] = {}
            started: list[str] = []
            for phase in (self.core, OPTIONAL_SERVICES):
                pending: dict[ServiceName, process.ProcessRecord] = {}
                for name in (s for s in todo if s in phase):
                    missing = [n for n in self.specs[name].needs if not self.healthy(n)]
                    if missing:
                        failed[name] = f"needs {', '.join(missing)}, which is not healthy"
                        report(f"{name}: FAILED to start: {failed[name]}")
                        continue
                    try:
                        pending[name] = self._spawn(name, report)
                    except (StackError, OSError) as exc:
                        failed[name] = str(exc)
                        report(f"{name}: FAILED to start: {exc}")
                started += self._await_healthy(pending, failed, report, t0)
                if phase is self.core and self.settings.secure and "kafka" in started:
                    self._secure_kafka(failed, report)
            self._remember_failures(wanted, failed)
        result = UpResult(tuple(started), tuple(already), failed, time.monotonic() - t0)
        if result.ok:
            report(f"stack up in {result.seconds:.1f}s")
        return result

    def _secure_kafka(self, failed: dict[str, str], report: Report) -> None:
        """Apply the secured broker's users and ACLs once it is healthy."""
        from runwatch.stack.prepare import PrepareError, secure_broker

        try:
            secure_broker(self.settings, report)
        except PrepareError as exc:
            failed["kafka"] = str(exc)
            report(f"kafka: FAILED to secure: {exc}")

    def _remember_failures(self, names: Iterable[str], failed: dict[str, str]) -> None:
        path = self.settings.state / "failures.json"
        try:
            known = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            known = {}
        for name in names:
            known.pop(name, None)
        known.update({k: v.splitlines()[0] for k, v in failed.items()})
        path.write_text(json.dumps(known, indent=2), encoding="utf-8")

    def last_failure(self, name: ServiceName) -> str:
        """Return why the last ``up`` could not start a service ('' if it could)."""
        try:
            known = json.loads((self.settings.state / "failures.json").read_text("utf-8"))
        except (OSError, ValueError):
            return ""
        return str(known.get(name, ""))

    def _check_ports(self, names: Iterable[ServiceName]) -> None:
        busy = []
        for name in names:
            for port in self.specs[name].ports:
                holder = process.port_holder(self.settings.host, port)
                if holder is not None:
                    busy.append(f"{name}: {holder.describe()}")
        if busy:
            msg = "cannot start the stack: " + "; ".join(busy)
            raise StackError(msg)

    def _spawn(self, name: ServiceName, report: Report) -> process.ProcessRecord:
        spec = self.specs[name]
        if name in BROKER_NAMES:
            prepare_kafka(self.settings, report, node_of(name))
        elif name == "alertmanager":
            (self.settings.state / "alertmanager").mkdir(parents=True, exist_ok=True)
        elif name == "pager":
            write_stack_routes(self.settings)  # on other ports: page this stack's Alertmanager
        where = f"on {self.settings.host}:{spec.port}" if spec.ports else f"(log {spec.log})"
        report(f"{name}: starting {where}")
        record = process.spawn(name, spec.argv, spec.log, spec.cwd or self.settings.state,
                               spec.env)
        self.registry.put(record)
        return record

    def _await_healthy(
        self,
        pending: dict[ServiceName, process.ProcessRecord],
        failed: dict[str, str],
        report: Report,
        t0: float,
    ) -> list[str]:
        started: list[str] = []
        deadline = time.monotonic() + self.settings.start_timeout_s
        while pending:
            for name, record in list(pending.items()):
                code = process.exit_code(record)
                if code is not None or process.owned_process(record) is None:
                    why = f"exited{'' if code is None else f' with status {code}'} during start"
                    tail = self.log_tail(name)
                    if name == "store" and "invalid choice: 'store'" in tail:
                        why = "`runwatch store` is not available in this checkout yet"
                    failed[name] = f"{why}\n{tail}"
                    report(f"{name}: FAILED ({why}); log: {self.specs[name].log}")
                    self.registry.drop(name)
                    del pending[name]
                elif self.specs[name].probe():
                    report(f"{name}: healthy (pid {record.pid}) after "
                           f"{time.monotonic() - t0:.1f}s")
                    started.append(name)
                    del pending[name]
            if pending and time.monotonic() > deadline:
                for name, record in pending.items():
                    process.stop(record, self.settings.stop_timeout_s)
                    self.registry.drop(name)
                    failed[name] = (f"not healthy after {self.settings.start_timeout_s:.0f}s\n"
                                    f"{self.log_tail(name)}")
                    report(f"{name}: FAILED (not healthy in time); log: {self.specs[name].log}")
                pending.clear()
            if pending:
                time.sleep(_POLL_S)
        return started

    def down(self, report: Report = _quiet,
             services: Iterable[ServiceName] | None = None) -> dict[str, str]:
        """Stop exactly the recorded processes, gracefully (SIGTERM, then SIGKILL).

        Args:
            report: Progress callback.
            services: Which services to stop (in reverse start order; default:
                everything recorded, optional services included).

        Returns:
            What happened to each service.

        """
        outcome: dict[str, str] = {}
        with self._locked():
            records = self.registry.load()
            chosen = set(self.all if services is None else services)
            brokers = [b for b in BROKER_NAMES if b in chosen and b in records]
            for name in reversed([s for s in self.all if s in chosen]):
                record = records.get(name)
                if record is None:
                    if name in self.core:
                        outcome[name] = "not running"
                    continue
                if name in brokers and len(brokers) > 1:  # all at once: see _stop_together
                    if name == brokers[0]:
                        for stopped, what in self._stop_together(brokers, records, report).items():
                            outcome[stopped] = what
                    continue
                report(f"{name}: stopping pid {record.pid}")
                outcome[name] = process.stop(record, self.settings.stop_timeout_s)
                self.registry.drop(name)
                report(f"{name}: {outcome[name]}")
        return outcome

    def _stop_together(self, names: list[BrokerName], records: dict[str, process.ProcessRecord],
                       report: Report) -> dict[BrokerName, str]:
        """Stop a cluster's brokers at the same time.

        One after another, the last broker's controlled shutdown waits for a
        controller quorum that is already gone, until the stop timeout kills it.
        """
        from concurrent.futures import ThreadPoolExecutor

        for name in names:
            report(f"{name}: stopping pid {records[name].pid}")
        with ThreadPoolExecutor(len(names)) as pool:
            results = dict(zip(names, pool.map(
                lambda n: process.stop(records[n], self.settings.stop_timeout_s), names),
                strict=True))
        for name, what in results.items():
            self.registry.drop(name)
            report(f"{name}: {what}")
        return results

    def restart(self, name: ServiceName, report: Report = _quiet) -> UpResult:
        """Stop and start one service (its data is kept).

        Args:
            name: The service.
            report: Progress callback.

        Returns:
            The result of starting it again.

        """
        self.down(report, [name])
        return self.up(report, [name])
