"""The steady load of a chaos run, through the public entry points only.

Each phase starts three SDK runs (``runwatch.init`` / ``run.step``): two
healthy ones and one whose loss turns NaN part-way (a hard rule: one alert is
expected), plus two ``data.report`` batches; one node agent (over the NVML
double the caller hands in) samples throughout. Every transport is wrapped in
a :class:`~runwatch.chaos.ledger.LedgerTransport`, so every event id
published is in the ledger, under the phase it was published in.
"""

from __future__ import annotations

import logging
import math
import random
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runwatch.adapters.host import HostSampler
from runwatch.adapters.kafka import KafkaTransport, ProducerSettings
from runwatch.adapters.nvml import Nvml
from runwatch.adapters.settings import KafkaSettings
from runwatch.agent.service import NodeAgent
from runwatch.chaos.ledger import Ledger, LedgerTransport
from runwatch.client import data, init
from runwatch.client.publisher import Publisher

logger = logging.getLogger(__name__)

ROLES = ("nan", "healthy-1", "healthy-2")
DATASET = "chaos://datasets/clicks"


@dataclass(slots=True)
class PhaseLoad:
    """The runs of one phase and what their transports counted."""

    phase: str
    run_ids: dict[str, str]  # run id -> role
    threads: list[threading.Thread] = field(default_factory=list)
    counters: dict[str, dict[str, int]] = field(default_factory=dict)  # role -> counters
    errors: list[str] = field(default_factory=list)

    def join(self, timeout_s: float) -> None:
        """Wait for the phase's runs to finish."""
        deadline = time.monotonic() + timeout_s
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))

    @property
    def evicted(self) -> int:
        """Records the phase's SDK transports evicted from a full spool (counted, on purpose)."""
        return sum(c.get("transport_evicted", 0) for c in self.counters.values())


class Load:
    """Producers of a chaos run."""

    def __init__(self, ledger: Ledger, kafka: KafkaSettings, spool_dir: Path,
                 nvml_module: Any = None, *, session: str, step_hz: float = 5.0) -> None:
        self.ledger = ledger
        self.kafka = kafka
        self.spool_dir = spool_dir
        self.session = session
        self.step_hz = step_hz
        self._stop = threading.Event()
        self._nvml = Nvml.open(nvml_module) if nvml_module is not None else None
        self._agent_transport: KafkaTransport | None = None
        self._agent_thread: threading.Thread | None = None

    def _transport(self, name: str, spool_max_bytes: int | None = None) -> KafkaTransport:
        extra = {} if spool_max_bytes is None else {"spool_max_bytes": spool_max_bytes,
                                                    "spool_segment_bytes": spool_max_bytes // 4}
        producer = ProducerSettings(spool_dir=self.spool_dir, **extra)  # type: ignore[arg-type]
        return KafkaTransport(self.kafka, producer, name=name)

    def start_agent(self, node: str, interval_s: float = 1.0) -> None:
        """Start the node agent (one sample per ``interval_s``) until :meth:`stop`."""
        self._agent_transport = self._transport(f"chaos-agent-{node}")
        publisher = Publisher(LedgerTransport(self._agent_transport, self.ledger, "agent"),
                              kind="agent")
        agent = NodeAgent(publisher, node=node, nvml=self._nvml, host=HostSampler())
        self._agent_thread = threading.Thread(
            target=agent.run, args=(self._stop, interval_s), name="chaos-agent", daemon=True)
        self._agent_thread.start()

    def agent_counters(self) -> dict[str, int]:
        """The agent transport's counters so far."""
        if self._agent_transport is None:
            return {}
        c = self._agent_transport.counters()
        return {k: int(getattr(c, k)) for k in ("sent", "spooled", "replayed", "evicted",
                                                 "failed", "duplicates", "in_doubt", "in_spool")}

    def phase(self, phase: str, seconds: float, nan_at_s: float,
              spool_max_bytes: int | None = None,
              on_nan: Callable[[], None] | None = None) -> PhaseLoad:
        """Start a phase's runs and data reports (they run in threads; join the result).

        Args:
            phase: Phase name (the ledger's label and part of the run ids).
            seconds: How long each run steps.
            nan_at_s: When the ``nan`` run's loss turns NaN.
            spool_max_bytes: Spool limit of the runs' transports (default: the SDK's).
            on_nan: Called when the NaN step is published.

        Returns:
            The phase's runs.

        """
        self.ledger.phase = phase
        slug = re.sub(r"[^a-z0-9]+", "-", phase.lower()).strip("-")
        run_ids = {f"chaos-{self.session}-{slug}-{role}": role for role in ROLES}
        load = PhaseLoad(phase, run_ids)
        for run_id, role in run_ids.items():
            t = threading.Thread(target=self._run, args=(load, run_id, role, seconds, nan_at_s,
                                                         spool_max_bytes, on_nan),
                                 name=f"chaos-{role}", daemon=True)
            load.threads.append(t)
            t.start()
        t = threading.Thread(target=self._reports, args=(load, seconds), name="chaos-data",
                             daemon=True)
        load.threads.append(t)
        t.start()
        return load

    def _run(self, load: PhaseLoad, run_id: str, role: str, seconds: float, nan_at_s: float,
             spool_max_bytes: int | None, on_nan: Callable[[], None] | None) -> None:
        transport = LedgerTransport(self._transport(f"sdk-{run_id}", spool_max_bytes),
                                    self.ledger, f"sdk:{role}")
        run = init(project="chaos", team="chaos", run_id=run_id, transport=transport,
                            capture_lineage=False, install_hooks=False,
                            labels={"suite": "chaos"})
        rng = random.Random(run_id)
        period = 1.0 / self.step_hz
        t0 = time.monotonic()
        step = 0
        nan_sent = False
        while time.monotonic() - t0 < seconds and not self._stop.is_set():
            elapsed = time.monotonic() - t0
            loss = 2.0 * math.exp(-step / 300) + 0.05 + rng.uniform(-0.01, 0.01)
            if role == "nan" and elapsed >= nan_at_s and not nan_sent:
                loss, nan_sent = float("nan"), True
                if on_nan is not None:
                    on_nan()
            run.step(step, loss=loss, lr=1e-3, grad_norm=1.0 + rng.uniform(0, 0.1),
                     samples=256, step_ms=period * 1000, loader_wait_ms=2.0)
            step += 1
            time.sleep(max(0.0, t0 + step * period - time.monotonic()))
        load.counters[role] = dict(run.finish(timeout=30.0))

    def _reports(self, load: PhaseLoad, seconds: float) -> None:
        transport = self._transport(f"chaos-data-{load.phase}")
        publisher = Publisher(LedgerTransport(transport, self.ledger, "data"), kind="sdk")
        rng = random.Random(load.phase)
        t0 = time.monotonic()
        for i, at in enumerate((1.0, seconds * 0.6)):
            time.sleep(max(0.0, t0 + at - time.monotonic()))
            table = {"clicks": [rng.gauss(10, 2) for _ in range(500)],
                     "label": [rng.random() < 0.3 for _ in range(500)]}
            try:
                data.report(DATASET, "v1", f"phase={load.phase}/{i}", table, baseline="chaos",
                            label="label", baseline_directory=self.spool_dir / "baselines",
                            publisher=publisher)
            except Exception as exc:  # noqa: BLE001 - reported in the table's notes
                load.errors.append(f"data.report: {exc}")
        transport.close(30.0)

    def stop(self) -> None:
        """Stop the agent and close its transport."""
        self._stop.set()
        if self._agent_thread is not None:
            self._agent_thread.join(10)
        if self._agent_transport is not None:
            self._agent_transport.close(30.0)
        if self._nvml is not None:
            self._nvml.close()
