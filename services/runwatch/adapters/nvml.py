"""NVML access through ``pynvml`` (nvidia-ml-py), one call per figure.

Every figure a GPU does not support comes back as None instead of an error.
:meth:`Nvml.open` returns None (after one clear log line) where there is no
driver, so callers keep publishing host figures. Tests pass a module-like test
double (``runwatch.testing.nvml_double``) instead of ``pynvml``.

SM occupancy and SM activity come from NVML GPM (GPU Performance Monitoring,
Hopper and later): one GPM sample per GPU per read, the metrics computed over
the previous read's sample and this one (one agent interval apart). GPUs
without GPM report None for both, after one log line at :meth:`Nvml.open`;
they are not asked again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from types import ModuleType
from typing import Any

logger = logging.getLogger(__name__)

GPM_FUNCTIONS = ("nvmlGpmQueryDeviceSupport", "nvmlGpmSampleAlloc", "nvmlGpmSampleGet",
                 "nvmlGpmSampleFree", "nvmlGpmMetricsGet", "c_nvmlGpmMetricsGet_t")
"""The pynvml names GPM needs; a binding without any of them means no GPM."""
GPM_MAX_FAILS = 3
"""Consecutive GPM failures on one GPU before it is no longer asked."""


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU's figures at one instant (rates are raw counters; see agent)."""

    index: int
    uuid: str
    name: str
    util_pct: float
    mem_util_pct: float | None
    mem_used_bytes: int
    mem_total_bytes: int
    power_w: float
    temp_c: float
    sm_clock_mhz: int
    mem_clock_mhz: int
    throttle_reasons: int
    ecc_corrected: int
    ecc_uncorrected: int
    pcie_rx_bps: float | None
    pcie_tx_bps: float | None
    nvlink_rx_bytes: int | None
    nvlink_tx_bytes: int | None
    processes: tuple[tuple[int, int], ...]
    sm_occupancy_pct: float | None = None
    sm_util_pct: float | None = None


class Nvml:
    """A thin wrapper over the pynvml functions the agent needs."""

    def __init__(self, module: Any) -> None:
        """Wrap an initialised pynvml-like module.

        Args:
            module: ``pynvml`` or a test double with the same functions.

        """
        self.m = module
        self._handles: list[Any] = []
        self._events: Any = None
        self._err: type[BaseException] = getattr(module, "NVMLError", Exception)
        self._gpm_ok: list[bool] = []
        self._gpm_prev: dict[int, Any] = {}
        self._gpm_fails: dict[int, int] = {}

    @classmethod
    def open(cls, module: Any = None, *, quiet: bool = False) -> Nvml | None:
        """Initialise NVML; None when there is no driver or library.

        Args:
            module: A pynvml-like module; ``pynvml`` when None.
            quiet: Log at debug level instead of warning.

        Returns:
            The wrapper, or None.

        """
        try:
            if module is None:
                import pynvml

                module = pynvml
            module.nvmlInit()
        except Exception as exc:
            logger.log(
                logging.DEBUG if quiet else logging.WARNING,
                "NVML unavailable (%s): no GPU figures, host figures continue",
                exc,
            )
            return None
        nv = cls(module)
        nv._handles = [
            module.nvmlDeviceGetHandleByIndex(i) for i in range(module.nvmlDeviceGetCount())
        ]
        nv._gpm_setup()
        return nv

    def _gpm_setup(self) -> None:
        """Check GPM support once per GPU and take each supported GPU's first sample."""
        m = self.m
        self._gpm_ok = [False] * len(self._handles)
        if not all(hasattr(m, f) for f in GPM_FUNCTIONS):
            logger.info("NVML GPM not available in this NVML binding: SM occupancy not reported")
            return
        why: dict[int, str] = {}
        for i, h in enumerate(self._handles):
            try:
                ok = bool(m.nvmlGpmQueryDeviceSupport(h).isSupportedDevice)
                if not ok:
                    why[i] = "not supported"
            except self._err as exc:
                ok, why[i] = False, str(exc)
            if ok:
                first = self._gpm_sample(i)
                self._gpm_ok[i] = first is not None
                if first is None:
                    why[i] = "sampling failed"
                else:
                    self._gpm_prev[i] = first
        if why:
            logger.info("NVML GPM unavailable on GPUs %s (%s): SM occupancy not reported there",
                        sorted(why), "; ".join(sorted(set(why.values()))))

    def _gpm_sample(self, index: int) -> Any:
        """Take a new GPM sample of one GPU; None on error (nothing left allocated)."""
        m, s = self.m, None
        try:
            s = m.nvmlGpmSampleAlloc()
            m.nvmlGpmSampleGet(self._handles[index], s)
        except self._err as exc:
            logger.debug("GPM sample of GPU %d failed: %s", index, exc)
            if s is not None:
                self._gpm_free(s)
            return None
        return s

    def _gpm_free(self, s: Any) -> None:
        try:
            self.m.nvmlGpmSampleFree(s)
        except self._err as exc:
            logger.debug("GPM sample free failed: %s", exc)

    def gpm(self, index: int) -> tuple[float | None, float | None]:
        """SM occupancy and SM activity of one GPU since the previous call, in percent.

        Args:
            index: GPU index.

        Returns:
            (occupancy, activity); None for each figure GPM does not give.

        """
        if index >= len(self._gpm_ok) or not self._gpm_ok[index]:
            return None, None
        m = self.m
        prev = self._gpm_prev.get(index)
        cur = self._gpm_sample(index)
        if cur is None:
            return self._gpm_failed(index, "sampling failed")
        self._gpm_prev[index] = cur
        if prev is None:
            return None, None
        try:
            mg = m.c_nvmlGpmMetricsGet_t()
            mg.version = m.NVML_GPM_METRICS_GET_VERSION
            mg.numMetrics = 2
            mg.sample1, mg.sample2 = prev, cur
            mg.metrics[0].metricId = m.NVML_GPM_METRIC_SM_OCCUPANCY
            mg.metrics[1].metricId = m.NVML_GPM_METRIC_SM_UTIL
            m.nvmlGpmMetricsGet(mg)
        except self._err as exc:
            return self._gpm_failed(index, str(exc))
        finally:
            self._gpm_free(prev)
        self._gpm_fails[index] = 0
        occ, util = mg.metrics[0], mg.metrics[1]
        return (float(occ.value) if occ.nvmlReturn == 0 else None,
                float(util.value) if util.nvmlReturn == 0 else None)

    def _gpm_failed(self, index: int, why: str) -> tuple[None, None]:
        n = self._gpm_fails.get(index, 0) + 1
        self._gpm_fails[index] = n
        if n >= GPM_MAX_FAILS:
            self._gpm_ok[index] = False
            s = self._gpm_prev.pop(index, None)
            if s is not None:
                self._gpm_free(s)
            logger.warning("NVML GPM failed %d times on GPU %d (%s): SM occupancy no longer "
                           "reported there", n, index, why)
        return None, None

    def close(self) -> None:
        """Shut NVML down."""
        try:
            if self._events is not None:
                self.m.nvmlEventSetFree(self._events)
            for gs in self._gpm_prev.values():
                self._gpm_free(gs)
            self._gpm_prev.clear()
            self.m.nvmlShutdown()
        except Exception as exc:
            logger.debug("nvml shutdown: %s", exc)

    def device_count(self) -> int:
        """Return the number of GPUs."""
        return len(self._handles)

    def device_name(self, index: int) -> str:
        """Model name of a GPU.

        Args:
            index: GPU index.

        Returns:
            The name.

        """
        name = self.m.nvmlDeviceGetName(self._handles[index])
        return name.decode() if isinstance(name, bytes) else str(name)

    def _try(self, fn: str, *args: Any) -> Any:
        f = getattr(self.m, fn, None)
        if f is None:
            return None
        try:
            return f(*args)
        except self._err:
            return None

    def read(self, index: int) -> GpuReading:
        """Read every figure of one GPU (unsupported ones are None or 0).

        Args:
            index: GPU index.

        Returns:
            The reading.

        """
        m, h = self.m, self._handles[index]
        util = self._try("nvmlDeviceGetUtilizationRates", h)
        mem = self._try("nvmlDeviceGetMemoryInfo", h)
        power = self._try("nvmlDeviceGetPowerUsage", h)
        temp = self._try("nvmlDeviceGetTemperature", h, m.NVML_TEMPERATURE_GPU)
        thr = self._try("nvmlDeviceGetCurrentClocksEventReasons", h)
        if thr is None:
            thr = self._try("nvmlDeviceGetCurrentClocksThrottleReasons", h)
        ecc_c = self._try(
            "nvmlDeviceGetTotalEccErrors",
            h,
            m.NVML_MEMORY_ERROR_TYPE_CORRECTED,
            m.NVML_VOLATILE_ECC,
        )
        ecc_u = self._try(
            "nvmlDeviceGetTotalEccErrors",
            h,
            m.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            m.NVML_VOLATILE_ECC,
        )
        rx = self._try("nvmlDeviceGetPcieThroughput", h, m.NVML_PCIE_UTIL_RX_BYTES)
        tx = self._try("nvmlDeviceGetPcieThroughput", h, m.NVML_PCIE_UTIL_TX_BYTES)
        nvl_rx, nvl_tx = self._nvlink(h)
        procs = self._try("nvmlDeviceGetComputeRunningProcesses", h) or []
        uuid = self._try("nvmlDeviceGetUUID", h) or f"GPU-{index}"
        occ_pct, sm_pct = self.gpm(index)
        return GpuReading(
            index=index,
            uuid=uuid.decode() if isinstance(uuid, bytes) else str(uuid),
            name=self.device_name(index),
            util_pct=float(util.gpu) if util is not None else 0.0,
            mem_util_pct=float(util.memory) if util is not None else None,
            mem_used_bytes=int(mem.used) if mem is not None else 0,
            mem_total_bytes=int(mem.total) if mem is not None else 0,
            power_w=power / 1000.0 if power is not None else 0.0,
            temp_c=float(temp) if temp is not None else 0.0,
            sm_clock_mhz=int(self._try("nvmlDeviceGetClockInfo", h, m.NVML_CLOCK_SM) or 0),
            mem_clock_mhz=int(self._try("nvmlDeviceGetClockInfo", h, m.NVML_CLOCK_MEM) or 0),
            throttle_reasons=int(thr or 0),
            ecc_corrected=int(ecc_c or 0),
            ecc_uncorrected=int(ecc_u or 0),
            pcie_rx_bps=rx * 1024.0 if rx is not None else None,
            pcie_tx_bps=tx * 1024.0 if tx is not None else None,
            nvlink_rx_bytes=nvl_rx,
            nvlink_tx_bytes=nvl_tx,
            processes=tuple((int(p.pid), int(p.usedGpuMemory or 0)) for p in procs),
            sm_occupancy_pct=occ_pct,
            sm_util_pct=sm_pct,
        )

    def _nvlink(self, h: Any) -> tuple[int | None, int | None]:
        m = self.m
        ids = [m.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, m.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX]
        vals = self._try("nvmlDeviceGetFieldValues", h, ids)
        if not vals:
            return None, None
        out: list[int | None] = []
        for fv in vals:
            ok = getattr(fv, "nvmlReturn", 1) == 0
            out.append(int(fv.value.ullVal) * 1024 if ok else None)
        return out[0], out[1]

    def xid_events(self, timeout_ms: int = 0) -> dict[int, int]:
        """Drain pending XID critical-error events.

        Args:
            timeout_ms: Wait this long for the first event.

        Returns:
            GPU index -> last XID seen.

        """
        m = self.m
        if self._events is None:
            self._events = self._try("nvmlEventSetCreate")
            if self._events is None:
                return {}
            for h in self._handles:
                self._try(
                    "nvmlDeviceRegisterEvents", h, m.nvmlEventTypeXidCriticalError, self._events
                )
        out: dict[int, int] = {}
        wait = timeout_ms
        for _ in range(64):
            data = self._try("nvmlEventSetWait_v2", self._events, wait)
            if data is None:
                break
            wait = 0
            for i, h in enumerate(self._handles):
                if data.device == h:
                    out[i] = int(data.eventData)
        return out


def is_module(obj: object) -> bool:
    """Tell a real module (pynvml) from a test double."""
    return isinstance(obj, ModuleType)
