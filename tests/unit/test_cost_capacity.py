"""Capacity attribution on hand-made tables: supply, scheduler policy, storage, network."""

from __future__ import annotations

import pytest

from runwatch.core.cost.capacity import (
    BUCKET_MS,
    CkptBucket,
    NodeMinute,
    QueueWait,
    StepBucket,
    capacity_report,
)

M = 60_000


def minutes(free: tuple[int, int], n: int = 120) -> list[NodeMinute]:
    return [NodeMinute(i * M, f"n{k}", 8, free[k]) for i in range(n) for k in (0, 1)]


@pytest.mark.parametrize(
    ("free", "cause", "fragmented"),
    [((0, 0), "accelerator_supply", None), ((4, 4), "scheduler_policy", 8.0),
     ((8, 0), "scheduler_policy", 0.0)],
)
def test_queue_delay_is_supply_or_scheduler(free: tuple[int, int], cause: str,
                                            fragmented: float | None) -> None:
    out = capacity_report([QueueWait("q", 10 * M, 70 * M, 8)], minutes(free), [], [], {}, {}, [])
    assert out["bottleneck"] == cause
    assert out["causes"][0]["lost_gpu_hours"] == pytest.approx(8.0)
    if fragmented is not None:
        assert out["causes"][0]["evidence"]["fragmented_gpu_hours"] == pytest.approx(fragmented)


def steps(run: str, slow: range, loader: float = 150.0, compute: float = 1800.0,
          extra_loader: float = 0.0, extra_compute: float = 0.0) -> list[StepBucket]:
    return [StepBucket(run, b * BUCKET_MS, 10,
                       10 * (loader + (extra_loader if b in slow else 0.0)),
                       10 * (compute + (extra_compute if b in slow else 0.0))) for b in range(24)]


def test_storage_needs_many_runs_and_checkpoints_rising_together() -> None:
    runs = [f"r{i}" for i in range(4)]
    st = [s for r in runs for s in steps(r, range(6, 12), extra_loader=3000.0)]
    ck = [CkptBucket(r, b * BUCKET_MS, 1, 20_000.0 + (60_000.0 if b in (6, 8, 10) else 0.0))
          for r in runs for b in range(0, 24, 2)]
    gpus = dict.fromkeys(runs, 8)
    out = capacity_report([], [], st, ck, gpus, {}, [])
    assert out["bottleneck"] == "distributed_storage"
    assert out["causes"][0]["lost_gpu_hours"] == pytest.approx(4 * 8 * (60 * 3 + 3 * 60) / 3600)
    # Without the checkpoints rising, slow loaders alone are not storage.
    flat = [CkptBucket(c.run_id, c.bucket_ms, 1, 20_000.0) for c in ck]
    assert capacity_report([], [], st, flat, gpus, {}, [])["bottleneck"] is None
    # Nor are two runs "many".
    two = [s for s in st if s.run_id in ("r0", "r1")]
    assert capacity_report([], [], two, ck, gpus, {}, [])["bottleneck"] is None


def test_network_is_compute_rising_across_nodes_without_loader() -> None:
    runs = [f"r{i}" for i in range(3)]
    st = [s for r in runs for s in steps(r, range(6, 12), extra_compute=1800.0)]
    out = capacity_report([], [], st, [], dict.fromkeys(runs, 8),
                          {r: [f"n{i}"] for i, r in enumerate(runs)}, [])
    assert out["bottleneck"] == "network_fabric"
    assert out["causes"][0]["lost_gpu_hours"] == pytest.approx(3 * 8 * 60 * 1.8 / 3600)
    one_node = capacity_report([], [], st, [], dict.fromkeys(runs, 8),
                               dict.fromkeys(runs, ["n0"]), [])
    assert one_node["bottleneck"] is None


def test_workload_configuration_only_for_runs_with_nothing_else_wrong() -> None:
    out = capacity_report([], [], [], [], {}, {}, [("m", 10.0, 30.0, 80.0), ("ok", 0.0, 80, 80)])
    assert out["bottleneck"] == "workload_configuration"
    assert out["causes"][0]["evidence"]["runs"][0]["run_id"] == "m"
    assert capacity_report([], [], [], [], {}, {}, [])["bottleneck"] is None
