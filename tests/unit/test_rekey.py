import pytest

from runwatch.core.codec import load_codec
from runwatch.core.records import (
    Allocation,
    DataQualityReport,
    DatasetRef,
    GpuProcess,
    GpuSample,
    JobEvent,
    NodeSample,
    RunManifest,
    Source,
)
from runwatch.core.stream import rekey

SRC = Source(kind="t", host="h", runwatch_version="0")
C = {"event_id": "e", "emitted_at_ms": 1, "source": SRC, "seq": 1}


def gpu(i: int, run: str | None = None) -> GpuSample:
    procs = (GpuProcess(pid=1, run_id=run, used_mem_bytes=1),) if run is not None else ()
    return GpuSample(
        index=i,
        uuid=f"g{i}",
        util_pct=50.0,
        mem_used_bytes=0,
        mem_total_bytes=1,
        power_w=1.0,
        temp_c=1.0,
        sm_clock_mhz=1,
        mem_clock_mhz=1,
        throttle_reasons=0,
        ecc_corrected=0,
        ecc_uncorrected=0,
        processes=procs,
    )


def sample(*gpus: GpuSample) -> NodeSample:
    return NodeSample(
        **C,
        node="n1",
        cpu_pct=0.0,
        mem_used_bytes=0,
        mem_total_bytes=1,
        disk_read_bps=0.0,
        disk_write_bps=0.0,
        net_rx_bps=0.0,
        net_tx_bps=0.0,
        gpus=gpus,
    )


@pytest.mark.parametrize(
    ("gpus", "alloc", "expected"),
    [
        ((gpu(0), gpu(1)), {"A": [0], "B": [1]}, {"A": [0], "B": [1]}),
        ((gpu(0, "A"), gpu(1, "B")), {}, {"A": [0], "B": [1]}),
        ((gpu(0, "A"), gpu(1)), {"B": []}, {"A": [0], "B": []}),  # attribution wins; 1 idle
        ((gpu(0), gpu(1)), {"A": []}, {"A": [0, 1]}),
        ((gpu(0), gpu(1)), {}, {}),
        # allocated with no GPU list but attributed: an idle or freed GPU is not the run's
        ((gpu(0, "A"), gpu(1)), {"A": []}, {"A": [0]}),
        ((gpu(0, "A"), gpu(1), gpu(2, "B")), {"A": [], "B": [2]}, {"A": [0], "B": [2]}),
        ((gpu(0, "A"), gpu(1, "")), {"A": [0, 1]}, {"A": [0, 1]}),  # 1 busy, unattributed
        # the node shows processes: allocated GPUs running none (not started, or finished
        # before the end event) are left out
        ((gpu(0, "A"), gpu(1)), {"A": [0, 1]}, {"A": [0]}),
        ((gpu(0, "B"), gpu(1), gpu(2)), {"A": [1, 2], "B": [0]}, {"A": [], "B": [0]}),
    ],
)
def test_assign_gpus(gpus, alloc, expected) -> None:
    codec = load_codec()  # as the node re-keyer reads a sample: decoded to dicts
    _, d = codec.decode_dict(codec.encode(sample(*gpus)))
    assert rekey.assign_gpus(d["gpus"], alloc) == expected


@pytest.mark.parametrize(("visible", "expected"), [
    (False, {"A": [0, 1]}),  # a node that never showed processes: the allocation decides
    (True, {"A": []}),  # it did before: every run here finished before its end event
])
def test_a_node_known_to_show_processes_idle_gpus_are_nobodys(visible, expected) -> None:
    codec = load_codec()
    _, d = codec.decode_dict(codec.encode(sample(gpu(0), gpu(1))))
    assert rekey.assign_gpus(d["gpus"], {"A": [0, 1]}, procs_visible=visible) == expected


def test_job_events_build_and_release_node_index() -> None:
    """As the run folder sends allocation changes and the node re-keyer applies them."""
    idx: dict = {}

    def apply(event: JobEvent, held: list[str]) -> tuple[list[str], list[str]]:
        changes, now_held = rekey.allocation_changes(event, held)
        changed = [c.node for c in changes
                   if rekey.apply_alloc_change(idx.setdefault(c.node, {}), c)]
        return changed, now_held

    alloc = Allocation(nodes=("n1", "n2"), gpu_indices=(3, 1))
    changed, held = apply(JobEvent(**C, run_id="R", state="running", attempt=1,
                                   allocation=alloc), [])
    assert sorted(changed) == ["n1", "n2"]
    assert idx == {"n1": {"R": [1, 3]}, "n2": {"R": [1, 3]}}
    changed, held = apply(JobEvent(**C, run_id="R", state="succeeded", attempt=1), held)
    assert sorted(changed) == ["n1", "n2"] and held == []
    assert idx == {"n1": {}, "n2": {}}


@pytest.mark.parametrize(
    ("version", "expected"),
    [("v1", ["R1", "R3"]), ("v2", ["R2", "R3"]), (None, ["R1", "R2", "R3"])],  # R3: unversioned
)
def test_dataset_routing(version, expected) -> None:
    idx: dict = {}
    for run, ver in (("R1", "v1"), ("R2", "v2"), ("R3", None)):
        manifest = RunManifest(**{**C, "run_id": run},
                               datasets=(DatasetRef(uri="s3://d", version=ver),),
                               transforms=(), code_dirty=False)
        for _uri, ref in rekey.manifest_keys(manifest.datasets):  # as the dataset re-keyer
            rekey.add_run(idx, ref, run)
    rep = DataQualityReport(
        **C,
        dataset_uri="s3://d",
        dataset_version=version,
        window_start_ms=0,
        window_end_ms=1,
        row_count=1,
        schema_failures=0,
        duplicate_rows=0,
        rejected_samples=0,
    )
    assert rekey.runs_for_report(idx, rep) == expected
