"""Node records (topic rw.exec.node): host figures and GPU samples.

Generated from schemas/avro/*.avsc; tests/contract checks they agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from runwatch.core.records.common import Source

__all__ = ["GpuProcess", "GpuSample", "NodeSample"]


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuProcess:
    """A process holding GPU memory.

    Mirrors Avro ``runwatch.v1.GpuProcess``.

    Attributes:
        pid: Process id.
        run_id: Run the process is attributed to.
        used_mem_bytes: GPU memory used by the process, bytes.

    """

    AVRO_NAME: ClassVar[str] = "runwatch.v1.GpuProcess"

    pid: int
    run_id: str | None = None
    used_mem_bytes: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Return the plain dict fastavro writes (nested records as dicts)."""
        return {
            "pid": self.pid,
            "run_id": self.run_id,
            "used_mem_bytes": self.used_mem_bytes,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GpuProcess:
        """Build from a dict as fastavro reads it; absent defaulted fields take defaults."""
        return cls(
            pid=d["pid"],
            run_id=d.get("run_id", None),
            used_mem_bytes=d.get("used_mem_bytes", 0),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSample:
    """One GPU at one tick.

    Mirrors Avro ``runwatch.v1.GpuSample``.

    Attributes:
        index: GPU index on the node.
        uuid: GPU UUID.
        util_pct: GPU utilization, percent.
        sm_active_pct: SM activity, percent, where available (DCGM).
        mem_used_bytes: Framebuffer memory used, bytes.
        mem_total_bytes: Framebuffer memory total, bytes.
        power_w: Power draw, watts.
        temp_c: GPU temperature, degrees Celsius.
        sm_clock_mhz: SM clock, MHz.
        mem_clock_mhz: Memory clock, MHz.
        throttle_reasons: NVML clocks-event (throttle) reasons bitmask.
        ecc_corrected: Corrected ECC errors (volatile count).
        ecc_uncorrected: Uncorrected ECC errors (volatile count).
        xid: Most recent XID error code since the previous sample; null when none.
        pcie_rx_bps: PCIe receive throughput, bytes per second.
        pcie_tx_bps: PCIe transmit throughput, bytes per second.
        nvlink_rx_bps: NVLink receive throughput, bytes per second.
        nvlink_tx_bps: NVLink transmit throughput, bytes per second.
        processes: Processes using the GPU.

    """

    AVRO_NAME: ClassVar[str] = "runwatch.v1.GpuSample"

    index: int
    uuid: str
    util_pct: float
    sm_active_pct: float | None = None
    mem_used_bytes: int
    mem_total_bytes: int
    power_w: float
    temp_c: float
    sm_clock_mhz: int = 0
    mem_clock_mhz: int = 0
    throttle_reasons: int = 0
    ecc_corrected: int = 0
    ecc_uncorrected: int = 0
    xid: int | None = None
    pcie_rx_bps: float | None = None
    pcie_tx_bps: float | None = None
    nvlink_rx_bps: float | None = None
    nvlink_tx_bps: float | None = None
    processes: tuple[GpuProcess, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Return the plain dict fastavro writes (nested records as dicts)."""
        return {
            "index": self.index,
            "uuid": self.uuid,
            "util_pct": self.util_pct,
            "sm_active_pct": self.sm_active_pct,
            "mem_used_bytes": self.mem_used_bytes,
            "mem_total_bytes": self.mem_total_bytes,
            "power_w": self.power_w,
            "temp_c": self.temp_c,
            "sm_clock_mhz": self.sm_clock_mhz,
            "mem_clock_mhz": self.mem_clock_mhz,
            "throttle_reasons": self.throttle_reasons,
            "ecc_corrected": self.ecc_corrected,
            "ecc_uncorrected": self.ecc_uncorrected,
            "xid": self.xid,
            "pcie_rx_bps": self.pcie_rx_bps,
            "pcie_tx_bps": self.pcie_tx_bps,
            "nvlink_rx_bps": self.nvlink_rx_bps,
            "nvlink_tx_bps": self.nvlink_tx_bps,
            "processes": [x.to_dict() for x in self.processes],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GpuSample:
        """Build from a dict as fastavro reads it; absent defaulted fields take defaults."""
        return cls(
            index=d["index"],
            uuid=d["uuid"],
            util_pct=d["util_pct"],
            sm_active_pct=d.get("sm_active_pct", None),
            mem_used_bytes=d["mem_used_bytes"],
            mem_total_bytes=d["mem_total_bytes"],
            power_w=d["power_w"],
            temp_c=d["temp_c"],
            sm_clock_mhz=d.get("sm_clock_mhz", 0),
            mem_clock_mhz=d.get("mem_clock_mhz", 0),
            throttle_reasons=d.get("throttle_reasons", 0),
            ecc_corrected=d.get("ecc_corrected", 0),
            ecc_uncorrected=d.get("ecc_uncorrected", 0),
            xid=d.get("xid", None),
            pcie_rx_bps=d.get("pcie_rx_bps", None),
            pcie_tx_bps=d.get("pcie_tx_bps", None),
            nvlink_rx_bps=d.get("nvlink_rx_bps", None),
            nvlink_tx_bps=d.get("nvlink_tx_bps", None),
            processes=tuple([GpuProcess.from_dict(x) for x in d.get("processes", ())]),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSample:
    """One node at one tick: host figures and every GPU.

    Mirrors Avro ``runwatch.v1.NodeSample``.

    Attributes:
        event_id: Unique event id (UUID string); used for idempotent sinks.
        run_id: Training run the event concerns; null when it concerns no single run.
        emitted_at_ms: Emission time, UTC epoch milliseconds.
        source: Who emitted the event.
        seq: Sequence number, monotonic per producer.
        node: Node id (the topic key).
        cpu_pct: Host CPU utilization, percent.
        mem_used_bytes: Host memory used, bytes.
        mem_total_bytes: Host memory total, bytes.
        disk_read_bps: Disk read throughput, bytes per second.
        disk_write_bps: Disk write throughput, bytes per second.
        net_rx_bps: Network receive throughput, bytes per second.
        net_tx_bps: Network transmit throughput, bytes per second.
        gpus: One sample per GPU; empty without a GPU driver.

    """

    AVRO_NAME: ClassVar[str] = "runwatch.v1.NodeSample"

    event_id: str
    run_id: str | None = None
    emitted_at_ms: int
    source: Source
    seq: int
    node: str
    cpu_pct: float
    mem_used_bytes: int
    mem_total_bytes: int
    disk_read_bps: float = 0.0
    disk_write_bps: float = 0.0
    net_rx_bps: float = 0.0
    net_tx_bps: float = 0.0
    gpus: tuple[GpuSample, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Return the plain dict fastavro writes (nested records as dicts)."""
        return {
            "event_id": self.event_id,
            "run_id": self.run_id,
            "emitted_at_ms": self.emitted_at_ms,
            "source": self.source.to_dict(),
            "seq": self.seq,
            "node": self.node,
            "cpu_pct": self.cpu_pct,
            "mem_used_bytes": self.mem_used_bytes,
            "mem_total_bytes": self.mem_total_bytes,
            "disk_read_bps": self.disk_read_bps,
            "disk_write_bps": self.disk_write_bps,
            "net_rx_bps": self.net_rx_bps,
            "net_tx_bps": self.net_tx_bps,
            "gpus": [x.to_dict() for x in self.gpus],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NodeSample:
        """Build from a dict as fastavro reads it; absent defaulted fields take defaults."""
        return cls(
            event_id=d["event_id"],
            run_id=d.get("run_id", None),
            emitted_at_ms=d["emitted_at_ms"],
            source=Source.from_dict(d["source"]),
            seq=d["seq"],
            node=d["node"],
            cpu_pct=d["cpu_pct"],
            mem_used_bytes=d["mem_used_bytes"],
            mem_total_bytes=d["mem_total_bytes"],
            disk_read_bps=d.get("disk_read_bps", 0.0),
            disk_write_bps=d.get("disk_write_bps", 0.0),
            net_rx_bps=d.get("net_rx_bps", 0.0),
            net_tx_bps=d.get("net_tx_bps", 0.0),
            gpus=tuple([GpuSample.from_dict(x) for x in d.get("gpus", ())]),
        )
