# ruff: noqa: D102  (methods mirror a framework/pynvml API documented upstream)
"""FakeNvml8: a TEST DOUBLE of ``pynvml`` describing a node with 8 GPUs.

This is not a GPU driver. It stands in for ``pynvml`` at the function level
(same function names, arguments, return shapes and error class) so the agent,
its tests and its benchmark run on machines without GPUs. Figures move
deterministically with each call; processes are whatever the caller attaches
with :meth:`FakeNvml8.attach_process` (for example the pid of a real process
whose environment carries ``RUNWATCH_RUN_ID``).

GPM (SM occupancy / SM activity) works as in pynvml: allocate samples, take
them, compute metrics over two of them, free them. Occupancy per GPU is what
the caller puts in :attr:`FakeNvml8.occupancy` (default: 65 % busy, 0 % idle);
``gpm=False`` or :attr:`FakeNvml8.gpm_unsupported` describe GPUs without GPM,
:attr:`FakeNvml8.gpm_failing` (GPU -> count) makes that many samples fail.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any


class NVMLError(Exception):
    """Mirror of pynvml.NVMLError."""


NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139
nvmlEventTypeXidCriticalError = 8  # noqa: N816 (pynvml's name)
NVML_ERROR_TIMEOUT = 10
NVML_GPM_METRIC_SM_UTIL = 2
NVML_GPM_METRIC_SM_OCCUPANCY = 3
NVML_GPM_METRICS_GET_VERSION = 1
NVML_GPM_SUPPORT_VERSION = 1
NVML_ERROR_NOT_SUPPORTED = 3
GPM_METRIC_SLOTS = 16

GIB = 1024**3


class _GpmMetricsGet:
    """Mirror of pynvml.c_nvmlGpmMetricsGet_t (fields only)."""

    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0  # noqa: N815 (pynvml's name)
        self.sample1: Any = None
        self.sample2: Any = None
        self.metrics = [SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0)
                        for _ in range(GPM_METRIC_SLOTS)]


class FakeNvml8:
    """Module-like pynvml test double for 8 H100-like GPUs."""

    NVMLError = NVMLError

    def __init__(self, gpus: int = 8, name: str = "NVIDIA H100 80GB HBM3 (test double)",
                 *, gpm: bool = True) -> None:
        """Create the double.

        Args:
            gpus: How many GPUs to describe.
            name: Model name reported.
            gpm: Whether the GPUs support GPM (SM occupancy).

        """
        self.gpus = gpus
        self.name = name
        self.initialised = False
        self.tick = 0
        self.calls = 0
        self.processes: dict[int, list[tuple[int, int]]] = {i: [] for i in range(gpus)}
        self.pending_xids: list[tuple[int, int]] = []
        self.occupancy: dict[int, float] = {}
        self.gpm_unsupported: set[int] = set() if gpm else set(range(gpus))
        self.gpm_live = 0
        self.gpm_calls = 0
        self.gpm_failing: dict[int, int] = {}
        self.memory_used: dict[int, int] = {}
        self.throttle: dict[int, int] = {}
        self.temperature: dict[int, int] = {}
        self.sm_clock: dict[int, int] = {}
        self.nvlink_kib: dict[int, int] = {}  # KiB per read (per sample) where set
        self._nvlink_total: dict[int, int] = {}
        self._lock = threading.Lock()
        for k, v in globals().items():
            if k.startswith(("NVML_", "nvmlEvent")):
                setattr(self, k, v)

    # test controls -------------------------------------------------------
    def attach_process(self, gpu: int, pid: int, used_bytes: int = 10 * GIB) -> None:
        """Report ``pid`` as a compute process on ``gpu``."""
        self.processes[gpu].append((pid, used_bytes))

    def inject_xid(self, gpu: int, xid: int) -> None:
        """Queue an XID critical-error event on ``gpu``."""
        self.pending_xids.append((gpu, xid))

    def set_occupancy(self, gpu: int, pct: float) -> None:
        """Make GPM report ``pct`` SM occupancy (and activity) on ``gpu``."""
        self.occupancy[gpu] = pct

    def set_memory_used(self, gpu: int, used_bytes: int) -> None:
        """Report ``used_bytes`` of framebuffer memory used on ``gpu`` (of 80 GiB)."""
        self.memory_used[gpu] = used_bytes

    def set_throttle(self, gpu: int, reasons: int, temp_c: int | None = None,
                     sm_clock_mhz: int | None = None) -> None:
        """Report clocks-event (throttle) ``reasons`` on ``gpu``, optionally with its heat/clock."""
        self.throttle[gpu] = reasons
        if temp_c is not None:
            self.temperature[gpu] = temp_c
        if sm_clock_mhz is not None:
            self.sm_clock[gpu] = sm_clock_mhz

    def set_nvlink(self, gpu: int, kib_per_read: int) -> None:
        """Advance ``gpu``'s NVLink rx and tx counters by ``kib_per_read`` KiB on each read.

        The agent turns counter deltas into rates over its sample times, so a
        sample every second reads ``kib_per_read * 1024`` bytes/s each way.
        """
        self.nvlink_kib[gpu] = kib_per_read

    def _occupancy(self, i: int) -> float:
        return self.occupancy.get(i, 65.0 if self.processes[i] else 0.0)

    # pynvml surface --------------------------------------------------------
    def _h(self, h: Any) -> int:
        self.calls += 1
        if not self.initialised:
            msg = "Uninitialized"
            raise NVMLError(msg)
        return int(h.index)

    def nvmlInit(self) -> None:  # noqa: N802
        self.initialised = True

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.initialised = False

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, i: int) -> Any:  # noqa: N802
        if not 0 <= i < self.gpus:
            msg = "Invalid Argument"
            raise NVMLError(msg)
        return SimpleNamespace(index=i)

    def nvmlDeviceGetName(self, h: Any) -> str:  # noqa: N802
        self._h(h)
        return self.name

    def nvmlDeviceGetUUID(self, h: Any) -> str:  # noqa: N802
        return f"GPU-00000000-fake-0000-0000-{self._h(h):012d}"

    def nvmlDeviceGetUtilizationRates(self, h: Any) -> Any:  # noqa: N802
        i = self._h(h)
        with self._lock:
            self.tick += 1
        busy = 90 if self.processes[i] else 0
        return SimpleNamespace(gpu=busy + (self.tick + i) % 7, memory=busy // 2)

    def nvmlDeviceGetMemoryInfo(self, h: Any) -> Any:  # noqa: N802
        i = self._h(h)
        used = self.memory_used.get(i, sum(b for _, b in self.processes[i]) + 512 * 1024**2)
        return SimpleNamespace(used=used, total=80 * GIB, free=80 * GIB - used)

    def nvmlDeviceGetPowerUsage(self, h: Any) -> int:  # noqa: N802
        i = self._h(h)
        return 300_000 + 10_000 * i if self.processes[i] else 70_000

    def nvmlDeviceGetTemperature(self, h: Any, sensor: int) -> int:  # noqa: N802
        i = self._h(h)
        return self.temperature.get(i, 40 + i)

    def nvmlDeviceGetClockInfo(self, h: Any, kind: int) -> int:  # noqa: N802
        i = self._h(h)
        return self.sm_clock.get(i, 1980) if kind == NVML_CLOCK_SM else 2619

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: Any) -> int:  # noqa: N802
        i = self._h(h)
        return self.throttle.get(i, 0x4 if i == 7 else 0)  # GPU 7: SW power cap

    def nvmlDeviceGetTotalEccErrors(self, h: Any, kind: int, counter: int) -> int:  # noqa: N802
        i = self._h(h)
        return 3 if (i == 5 and kind == NVML_MEMORY_ERROR_TYPE_CORRECTED) else 0

    def nvmlDeviceGetPcieThroughput(self, h: Any, counter: int) -> int:  # noqa: N802
        return 1000 * (self._h(h) + 1)  # KB/s

    def nvmlDeviceGetFieldValues(self, h: Any, ids: list[int]) -> list[Any]:  # noqa: N802
        i = self._h(h)
        total = self.tick * 100
        if i in self.nvlink_kib:
            total = self._nvlink_total[i] = self._nvlink_total.get(i, 0) + self.nvlink_kib[i]
        return [
            SimpleNamespace(fieldId=f, nvmlReturn=0, value=SimpleNamespace(ullVal=total))
            for f in ids
        ]

    def nvmlDeviceGetComputeRunningProcesses(self, h: Any) -> list[Any]:  # noqa: N802
        i = self._h(h)
        return [SimpleNamespace(pid=p, usedGpuMemory=b) for p, b in self.processes[i]]

    def nvmlEventSetCreate(self) -> Any:  # noqa: N802
        return SimpleNamespace(kind="eventset")

    def nvmlDeviceRegisterEvents(self, h: Any, types: int, es: Any) -> None:  # noqa: N802
        self._h(h)

    def nvmlEventSetWait_v2(self, es: Any, timeout_ms: int) -> Any:  # noqa: N802
        if not self.pending_xids:
            msg = "Timeout"
            raise NVMLError(msg)
        gpu, xid = self.pending_xids.pop(0)
        return SimpleNamespace(device=self._handle_eq(gpu), eventData=xid, eventType=8)

    def _handle_eq(self, gpu: int) -> Any:
        return _Handle(gpu)

    def nvmlEventSetFree(self, es: Any) -> None:  # noqa: N802
        return None

    # GPM -------------------------------------------------------------------
    c_nvmlGpmMetricsGet_t = _GpmMetricsGet  # a class, as in pynvml

    def nvmlGpmQueryDeviceSupport(self, h: Any) -> Any:  # noqa: N802
        i = self._h(h)
        return SimpleNamespace(version=NVML_GPM_SUPPORT_VERSION,
                               isSupportedDevice=int(i not in self.gpm_unsupported))

    def nvmlGpmSampleAlloc(self) -> Any:  # noqa: N802
        self.gpm_live += 1
        return SimpleNamespace(index=None, occupancy=None, freed=False)

    def nvmlGpmSampleFree(self, s: Any) -> None:  # noqa: N802
        if s.freed:
            msg = "Invalid Argument (double free)"
            raise NVMLError(msg)
        s.freed = True
        self.gpm_live -= 1

    def nvmlGpmSampleGet(self, h: Any, s: Any) -> Any:  # noqa: N802
        i = self._h(h)
        self.gpm_calls += 1
        if i in self.gpm_unsupported:
            msg = "Not Supported"
            raise NVMLError(msg)
        if self.gpm_failing.get(i, 0) > 0:
            self.gpm_failing[i] -= 1
            msg = "Unknown Error"
            raise NVMLError(msg)
        s.index, s.occupancy = i, self._occupancy(i)
        return s

    def nvmlGpmMetricsGet(self, mg: Any) -> Any:  # noqa: N802
        a, b = mg.sample1, mg.sample2
        if a.freed or b.freed or a.index is None or a.index != b.index or a is b:
            msg = "Invalid Argument"
            raise NVMLError(msg)
        occ = float(b.occupancy)
        for k in range(mg.numMetrics):
            m = mg.metrics[k]
            known = m.metricId in (NVML_GPM_METRIC_SM_OCCUPANCY, NVML_GPM_METRIC_SM_UTIL)
            m.nvmlReturn = 0 if known else NVML_ERROR_NOT_SUPPORTED
            m.value = (occ if m.metricId == NVML_GPM_METRIC_SM_OCCUPANCY
                       else min(occ * 1.3, 100.0)) if known else 0.0
        return mg


class _Handle(SimpleNamespace):
    def __init__(self, index: int) -> None:
        super().__init__(index=index)

    def __eq__(self, other: object) -> bool:
        return getattr(other, "index", None) == self.index

    __hash__ = None  # type: ignore[assignment]
