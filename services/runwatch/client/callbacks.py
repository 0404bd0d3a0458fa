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


class LightningLogic:
    """Lightning hooks -> run calls (mixed into ``lightning.pytorch.Callback``).

    * Loader wait of a step: the time from the previous ``on_train_batch_end``
      to this ``on_train_batch_start``, which is where Lightning's fit loop
      fetches the next batch. The first batch of an epoch counts none, nor
      does a batch after a validation or a checkpoint save in that gap.
    * Samples of a step: the leading dimension of the batch's first tensor.
    * Checkpoints: ``on_save_checkpoint`` runs before Lightning writes the
      file, so the event is recorded at the next hook, once
      ``ModelCheckpoint`` has written it (its size and sha256 are those of the
      written file; the duration runs from the hook to the file's mtime). A
      save whose file cannot be found is recorded with outcome ``unknown``.
    """

    def __init__(self, run: Any, finish_on_end: bool = False) -> None:
        self.rw_run = run
        self.rw_finish = finish_on_end
        self._t_end: float | None = None
        self._wait_ms: float | None = None
        self._pending: tuple[int, float, int, str | None] | None = None

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self._flush_checkpoint(trainer)
        self._t_end = None

    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        self._flush_checkpoint(trainer)
        t = time.perf_counter()
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
        self._t_end = time.perf_counter()

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
        before = getattr(cb, "_last_checkpoint_saved", None) if cb is not None else None
        self._pending = (int(trainer.global_step), time.time(), self.rw_run.now_ms(), before)

    def _flush_checkpoint(self, trainer: Any) -> None:
        """Record the checkpoint saved since ``on_save_checkpoint``, once its file is written."""
        if self._pending is None:
            return
        step, t0, start_ms, before = self._pending
        self._pending = None
        cb = getattr(trainer, "checkpoint_callback", None)
        names = ("_last_checkpoint_saved", "last_model_path", "best_model_path")
        seen = [getattr(cb, n, None) for n in names] if cb is not None else []
        newest: tuple[float, str] | None = None
        for p in seen:
            if not p or not isinstance(p, str):
                continue
            try:
                mtime = os.stat(p).st_mtime
            except OSError:
                continue
            if mtime >= t0 - 1.0 and (newest is None or mtime > newest[0]):
                newest = (mtime, p)
        if newest is None:
            uri = next((p for p in seen if p and isinstance(p, str) and p != before), None)
            self.rw_run.checkpoint(
                uri or str(getattr(cb, "dirpath", "") or "lightning-checkpoint"),
                step=step, started_at_ms=start_ms, outcome="unknown",
            )
            return
        dur = max(newest[0] - t0, 0.0) * 1000.0
        self.rw_run.checkpoint(newest[1], step=step, started_at_ms=start_ms, duration_ms=dur,
                               now_ms=start_ms + int(dur))

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._flush_checkpoint(trainer)
        self.rw_run.finish("failed", reason=f"{type(exception).__name__}: {exception}")

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._flush_checkpoint(trainer)
        if self.rw_finish:
            self.rw_run.finish("succeeded")

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
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
