"""The node agent: one NodeSample per tick with every GPU and host figures.

GPU processes are attributed to runs through ``RUNWATCH_RUN_ID`` in
``/proc/<pid>/environ`` or, failing that, a scheduler allocation file (JSON,
either ``{"<gpu index>": "<run id>"}`` or
``[{"run_id": "...", "gpus": [0, 1]}, ...]``), written for example by the Slurm
prolog in ``infra/slurm/``.

``GpuSample.sm_active_pct`` carries SM occupancy from NVML GPM (see
:mod:`runwatch.adapters.nvml`) and stays null on GPUs without GPM; the
processor then falls back to utilization for its occupancy indicator.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from runwatch.adapters.host import HostSampler
from runwatch.adapters.nvml import GpuReading, Nvml
from runwatch.adapters.publisher import Publisher
from runwatch.core.records import GpuProcess, GpuSample, NodeSample

logger = logging.getLogger(__name__)


INTERVAL_MIN_S = 0.05
"""Shortest sampling interval (20 samples a second)."""
INTERVAL_MAX_S = 3600.0
"""Longest sampling interval (an hour)."""


class AgentSettings(BaseSettings):
    """Agent settings (env prefix ``RUNWATCH_AGENT_``)."""

    model_config = SettingsConfigDict(env_prefix="RUNWATCH_AGENT_", extra="ignore")

    #: Seconds between samples: 0, a negative or a NaN interval spun a core
    interval_s: float = Field(default=1.0, ge=INTERVAL_MIN_S, le=INTERVAL_MAX_S,
                              allow_inf_nan=False)
    node: str = ""
    allocation_file: Path | None = None
    nvml_double: bool = False
    proc_root: Path = Path("/proc")


class RunAttributor:
    """Maps pids and GPU indices to run ids."""

    def __init__(self, proc_root: Path = Path("/proc"), allocation_file: Path | None = None):
        """Create the attributor.

        Args:
            proc_root: Where /proc is (tests may point elsewhere).
            allocation_file: Scheduler allocation file, optional.

        """
        self.proc_root = proc_root
        self.allocation_file = allocation_file
        self._cache: dict[tuple[int, str], str | None] = {}
        self._alloc: dict[int, str] = {}
        self._alloc_mtime = -1.0
        self._noted = ""  # the allocation-file problem logged last

    def run_of_pid(self, pid: int) -> str | None:
        """Return RUNWATCH_RUN_ID from a process's environment, if readable.

        Args:
            pid: Process id.

        Returns:
            The run id or None.

        """
        base = self.proc_root / str(pid)
        try:
            start = (base / "stat").read_text().rsplit(")", 1)[1].split()[19]
        except (OSError, IndexError):
            start = ""
        key = (pid, start)
        if key in self._cache:
            return self._cache[key]
        run: str | None = None
        try:
            for item in (base / "environ").read_bytes().split(b"\0"):
                if item.startswith(b"RUNWATCH_RUN_ID="):
                    run = item.split(b"=", 1)[1].decode("utf-8", "replace") or None
                    break
        except OSError:
            run = None
        if len(self._cache) > 4096:
            self._cache.clear()
        self._cache[key] = run
        return run

    def run_of_gpu(self, index: int) -> str | None:
        """Return the run the allocation file gives a GPU.

        Args:
            index: GPU index.

        Returns:
            The run id or None.

        """
        path = self.allocation_file
        if path is None:
            return None
        try:
            mtime = path.stat().st_mtime
        except OSError as exc:  # no job placed yet, or the hook has not written it
            self._note(f"allocation file {path} unreadable: {exc}", debug=True)
            return None
        if mtime != self._alloc_mtime:
            try:
                alloc, problems = parse_allocation(json.loads(path.read_text()))
            except (OSError, ValueError) as exc:  # a torn write, not JSON: attribute nothing
                self._alloc = {}  # and read it again next time (logged once)
                self._note(f"allocation file {path} unreadable: {exc}")
                return None
            self._alloc, self._alloc_mtime = alloc, mtime
            if problems:  # the good entries still attribute their GPUs
                self._note(f"allocation file {path}: skipped {'; '.join(problems[:5])}")
        return self._alloc.get(index)

    def _note(self, message: str, *, debug: bool = False) -> None:
        """Log a problem with the allocation file once per change of it."""
        if message != self._noted:
            self._noted = message
            logger.log(logging.DEBUG if debug else logging.WARNING, "%s", message)


def parse_allocation(doc: Any) -> tuple[dict[int, str], list[str]]:
    """Parse an allocation document into GPU index -> run id.

    An entry that is not a GPU index (a whole number >= 0) with a non-empty run id is
    skipped and named; the others still count. One bad entry once made every GPU with
    a process vanish from the node's samples (its error surfaced per GPU), and a null
    run id attributed processes to a run called ``"None"``.

    Args:
        doc: ``{"0": "run"}`` or ``[{"run_id": "run", "gpus": [0]}]``.

    Returns:
        The mapping, and what was skipped and why.

    """
    out: dict[int, str] = {}
    problems: list[str] = []

    def add(gpu: Any, run: Any, where: str) -> None:
        index = gpu if type(gpu) is int else (int(gpu) if isinstance(gpu, str)
                                              and gpu.strip().isdigit() else None)
        if index is None or index < 0:
            problems.append(f"{where}: GPU {gpu!r} is not a GPU index")
        elif not isinstance(run, str) or not run.strip():
            problems.append(f"{where}: run id {run!r} is not a run id")
        else:
            out[index] = run.strip()

    if isinstance(doc, dict):
        for k, v in doc.items():
            add(k, v, f"key {k!r}")
    elif isinstance(doc, list):
        for i, entry in enumerate(doc):
            gpus = entry.get("gpus") if isinstance(entry, dict) else None
            if not isinstance(gpus, list):
                problems.append(f"entry {i}: not {{'run_id': ..., 'gpus': [...]}}")
                continue
            for g in gpus:
                add(g, entry.get("run_id"), f"entry {i}")
    else:
        problems.append(f"the document is a {type(doc).__name__}, not an object or a list")
    return out, problems


class NodeAgent:
    """Samples a node and publishes NodeSamples."""

    def __init__(
        self,
        publisher: Publisher,
        *,
        node: str | None = None,
        nvml: Nvml | None = None,
        host: HostSampler | None = None,
        attributor: RunAttributor | None = None,
    ) -> None:
        """Create the agent.

        Args:
            publisher: Where samples go.
            node: Node name (host name by default).
            nvml: NVML wrapper, or None for host figures only.
            host: Host sampler.
            attributor: pid/GPU -> run mapping.

        """
        self.publisher = publisher
        self.node = node or socket.gethostname()
        self.nvml = nvml
        self.host = host or HostSampler()
        self.attributor = attributor or RunAttributor()
        self._nvlink_prev: dict[int, tuple[float, int | None, int | None]] = {}
        self._last_gpu: dict[int, GpuSample] = {}  # each GPU's latest sample (its identity)
        self.ticks = 0
        self.errors = 0
        self._unreadable: set[int] = set()  # GPUs (and -1: NVML) whose failure was logged

    def _gpu(self, r: GpuReading, xid: int | None, now: float) -> GpuSample:
        procs = []
        for pid, used in r.processes:
            run = self.attributor.run_of_pid(pid) or self.attributor.run_of_gpu(r.index)
            procs.append(GpuProcess(pid=pid, run_id=run, used_mem_bytes=used))
        prev = self._nvlink_prev.get(r.index)
        self._nvlink_prev[r.index] = (now, r.nvlink_rx_bytes, r.nvlink_tx_bytes)
        rx = tx = None
        if prev is not None and now > prev[0]:
            dt = now - prev[0]
            if r.nvlink_rx_bytes is not None and prev[1] is not None:
                rx = max(r.nvlink_rx_bytes - prev[1], 0) / dt
            if r.nvlink_tx_bytes is not None and prev[2] is not None:
                tx = max(r.nvlink_tx_bytes - prev[2], 0) / dt
        return GpuSample(
            index=r.index,
            uuid=r.uuid,
            util_pct=r.util_pct,
            sm_active_pct=r.sm_occupancy_pct,
            mem_used_bytes=r.mem_used_bytes,
            mem_total_bytes=r.mem_total_bytes,
            power_w=r.power_w,
            temp_c=r.temp_c,
            sm_clock_mhz=r.sm_clock_mhz,
            mem_clock_mhz=r.mem_clock_mhz,
            throttle_reasons=r.throttle_reasons,
            ecc_corrected=r.ecc_corrected,
            ecc_uncorrected=r.ecc_uncorrected,
            xid=xid,
            pcie_rx_bps=r.pcie_rx_bps,
            pcie_tx_bps=r.pcie_tx_bps,
            nvlink_rx_bps=rx,
            nvlink_tx_bps=tx,
            processes=tuple(procs),
        )

    def _lost_gpu(self, index: int, xid: int | None) -> GpuSample | None:
        """Return the XID of a GPU NVML cannot read any more, on the GPU as last seen.

        A GPU that falls off the bus (XID 79) fails every NVML call after its XID
        event: left out of the sample, it took the XID with it, and the job it
        stopped was paged a stall of its own making. Its index, uuid and processes
        are those of its latest readable sample (the run it served); every figure
        is 0 (none could be read).
        """
        last = self._last_gpu.get(index)
        if xid is None or last is None:
            return None
        return GpuSample(index=index, uuid=last.uuid, util_pct=0.0, mem_used_bytes=0,
                         mem_total_bytes=0, power_w=0.0, temp_c=0.0, sm_clock_mhz=0,
                         mem_clock_mhz=0, throttle_reasons=0, ecc_corrected=0,
                         ecc_uncorrected=0, xid=xid, processes=last.processes)

    def _gpu_failed(self, index: int, exc: Exception) -> None:
        """Log a GPU (-1: NVML) that cannot be read: once until it can be read again."""
        if index not in self._unreadable:
            self._unreadable.add(index)
            what = "NVML" if index < 0 else f"GPU {index}"
            logger.warning("%s unreadable: %s (left out of the samples until it can be read "
                           "again; logged once, counted in errors)", what, exc)

    def _gpu_back(self, index: int) -> None:
        if index in self._unreadable:
            self._unreadable.discard(index)
            logger.warning("%s readable again", "NVML" if index < 0 else f"GPU {index}")

    def sample(self, now_ms: int | None = None) -> NodeSample:
        """Take one sample (no publishing).

        Args:
            now_ms: Sample time; the clock when None.

        Returns:
            The NodeSample.

        """
        h = self.host.read()
        gpus: list[GpuSample] = []
        if self.nvml is not None:
            # rates over the samples' own times when they are given (a replay, a test)
            now = now_ms / 1000.0 if now_ms is not None else time.monotonic()
            try:
                xids = self.nvml.xid_events(0)
                count = self.nvml.device_count()
            except Exception as exc:  # NVML itself failing: the host figures still go out
                xids, count = {}, 0
                self.errors += 1
                self._gpu_failed(-1, exc)
            else:
                self._gpu_back(-1)
            for i in range(count):
                try:
                    gpus.append(self._gpu(self.nvml.read(i), xids.get(i), now))
                except Exception as exc:
                    self.errors += 1
                    self._gpu_failed(i, exc)
                    lost = self._lost_gpu(i, xids.get(i))
                    if lost is not None:
                        gpus.append(lost)
                else:
                    self._gpu_back(i)
                    self._last_gpu[i] = gpus[-1]
        runs = {p.run_id for g in gpus for p in g.processes if p.run_id}
        return NodeSample(
            **self.publisher.meta(now_ms),
            run_id=next(iter(runs)) if len(runs) == 1 else None,
            node=self.node,
            cpu_pct=h.cpu_pct,
            mem_used_bytes=h.mem_used_bytes,
            mem_total_bytes=h.mem_total_bytes,
            disk_read_bps=h.disk_read_bps,
            disk_write_bps=h.disk_write_bps,
            net_rx_bps=h.net_rx_bps,
            net_tx_bps=h.net_tx_bps,
            gpus=tuple(gpus),
        )

    def tick(self, now_ms: int | None = None) -> NodeSample:
        """Sample and publish once.

        Args:
            now_ms: Sample time; the clock when None.

        Returns:
            The published sample.

        """
        s = self.sample(now_ms)
        self.publisher.publish([s])
        self.ticks += 1
        return s

    def run(self, stop: threading.Event, interval_s: float = 1.0, max_ticks: int = 0) -> int:
        """Tick every ``interval_s`` until ``stop`` is set (or ``max_ticks``).

        Args:
            stop: Set to stop.
            interval_s: Seconds between ticks.
            max_ticks: Stop after this many ticks when > 0.

        Returns:
            Ticks done.

        """
        nxt = time.monotonic()
        while not stop.is_set():
            try:
                self.tick()
            except Exception:
                self.errors += 1
                logger.exception("agent tick failed")
            if max_ticks and self.ticks >= max_ticks:
                break
            nxt += interval_s
            delay = nxt - time.monotonic()
            if delay < 0:
                nxt = time.monotonic()
                delay = 0
            stop.wait(delay)
        return self.ticks


def default_node() -> str:
    """Node name: ``RUNWATCH_NODE``, ``SLURMD_NODENAME`` or the host name."""
    return (
        os.environ.get("RUNWATCH_NODE") or os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    )
