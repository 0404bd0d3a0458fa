# ruff: noqa: D102  (methods mirror a framework/pynvml API documented upstream)
"""Framework callbacks: PyTorch Lightning, Hugging Face Trainer, Keras.

Hook methods keep the frameworks' names and signatures; each framework documents them.

Nothing is imported until a factory is called: ``lightning_callback(run)``,
``huggingface_callback(run)`` and ``keras_callback(run)`` import their
framework then and return a callback subclassing its base class. The logic
lives in framework-free mixins (tested against stand-ins that follow each
framework's call order, checked on Lightning 2.6, transformers 5.25 and Keras 3.15).

Size: the three frameworks' mixins share their helpers (scalars, batch sizes,
local-file outcomes, exception reasons) and one lazy-import factory; split into
a package when a fourth framework comes.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import time
from collections.abc import Mapping
from typing import Any

logger = logging.getLogger(__name__)


def _scalars(d: Mapping[str, Any] | None, skip: tuple[str, ...] = ()) -> dict[str, float]:
    """The numeric entries of a framework's logs as floats (others, and ``skip``, left out)."""
    out: dict[str, float] = {}
    for k, v in (d or {}).items():
        if k not in skip and (f := _to_float(v)) is not None:
            out[str(k)] = f
    return out


def _import_first(*names: str) -> Any:
    err: Exception | None = None
    for n in names:
        try:
            return importlib.import_module(n)
        except ImportError as exc:
            err = exc
    msg = f"none of {', '.join(names)} is installed"
    raise ImportError(msg) from err


def _batch_len(batch: Any) -> int:
    """Samples in a batch: the leading dimension of its first tensor-like part (0 if unknown)."""
    for _ in range(4):
        if isinstance(batch, Mapping):
            batch = next(iter(batch.values()), None)
        elif isinstance(batch, list | tuple):
            batch = batch[0] if batch else None
        else:
            break
    shape = getattr(batch, "shape", None)
    try:
        return int(shape[0]) if shape is not None and len(shape) else 0
    except (TypeError, IndexError, ValueError):
        return 0


def _to_float(v: Any) -> float | None:
    """A framework scalar (tensor, variable, numpy or Python number) as a float; None if not one.

    ``item()`` first: a torch tensor on a GPU refuses ``numpy()`` (TypeError), and so does
    one that requires grad (RuntimeError), so every loss and metric of a Lightning job on
    a GPU was read as none. TensorFlow's tensors have ``numpy()`` only.
    """
    errors = (TypeError, ValueError, RuntimeError, AttributeError)
    try:
        if hasattr(v, "item"):  # torch (any device), numpy, JAX
            v = v.item()
    except errors:
        if not hasattr(v, "numpy"):
            return None  # not a one-element tensor
    try:
        if hasattr(v, "numpy"):  # TensorFlow / Keras tensors and variables
            v = v.numpy()
            if hasattr(v, "item"):
                v = v.item()
    except errors:
        return None  # not a one-element tensor
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None  # a string, a list, None: not a number the logs meant
    return float(v)


def _exc_reason(exception: BaseException) -> str:
    """``Type: text``, or the type alone when the exception has no text (``KeyboardInterrupt``)."""
    text = str(exception)
    return f"{type(exception).__name__}: {text}" if text else type(exception).__name__


def _perf_s() -> float:
    """Monotonic seconds for the callbacks' intervals (one seam for tests)."""
    return time.perf_counter()


def _is_remote(uri: str) -> bool:
    """Whether ``uri`` names an fsspec location other than the local file system."""
    return "://" in uri and not uri.startswith("file://")


def _saved_outcome(uri: str) -> str:
    """Outcome of a save Lightning returned from: remote is ``ok``; local must be readable."""
    if _is_remote(uri):
        return "ok"  # fsspec wrote it; nothing local to hash
    path = uri[7:] if uri.startswith("file://") else uri
    return "ok" if os.path.exists(path) and os.access(path, os.R_OK) else "unknown"


def _fitting(trainer: Any) -> bool:
    """Whether ``trainer`` is inside ``fit`` (stand-ins without a ``state`` count as fitting)."""
    state = getattr(trainer, "state", None)
    if state is None:
        return True
    fn, status = getattr(state, "fn", None), getattr(state, "status", None)
    return str(getattr(fn, "value", fn)) == "fit" and str(getattr(status, "value", status)) == (
        "running"
    )


def _accumulation(trainer: Any) -> int:
    """Lightning's ``accumulate_grad_batches`` (1 when the trainer has none)."""
    try:
        return max(int(getattr(trainer, "accumulate_grad_batches", 1) or 1), 1)
    except (TypeError, ValueError):
        return 1


def _ended_by(run: Any, finish: bool, what: str, exception: BaseException) -> None:
    """An exception left the framework's loop: finish the run only if the callback owns its end.

    With ``finish_on_end=False`` the job may catch it and go on (an out-of-memory
    retry with a smaller batch); if it does not, the SDK's exit hooks end the run
    as ``failed`` with the exception (``install_hooks=True``, the default).
    """
    reason = _exc_reason(exception)
    if finish:
        interrupted = isinstance(exception, KeyboardInterrupt)
        run.finish("cancelled" if interrupted else "failed", reason=reason[:1000])
        return
    logger.warning(
        "runwatch run %s: %s raised %s; the run is not finished (finish_on_end=False): "
        "the job's own run.finish() or the SDK's exit hooks end it",
        getattr(run, "run_id", "?"), what, reason[:300])


_CKPT_ATTRS = ("_last_checkpoint_saved", "last_model_path", "best_model_path")


class LightningLogic:
    """Lightning hooks -> run calls (mixed into ``lightning.pytorch.Callback``).

    * Loader wait of a step: the time from the previous ``on_train_batch_end``
      to this ``on_train_batch_start``, which is where Lightning's fit loop
      fetches the next batch. The first batch of an epoch counts none, nor
      does a batch after a validation or a checkpoint save in that gap.
    * Steps are optimizer steps, numbered ``trainer.global_step`` (as validations
      and checkpoints are): one per batch, or with ``accumulate_grad_batches=N``
      one per N batches, with the mean of their losses as ``training_step``
      returned them (Lightning hands ``on_train_batch_end`` the loss divided by
      N, for the backward pass; the callback multiplies it back), their samples
      and loader waits summed.
    * Learning rate: read at ``on_train_batch_start``; the scheduler steps after
      the batch, before ``on_train_batch_end``.
    * Samples of a step: the leading dimension of the batch's first tensor.
    * An exception (``on_exception``) finishes the run only with
      ``finish_on_end=True`` (``failed``; ``cancelled`` for a KeyboardInterrupt);
      otherwise it is logged and the job may catch it and fit again.
    * Lightning's sanity-check validation is not published.
    * Checkpoints: ``on_save_checkpoint`` runs inside ``Trainer.save_checkpoint``
      before the write, which then goes through ``trainer.strategy.save_checkpoint``
      (also for ``trainer.save_checkpoint(path)`` called after ``fit``). The hook
      wraps that call once, so the save is recorded when it returns, with its
      path: a remote (fsspec URL) path is ``ok`` without size or sha256; a local
      file is ``ok`` with its size and sha256, or ``unknown`` if it cannot be
      read; a save that raises is ``failed``. Without a strategy to wrap, the
      save is recorded at the next hook from the path ``ModelCheckpoint``
      reports as just saved (outside ``fit``: at once, as ``unknown``).
    """

    def __init__(self, run: Any, finish_on_end: bool = False) -> None:
        self.rw_run = run
        self.rw_finish = finish_on_end
        self._t_end: float | None = None
        self._wait_ms: float | None = None
        self._pending: tuple[int, float, int, dict[str, Any]] | None = None
        self._armed: tuple[Any, Any, Any] | None = None
        self._gs0: int | None = None  # trainer.global_step when the batch started
        self._lr: Any = None  # the lr the batch's optimizer step uses (read before it)
        self._win: list[Any] = [0.0, 0, 0, None]  # the window's loss sum, losses, samples, wait

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self._flush_checkpoint(trainer)
        self._t_end = None

    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        self._flush_checkpoint(trainer)
        t = _perf_s()
        self._wait_ms = (t - self._t_end) * 1000.0 if self._t_end is not None else None
        self._gs0 = int(trainer.global_step)
        # the scheduler steps after the batch, before on_train_batch_end: read the lr now
        opts = getattr(trainer, "optimizers", None) or []
        groups = (getattr(opts[0], "param_groups", None) or []) if opts else []
        self._lr = groups[0].get("lr") if groups else None

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        loss: Any = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        loss = _to_float(loss) if loss is not None else None
        accum = _accumulation(trainer)
        if loss is not None and accum > 1 and getattr(pl_module, "automatic_optimization", True):
            loss *= accum  # Lightning divided training_step's loss by N for the backward pass
        win = self._win
        if loss is not None:
            win[0] += loss
            win[1] += 1
        win[2] += _batch_len(batch)
        if self._wait_ms is not None:
            win[3] = (win[3] or 0.0) + self._wait_ms
        self._wait_ms = None
        gs = int(trainer.global_step)
        if accum <= 1 or self._gs0 is None or gs != self._gs0:  # the optimizer stepped
            metrics = _scalars(getattr(trainer, "callback_metrics", None), skip=("loss",))
            self.rw_run.step(
                gs,
                loss=win[0] / win[1] if win[1] else None,
                metrics=metrics,
                lr=self._lr,
                samples=win[2],
                epoch=int(getattr(trainer, "current_epoch", 0)),
                loader_wait_ms=win[3],
            )
            self._win = [0.0, 0, 0, None]
        self._t_end = _perf_s()

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        self._t_end = None  # a validation between two batches is not loader wait

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        self._flush_checkpoint(trainer)
        if getattr(trainer, "sanity_checking", False):
            return  # Lightning's sanity check: a few batches on the initial weights
        m = {k: v for k, v in _scalars(trainer.callback_metrics).items() if k.startswith("val")}
        if m:
            self.rw_run.validation(int(trainer.global_step), m, epoch=int(trainer.current_epoch))

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: Any) -> None:
        self._flush_checkpoint(trainer)
        self._t_end = None  # nor is writing a checkpoint
        cb = getattr(trainer, "checkpoint_callback", None)
        names = (*_CKPT_ATTRS, "_last_global_step_saved")
        before = {n: getattr(cb, n, None) for n in names} if cb is not None else {}
        self._pending = (int(trainer.global_step), _perf_s(), self.rw_run.now_ms(), before)
        if not self._arm(trainer) and not _fitting(trainer):
            self._flush_checkpoint(trainer)  # no later hook is coming

    def _arm(self, trainer: Any) -> bool:
        """Wrap ``trainer.strategy.save_checkpoint`` for its next call; False if impossible."""
        strategy = getattr(trainer, "strategy", None)
        orig = getattr(strategy, "save_checkpoint", None)
        if strategy is None or not callable(orig):
            return False
        if getattr(orig, "rw_owner", None) is self:
            return True
        try:
            own = vars(strategy).get("save_checkpoint")
        except TypeError:
            return False

        def save_checkpoint(*args: Any, **kwargs: Any) -> Any:
            self._disarm()
            path = args[1] if len(args) > 1 else kwargs.get("filepath")
            try:
                out = orig(*args, **kwargs)
            except BaseException:
                self._record_save(path, "failed")
                raise
            self._record_save(path, None)
            return out

        save_checkpoint.rw_owner = self  # type: ignore[attr-defined]
        try:
            strategy.save_checkpoint = save_checkpoint
        except (AttributeError, TypeError):
            return False
        self._armed = (strategy, own, save_checkpoint)
        return True

    def _disarm(self) -> None:
        if self._armed is None:
            return
        strategy, own, ours = self._armed
        self._armed = None
        with contextlib.suppress(AttributeError, TypeError):
            if vars(strategy).get("save_checkpoint") is ours:
                if own is None:
                    del strategy.save_checkpoint
                else:
                    strategy.save_checkpoint = own

    def _record_save(self, path: Any, outcome: str | None) -> None:
        """Record the pending checkpoint as written to ``path`` (the strategy's call returned)."""
        if self._pending is None:
            return
        step, t0, start_ms, _ = self._pending
        self._pending = None
        uri = os.fspath(path) if path is not None else "lightning-checkpoint"
        uri = uri if isinstance(uri, str) else uri.decode(errors="replace")
        self._emit(uri, step, t0, start_ms, outcome or _saved_outcome(uri))

    def _emit(self, uri: str, step: int, t0: float, start_ms: int, outcome: str) -> None:
        dur = max(_perf_s() - t0, 0.0) * 1000.0
        self.rw_run.checkpoint(uri, step=step, started_at_ms=start_ms, duration_ms=dur,
                               outcome=outcome, now_ms=start_ms + int(dur))

    def _flush_checkpoint(self, trainer: Any) -> None:
        """Record a save the strategy wrapper did not see, from what ``ModelCheckpoint`` reports.

        A path counts as just saved if ``ModelCheckpoint`` changed it (or its
        last saved step) since ``on_save_checkpoint``; no file times are
        compared, so a file server's clock skew does not matter. The duration
        then runs to this hook (an upper bound).
        """
        self._disarm()
        if self._pending is None:
            return
        step, t0, start_ms, before = self._pending
        self._pending = None
        cb = getattr(trainer, "checkpoint_callback", None)
        now = {n: getattr(cb, n, None) for n in before}
        saved = [now[n] for n in _CKPT_ATTRS if n in now and now[n] != before[n]]
        if now.get("_last_global_step_saved") != before.get("_last_global_step_saved"):
            saved.insert(0, now.get("_last_checkpoint_saved"))
        uri = next((p for p in saved if p and isinstance(p, str)), None)
        if uri is None:
            where = str(getattr(cb, "dirpath", "") or "lightning-checkpoint")
            self._emit(where, step, t0, start_ms, "unknown")
            return
        self._emit(uri, step, t0, start_ms, _saved_outcome(uri))

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._flush_checkpoint(trainer)
        self._win = [0.0, 0, 0, None]  # batches whose optimizer step never came
        _ended_by(self.rw_run, self.rw_finish, "Lightning fit", exception)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._flush_checkpoint(trainer)
        if self.rw_finish:
            self.rw_run.finish("succeeded")

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        self._flush_checkpoint(trainer)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._flush_checkpoint(trainer)


class HuggingFaceLogic:
    """``transformers.TrainerCallback`` hooks -> run calls.

    * A checkpoint's duration: the Trainer saves ``checkpoint-N`` right after the
      step's last hook (``on_step_end`` or ``on_epoch_end``, then the ``on_log``
      and ``on_evaluate`` of that step's logging and evaluation) and calls
      ``on_save`` once it is written; the time from the latest of those hooks to
      ``on_save`` is the save's (an upper bound: other callbacks' hooks in between
      count too).
    """

    def __init__(self, run: Any, finish_on_end: bool = False) -> None:
        self.rw_run = run
        self.rw_finish = finish_on_end
        self._t_hook: float | None = None  # the latest hook before a save

    def _mark(self) -> None:
        self._t_hook = _perf_s()

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self._mark()

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self._mark()

    def on_evaluate(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self._mark()

    def on_log(
        self, args: Any, state: Any, control: Any, logs: Mapping[str, Any] | None = None, **kw: Any
    ) -> None:
        self._publish_log(state, logs or {})
        self._mark()

    def _publish_log(self, state: Any, logs: Mapping[str, Any]) -> None:
        if any(k.startswith("eval_") for k in logs):
            m = {k: v for k, v in _scalars(logs).items() if k.startswith("eval_")}
            self.rw_run.validation(int(state.global_step), m, epoch=int(state.epoch or 0))
            return
        if "loss" not in logs:
            return
        m = _scalars(logs, skip=("loss", "learning_rate", "grad_norm", "epoch"))
        self.rw_run.step(
            int(state.global_step),
            loss=logs.get("loss"),
            metrics=m,
            lr=logs.get("learning_rate"),
            grad_norm=logs.get("grad_norm"),
            epoch=int(state.epoch or 0),
        )

    def on_save(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        out = getattr(args, "output_dir", None)
        t0, self._t_hook = self._t_hook, None
        if out:
            dur = max(_perf_s() - t0, 0.0) * 1000.0 if t0 is not None else None
            self.rw_run.checkpoint(
                f"{out}/checkpoint-{state.global_step}", step=int(state.global_step),
                duration_ms=dur,
            )

    def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self.rw_finish:
            self.rw_run.finish("succeeded")


_SAVES = ("save", "save_weights")  # what ModelCheckpoint (and BackupAndRestore) call
_SCHEDULE_SHARE = 50.0
"""A schedule is evaluated once this many times its cost has passed (at most 2% of the loop)."""


class KerasLogic:
    """``keras.callbacks.Callback`` hooks -> run calls.

    * Steps are batches: ``on_train_batch_end(batch)`` gets the index of the
      epoch's last batch run (with ``compile(steps_per_execution=8)`` Keras calls
      it every 8th batch, with 7, 15, ...), so each call adds the batches since
      the previous one. A fit starts counting from the optimizer's
      ``iterations`` (a second ``fit`` goes on; ``initial_epoch=E`` with a new
      optimizer starts at ``E * steps``).
    * Learning rate: a ``LearningRateSchedule`` is evaluated at the step's
      iteration (an eager evaluation costs about 0.4 ms under JAX: on a loop
      faster than 50 times that, steps between two evaluations carry no lr); a
      fixed or callback-set rate (``LearningRateScheduler``) is read at the
      epoch's first ``on_train_batch_begin``, after every callback's
      ``on_epoch_begin``: under JAX the optimizer's variables are detached from
      the model during the rest of the epoch (reading them then gives their
      initial values).
    * Loader wait: the gap from ``on_train_batch_end`` to the next
      ``on_train_batch_begin`` (none for the first batch of an epoch). The torch
      backend fetches batches there; JAX and TensorFlow fetch inside the train
      function, so their loader time counts as compute.
    * Samples: Keras does not tell callbacks the batch size; ``batch_size=``
      given to ``keras_callback`` is published per batch, else none (0).
    * Checkpoints: ``model.save`` and ``model.save_weights`` (which
      ``ModelCheckpoint`` calls) are wrapped from ``on_train_begin`` to
      ``on_train_end``: each save is recorded when it returns, with its duration
      (``failed`` if it raises).
    """

    def __init__(self, run: Any, finish_on_end: bool = False) -> None:
        self.rw_run = run
        self.rw_finish = finish_on_end
        self.rw_batch_size: int | None = None
        self.rw_step = 0
        self.rw_epoch = 0
        self._last_batch = -1  # index of the epoch's last batch counted
        self._t_end: float | None = None
        self._wait_ms: float | None = None
        self._lr: float | None = None
        self._read_lr = True
        self._first_epoch = True
        self._wrapped: tuple[Any, dict[str, Any]] | None = None
        self._t_sched: float | None = None  # when the schedule was last evaluated
        self._sched_s = 0.0  # and what that cost

    def _optimizer(self) -> Any:
        return getattr(getattr(self, "model", None), "optimizer", None)

    def on_train_begin(self, logs: Mapping[str, Any] | None = None) -> None:
        it = _to_float(getattr(self._optimizer(), "iterations", None))
        if it is not None:
            self.rw_step = int(it)
        self._first_epoch = True
        self._wrap_saves()

    def on_epoch_begin(self, epoch: int, logs: Mapping[str, Any] | None = None) -> None:
        self.rw_epoch = int(epoch)
        if self._first_epoch and epoch > 0:  # fit(initial_epoch=E)
            steps = (getattr(self, "params", None) or {}).get("steps")
            if isinstance(steps, int) and steps > 0:
                self.rw_step = max(self.rw_step, int(epoch) * steps)
        self._first_epoch = False
        self._last_batch = -1
        self._t_end = None
        self._read_lr = True

    def on_train_batch_begin(self, batch: int, logs: Mapping[str, Any] | None = None) -> None:
        t = _perf_s()
        self._wait_ms = (t - self._t_end) * 1000.0 if self._t_end is not None else None
        if self._read_lr:
            self._read_lr = False
            self._lr = self._fixed_lr()

    def _schedule(self) -> Any:
        lr = getattr(self._optimizer(), "_learning_rate", None)
        if callable(lr) and hasattr(lr, "get_config") and not hasattr(lr, "assign"):
            return lr  # a LearningRateSchedule: a function of the iteration
        return None

    def _fixed_lr(self) -> float | None:
        opt = self._optimizer()
        if opt is None or self._schedule() is not None:
            return None
        lr = getattr(opt, "_learning_rate", None)
        if lr is None or isinstance(lr, int | float):
            lr = getattr(opt, "learning_rate", lr)
        if callable(lr) and not hasattr(lr, "assign"):
            with contextlib.suppress(Exception):
                lr = lr()
        return _to_float(lr)

    def on_train_batch_end(self, batch: int, logs: Mapping[str, Any] | None = None) -> None:
        n = int(batch) - self._last_batch if isinstance(batch, int) else 1
        n = max(n, 1)
        self._last_batch = int(batch) if isinstance(batch, int) else self._last_batch + 1
        self.rw_step += n
        logs = logs or {}
        lr = self._lr
        sched = self._schedule()
        if sched is not None:
            lr = None
            t = _perf_s()
            if self._t_sched is None or t - self._t_sched >= _SCHEDULE_SHARE * self._sched_s:
                with contextlib.suppress(Exception):
                    lr = _to_float(sched(self.rw_step - 1))  # the iteration it stepped at
                self._t_sched, self._sched_s = t, _perf_s() - t
        self.rw_run.step(
            self.rw_step,
            loss=logs.get("loss"),
            metrics=_scalars(logs, skip=("loss",)),
            lr=lr,
            samples=n * self.rw_batch_size if self.rw_batch_size else 0,
            epoch=self.rw_epoch,
            loader_wait_ms=self._wait_ms,
        )
        self._wait_ms = None
        self._t_end = _perf_s()

    def on_test_begin(self, logs: Mapping[str, Any] | None = None) -> None:
        self._t_end = None  # a validation between two batches is not loader wait

    def on_test_end(self, logs: Mapping[str, Any] | None = None) -> None:
        m = _scalars(logs)
        if m:
            self.rw_run.validation(self.rw_step, m, epoch=self.rw_epoch)

    def _wrap_saves(self) -> None:
        model = getattr(self, "model", None)
        if model is None or self._wrapped is not None:
            return
        own: dict[str, Any] = {}
        for name in _SAVES:
            orig = getattr(model, name, None)
            if not callable(orig) or getattr(orig, "rw_owner", None) is self:
                continue
            try:
                own[name] = vars(model).get(name)
                object.__setattr__(model, name, self._saver(orig))
            except (AttributeError, TypeError):
                own.pop(name, None)
        self._wrapped = (model, own)

    def _saver(self, orig: Any) -> Any:
        def save(*args: Any, **kwargs: Any) -> Any:
            path = args[0] if args else kwargs.get("filepath")
            t0, start_ms = _perf_s(), self.rw_run.now_ms()
            try:
                out = orig(*args, **kwargs)
            except BaseException:
                self._record_save(path, t0, start_ms, "failed")
                raise
            self._record_save(path, t0, start_ms, None)
            return out

        save.rw_owner = self  # type: ignore[attr-defined]
        return save

    def _record_save(self, path: Any, t0: float, start_ms: int, outcome: str | None) -> None:
        uri = os.fspath(path) if path is not None else "keras-checkpoint"
        uri = uri if isinstance(uri, str) else uri.decode(errors="replace")
        dur = max(_perf_s() - t0, 0.0) * 1000.0
        self.rw_run.checkpoint(uri, step=self.rw_step, started_at_ms=start_ms, duration_ms=dur,
                               outcome=outcome or _saved_outcome(uri), now_ms=start_ms + int(dur))

    def _unwrap_saves(self) -> None:
        if self._wrapped is None:
            return
        model, own = self._wrapped
        self._wrapped = None
        for name, prev in own.items():
            with contextlib.suppress(AttributeError, TypeError):
                if getattr(vars(model).get(name), "rw_owner", None) is not self:
                    continue  # someone wrapped it after us: leave theirs
                if prev is None:
                    object.__delattr__(model, name)
                else:
                    object.__setattr__(model, name, prev)

    def on_train_end(self, logs: Mapping[str, Any] | None = None) -> None:
        self._unwrap_saves()
        if self.rw_finish:
            self.rw_run.finish("succeeded")


def _combine(logic: type, base: type, name: str, run: Any, finish_on_end: bool) -> Any:
    cls: Any = type(name, (logic, base), {})
    obj = cls.__new__(cls)
    init_base: Any = getattr(base, "__init__")  # noqa: B009
    init_logic: Any = getattr(logic, "__init__")  # noqa: B009
    with contextlib.suppress(TypeError):
        init_base(obj)
    init_logic(obj, run, finish_on_end)
    return obj


def lightning_callback(run: Any, *, finish_on_end: bool = False, base: type | None = None) -> Any:
    """Build a PyTorch Lightning callback publishing to ``run`` (imports Lightning now).

    Args:
        run: The runwatch Run.
        finish_on_end: Call ``run.finish`` when training ends.
        base: Callback base class (default: ``lightning.pytorch.Callback``).

    Returns:
        The callback.

    """
    if base is None:
        base = _import_first("lightning.pytorch", "pytorch_lightning").Callback
    return _combine(LightningLogic, base, "RunwatchLightningCallback", run, finish_on_end)


def huggingface_callback(run: Any, *, finish_on_end: bool = False, base: type | None = None) -> Any:
    """Build a Hugging Face ``TrainerCallback`` publishing to ``run`` (imports transformers now)."""
    if base is None:
        base = _import_first("transformers").TrainerCallback
    return _combine(HuggingFaceLogic, base, "RunwatchTrainerCallback", run, finish_on_end)


def keras_callback(
    run: Any, *, finish_on_end: bool = False, batch_size: int | None = None,
    base: type | None = None,
) -> Any:
    """Build a Keras callback publishing to ``run`` (imports keras now).

    Args:
        run: The runwatch Run.
        finish_on_end: Call ``run.finish`` when training ends.
        batch_size: Samples per batch, published as each step's samples (Keras
            does not tell callbacks); default: none.
        base: Callback base class (default: ``keras.callbacks.Callback``).

    Returns:
        The callback.

    """
    if base is None:
        base = _import_first("keras", "tensorflow.keras").callbacks.Callback
    cb = _combine(KerasLogic, base, "RunwatchKerasCallback", run, finish_on_end)
    cb.rw_batch_size = int(batch_size) if batch_size else None
    return cb
