"""Lightning callback: checkpoint outcomes (remote, skewed clocks, after fit, failures).

Lightning is not installed here, so a stand-in Trainer follows Lightning 2.x's call order:
``Trainer.save_checkpoint(path)`` builds the checkpoint dict, calling every callback's
``on_save_checkpoint`` (``dump_checkpoint``), then calls
``trainer.strategy.save_checkpoint(checkpoint, path, storage_options=...)``, which writes
through the strategy's ``CheckpointIO`` (fsspec: a URL is never a local file).
``ModelCheckpoint._save_checkpoint`` calls ``trainer.save_checkpoint`` and only then sets
``_last_global_step_saved`` and ``_last_checkpoint_saved``. ModelCheckpoint callbacks run
after the other callbacks of a hook; ``fit`` ends with on_train_end, on_fit_end, teardown.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

import runwatch
import runwatch.client.callbacks as cbmod
from runwatch.adapters.publisher import CaptureTransport
from runwatch.client.callbacks import lightning_callback
from runwatch.core.codec import load_codec

REMOTE = ["s3://bucket/ckpts", "gs://bucket/run/ckpts", "hdfs://nn:8020/ckpts", "az://c/ckpts"]


class Base:  # stand-in for lightning.pytorch.Callback
    pass


class State:
    def __init__(self) -> None:
        self.fn = "fit"
        self.status = "initializing"


class CheckpointIO:
    """TorchCheckpointIO through fsspec: URLs land in ``remote``, local paths on disk."""

    def __init__(self, clock: list[float], *, skew_s: float = 0.0, write_local: bool = True,
                 fail: bool = False) -> None:
        self.clock, self.skew_s, self.write_local, self.fail = clock, skew_s, write_local, fail
        self.remote: dict[str, bytes] = {}

    def save_checkpoint(self, checkpoint, path, storage_options=None) -> None:
        self.clock[0] += 0.025  # writing takes 25 ms
        if self.fail:
            raise PermissionError(f"cannot write {path}")
        data = repr(sorted(checkpoint.items())).encode() * 50
        path = os.fspath(path)
        if "://" in path:
            self.remote[path] = data
        elif self.write_local:
            Path(path).write_bytes(data)
            if self.skew_s:  # an NFS server whose clock is behind this host's
                t = time.time() - self.skew_s
                os.utime(path, (t, t))


class Strategy:
    def __init__(self, io: CheckpointIO) -> None:
        self.checkpoint_io = io

    def save_checkpoint(self, checkpoint, filepath, storage_options=None) -> None:
        self.checkpoint_io.save_checkpoint(checkpoint, filepath, storage_options=storage_options)


class ModelCheckpoint:
    def __init__(self, dirpath: str, filename: str | None = None) -> None:
        self.dirpath, self.filename = dirpath, filename
        self._last_checkpoint_saved = ""
        self._last_global_step_saved = 0
        self.last_model_path = ""
        self.best_model_path = ""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step % 2 == 0:  # every_n_train_steps=2
            name = self.filename or f"step={trainer.global_step}.ckpt"
            filepath = f"{self.dirpath}/{name}"
            trainer.save_checkpoint(filepath)
            self._last_global_step_saved = trainer.global_step
            self._last_checkpoint_saved = filepath
            self.best_model_path = filepath


class Trainer:
    def __init__(self, rw_cb, ckpt: ModelCheckpoint, io: CheckpointIO, strategy: bool) -> None:
        self.callbacks = [rw_cb, ckpt]  # checkpoint callbacks last, as Lightning orders them
        self.checkpoint_callback = ckpt
        self._strategy = Strategy(io)
        if strategy:  # else: a strategy the callback cannot reach, writing all the same
            self.strategy = self._strategy
        self.state = State()
        self.global_step = 0
        self.current_epoch = 0
        self.callback_metrics: dict[str, float] = {}
        self.optimizers: list = []

    def _hook(self, name: str, *args) -> None:
        for cb in self.callbacks:
            fn = getattr(cb, name, None)
            if fn is not None:
                fn(self, None, *args)

    def save_checkpoint(self, filepath, weights_only=False, storage_options=None) -> None:
        checkpoint = {"global_step": self.global_step, "epoch": self.current_epoch}
        self._hook("on_save_checkpoint", checkpoint)  # dump_checkpoint
        strategy = getattr(self, "strategy", self._strategy)
        strategy.save_checkpoint(checkpoint, filepath, storage_options=storage_options)

    def fit(self, batches: int) -> None:
        self.state.status = "running"
        self._hook("on_train_epoch_start")
        for i in range(batches):
            self._hook("on_train_batch_start", None, i)
            self.global_step += 1
            self._hook("on_train_batch_end", {"loss": 1.0}, None, i)
        self._hook("on_train_end")
        self._hook("on_fit_end")
        self._hook("teardown", "fit")
        self.state.status = "finished"


@pytest.fixture
def clock(monkeypatch) -> list[float]:
    c = [1000.0]
    monkeypatch.setattr(cbmod, "_perf_s", lambda: c[0])
    return c


def setup(dirpath: str, clock: list[float], *, strategy: bool = True, filename: str | None = None,
          **io_kw):
    t = CaptureTransport()
    run = runwatch.init("fam", transport=t, install_hooks=False, capture_lineage=False)
    cb = lightning_callback(run, base=Base)
    io = CheckpointIO(clock, **io_kw)
    return run, t, Trainer(cb, ModelCheckpoint(dirpath, filename), io, strategy), io


def checkpoints(run, t: CaptureTransport):
    run.finish()
    codec = load_codec()
    recs = [codec.decode(v) for _, _, v in t.messages]
    return [r for r in recs if type(r).__name__ == "CheckpointEvent"]


@pytest.mark.parametrize("strategy", [True, False], ids=["strategy", "no-strategy"])
@pytest.mark.parametrize("dirpath", REMOTE)
def test_remote_checkpoints_are_ok_without_size_or_digest(clock, dirpath, strategy) -> None:
    run, t, trainer, io = setup(dirpath, clock, strategy=strategy)
    trainer.fit(4)
    evs = checkpoints(run, t)
    assert [(e.step, e.uri, e.outcome) for e in evs] == [
        (2, f"{dirpath}/step=2.ckpt", "ok"), (4, f"{dirpath}/step=4.ckpt", "ok")]
    assert all(e.size_bytes == 0 and e.sha256 is None for e in evs)
    assert sorted(io.remote) == [e.uri for e in evs]
    if strategy:
        assert [e.duration_ms for e in evs] == pytest.approx([25.0, 25.0])


@pytest.mark.parametrize("strategy", [True, False], ids=["strategy", "no-strategy"])
@pytest.mark.parametrize("skew_s", [0.0, 3.0, 3600.0])
def test_local_checkpoint_on_a_skewed_clock_is_ok_with_digest(
    tmp_path: Path, clock, skew_s, strategy
) -> None:
    run, t, trainer, _ = setup(str(tmp_path), clock, strategy=strategy, skew_s=skew_s)
    trainer.fit(2)
    (ev,) = checkpoints(run, t)
    data = (tmp_path / "step=2.ckpt").read_bytes()
    assert ev.outcome == "ok" and ev.uri == str(tmp_path / "step=2.ckpt") and ev.step == 2
    assert ev.size_bytes == len(data) and ev.sha256 == hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("kind", ["local", *REMOTE])
def test_save_after_fit_is_recorded(tmp_path: Path, clock, kind: str) -> None:
    dirpath = str(tmp_path) if kind == "local" else kind
    run, t, trainer, _ = setup(dirpath, clock)
    trainer.fit(3)  # one checkpoint inside fit, at step 2
    final = f"{dirpath}/final.ckpt"
    trainer.save_checkpoint(final)  # after fit: no hook follows
    evs = checkpoints(run, t)
    assert [(e.step, e.uri, e.outcome) for e in evs] == [
        (2, f"{dirpath}/step=2.ckpt", "ok"), (3, final, "ok")]
    if kind == "local":
        data = Path(final).read_bytes()
        assert evs[1].sha256 == hashlib.sha256(data).hexdigest()
        assert evs[1].size_bytes == len(data)
    else:
        assert evs[1].sha256 is None and evs[1].size_bytes == 0
    assert evs[1].duration_ms == pytest.approx(25.0)
    assert "save_checkpoint" not in vars(trainer.strategy)  # the one-shot wrapper is gone


def test_save_after_fit_without_a_strategy_is_recorded_at_once(tmp_path: Path, clock) -> None:
    run, t, trainer, _ = setup(str(tmp_path), clock, strategy=False)
    trainer.fit(1)
    trainer.save_checkpoint(str(tmp_path / "final.ckpt"))
    (ev,) = checkpoints(run, t)  # the path is not known: recorded, but not as ok
    assert ev.step == 1 and ev.outcome == "unknown" and ev.uri == str(tmp_path)


@pytest.mark.parametrize("dirpath", ["local", "s3://bucket/ckpts"])
def test_failed_save_is_recorded_failed_and_raised(tmp_path: Path, clock, dirpath) -> None:
    dirpath = str(tmp_path) if dirpath == "local" else dirpath
    run, t, trainer, _ = setup(dirpath, clock, fail=True)
    with pytest.raises(PermissionError):
        trainer.fit(2)
    assert "save_checkpoint" not in vars(trainer.strategy)
    (ev,) = checkpoints(run, t)
    assert ev.outcome == "failed" and ev.uri == f"{dirpath}/step=2.ckpt" and ev.step == 2


def test_local_file_missing_after_the_save_is_unknown(tmp_path: Path, clock) -> None:
    run, t, trainer, _ = setup(str(tmp_path), clock, write_local=False)  # e.g. not rank zero
    trainer.fit(2)
    (ev,) = checkpoints(run, t)
    assert ev.outcome == "unknown" and ev.uri == str(tmp_path / "step=2.ckpt")
    assert ev.sha256 is None


def test_same_path_rewritten_is_ok_each_time(tmp_path: Path, clock) -> None:
    run, t, trainer, _ = setup(str(tmp_path), clock, strategy=False, filename="last.ckpt",
                               skew_s=60.0)
    trainer.fit(6)
    evs = checkpoints(run, t)
    assert [(e.step, e.outcome) for e in evs] == [(2, "ok"), (4, "ok"), (6, "ok")]
    assert {e.uri for e in evs} == {str(tmp_path / "last.ckpt")}


def test_an_existing_instance_wrapper_is_restored(tmp_path: Path, clock) -> None:
    run, t, trainer, _ = setup(str(tmp_path), clock)
    calls: list[str] = []
    inner = trainer.strategy.save_checkpoint

    def theirs(checkpoint, filepath, storage_options=None):
        calls.append(filepath)
        inner(checkpoint, filepath, storage_options=storage_options)

    trainer.strategy.save_checkpoint = theirs
    trainer.fit(4)
    assert vars(trainer.strategy)["save_checkpoint"] is theirs
    assert calls == [f"{tmp_path}/step=2.ckpt", f"{tmp_path}/step=4.ckpt"]
    assert [e.outcome for e in checkpoints(run, t)] == ["ok", "ok"]
