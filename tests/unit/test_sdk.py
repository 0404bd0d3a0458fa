"""SDK behaviour with an in-memory transport double (no broker)."""

from __future__ import annotations

import hashlib
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from sdk_kit import child_script, read_records

import runwatch
import runwatch.client.callbacks as cbmod
import runwatch.client.run as runmod
from runwatch.client import NullRun
from runwatch.client.callbacks import huggingface_callback, keras_callback, lightning_callback
from runwatch.core.codec import load_codec


class ListTransport:
    def __init__(self) -> None:
        self.out: list[tuple[str, str | None, bytes]] = []
        self.closed = False

    def produce(self, topic, key, value):
        self.out.append((topic, key, value))

    def flush(self, timeout=1.0):
        return 0

    def close(self, timeout=1.0):
        self.closed = True
        return None

    def records(self):
        codec = load_codec()
        return [(t, k, codec.decode(v)) for t, k, v in self.out]


class FakeTime:
    """The SDK's interval clocks, advanced by hand (no timed assertions on busy cores)."""

    def __init__(self) -> None:
        self.ns = 10**12

    def advance(self, ms: float) -> None:
        self.ns += int(ms * 1_000_000)

    def perf_counter_ns(self) -> int:
        return self.ns

    def __getattr__(self, name: str):
        return getattr(time, name)  # wall clock, sleep, ...: the real ones


@pytest.fixture
def fake_time(monkeypatch) -> FakeTime:
    ft = FakeTime()
    monkeypatch.setattr(runmod, "time", ft)  # Run.step / data_wait measure with it
    monkeypatch.setattr(cbmod, "_perf_s", lambda: ft.ns / 1e9)  # the Lightning callback too
    return ft


def make_run(**kw):
    t = ListTransport()
    kw.setdefault("capture_lineage", False)
    run = runwatch.init("fam", team="ml", transport=t, install_hooks=False, **kw)
    return run, t


def by_type(t: ListTransport, name: str):
    return [r for _, _, r in t.records() if type(r).__name__ == name]


def test_init_publishes_manifest_and_running(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.delenv("RUNWATCH_RUN_ID", raising=False)
    monkeypatch.setenv("RUNWATCH_IMAGE_DIGEST", "sha256:abc")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("lr: 0.1\n")
    run, t = make_run(
        config=str(cfg),
        datasets=["s3://b/ds"],
        seed_policy="fixed:1",
        resumed_from="s3://ck/5",
        capture_lineage=True,
    )
    run.finish()
    recs = t.records()
    topics = [x[0] for x in recs]
    assert topics[:2] == ["rw.lineage", "rw.exec.job"]
    m = recs[0][2]
    assert m.run_id == run.run_id and m.image_digest == "sha256:abc"
    assert m.config_hash and m.config_hash.startswith("sha256:")
    assert m.datasets[0].uri == "s3://b/ds" and m.seed_policy == "fixed:1"
    assert m.resumed_from_checkpoint == "s3://ck/5" and m.experiment_family == "fam"
    assert "numpy" in m.framework_versions and m.code_revision  # this checkout is a git repo
    states = [r.state for r in by_type(t, "JobEvent")]
    assert states == ["running", "succeeded"]
    assert all(k == run.run_id for _, k, _ in t.out) and t.closed


@pytest.mark.parametrize("env,arg,expect", [("from-env", "arg", "from-env"), (None, "arg", "arg")])
def test_run_id_env_wins(monkeypatch, env, arg, expect) -> None:
    if env:
        monkeypatch.setenv("RUNWATCH_RUN_ID", env)
    else:
        monkeypatch.delenv("RUNWATCH_RUN_ID", raising=False)
    run, _ = make_run(run_id=arg)
    assert run.run_id == expect
    run.finish()


def test_generated_run_ids_differ(monkeypatch) -> None:
    monkeypatch.delenv("RUNWATCH_RUN_ID", raising=False)
    a, _ = make_run()
    b, _ = make_run()
    assert a.run_id != b.run_id and a.run_id.startswith("run-")
    a.finish()
    b.finish()


def test_steps_build_learning_and_timing_in_order(fake_time: FakeTime) -> None:
    run, t = make_run()
    for s in range(50):
        with run.data_wait():
            fake_time.advance(1.5)
        fake_time.advance(2.0)  # compute
        run.step(
            s,
            loss=1.0 / (s + 1),
            metrics={"acc": s / 50, "n": s},
            lr=0.1,
            grad_norm=2.0,
            samples=8,
            tokens=100,
        )
    run.finish()
    ls = by_type(t, "LearningStep")
    st = by_type(t, "StepTiming")
    assert [r.step for r in ls] == list(range(50)) and [r.step for r in st] == list(range(50))
    assert ls[3].metrics == {"acc": 3 / 50, "n": 3.0} and ls[3].lr == 0.1
    assert [r.loader_wait_ms for r in st] == pytest.approx([1.5] * 50)
    assert [r.step_ms for r in st] == pytest.approx([3.5] * 50)
    assert [r.compute_ms for r in st] == pytest.approx([2.0] * 50)
    seqs = [r.seq for _, _, r in t.records()]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    ids = [r.event_id for _, _, r in t.records()]
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize(
    "kwargs,nonfinite,counted",
    [
        ({"loss": math.nan}, 1, 1),
        # a metric's NaN is published in the metrics and counted, not in nonfinite_count
        # (the processor reads that count as the step's loss and gradients)
        ({"loss": math.inf, "metrics": {"a": -math.inf, "b": 1.0}}, 1, 2),
        ({"loss": 1.0, "grad_norm": math.nan, "lr": math.inf}, 2, 2),
        ({"loss": 1.0}, 0, 0),
    ],
)
def test_nonfinite_published_and_counted(kwargs, nonfinite, counted) -> None:
    run, t = make_run()
    run.step(1, **kwargs)
    c = run.finish()
    ls = by_type(t, "LearningStep")[0]
    assert ls.nonfinite_count == nonfinite and c.get("nonfinite", 0) == counted
    if "loss" in kwargs and not math.isfinite(kwargs["loss"]):
        assert not math.isfinite(ls.loss)


@pytest.mark.parametrize(
    "kwargs,dropped,kept_metrics",
    [
        ({"loss": "bad"}, 1, {}),
        ({"loss": 1.0, "metrics": {"a": "x", "b": 2.0}}, 1, {"b": 2.0}),
        ({"loss": np.float32(0.5), "metrics": {"c": np.int64(3)}}, 0, {"c": 3.0}),
        ({"loss": 1.0, "metrics": {"a": None, "b": [1]}}, 2, {}),
    ],
)
def test_wrong_types_dropped_and_counted(kwargs, dropped, kept_metrics, caplog) -> None:
    run, t = make_run()
    for _ in range(3):  # same call site: logged once
        run.step(1, **kwargs)
    c = run.finish()
    assert c.get("dropped_wrong_type", 0) == 3 * dropped
    learning = by_type(t, "LearningStep")
    if kwargs == {"loss": "bad"}:  # no loss and nothing else learned: the timing only
        assert learning == [] and len(by_type(t, "StepTiming")) == 3
    else:
        assert learning[0].metrics == kept_metrics
    lines = [r for r in caplog.records if "of type" in r.getMessage()
             and "counted in dropped_wrong_type" in r.getMessage()]
    assert len(lines) == dropped  # one per argument that had the wrong type


def test_strict_raises() -> None:
    run, _ = make_run(strict=True)
    with pytest.raises(TypeError):
        run.step(1, loss="bad")
    run.finish()


def test_bad_step_type_dropped() -> None:
    run, t = make_run()
    run.step("seven", loss=1.0)  # type: ignore[arg-type]
    c = run.finish()
    assert c["dropped_wrong_type"] == 1 and by_type(t, "LearningStep") == []


def test_queue_bound_drops_and_counts() -> None:
    run, t = make_run(queue_max=10)
    run._stop.set()  # keep the worker from draining: simulate a stuck consumer
    time.sleep(0.1)
    for s in range(100):
        run.step(s, loss=1.0)
    assert run.counters["dropped_queue_full"] >= 90
    run.finish()


def test_checkpoint_artifact_validation_gate(tmp_path: Path) -> None:
    ck = tmp_path / "ck.bin"
    ck.write_bytes(b"x" * 4096)
    run, t = make_run()
    run.checkpoint(ck, step=10, duration_ms=20.0)
    run.checkpoint(ck, step=11, expected_sha256="00" * 32)
    run.checkpoint("s3://bucket/ck-12", step=12)
    run.artifact(ck, kind="model")
    run.validation(10, {"val_loss": 0.3}, dataset="s3://val", slice="en")
    run.gate("release", "fail", thresholds={"acc": 0.9}, measured={"acc": 0.8}, reasons=["acc low"])
    run.finish()
    import hashlib

    digest = hashlib.sha256(b"x" * 4096).hexdigest()
    cks = by_type(t, "CheckpointEvent")
    assert [c.step for c in cks] == [10, 11, 12]
    assert cks[0].sha256 == digest and cks[0].size_bytes == 4096 and cks[0].outcome == "ok"
    assert cks[0].throughput_bps == pytest.approx(4096 / 0.02)
    assert cks[1].outcome == "corrupt"
    assert cks[2].sha256 is None and cks[2].size_bytes == 0
    art = by_type(t, "ArtifactEvent")[0]
    assert art.sha256 == digest and art.size_bytes == 4096
    v = by_type(t, "ValidationResult")[0]
    assert v.metrics == {"val_loss": 0.3} and v.dataset.uri == "s3://val" and v.slice == "en"
    g = by_type(t, "GateDecision")[0]
    assert g.decision == "fail" and g.reasons == ("acc low",)
    topics = {type(r).__name__: tp for tp, _, r in t.records()}
    assert topics["CheckpointEvent"] == "rw.exec.job" and topics["GateDecision"] == "rw.artifact"
    assert topics["ValidationResult"] == "rw.learning"


def test_init_failure_returns_null_run(monkeypatch) -> None:
    import runwatch.adapters.publisher as pubmod

    def boom(*a, **k):
        raise RuntimeError("no codec")

    monkeypatch.setattr(pubmod.Publisher, "__init__", boom)
    run = runwatch.init("x", transport=ListTransport(), install_hooks=False)
    assert isinstance(run, NullRun)
    run.step(1, loss=1.0)
    with run.data_wait():
        pass
    run.finish()
    with pytest.raises(RuntimeError):
        runwatch.init("x", transport=ListTransport(), install_hooks=False, strict=True)


CHILD = child_script(
    """
    import os, signal, sys, time
    import runwatch
    OUT = sys.argv[2]
    # <file transport>
    run = runwatch.init("x", transport=T(), capture_lineage=False)
    run.step(1, loss=1.0)
    mode = sys.argv[1]
    if mode == "raise":
        raise ValueError("boom")
    if mode == "sigterm":
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)
    if mode == "exit3":
        sys.exit(3)
    if mode == "exit0":
        sys.exit(0)
    if mode == "exitmsg":
        sys.exit("bad config")
    if mode == "builtin":  # site's exit(), as scripts call it
        exit(5)
    if mode == "thread":  # ends the thread only; the process exits normally
        import threading
        t = threading.Thread(target=sys.exit, args=(4,))
        t.start(); t.join()
    """
)


@pytest.mark.parametrize(
    "mode,state,reason,rc",
    [
        ("raise", "failed", "uncaught ValueError: boom", 1),
        ("sigterm", "preempted", "SIGTERM received", -15),
        ("exit", "succeeded", "process exited without run.finish()", 0),
        ("exit0", "succeeded", "process exited without run.finish()", 0),
        ("exit3", "failed", "process exited with status 3 without run.finish()", 3),
        ("exitmsg", "failed",
         "process exited with status 1 without run.finish(): bad config", 1),
        ("thread", "succeeded", "process exited without run.finish()", 0),
        ("builtin", "failed", "process exited with status 5 without run.finish()", 5),
    ],
)
def test_final_job_event_on_exit_paths(tmp_path: Path, mode, state, reason, rc) -> None:
    out = tmp_path / "out.bin"
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    p = subprocess.run(
        [sys.executable, str(script), mode, str(out)], capture_output=True, text=True, timeout=60
    )
    assert p.returncode == rc, p.stderr
    jobs = [r for r in read_records(out) if type(r).__name__ == "JobEvent"]
    assert [j.state for j in jobs] == ["running", state]
    assert jobs[-1].reason == reason
    if mode == "raise":
        assert "ValueError: boom" in p.stderr  # the previous excepthook still ran


# ---- framework callbacks against stand-ins following each documented call order


class _Obj:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class LightningBase:  # stand-in for lightning.pytorch.Callback
    pass


class HFBase:  # stand-in for transformers.TrainerCallback
    pass


class KerasBase:  # stand-in for keras.callbacks.Callback
    def __init__(self):
        self.model = None


def test_lightning_callback_call_order() -> None:
    run, t = make_run()
    cb = lightning_callback(run, finish_on_end=True, base=LightningBase)
    assert isinstance(cb, LightningBase)
    trainer = _Obj(
        global_step=0,
        current_epoch=0,
        callback_metrics={"acc": 0.5},
        optimizers=[_Obj(param_groups=[{"lr": 0.01}])],
        checkpoint_callback=_Obj(last_model_path="", dirpath=None),
    )
    for i in range(3):  # fit loop: batch_start, batch_end (global_step advanced)
        cb.on_train_batch_start(trainer, None, None, i)
        trainer.global_step += 1
        cb.on_train_batch_end(trainer, None, {"loss": np.float64(1.0 / (i + 1))}, None, i)
    trainer.callback_metrics = {"val_loss": 0.4, "acc": 0.6}
    cb.on_validation_end(trainer, None)
    cb.on_train_end(trainer, None)
    ls = by_type(t, "LearningStep")
    assert [r.step for r in ls] == [1, 2, 3] and ls[0].lr == 0.01 and ls[0].metrics == {"acc": 0.5}
    assert by_type(t, "ValidationResult")[0].metrics == {"val_loss": 0.4}
    assert by_type(t, "JobEvent")[-1].state == "succeeded"


def _lightning_trainer(**kw):
    base = dict(global_step=0, current_epoch=0, callback_metrics={}, optimizers=[],
                checkpoint_callback=_Obj(last_model_path="", best_model_path="",
                                         _last_checkpoint_saved=None, dirpath=None))
    base.update(kw)
    return _Obj(**base)


@pytest.mark.parametrize(
    ("batch", "samples"),
    [
        (np.zeros((32, 4)), 32),
        ((np.zeros((16, 3)), np.zeros(16)), 16),
        ({"input_ids": np.zeros((8, 128)), "labels": np.zeros(8)}, 8),
        ([[np.zeros((4, 2))]], 4),
        (None, 0),
        ("text", 0),
        (np.float64(1.0), 0),
    ],
)
def test_lightning_samples_from_batch(batch, samples) -> None:
    run, t = make_run()
    cb = lightning_callback(run, base=LightningBase)
    tr = _lightning_trainer()
    cb.on_train_batch_start(tr, None, batch, 0)
    tr.global_step = 1
    cb.on_train_batch_end(tr, None, {"loss": 1.0}, batch, 0)
    run.finish()
    assert by_type(t, "StepTiming")[0].samples == samples


@pytest.mark.parametrize(
    ("batches", "waits"),
    [
        # (new epoch before the batch?, ms fetching it): the first batch of each epoch has no
        # previous end in this epoch, so its fetch is not counted; later fetches are.
        ([(True, 30.0), (False, 50.0), (False, 7.0)], [0.0, 50.0, 7.0]),
        ([(True, 5.0), (False, 12.0), (True, 40.0), (False, 3.0)], [0.0, 12.0, 0.0, 3.0]),
        ([(False, 20.0), (False, 0.0)], [0.0, 0.0]),
    ],
)
def test_lightning_loader_wait_is_gap_between_batches(
    fake_time: FakeTime, batches, waits
) -> None:
    run, t = make_run()
    cb = lightning_callback(run, base=LightningBase)
    tr = _lightning_trainer()
    for i, (new_epoch, gap) in enumerate(batches):
        if new_epoch:
            cb.on_train_epoch_start(tr, None)
        fake_time.advance(gap)  # the fit loop fetching the next batch
        cb.on_train_batch_start(tr, None, None, i)
        fake_time.advance(10.0)  # compute
        tr.global_step += 1
        cb.on_train_batch_end(tr, None, {"loss": 1.0}, None, i)
    run.finish()
    st = by_type(t, "StepTiming")
    assert [s.loader_wait_ms for s in st] == pytest.approx(waits)
    steps = [gap + 10.0 for _, gap in batches]  # the Run times each step since the last
    assert [s.step_ms for s in st] == pytest.approx(steps)
    computes = [s - w for s, w in zip(steps, waits, strict=True)]
    assert [s.compute_ms for s in st] == pytest.approx(computes)


@pytest.mark.parametrize("between", ["validation", "checkpoint"])
def test_lightning_validation_or_checkpoint_between_batches_is_not_loader_wait(
    between: str, tmp_path: Path, fake_time: FakeTime
) -> None:
    run, t = make_run()
    cb = lightning_callback(run, base=LightningBase)
    tr = _lightning_trainer(checkpoint_callback=_Obj(
        last_model_path="", best_model_path="", _last_checkpoint_saved=None,
        dirpath=str(tmp_path)))
    cb.on_train_batch_start(tr, None, None, 0)
    tr.global_step = 1
    cb.on_train_batch_end(tr, None, {"loss": 1.0}, None, 0)
    if between == "validation":
        cb.on_validation_start(tr, None)
        fake_time.advance(50.0)
        cb.on_validation_end(tr, None)
    else:
        cb.on_save_checkpoint(tr, None, {})
        fake_time.advance(50.0)  # Lightning writes the file
    fake_time.advance(4.0)  # fetching the next batch, after the validation or save
    cb.on_train_batch_start(tr, None, None, 1)
    fake_time.advance(6.0)  # compute
    tr.global_step = 2
    cb.on_train_batch_end(tr, None, {"loss": 1.0}, None, 1)
    run.finish()
    st = by_type(t, "StepTiming")
    assert st[1].loader_wait_ms == 0.0  # the 54 ms since the last batch are not loader wait
    assert st[1].step_ms == pytest.approx(60.0) and st[1].compute_ms == pytest.approx(60.0)


def test_lightning_checkpoint_recorded_once_the_file_is_written(tmp_path: Path) -> None:
    run, t = make_run()
    cb = lightning_callback(run, base=LightningBase)
    old = tmp_path / "epoch=0.ckpt"
    old.write_bytes(b"old")
    ck = _Obj(last_model_path="", best_model_path=str(old), _last_checkpoint_saved=str(old),
              dirpath=str(tmp_path))
    tr = _lightning_trainer(global_step=7, checkpoint_callback=ck)
    cb.on_save_checkpoint(tr, None, {})  # Lightning calls this BEFORE writing the file
    assert not by_type(t, "CheckpointEvent")
    new = tmp_path / "epoch=1.ckpt"
    new.write_bytes(b"weights" * 1000)  # ModelCheckpoint writes, then records the path
    ck._last_checkpoint_saved = str(new)
    cb.on_train_batch_start(tr, None, None, 0)
    cb.on_train_end(tr, None)  # nothing pending: no second event
    run.finish()
    (ev,) = by_type(t, "CheckpointEvent")
    assert ev.uri == str(new) and ev.step == 7 and ev.outcome == "ok"
    assert ev.size_bytes == 7000 and ev.sha256 == hashlib.sha256(b"weights" * 1000).hexdigest()
    assert ev.ended_at_ms >= ev.started_at_ms


def test_lightning_checkpoint_without_a_file_is_unknown(tmp_path: Path) -> None:
    run, t = make_run()
    cb = lightning_callback(run, base=LightningBase)
    ck = _Obj(last_model_path="", best_model_path="", _last_checkpoint_saved=None,
              dirpath=str(tmp_path))
    tr = _lightning_trainer(global_step=3, checkpoint_callback=ck)
    cb.on_save_checkpoint(tr, None, {})  # e.g. trainer.save_checkpoint to a remote path
    cb.on_train_end(tr, None)
    run.finish()
    (ev,) = by_type(t, "CheckpointEvent")
    assert ev.outcome == "unknown" and ev.step == 3 and ev.uri == str(tmp_path)


def test_huggingface_callback_call_order(tmp_path: Path) -> None:
    run, t = make_run()
    cb = huggingface_callback(run, base=HFBase)
    args = _Obj(output_dir=str(tmp_path))
    state = _Obj(global_step=0, epoch=0.0)
    for i in range(1, 4):
        state.global_step = i
        cb.on_log(
            args,
            state,
            None,
            logs={"loss": 2.0 / i, "learning_rate": 1e-4, "grad_norm": 1.5, "epoch": 0.1 * i},
        )
    cb.on_log(args, state, None, logs={"eval_loss": 0.9, "eval_runtime": 1.0, "epoch": 0.3})
    cb.on_save(args, state, None)
    cb.on_train_end(args, state, None)
    run.finish()
    ls = by_type(t, "LearningStep")
    assert [r.step for r in ls] == [1, 2, 3] and ls[0].lr == 1e-4 and ls[0].grad_norm == 1.5
    assert by_type(t, "ValidationResult")[0].metrics["eval_loss"] == 0.9
    assert by_type(t, "CheckpointEvent")[0].uri.endswith("checkpoint-3")


def test_keras_callback_call_order() -> None:
    run, t = make_run()
    cb = keras_callback(run, base=KerasBase)
    assert cb.model is None  # base initialised
    for epoch in range(2):
        cb.on_epoch_begin(epoch, {})
        for b in range(2):
            cb.on_train_batch_end(b, {"loss": 0.5, "accuracy": 0.7})
    cb.on_test_end({"loss": 0.6, "accuracy": 0.65})
    run.finish()
    ls = by_type(t, "LearningStep")
    assert [(r.step, r.epoch) for r in ls] == [(1, 0), (2, 0), (3, 1), (4, 1)]
    assert ls[0].metrics == {"accuracy": 0.7}
    assert by_type(t, "ValidationResult")[0].step == 4


def test_callbacks_import_nothing_until_used() -> None:
    code = (
        "import sys, runwatch.client.callbacks, runwatch; "
        "bad=[m for m in ('torch','lightning','transformers','keras','tensorflow',"
        "'confluent_kafka') "
        "if m in sys.modules]; print(bad)"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.stdout.strip() == "[]", p.stderr
