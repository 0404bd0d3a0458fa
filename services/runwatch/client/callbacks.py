# ruff: noqa: D102  (methods mirror a framework/pynvml API documented upstream)
"""Framework callbacks: PyTorch Lightning, Hugging Face Trainer, Keras.

Hook methods keep the frameworks' names and signatures; each framework documents them.

Nothing is imported until a factory is called: ``lightning_callback(run)``,
``huggingface_callback(run)`` and ``keras_callback(run)`` import their
framework then and return a callback subclassing its base class. The logic
lives in framework-free mixins (tested against stand-ins that follow each
framework's documented call order).
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
    out: dict[str, float] = {}
    for k, v in (d or {}).items():
        if k in skip:
            continue
        try:
            if hasattr(v, "item"):
                v = v.item()
            if isinstance(v, bool) or not isinstance(v, int | float):
                continue
            out[str(k)] = float(v)
        except (TypeError, ValueError, RuntimeError):
            continue
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


_CKPT_ATTRS = ("_last_checkpoint_saved", "last_model_path", "best_model_path")


class LightningLogic:
    """Lightning hooks -> run calls (mixed into ``lightning.pytorch.Callback``).

    * Loader wait of a step: the time from the previous ``on_train_batch_end``
      to this ``on_train_batch_start``, which is where Lightning's fit loop
      fetches the next batch. The first batch of an epoch counts none, nor
      does a batch after a validation or a checkpoint save in that gap.
    * Samples of a step: the leading dimension of the batch's first tensor.
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

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self._flush_checkpoint(trainer)
        self._t_end = None

    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        self._flush_checkpoint(trainer)
        t = _perf_s()
        self._wait_ms = (t - self._t_end) * 1000.0 if self._t_end is not None else None

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        loss: Any = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        if loss is not None and hasattr(loss, "item"):
            loss = loss.item()
        metrics = _scalars(getattr(trainer, "callback_metrics", None), skip=("loss",))
        lr = None
        opts = getattr(trainer, "optimizers", None) or []
        if opts:
            groups = getattr(opts[0], "param_groups", None) or []
            lr = groups[0].get("lr") if groups else None
        self.rw_run.step(
            int(trainer.global_step),
            loss=loss,
            metrics=metrics,
            lr=lr,
            samples=_batch_len(batch),
            epoch=int(getattr(trainer, "current_epoch", 0)),
            loader_wait_ms=self._wait_ms,
        )
        self._wait_ms = None
        self._t_end = _perf_s()

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        self._t_end = None  # a validation between two batches is not loader wait

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        self._flush_checkpoint(trainer)
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
        self.rw_run.finish("failed", reason=f"{type(exception).__name__}: {exception}")

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._flush_checkpoint(trainer)
        if self.rw_finish:
            self.rw_run.finish("succeeded")

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        self._flush_checkpoint(trainer)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._flush_checkpoint(trainer)


class HuggingFaceLogic:
    """``transformers.TrainerCallback`` hooks -> run calls."""

    def __init__(self, run: Any, finish_on_end: bool = False) -> None:
        self.rw_run = run
        self.rw_finish = finish_on_end

    def on_log(
        self, args: Any, state: Any, control: Any, logs: Mapping[str, Any] | None = None, **kw: Any
    ) -> None:
        logs = logs or {}
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
        if out:
            self.rw_run.checkpoint(
                f"{out}/checkpoint-{state.global_step}", step=int(state.global_step)
            )

    def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self.rw_finish:
            self.rw_run.finish("succeeded")


class KerasLogic:
    """``keras.callbacks.Callback`` hooks -> run calls."""

    def __init__(self, run: Any, finish_on_end: bool = False) -> None:
        self.rw_run = run
        self.rw_finish = finish_on_end
        self.rw_step = 0
        self.rw_epoch = 0

    def on_epoch_begin(self, epoch: int, logs: Mapping[str, Any] | None = None) -> None:
        self.rw_epoch = int(epoch)

    def on_train_batch_end(self, batch: int, logs: Mapping[str, Any] | None = None) -> None:
        self.rw_step += 1
        logs = logs or {}
        self.rw_run.step(
            self.rw_step,
            loss=logs.get("loss"),
            metrics=_scalars(logs, skip=("loss",)),
            epoch=self.rw_epoch,
        )

    def on_test_end(self, logs: Mapping[str, Any] | None = None) -> None:
        m = _scalars(logs)
        if m:
            self.rw_run.validation(self.rw_step, m, epoch=self.rw_epoch)

    def on_train_end(self, logs: Mapping[str, Any] | None = None) -> None:
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


def keras_callback(run: Any, *, finish_on_end: bool = False, base: type | None = None) -> Any:
    """Build a Keras callback publishing to ``run`` (imports keras now)."""
    if base is None:
        base = _import_first("keras", "tensorflow.keras").callbacks.Callback
    return _combine(KerasLogic, base, "RunwatchKerasCallback", run, finish_on_end)
