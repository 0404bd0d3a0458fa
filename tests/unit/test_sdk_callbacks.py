"""Framework callbacks against stand-ins that drive them as the real frameworks do.

Lightning, transformers and Keras are not installed here (CI does not install
them), so each stand-in follows its framework's call pattern, checked by
instrumenting Lightning 2.6, transformers 5.25 and Keras 3.15 (JAX and torch
backends):

* Lightning's fit loop: ``on_train_batch_start(batch, i)``; ``training_step``; with
  ``accumulate_grad_batches=N`` the optimizer steps on every Nth batch and on the
  epoch's last (``trainer.global_step`` += 1), then a step-interval scheduler
  steps; then ``on_train_batch_end(outputs, batch, i)`` with ``outputs["loss"]``
  = training_step's loss / N (in automatic optimization, whatever the window's
  length). The sanity check runs the validation hooks with
  ``trainer.sanity_checking`` True before the first batch. An exception out of
  ``fit`` calls every callback's ``on_exception``, then ``teardown``, then is
  raised again (a KeyboardInterrupt becomes ``sys.exit(1)``).
* transformers' Trainer: ``on_step_end``, then in ``_maybe_log_save_evaluate``
  ``on_log`` (train logs), evaluation (``on_log`` of eval metrics, ``on_evaluate``),
  ``_save_checkpoint`` writing ``checkpoint-N``, then ``on_save``.
* Keras 3 ``fit``: ``on_train_begin``; per epoch ``on_epoch_begin(epoch)``; per
  execution ``on_train_batch_begin(begin)`` and ``on_train_batch_end(end, logs)``
  where ``end = begin + steps_per_execution - 1`` (batch indices in the epoch);
  validation (``on_test_begin``, ``on_test_end(logs)``); ``on_epoch_end``
  (``ModelCheckpoint`` calls ``model.save`` or ``model.save_weights`` there);
  ``on_train_end`` only when fit completes. Callbacks see ``params`` =
  ``{verbose, epochs, steps}`` (no batch size). Under JAX the optimizer's
  variables are detached after the epoch's first ``on_train_batch_begin`` (a read
  gives their initial value) and attached again at the epoch's end.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sdk_kit import child_script, read_records

import runwatch
import runwatch.client.callbacks as cbmod
from runwatch.adapters.publisher import CaptureTransport
from runwatch.client.callbacks import huggingface_callback, keras_callback, lightning_callback
from runwatch.core.codec import load_codec


class Base:  # stand-in for each framework's callback base class
    pass


class _Obj:
    def __init__(self, **kw):
        self.__dict__.update(kw)


@pytest.fixture
def clock(monkeypatch) -> list[float]:
    c = [1000.0]
    monkeypatch.setattr(cbmod, "_perf_s", lambda: c[0])
    return c


def make_run(**kw):
    t = CaptureTransport()
    kw.setdefault("capture_lineage", False)
    kw.setdefault("install_hooks", False)
    return runwatch.init("fam", team="ml", transport=t, **kw), t


def records(t: CaptureTransport, name: str):
    codec = load_codec()
    return [r for r in (codec.decode(v) for _, _, v in t.messages) if type(r).__name__ == name]


# ---- Lightning


class Batch:
    def __init__(self, n: int) -> None:
        self.shape = (n, 4)


class LightningTrainer:
    """Lightning 2.x's fit loop, as far as callbacks see it."""

    def __init__(self, cb, *, accumulate: int = 1, lr: float = 0.1, automatic: bool = True):
        self.cb = cb
        self.accumulate_grad_batches = accumulate
        self.global_step = 0
        self.current_epoch = 0
        self.sanity_checking = False
        self.callback_metrics: dict[str, float] = {}
        self.optimizers = [_Obj(param_groups=[{"lr": lr}])]
        self.checkpoint_callback = None
        self.module = _Obj(automatic_optimization=automatic)

    def sanity_check(self, val_loss: float) -> None:
        self.sanity_checking = True
        self.cb.on_validation_start(self, self.module)
        self.callback_metrics = {"val_loss": val_loss}
        self.cb.on_validation_end(self, self.module)
        self.sanity_checking = False
        self.callback_metrics = {}

    def epoch(self, losses, *, raise_at: int | None = None, exc: BaseException | None = None):
        self.cb.on_train_epoch_start(self, self.module)
        n = len(losses)
        for i, loss in enumerate(losses):
            batch = Batch(8)
            self.cb.on_train_batch_start(self, self.module, batch, i)
            if i == raise_at:
                assert exc is not None
                self.cb.on_exception(self, self.module, exc)
                self.cb.teardown(self, self.module, "fit")
                raise exc
            out = loss / self.accumulate_grad_batches if self.module.automatic_optimization \
                else loss
            if (i + 1) % self.accumulate_grad_batches == 0 or i == n - 1:
                self.global_step += 1  # optimizer step
                self.optimizers[0].param_groups[0]["lr"] /= 2  # StepLR(step_size=1, gamma=.5)
            self.cb.on_train_batch_end(self, self.module, {"loss": out}, batch, i)
        self.current_epoch += 1

    def end(self) -> None:
        self.cb.on_train_end(self, self.module)
        self.cb.on_fit_end(self, self.module)
        self.cb.teardown(self, self.module, "fit")


@pytest.mark.parametrize("accumulate", [1, 4, 3])
def test_lightning_one_step_per_optimizer_step_with_the_unscaled_loss(clock, accumulate) -> None:
    run, t = make_run()
    tr = LightningTrainer(lightning_callback(run, base=Base), accumulate=accumulate, lr=0.1)
    losses = [float(i + 1) for i in range(10)]
    tr.epoch(losses)
    tr.end()
    run.finish()
    windows = [losses[i:i + accumulate] for i in range(0, 10, accumulate)]
    ls = records(t, "LearningStep")
    assert [r.step for r in ls] == list(range(1, len(windows) + 1))  # distinct, = global_step
    assert [r.loss for r in ls] == pytest.approx([sum(w) / len(w) for w in windows])
    # the lr each optimizer step used: read before the scheduler halves it
    assert [r.lr for r in ls] == pytest.approx([0.1 / 2**k for k in range(len(windows))])
    st = records(t, "StepTiming")
    assert [s.samples for s in st] == [8 * len(w) for w in windows]


def test_lightning_manual_optimization_loss_is_not_rescaled(clock) -> None:
    run, t = make_run()
    tr = LightningTrainer(lightning_callback(run, base=Base), automatic=False)
    tr.epoch([2.0, 4.0])
    run.finish()
    assert [r.loss for r in records(t, "LearningStep")] == [2.0, 4.0]


def test_lightning_loader_waits_of_an_accumulation_window_add_up(clock) -> None:
    run, t = make_run()
    cb = lightning_callback(run, base=Base)
    tr = LightningTrainer(cb, accumulate=2)
    cb.on_train_epoch_start(tr, tr.module)
    for i, gap in enumerate([30.0, 5.0, 7.0, 11.0]):
        clock[0] += gap / 1000  # the fit loop fetching batch i
        cb.on_train_batch_start(tr, tr.module, Batch(8), i)
        clock[0] += 0.010
        if i % 2:
            tr.global_step += 1
        cb.on_train_batch_end(tr, tr.module, {"loss": 0.5}, Batch(8), i)
    run.finish()
    # the epoch's first fetch is not counted (no previous batch end in the epoch)
    assert [s.loader_wait_ms for s in records(t, "StepTiming")] == pytest.approx([5.0, 18.0])


def test_lightning_sanity_check_is_not_a_validation(clock) -> None:
    run, t = make_run()
    tr = LightningTrainer(lightning_callback(run, base=Base))
    tr.sanity_check(9.0)
    tr.epoch([1.0, 1.0])
    tr.callback_metrics = {"val_loss": 0.5}
    tr.cb.on_validation_start(tr, tr.module)
    tr.cb.on_validation_end(tr, tr.module)
    run.finish()
    assert [(v.step, v.metrics) for v in records(t, "ValidationResult")] == [
        (2, {"val_loss": 0.5})]


def test_lightning_caught_exception_leaves_the_run_going(clock, caplog) -> None:
    """The "out of memory: halve the batch and fit again" pattern (finish_on_end=False)."""
    run, t = make_run()
    oom = RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
    with pytest.raises(RuntimeError):
        LightningTrainer(lightning_callback(run, base=Base)).epoch([1.0] * 12, raise_at=10,
                                                                    exc=oom)
    assert "CUDA out of memory" in caplog.text  # logged, not published as the run's end
    tr = LightningTrainer(lightning_callback(run, base=Base))  # the retry: a new Trainer
    tr.epoch([0.5] * 32)
    tr.end()
    counters = run.finish("succeeded")
    jobs = records(t, "JobEvent")
    assert [(j.state, j.reason) for j in jobs] == [("running", None), ("succeeded", None)]
    assert len(records(t, "LearningStep")) == 10 + 32
    assert not counters.get("dropped_after_finish")


@pytest.mark.parametrize(
    ("exc", "state", "reason"),
    [
        (RuntimeError("CUDA error: an illegal memory access"), "failed",
         "RuntimeError: CUDA error: an illegal memory access"),
        (KeyboardInterrupt(), "cancelled", "KeyboardInterrupt"),
        (ValueError(), "failed", "ValueError"),
    ],
)
def test_lightning_exception_finishes_the_run_with_finish_on_end(clock, exc, state, reason):
    run, t = make_run()
    tr = LightningTrainer(lightning_callback(run, finish_on_end=True, base=Base))
    with pytest.raises(type(exc)):
        tr.epoch([1.0] * 4, raise_at=2, exc=exc)
    jobs = records(t, "JobEvent")
    assert [(j.state, j.reason) for j in jobs] == [("running", None), (state, reason)]


CHILD = child_script(
    """
    import sys
    import runwatch
    from runwatch.client.callbacks import lightning_callback
    OUT = sys.argv[1]
    # <file transport>
    class Base: pass
    class Trainer: global_step = 3; checkpoint_callback = None
    run = runwatch.init("x", transport=T(), capture_lineage=False)  # install_hooks=True
    cb = lightning_callback(run, base=Base)
    exc = RuntimeError("CUDA error: an illegal memory access was encountered")
    cb.on_exception(Trainer(), None, exc)  # Lightning's _interrupt, then it raises again
    raise exc
    """
)


def test_lightning_uncaught_exception_still_ends_the_run_failed(tmp_path: Path) -> None:
    out = tmp_path / "out.bin"
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    p = subprocess.run([sys.executable, str(script), str(out)], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 1, p.stderr
    jobs = [r for r in read_records(out) if type(r).__name__ == "JobEvent"]
    assert [(j.state, j.reason) for j in jobs] == [
        ("running", None),
        ("failed", "uncaught RuntimeError: CUDA error: an illegal memory access was encountered"),
    ]


# ---- Hugging Face


def test_huggingface_checkpoint_duration_is_the_save_time(tmp_path: Path, clock) -> None:
    run, t = make_run()
    cb = huggingface_callback(run, base=Base)
    args = _Obj(output_dir=str(tmp_path))
    state = _Obj(global_step=0, epoch=0.0)
    for step in range(1, 21):
        state.global_step = step
        clock[0] += 0.050  # the step
        cb.on_step_end(args, state, None)
        cb.on_log(args, state, None, logs={"loss": 1.0, "learning_rate": 1e-4})
        if step % 10:
            continue
        if step == 20:  # evaluation before this save
            clock[0] += 0.200
            cb.on_log(args, state, None, logs={"eval_loss": 0.9})
            cb.on_evaluate(args, state, None, metrics={"eval_loss": 0.9})
        clock[0] += 0.031 if step == 10 else 0.344  # _save_checkpoint writes checkpoint-N
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / "model.safetensors").write_bytes(b"w" * 100)
        cb.on_save(args, state, None)
    run.finish()
    evs = records(t, "CheckpointEvent")
    assert [(e.step, Path(e.uri).name) for e in evs] == [(10, "checkpoint-10"),
                                                         (20, "checkpoint-20")]
    assert [e.duration_ms for e in evs] == pytest.approx([31.0, 344.0])
    assert [e.ended_at_ms - e.started_at_ms for e in evs] == pytest.approx([31, 344], abs=1)
    assert all(e.size_bytes == 100 and e.sha256 for e in evs)


def test_huggingface_logs_keep_numbers_and_leave_out_the_rest(clock) -> None:
    """Trainer logs carry numpy scalars, one-element tensors, flags and text: numbers only."""
    np = pytest.importorskip("numpy")
    run, t = make_run()
    cb = huggingface_callback(run, base=Base)
    state = _Obj(global_step=1, epoch=0.0)
    clock[0] += 0.050
    cb.on_step_end(_Obj(output_dir="."), state, None)
    cb.on_log(_Obj(output_dir="."), state, None, logs={
        "loss": 1.25, "learning_rate": 1e-4, "tokens": np.int64(4096),
        "aux": np.array([0.5], dtype=np.float32), "hist": np.array([1.0, 2.0]),
        "note": "1.5", "resumed": True, "extra": None})
    run.finish()
    steps = records(t, "LearningStep")
    assert steps, "no step published"
    assert steps[-1].metrics == {"tokens": 4096.0, "aux": 0.5}


# ---- Keras


class KVar:
    """A Keras variable; detached under JAX during an epoch, it reads as its initial value."""

    def __init__(self, value: float) -> None:
        self.initial = self.value = value
        self.detached = False

    def assign(self, value: float) -> None:
        self.value = value

    def numpy(self) -> float:
        return self.initial if self.detached else self.value


class Schedule:  # a keras.optimizers.schedules.LearningRateSchedule
    def __call__(self, step):
        return 1e-2 / (1 + int(step))

    def get_config(self):
        return {}


class KOptimizer:
    def __init__(self, lr) -> None:
        self._learning_rate = lr if isinstance(lr, Schedule) else KVar(lr)
        self.iterations = KVar(0)

    @property
    def learning_rate(self):
        return self._learning_rate

    @learning_rate.setter
    def learning_rate(self, value: float) -> None:
        self._learning_rate.assign(value)

    @property
    def variables(self):
        return [self.iterations] + ([self._learning_rate] if isinstance(self._learning_rate, KVar)
                                    else [])


class KModel:
    def __init__(self, clock: list[float], lr=1e-3) -> None:
        self.optimizer = KOptimizer(lr)
        self.clock = clock
        self.saved: list[str] = []

    def save(self, filepath, overwrite=True) -> None:
        self.clock[0] += 0.040
        Path(filepath).write_bytes(b"model" * 10)
        self.saved.append(filepath)

    def save_weights(self, filepath, overwrite=True) -> None:
        self.clock[0] += 0.020
        Path(filepath).write_bytes(b"weights")
        self.saved.append(filepath)


class LRScheduler:  # keras.callbacks.LearningRateScheduler
    def __init__(self, fn) -> None:
        self.fn = fn

    def on_epoch_begin(self, epoch, logs=None) -> None:
        self.model.optimizer.learning_rate = self.fn(epoch)


class ModelCheckpoint:
    def __init__(self, path: str, weights_only: bool = False) -> None:
        self.path, self.weights_only = path, weights_only

    def on_epoch_end(self, epoch, logs=None) -> None:
        path = self.path.format(epoch=epoch + 1)
        (self.model.save_weights if self.weights_only else self.model.save)(path, overwrite=True)


def keras_fit(model: KModel, callbacks, clock: list[float], *, epochs: int = 3, steps: int = 64,
              spe: int = 1, initial_epoch: int = 0, jax: bool = True, gap_ms: float = 0.0,
              validation: bool = True) -> None:
    """Keras 3's fit loop (``backend/jax/trainer.py``) as its callbacks see it."""
    for cb in callbacks:
        cb.model = model
        cb.params = {"verbose": 0, "epochs": epochs, "steps": steps}

    def hook(name, *args):
        for cb in callbacks:
            fn = getattr(cb, name, None)
            if fn is not None:
                fn(*args)

    opt = model.optimizer
    hook("on_train_begin", {})
    for epoch in range(initial_epoch, epochs):
        hook("on_epoch_begin", epoch, {})
        it = int(opt.iterations.value)  # the optimizer's state, in the train function's hands
        for begin in range(0, steps, spe):
            end = min(begin + spe, steps) - 1
            clock[0] += gap_ms / 1000  # torch backend: the iterator fetches the batches here
            hook("on_train_batch_begin", begin, {})
            if jax and begin == 0:
                for v in opt.variables:
                    v.detached = True
            clock[0] += 0.005 * (end - begin + 1)
            it += end - begin + 1
            if not jax:
                opt.iterations.assign(it)
            hook("on_train_batch_end", end, {"loss": 0.5, "mean_absolute_error": 0.4})
        for v in opt.variables:  # jax_state_sync
            v.detached = False
        opt.iterations.assign(it)
        if validation:
            hook("on_test_begin", {})
            hook("on_test_end", {"loss": 0.6})
        hook("on_epoch_end", epoch, {"loss": 0.5, "val_loss": 0.6})
    hook("on_train_end", {})


@pytest.mark.parametrize("spe", [1, 8, 5])
def test_keras_steps_are_batches_with_steps_per_execution(clock, spe) -> None:
    run, t = make_run()
    keras_fit(KModel(clock), [keras_callback(run, base=Base)], clock, spe=spe)
    run.finish()
    steps = [r.step for r in records(t, "LearningStep")]
    assert steps[-1] == 192 and len(steps) == 3 * -(-64 // spe)
    assert steps == sorted(set(steps))
    assert [v.step for v in records(t, "ValidationResult")] == [64, 128, 192]


def test_keras_second_fit_and_initial_epoch_go_on_counting(clock) -> None:
    run, t = make_run()
    model = KModel(clock)
    keras_fit(model, [keras_callback(run, base=Base)], clock, epochs=2)
    keras_fit(model, [keras_callback(run, base=Base)], clock, epochs=3, initial_epoch=2)
    fresh = KModel(clock)  # weights restored, a new optimizer: fit(initial_epoch=3)
    keras_fit(fresh, [keras_callback(run, base=Base)], clock, epochs=4, initial_epoch=3)
    run.finish()
    steps = [r.step for r in records(t, "LearningStep")]
    assert steps == list(range(1, 4 * 64 + 1))
    assert [v.step for v in records(t, "ValidationResult")] == [64, 128, 192, 256]


@pytest.mark.parametrize("scheduler_first", [True, False])
@pytest.mark.parametrize("jax", [True, False])
def test_keras_lr_samples_loader_wait_and_checkpoints(tmp_path: Path, clock, scheduler_first,
                                                      jax) -> None:
    run, t = make_run()
    model = KModel(clock, lr=1e-3)
    ours = keras_callback(run, batch_size=32, base=Base)
    sched = LRScheduler(lambda e: 1e-3 * (e + 1) / 3)
    ckpt = ModelCheckpoint(str(tmp_path / "ep{epoch}.keras"))
    cbs = [sched, ckpt, ours] if scheduler_first else [ours, ckpt, sched]
    keras_fit(model, cbs, clock, steps=4, jax=jax, gap_ms=10.0)
    model.save(str(tmp_path / "final.keras"))  # after fit: not a checkpoint of the run
    run.finish()
    ls = records(t, "LearningStep")
    assert [r.lr for r in ls] == pytest.approx([1e-3 / 3] * 4 + [2e-3 / 3] * 4 + [1e-3] * 4)
    st = records(t, "StepTiming")
    assert {s.samples for s in st} == {32}
    # the gap before each batch but an epoch's first (after validation, checkpoints)
    assert [s.loader_wait_ms for s in st] == pytest.approx(([0.0] + [10.0] * 3) * 3)
    evs = records(t, "CheckpointEvent")
    assert [(e.step, Path(e.uri).name, e.outcome) for e in evs] == [
        (4, "ep1.keras", "ok"), (8, "ep2.keras", "ok"), (12, "ep3.keras", "ok")]
    assert [e.duration_ms for e in evs] == pytest.approx([40.0] * 3)
    assert all(e.size_bytes == 50 and e.sha256 for e in evs)
    assert "save" not in vars(model) and "save_weights" not in vars(model)


def test_keras_schedule_lr_is_the_steps_and_failed_save_is_failed(tmp_path: Path, clock) -> None:
    run, t = make_run()
    model = KModel(clock, lr=Schedule())

    def broken(filepath, overwrite=True):
        raise OSError("disk full")

    model.save_weights = broken  # type: ignore[method-assign]
    ckpt = ModelCheckpoint(str(tmp_path / "ep{epoch}.weights.h5"), weights_only=True)
    with pytest.raises(OSError):
        keras_fit(model, [keras_callback(run, base=Base), ckpt], clock, steps=4, spe=2)
    run.finish()
    ls = records(t, "LearningStep")
    assert [(r.step, r.lr) for r in ls] == [(2, pytest.approx(1e-2 / 2)),
                                            (4, pytest.approx(1e-2 / 4))]
    assert records(t, "StepTiming")[0].samples == 0  # no batch_size given: not published
    (ev,) = records(t, "CheckpointEvent")
    assert ev.outcome == "failed" and ev.step == 4
