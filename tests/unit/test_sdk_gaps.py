"""SDK gaps met by users of the public API (issue 15, item 10).

Every test goes through ``runwatch.init`` / ``run.*`` / ``runwatch.client.data.report``
with an in-memory transport and reads back the records a broker would get.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from sdk_kit import ListTransport

import runwatch
from runwatch.adapters.publisher import Publisher
from runwatch.client import data
from runwatch.core.records import Source
from runwatch.core.stream import join, runstate

T = 1_800_000_000_000
SRC = Source(kind="processor", host="t", runwatch_version="0")


def make_run(t: ListTransport | None = None, **kw):
    t = t or ListTransport()
    kw.setdefault("capture_lineage", False)
    kw.setdefault("install_hooks", False)
    run = runwatch.init("fam", team="ml", transport=t, **kw)
    return run, t


def batch(n: int = 400, t0: int = T, seed: int = 0) -> dict[str, list]:
    rng = random.Random(seed)
    return {"x": [rng.gauss(0.0, 1.0) for _ in range(n)],
            "event_ms": [t0 - 3_600_000 + i * 1000 for i in range(n)]}


# -- data.report takes explicit times -------------------------------------------------
@pytest.mark.parametrize("how", ["now_ms", "clock", "publisher_clock"])
def test_data_report_is_stamped_with_explicit_time(how: str, tmp_path: Path) -> None:
    t = ListTransport()
    kw: dict = {}
    pub_clock = None
    if how == "now_ms":
        kw["now_ms"] = T
    elif how == "clock":
        kw["clock"] = lambda: T
    else:
        pub_clock = lambda: T  # noqa: E731
    pub = Publisher(t, kind="sdk", clock=pub_clock)
    rec = data.report("s3://d", "v1", "p=1", batch(), timestamp="event_ms",
                      baseline_directory=tmp_path, publisher=pub, **kw)
    (sent,) = t.records("DataQualityReport")
    for r in (rec, sent):
        assert r.emitted_at_ms == T
        assert r.window_start_ms == r.window_end_ms == T
        assert r.freshness_lag_ms == T - max(batch()["event_ms"])


def test_explicit_now_ms_wins_over_clocks(tmp_path: Path) -> None:
    t = ListTransport()
    rec = data.report("s3://d", None, None, batch(), publisher=Publisher(t, kind="sdk",
                      clock=lambda: 5), clock=lambda: 7, now_ms=T, baseline_directory=tmp_path)
    assert rec.emitted_at_ms == T


# -- the event-time column is not a drifting feature ---------------------------------
def test_timestamp_column_never_counts_as_drift(tmp_path: Path) -> None:
    t = ListTransport()
    pub = Publisher(t, kind="sdk")
    day = 86_400_000
    for i in range(3):  # same feature distribution, a newer day each time
        rec = data.report("s3://d", "v1", f"day={i}", batch(t0=T + i * day, seed=i),
                          baseline="ref", timestamp="event_ms", baseline_directory=tmp_path,
                          publisher=pub, now_ms=T + i * day)
    assert rec.drift is not None  # drift is measured (the feature x has a baseline)
    assert "event_ms" not in rec.drift.drifted_features
    feats = {f.name: f for f in rec.features}
    assert feats["event_ms"].psi is None and feats["event_ms"].max is not None
    assert feats["x"].psi is not None


def test_a_shifted_feature_still_drifts_beside_the_timestamp(tmp_path: Path) -> None:
    pub = Publisher(ListTransport(), kind="sdk")
    data.report("s3://d", "v1", "a", batch(), baseline="ref", timestamp="event_ms",
                baseline_directory=tmp_path, publisher=pub, now_ms=T)
    shifted = batch(t0=T + 86_400_000, seed=1)
    shifted["x"] = [v + 3.0 for v in shifted["x"]]
    rec = data.report("s3://d", "v1", "b", shifted, baseline="ref", timestamp="event_ms",
                      baseline_directory=tmp_path, publisher=pub, now_ms=T + 86_400_000)
    assert rec.drift is not None and rec.drift.drifted_features == ("x",)


# -- init(attempt=) -----------------------------------------------------------------
@pytest.mark.parametrize(("env", "arg", "expect"),
                         [(None, 3, 3), ("1", 3, 3), ("2", None, 2), (None, None, 0),
                          ("5", 0, 0)])
def test_init_takes_attempt(monkeypatch, env, arg, expect) -> None:
    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    if env is None:
        monkeypatch.delenv("RUNWATCH_ATTEMPT", raising=False)
    else:
        monkeypatch.setenv("RUNWATCH_ATTEMPT", env)
    kw = {} if arg is None else {"attempt": arg}
    run, t = make_run(strict=True, **kw)
    run.step(1, loss=1.0, now_ms=T)
    run.finish(now_ms=T + 1)
    jobs = t.records("JobEvent")
    assert [j.state for j in jobs] == ["running", "succeeded"]
    assert {j.attempt for j in jobs} == {expect}


@pytest.mark.parametrize(("runwatch_env", "slurm", "expect"),
                         [(None, "0", 1), (None, "1", 2), ("3", "1", 3), (None, " 2 ", 3),
                          ("x", "1", 2), (None, "-1", 0), (None, "one", 0)])
def test_init_attempt_from_slurm_is_one_based(monkeypatch, caplog, runwatch_env, slurm,
                                              expect) -> None:
    """Slurm counts restarts from 0; JobEvent.attempt is 1-based (0: unknown)."""
    monkeypatch.setenv("SLURM_RESTART_COUNT", slurm)
    if runwatch_env is None:
        monkeypatch.delenv("RUNWATCH_ATTEMPT", raising=False)
    else:
        monkeypatch.setenv("RUNWATCH_ATTEMPT", runwatch_env)
    run, t = make_run(strict=True)
    assert type(run).__name__ == "Run"  # a bad value never turns monitoring off
    run.finish(now_ms=T)
    assert {j.attempt for j in t.records("JobEvent")} == {expect}
    bad = [v for v in (runwatch_env, slurm) if v is not None and not v.strip().isdigit()]
    assert all(repr(v) in caplog.text for v in bad)


DISTRIBUTED_ENV = ("RUNWATCH_RUN_ID", "RUNWATCH_ATTEMPT", "TORCHELASTIC_RUN_ID",
                   "TORCHELASTIC_RESTART_COUNT", "SLURM_JOB_ID", "SLURM_NTASKS", "SLURM_NPROCS",
                   "SLURM_CLUSTER_NAME", "SLURM_RESTART_COUNT", "WORLD_SIZE", "RANK")


@pytest.mark.parametrize(("env", "expect"), [
    ({"TORCHELASTIC_RUN_ID": "5f2c", "WORLD_SIZE": "2"}, "torch-5f2c"),
    ({"SLURM_JOB_ID": "77", "SLURM_NTASKS": "4", "SLURM_CLUSTER_NAME": "c1"}, "slurm-c1-77"),
    ({"SLURM_JOB_ID": "77", "SLURM_NPROCS": "2"}, "slurm-cluster-77"),
    ({"TORCHELASTIC_RUN_ID": "5f2c", "RUNWATCH_RUN_ID": "hooked"}, "hooked"),
])
def test_every_rank_of_a_distributed_job_joins_one_run(monkeypatch, env, expect) -> None:
    """Each rank that called init without a run id started a run of its own: N manifests,
    N pages for one NaN loss, N times the job's GPU-hours."""
    for name in DISTRIBUTED_ENV:
        monkeypatch.delenv(name, raising=False)
    t = ListTransport()
    for rank in ("0", "1"):
        for k, v in {**env, "RANK": rank}.items():
            monkeypatch.setenv(k, v)
        run, _ = make_run(t, strict=True)
        run.finish(now_ms=T)
    assert {m.run_id for m in t.records("RunManifest")} == {expect}


@pytest.mark.parametrize("env", [
    {"TORCHELASTIC_RUN_ID": "none", "WORLD_SIZE": "2"},   # torchrun's placeholder rendezvous id
    {"SLURM_JOB_ID": "77", "SLURM_NTASKS": "1", "WORLD_SIZE": "2"},
])
def test_ranks_without_a_shared_id_are_told_so(monkeypatch, caplog, env) -> None:
    for name in DISTRIBUTED_ENV:
        monkeypatch.delenv(name, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    run, t = make_run(strict=True)
    run.finish(now_ms=T)
    (m,) = t.records("RunManifest")
    assert m.run_id.startswith("run-")
    assert "one of 2 ranks" in caplog.text and m.run_id in caplog.text


def test_an_explicit_run_id_wins_over_the_shared_one_and_a_single_process_gets_a_new_one(
        monkeypatch) -> None:
    for name in DISTRIBUTED_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "5f2c")
    run, t = make_run(strict=True, run_id="mine")
    run.finish(now_ms=T)
    monkeypatch.delenv("TORCHELASTIC_RUN_ID")
    monkeypatch.setenv("SLURM_JOB_ID", "77")  # one task: train.py then eval.py may share a job
    single, t2 = make_run(strict=True)
    single.finish(now_ms=T)
    assert [m.run_id for m in t.records("RunManifest")] == ["mine"]
    assert t2.records("RunManifest")[0].run_id.startswith("run-")


def test_torchruns_restart_count_is_the_attempt_less_one(monkeypatch) -> None:
    for name in DISTRIBUTED_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    run, t = make_run(strict=True)
    run.finish(now_ms=T)
    assert {j.attempt for j in t.records("JobEvent")} == {2}


# -- lineage= with plain values -----------------------------------------------------
def test_lineage_hardware_as_a_plain_dict_is_kept() -> None:
    run, t = make_run(strict=True, lineage={
        "hardware": {"nodes": ["n1", "n2"], "gpu_count": 16, "gpu_model": "H100"},
        "image_digest": "sha256:abc", "labels": {"tier": 1},
    })
    run.finish(now_ms=T)
    (m,) = t.records("RunManifest")
    assert m.hardware is not None
    assert (m.hardware.nodes, m.hardware.gpu_count, m.hardware.gpu_model) == (
        ("n1", "n2"), 16, "H100")
    assert m.image_digest == "sha256:abc" and m.labels == {"tier": "1"}
    assert run.counters.get("lineage_dropped", 0) == 0


@pytest.mark.parametrize("bad", [
    {"hardware": {"gpus": 8}},                 # unknown key
    {"hardware": {"gpu_count": "eight"}},      # not a number
    {"gpu_count": 8},                          # not a manifest field
    {"code_revision": 123},                    # wrong type for the schema
])
def test_bad_lineage_field_is_dropped_counted_and_the_manifest_kept(bad, caplog) -> None:
    run, t = make_run(lineage={**bad, "image_digest": "sha256:abc"})
    run.finish(now_ms=T)
    (m,) = t.records("RunManifest")
    assert m.image_digest == "sha256:abc"
    assert run.counters["lineage_dropped"] == 1
    (name,) = bad
    assert any(name in r.getMessage() and "lineage_dropped" in r.getMessage()
               for r in caplog.records)


def test_bad_lineage_field_raises_in_strict_mode() -> None:
    with pytest.raises(ValueError, match="hardware"):
        runwatch.init("fam", transport=ListTransport(), install_hooks=False,
                      capture_lineage=False, strict=True, lineage={"hardware": {"gpus": 8}})


def test_lineage_datasets_as_strings_and_mappings() -> None:
    run, t = make_run(strict=True, lineage={
        "datasets": ["s3://a", {"uri": "s3://b", "version": "v2"}]})
    run.finish(now_ms=T)
    (m,) = t.records("RunManifest")
    assert [(d.uri, d.version) for d in m.datasets] == [("s3://a", None), ("s3://b", "v2")]


# -- checkpoint(now_ms=) without a clock --------------------------------------------
def test_checkpoint_now_ms_stamps_the_record_without_a_clock(tmp_path: Path) -> None:
    path = tmp_path / "c.pt"
    path.write_bytes(b"x" * 10)
    run, t = make_run(strict=True)
    run.checkpoint(path, step=5, duration_ms=1500.0, now_ms=T)
    run.finish(now_ms=T + 10)
    (c,) = t.records("CheckpointEvent")
    assert c.emitted_at_ms == c.ended_at_ms == T
    assert c.started_at_ms == T - 1500


# -- a dataset given to init as a plain string joins versioned reports -----------------
def fold(records: list, now: int) -> runstate.RunState:
    cfg = runstate.RunConfig(source=SRC, data_wait_ms=60_000)
    st = runstate.new_state(records[0].run_id)
    for rec in records:
        st, _ = join.step(st, rec, int(rec.emitted_at_ms), cfg)
    return st


@pytest.mark.parametrize(("declared", "reported_version", "joins"), [
    ("s3://d", "v3", True),          # unversioned declaration: any version
    ("s3://d", None, True),
    ("s3://d@v3", "v3", True),       # DatasetRef with a version, same version
    ("s3://d@v3", "v4", False),      # ... another version does not count
    ("s3://other", "v3", False),
])
def test_unversioned_dataset_joins_versioned_reports(declared, reported_version, joins,
                                                     tmp_path: Path) -> None:
    from runwatch.core.records import DatasetRef
    from runwatch.processor.memory import MemoryProcessor
    from runwatch.processor.settings import ProcessorSettings

    uri, _, ver = declared.partition("@")
    ds = DatasetRef(uri=uri, version=ver) if ver else uri
    run, t = make_run(strict=True, datasets=[ds], clock=lambda: T)
    run.finish(now_ms=T + 61_000)  # past the report's wait (a run ended before it is not judged)
    data.report("s3://d", reported_version, "p", batch(), now_ms=T + 2,
                publisher=Publisher(t, kind="sdk"), baseline_directory=tmp_path)
    worker = MemoryProcessor(ProcessorSettings(save_interval_s=0), clock=lambda: T + 2)
    worker.feed(t.out)  # the processor's own routing: manifest refs, then the report
    routed = sorted({k.decode() for topic, k, v, _p in worker.internal
                     if topic == "rw.internal.data-by-run" and v[:1] != b"{"})  # not acks
    assert routed == ([run.run_id] if joins else [])
    # the run's missing-report rule sees the report as the declared dataset's
    st = worker.p.runs.load(run.run_id.encode())
    cfg = runstate.RunConfig(source=SRC, data_wait_ms=60_000)
    _, outs = join.tick(st, T + 61_000, cfg)
    missing = [o for o in outs if getattr(o, "detector", "") == "rule:missing_data_report"]
    assert (missing == []) is joins


def test_a_refused_strict_init_leaves_no_transport_thread(tmp_path: Path) -> None:
    import threading

    from runwatch.adapters.kafka import ProducerSettings
    from runwatch.adapters.settings import KafkaSettings

    with pytest.raises(ValueError, match="hardware"):
        runwatch.init("fam", run_id="run-refused", install_hooks=False, capture_lineage=False,
                      strict=True, lineage={"hardware": {"gpus": 8}},
                      kafka=KafkaSettings(bootstrap_servers="127.0.0.1:1"),
                      producer=ProducerSettings(spool_dir=tmp_path))
    assert [t.name for t in threading.enumerate() if "run-refused" in t.name] == []


def test_dataset_ref_comes_from_the_sdk_package_the_docs_import_it_from() -> None:
    # docs/sdk.md's examples use DatasetRef; runwatch.client did not export it
    import runwatch.client as sdk
    from runwatch.core.records import DatasetRef

    assert sdk.DatasetRef is DatasetRef and "DatasetRef" in sdk.__all__
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = sdk.Nope
