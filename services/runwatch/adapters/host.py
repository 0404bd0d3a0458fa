"""Host figures through psutil: CPU, memory, disk and network rates."""

from __future__ import annotations

import time
from dataclasses import dataclass

import psutil


@dataclass(frozen=True, slots=True)
class HostReading:
    """Host figures over the interval since the previous reading."""

    cpu_pct: float
    mem_used_bytes: int
    mem_total_bytes: int
    disk_read_bps: float
    disk_write_bps: float
    net_rx_bps: float
    net_tx_bps: float


class HostSampler:
    """Reads host counters and turns them into rates between calls."""

    def __init__(self) -> None:
        """Take the first counter snapshot."""
        psutil.cpu_percent(None)
        self._t = time.monotonic()
        self._disk = psutil.disk_io_counters()
        self._net = psutil.net_io_counters()

    def read(self) -> HostReading:
        """Return figures since the previous call (or since construction).

        Returns:
            The reading.

        """
        now = time.monotonic()
        dt = max(now - self._t, 1e-3)
        disk = psutil.disk_io_counters()
        net = psutil.net_io_counters()
        vm = psutil.virtual_memory()

        def rate(new: int | None, old: int | None) -> float:
            if new is None or old is None:
                return 0.0
            return max(new - old, 0) / dt

        out = HostReading(
            cpu_pct=float(psutil.cpu_percent(None)),
            mem_used_bytes=int(vm.total - vm.available),
            mem_total_bytes=int(vm.total),
            disk_read_bps=rate(
                getattr(disk, "read_bytes", None), getattr(self._disk, "read_bytes", None)
            ),
            disk_write_bps=rate(
                getattr(disk, "write_bytes", None), getattr(self._disk, "write_bytes", None)
            ),
            net_rx_bps=rate(
                getattr(net, "bytes_recv", None), getattr(self._net, "bytes_recv", None)
            ),
            net_tx_bps=rate(
                getattr(net, "bytes_sent", None), getattr(self._net, "bytes_sent", None)
            ),
        )
        self._t, self._disk, self._net = now, disk, net
        return out
