"""Lineage through a real processor worker driven in memory: re-emitted manifests, stages.

Everything is published the way users publish it (``runwatch.init``, ``run.*``,
``runwatch.client.data.stage``, ``data.report``) to a capture transport and fed
to :class:`~runwatch.processor.memory.MemoryProcessor`.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

import runwatch
from runwatch.adapters.publisher import CaptureTransport, Publisher
from runwatch.client import data
from runwatch.core import lineage
from runwatch.core.codec import load_codec
from runwatch.core.records import Alert, DatasetRef, RunManifest
from runwatch.processor.memory import MemoryProcessor

WALL = int(time.time() * 1000)


@pytest.fixture(autouse=True)
def _wall_now(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's events start at the wall clock of its own start, as the processor's
    clock (the wall clock) sees them live: taken once at import, a test that ran 20
    minutes into the session fed its whole run at once 20 minutes late (a backfill),
    and its rule waited for the input's horizon, which the test never ticks past."""
    monkeypatch.setattr(f"{__name__}.WALL", int(time.time() * 1000))


def start(t: CaptureTransport, run_id: str, at: int, *, version: str = "v1",
          lr: float = 0.1, revision: str = "abc", seed: int = 1) -> None:
    """One process of a run publishing its manifest (a first start, a retry, a resume)."""
    runwatch.init("fam", run_id=run_id, transport=t, install_hooks=False, capture_lineage=False,
                  clock=lambda: at, config={"lr": lr}, seed_policy=f"fixed:{seed}",
                  datasets=[DatasetRef(uri="s3://d", version=version)],
                  lineage={"code_revision": revision, "image_digest": "sha256:aa",
                           "hardware": {"gpu_count": 8, "gpu_model": "H100"}}).finish()


def mutated(m: MemoryProcessor) -> list[Alert]:
    return [a for a in m.alerts if isinstance(a, Alert) and a.detector == "rule:lineage_mutated"
            and a.status == "firing"]


def fed(t: CaptureTransport, *, twice: bool = False) -> MemoryProcessor:
    m = MemoryProcessor()
    m.feed(t.messages + (t.messages if twice else []))
    return m


def test_the_same_lineage_re_emitted_does_not_alert() -> None:
    t = CaptureTransport()
    start(t, "R", WALL)
    start(t, "R", WALL + 60_000)  # resumed: a new process, a new manifest, the same lineage
    m = fed(t, twice=True)  # and every message redelivered
    assert mutated(m) == []
    state = m.p.runs.load(b"R")
    assert state.signals["lineage"]["versions"] == 1


def test_a_changed_lineage_alerts_with_what_changed_and_keeps_the_first() -> None:
    t = CaptureTransport()
    start(t, "R", WALL)
    start(t, "R", WALL + 60_000, version="v2", lr=0.2)
    m = fed(t)
    [alert] = mutated(m)
    assert alert.probable_cause == "data" and alert.severity == "warning"
    assert alert.labels["lineage_changed"] == "datasets,config_hash"
    details = {e.indicator: e.detail for e in alert.evidence}
    assert details["lineage.datasets"] == "s3://d@v1 → s3://d@v2"
    assert details["lineage.config_hash"].startswith("sha256:")
    codec = load_codec()
    first, second = [r for r in (codec.decode(v) for _, _, v in t.messages)
                     if type(r).__name__ == "RunManifest"]
    assert alert.labels["lineage_first"] == first.lineage_hash
    assert alert.labels["lineage_hash"] == second.lineage_hash != first.lineage_hash
    state = m.p.runs.load(b"R")
    assert state.signals["lineage"]["first"] == first.lineage_hash


@pytest.mark.parametrize(("change", "cause", "fields"), [
    ({"revision": "def"}, "artifact", "code_revision"),
    ({"seed": 2}, "artifact", "seed_policy"),
])
def test_the_cause_follows_what_changed(change, cause, fields) -> None:
    t = CaptureTransport()
    start(t, "R", WALL)
    start(t, "R", WALL + 60_000, **change)
    [alert] = mutated(fed(t))
    assert (alert.probable_cause, alert.labels["lineage_changed"]) == (cause, fields)


def test_a_manifest_without_hashes_is_judged_by_its_content() -> None:
    """An older producer leaves the hashes empty: the processor recomputes them."""
    t = CaptureTransport()
    pub = Publisher(t, kind="hook")
    for version in ("v1", "v1", "v3"):
        rec = RunManifest(
            **pub.meta(WALL), run_id="H", datasets=(DatasetRef(uri="s3://d", version=version),))
        assert rec.lineage_hash == ""
        pub.publish([rec])
    [alert] = mutated(fed(t))
    assert alert.labels["lineage_changed"] == "datasets"
    assert alert.labels["lineage_hash"] == lineage.lineage_hash(rec.to_dict())


def drifted(n: int = 400, shift: float = 0.0) -> dict[str, list[float]]:
    rng = np.random.default_rng(5)
    return {"x": (rng.normal(0, 1, n) + shift).round(6).tolist()}


def test_a_run_knows_the_stages_upstream_of_its_data(tmp_path) -> None:
    """Stages before and after the run starts reach it; others' outputs do not."""
    t = CaptureTransport()
    pub = Publisher(t, kind="sdk")
    with data.stage("ingest", output="s3://raw@7", inputs=["kafka://clicks"], publisher=pub,
                    now_ms=WALL - 60_000) as st:
        st.rows_in, st.rows_out = 100, 100
    with data.stage("clean", output="s3://d@v1", inputs=["s3://raw@7"], publisher=pub,
                    now_ms=WALL - 30_000) as st:
        st.rows_in, st.rows_out = 100, 90
    start(t, "R", WALL)
    with data.stage("clean", code_version="2", output="s3://d@v1", inputs=["s3://raw@7"],
                    publisher=pub, now_ms=WALL + 10_000) as st:
        st.rows_out = 91
    with data.stage("other", output="s3://elsewhere@1", publisher=pub, now_ms=WALL) as st:
        st.rows_out = 5
    m = fed(t)
    state = m.p.runs.load(b"R")
    stages = state.signals["stages"]
    assert set(stages) == {"s3://d@v1"}
    assert stages["s3://d@v1"]["stage"] == "clean"
    assert stages["s3://d@v1"]["code_version"] == "2" and stages["s3://d@v1"]["rows_out"] == 91
    assert stages["s3://d@v1"]["inputs"] == ["s3://raw@7"]
    assert len(stages["s3://d@v1"]["ids"]) == 2
    assert [d for d in m.dead if "Stage" in d.reason] == []


def test_a_drifted_stage_output_makes_a_validation_decline_a_data_problem(tmp_path) -> None:
    t = CaptureTransport()
    pub = Publisher(t, kind="sdk")
    run = runwatch.init("fam", run_id="D", transport=t, install_hooks=False,
                        capture_lineage=False, clock=lambda: WALL,
                        datasets=[DatasetRef(uri="s3://d", version="v2")])
    data.report("s3://d", "v1", None, drifted(), baseline="ref", publisher=pub,
                baseline_directory=tmp_path)  # the reference distribution
    with data.stage("clean", output="s3://d@v2", publisher=pub, baseline_directory=tmp_path,
                    now_ms=WALL + 1_000) as st:
        st.compare(drifted(shift=3.0), baseline="ref")
    for i, acc in enumerate((0.90, 0.70, 0.60)):
        run.validation(100 * (i + 1), {"val_acc": acc}, now_ms=WALL + 600_000 + i * 60_000)
    run.finish()
    m = fed(t)
    [decline] = [a for a in m.alerts if isinstance(a, Alert)
                 and a.detector == "rule:validation_decline" and a.status == "firing"]
    assert decline.probable_cause == "data"
    assert any(e.indicator == "feature_drift" for e in decline.evidence)


def test_an_empty_stage_output_fires_zero_rows_and_a_failed_stage_is_evidence() -> None:
    t = CaptureTransport()
    pub = Publisher(t, kind="sdk")
    start(t, "Z", WALL)
    with data.stage("clean", output="s3://d@v1", publisher=pub, now_ms=WALL + 1_000) as st:
        st.rows_in, st.rows_out = 100, 0
    with pytest.raises(ValueError, match="boom"), data.stage(
            "clean", output="s3://d@v1", publisher=pub, now_ms=WALL + 2_000):
        raise ValueError("boom")
    m = fed(t)
    fired = {(a.detector, a.probable_cause) for a in m.alerts
             if isinstance(a, Alert) and a.status == "firing"}
    assert ("rule:zero_rows", "data") in fired
    state = m.p.runs.load(b"Z")
    assert state.signals["stages"]["s3://d@v1"]["outcome"] == "failed"
    assert any(k.startswith("rule:stage_failed|") for k in state.evidence)


@pytest.mark.parametrize("outcome", ["succeeded", "failed"])
def test_a_pipeline_of_stages_only_reports_the_version_its_runs_read(outcome: str) -> None:
    """A pipeline instrumented with ``data.stage`` alone (no ``data.report``) wrote the
    version a run reads: the run paged rule:missing_data_report (critical) ten minutes in;
    a stage that failed to write it still leaves the version missing, and the page names
    the failed stage (it did not: the stage failed more than WINDOW_MS before the page)."""
    t = CaptureTransport()
    pub = Publisher(t, kind="sdk")
    if outcome == "failed":
        with pytest.raises(KeyError), data.stage("features", output="s3://d@v1",
                                                   publisher=pub, now_ms=WALL - 3_600_000):
            raise KeyError("user_id")
    else:
        with data.stage("features", output="s3://d@v1", inputs=["s3://raw@7"], publisher=pub,
                        now_ms=WALL - 120_000) as st:
            st.rows_in, st.rows_out = 2_000, 1_980
    run = runwatch.init("fam", run_id=f"S-{outcome}", transport=t, install_hooks=False,
                        capture_lineage=False, clock=lambda: WALL,
                        datasets=[DatasetRef(uri="s3://d", version="v1")])
    for i in range(20):
        run.step(i, loss=1.0, now_ms=WALL + i * 60_000)
    run.finish(now_ms=WALL + 20 * 60_000)
    m = fed(t)
    m.tick(WALL + 20 * 60_000)
    missing = [a for a in m.alerts if isinstance(a, Alert) and a.status == "firing"
               and a.detector == "rule:missing_data_report"]
    assert bool(missing) == (outcome == "failed")
    if missing:  # and it says why: the stage that was to write it failed (before the run)
        assert any(e.indicator == "stage" for e in missing[0].evidence)


def test_an_empty_stage_output_stays_firing_until_healthy_outputs() -> None:
    """A stage that wrote 0 rows paged rule:zero_rows and resolved 15 minutes later with
    nothing else arriving (a report's empty partition stays firing until healthy reports)."""
    t = CaptureTransport()
    pub = Publisher(t, kind="sdk")
    run = runwatch.init("fam", run_id="E", transport=t, install_hooks=False,
                        capture_lineage=False, clock=lambda: WALL,
                        datasets=[DatasetRef(uri="s3://d", version="v1")])
    with data.stage("clean", output="s3://d@v1", publisher=pub, now_ms=WALL + 60_000) as st:
        st.rows_in, st.rows_out = 100, 0
    for i in range(40):
        run.step(i, loss=1.0, now_ms=WALL + i * 60_000)
    m = fed(t)
    for minute in range(40, 60, 5):
        m.tick(WALL + minute * 60_000)
    zero = [a for a in m.alerts if isinstance(a, Alert) and a.detector == "rule:zero_rows"]
    assert [a.status for a in zero] == ["firing"]
    seen = len(t.messages)
    for k in range(6):  # healthy outputs of the dataset resolve it
        with data.stage("clean", output="s3://d@v1", publisher=pub,
                        now_ms=WALL + (61 + k) * 60_000) as st:
            st.rows_in, st.rows_out = 100, 100
    m.feed(t.messages[seen:])
    zero = [a for a in m.alerts if isinstance(a, Alert) and a.detector == "rule:zero_rows"]
    assert zero[-1].status == "resolved"
