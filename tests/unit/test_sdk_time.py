"""The SDK's explicit-time API: ``now_ms=``/``step_ms=``/``loader_wait_ms=`` and ``clock=``."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from sdk_kit import Clock, ListTransport

import runwatch


def make_run(**kw):
    t = ListTransport()
    run = runwatch.init("fam", team="ml", transport=t, install_hooks=False,
                        capture_lineage=False, strict=True, **kw)
    return run, t


@pytest.mark.parametrize("step_ms,loader_ms,ebs,restarts", [
    (1000.0, 150.0, 256, 0), (2500.5, 0.0, 64, 2), (10.0, 9.0, None, None),
])
def test_explicit_step_timings_are_published(step_ms, loader_ms, ebs, restarts) -> None:
    run, t = make_run()
    run.step(7, loss=1.0, samples=32, now_ms=1_700_000_000_000, step_ms=step_ms,
             loader_wait_ms=loader_ms, effective_batch_size=ebs, worker_restarts=restarts)
    run.finish()
    (st,) = t.records("StepTiming")
    (ls,) = t.records("LearningStep")
    assert st.step_ms == step_ms and st.loader_wait_ms == loader_ms
    assert st.compute_ms == pytest.approx(step_ms - loader_ms)
    assert st.effective_batch_size == ebs and st.worker_restarts == (restarts or 0)
    assert st.emitted_at_ms == ls.emitted_at_ms == 1_700_000_000_000


def test_explicit_loader_wait_overrides_measured_and_resets_it() -> None:
    run, t = make_run()
    with run.data_wait():
        pass
    run.step(1, loss=1.0, loader_wait_ms=42.0, step_ms=100.0)
    run.step(2, loss=1.0, step_ms=100.0)
    run.finish()
    a, b = t.records("StepTiming")
    assert a.loader_wait_ms == 42.0
    assert b.loader_wait_ms < 42.0  # the measured wait was consumed by step 1


# (a clock in 1970, as 1_000_000 was here, is epoch seconds taken for ms: init refuses it,
# test_sdk_wrong_types.py; 2001-01-01 is a replay's old clock)
@pytest.mark.parametrize("start", [978_307_200_000, 1_800_000_000_000])
def test_clock_stamps_every_record(start: int, tmp_path: Path) -> None:
    clock = Clock(start)
    run, t = make_run(clock=clock)
    clock.t = start + 1_000
    run.step(0, loss=1.0, step_ms=900.0, loader_wait_ms=100.0)
    clock.t = start + 2_000
    run.validation(0, {"acc": 0.5})
    clock.t = start + 3_000
    body = b"weights"
    path = tmp_path / "ck.bin"
    path.write_bytes(body)
    run.checkpoint(path, step=0, duration_ms=500.0,
                   expected_sha256=hashlib.sha256(body).hexdigest())
    clock.t = start + 4_000
    run.gate("eval", "pass")
    clock.t = start + 5_000
    run.job_state("retrying", "worker lost", attempt=2)
    clock.t = start + 6_000
    run.artifact("s3://m/final", sha256="ab" * 32)
    clock.t = start + 7_000
    run.finish()
    by = {}
    for r in t.records():
        by.setdefault(type(r).__name__, []).append(r)
    assert by["RunManifest"][0].emitted_at_ms == start
    assert [j.emitted_at_ms for j in by["JobEvent"]] == [start, start + 5_000, start + 7_000]
    assert [j.attempt for j in by["JobEvent"]] == [0, 2, 2]
    assert by["StepTiming"][0].emitted_at_ms == start + 1_000
    assert by["ValidationResult"][0].emitted_at_ms == start + 2_000
    ck = by["CheckpointEvent"][0]
    assert (ck.emitted_at_ms, ck.ended_at_ms, ck.started_at_ms) == (
        start + 3_000, start + 3_000, start + 2_500)
    assert ck.outcome == "ok"
    assert by["GateDecision"][0].emitted_at_ms == start + 4_000
    assert by["ArtifactEvent"][0].emitted_at_ms == start + 6_000


@pytest.mark.parametrize("call", ["validation", "gate", "job_state", "artifact"])
def test_explicit_now_ms_wins_over_clock(call: str) -> None:
    t0 = 1_800_000_000_000
    run, t = make_run(clock=Clock(t0 + 5_000))
    args = {"validation": ((1, {"a": 1.0}), {}), "gate": (("g", "fail"), {}),
            "job_state": (("preempted",), {}), "artifact": (("s3://x",), {"sha256": "00" * 32})}
    a, kw = args[call]
    getattr(run, call)(*a, now_ms=t0 + 123_456, **kw)
    run.finish(now_ms=t0 + 200_000)
    stamps = sorted(r.emitted_at_ms for r in t.records())
    assert t0 + 123_456 in stamps and stamps[-1] == t0 + 200_000
    assert stamps[0] == t0 + 5_000  # manifest at the clock's start


def test_lineage_overrides_manifest_fields() -> None:
    run, t = make_run(lineage={"image_digest": "registry/x@sha256:1", "code_revision": "abc"})
    run.finish()
    (m,) = t.records("RunManifest")
    assert m.image_digest == "registry/x@sha256:1" and m.code_revision == "abc"


def test_without_clock_steps_are_wall_stamped_and_measured() -> None:
    import time

    run, t = make_run()
    before = int(time.time() * 1000)
    run.step(0, loss=1.0)
    run.finish()
    (st,) = t.records("StepTiming")
    assert st.emitted_at_ms >= before and st.effective_batch_size is None
