"""The training-job SDK: :class:`Run`, created by :func:`runwatch.init`.

Size: the SDK's public Run class; its methods are the SDK's surface, each short.

The hot path (:meth:`Run.step`) checks types, reads a monotonic clock and
appends one small tuple to a bounded deque; a background thread builds the
records, encodes them in batches and hands them to the transport. No call
raises into user code unless the run was created with ``strict=True``.

Explicit times. By default the SDK times steps itself (monotonic clock,
:meth:`Run.data_wait`) and stamps records with the wall clock. Callers that
know better (replays, simulators, frameworks that time steps themselves) pass
them explicitly: ``step(..., now_ms=, step_ms=, loader_wait_ms=,
effective_batch_size=, worker_restarts=)`` and ``now_ms=`` on every other
call, or a ``clock`` (a callable returning epoch milliseconds) to
:func:`runwatch.init` / :class:`Run`, which then stamps every call that gives
no ``now_ms``.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import logging
import math
import operator
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from runwatch.adapters.publisher import MAX_RECORD_BYTES, Publisher
from runwatch.client import lineage
from runwatch.client.exithooks import ExitHooks, ended_by
from runwatch.client.files import file_digest, file_size, file_stamp
from runwatch.client.lineage import dataset_ref
from runwatch.core import lineage as lineage_hash
from runwatch.core.records import (
    ArtifactEvent,
    CheckpointEvent,
    DatasetRef,
    GateDecision,
    Hardware,
    JobEvent,
    LearningStep,
    RunManifest,
    SliceResult,
    StepTiming,
    ValidationResult,
)
from runwatch.core.signals.rules import normalize_sha256, same_digest, status_word

logger = logging.getLogger(__name__)

_STEP, _REC, _FN = 0, 1, 2
#: Counters of calls or records that were not published (finish logs a warning naming them).
_LOSS_COUNTERS = ("dropped_queue_full", "dropped_wrong_type", "dropped_unsent",
                  "dropped_after_finish", "manifest_errors", "build_errors", "publish_errors",
                  "encode_errors", "oversize", "metrics_oversize", "transport_failed",
                  "transport_evicted", "transport_in_spool")
_NUM = (float, int)
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1  # an Avro long (steps, epochs, counts)
_FLOAT_MAX = 2**1023  # ints below this convert to a float without OverflowError
_FLOAT_MIN = -_FLOAT_MAX
#: Spellings of a state that mean one of the schema's symbols (compared in lower case).
_JOB_ALIASES = {
    "success": "succeeded", "successful": "succeeded", "succeed": "succeeded",
    "completed": "succeeded", "complete": "succeeded", "done": "succeeded",
    "finished": "succeeded", "ok": "succeeded", "fail": "failed", "failure": "failed",
    "error": "failed", "errored": "failed", "crashed": "failed", "canceled": "cancelled",
    "killed": "cancelled", "aborted": "cancelled", "requeued": "retrying",
    "restarting": "retrying", "pending": "queued", "started": "running",
}
_JOB_STATES = ("queued", "scheduled", "running", "preempted", "retrying", "failed",
               "succeeded", "cancelled")
_FINAL_STATES = ("succeeded", "failed", "cancelled", "preempted")
_OUTCOMES = ("ok", "failed", "corrupt", "timeout", "unknown")
_OUTCOME_ALIASES = {"success": "ok", "succeeded": "ok", "error": "failed", "fail": "failed",
                    "failure": "failed", "errored": "failed", "timed_out": "timeout",
                    "timedout": "timeout", "mismatch": "corrupt", "corrupted": "corrupt"}
_VERDICTS = ("pass", "fail", "review")
_VERDICT_ALIASES = {"passed": "pass", "approved": "pass", "ok": "pass", "success": "pass",
                    "failed": "fail", "failure": "fail", "rejected": "fail", "reject": "fail",
                    "denied": "fail", "deny": "fail", "blocked": "fail", "pending": "review"}


class _DataWait:
    """Context manager timing data-loader waits (reusable, allocation free)."""

    __slots__ = ("_run", "_t0")

    def __init__(self, run: Run) -> None:
        self._run = run
        self._t0 = 0

    def __enter__(self) -> _DataWait:
        self._t0 = time.perf_counter_ns()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: object, tb: object) -> None:
        self._run._wait_ns += time.perf_counter_ns() - self._t0


class Run(ExitHooks):
    """One training run publishing telemetry."""

    def __init__(
        self,
        publisher: Publisher,
        *,
        run_id: str,
        experiment_family: str | None = None,
        team: str | None = None,
        config: Mapping[str, Any] | str | os.PathLike[str] | None = None,
        datasets: Sequence[DatasetRef | str] = (),
        seed_policy: str | None = None,
        resumed_from: str | None = None,
        parent_run_id: str | None = None,
        labels: Mapping[str, str] | None = None,
        attempt: int = 0,
        strict: bool = False,
        queue_max: int = 100_000,
        capture_lineage: bool = True,
        install_hooks: bool = True,
        clock: Callable[[], int] | None = None,
        lineage: Mapping[str, Any] | None = None,
        orphans: Sequence[Any] = (),
    ) -> None:
        """Start a run (use :func:`runwatch.init`; its docstring explains the arguments)."""
        self.strict = strict
        self.counters: dict[str, int] = collections.defaultdict(int)
        self._warned: set[Any] = set()
        # A job id as an int, a seed as an int, an attempt read from the environment as
        # text: taken as what they mean, not left to fail every record of the run
        self.run_id = _text(run_id)
        self.publisher = publisher
        self.experiment_family = _text(experiment_family)
        self.team = _text(team)
        attempt = self._whole("attempt", attempt, 0)
        self.attempt = attempt
        self.finished = False
        self._orphans = list(orphans)  # transports replaying spools of exited jobs
        self._q: collections.deque[tuple[Any, ...]] = collections.deque()
        self._qmax = self._whole("queue_max", queue_max, 100_000)
        if self._qmax < 1:  # 0 or less dropped every step
            self._bad("queue_max (at least 1)", queue_max, kept="100,000 is used")
            self._qmax = 100_000
        self.forked = False  # True in a process forked from the one that started the run
        self._full_logged = 0  # dropped_queue_full when it was last logged
        self._full_logged_at = 0.0
        self._wait_ns = 0
        self._last_ns = time.perf_counter_ns()
        self._dw = _DataWait(self)
        self._clock: Callable[[], int] | None = (
            clock if clock is not None else getattr(publisher, "clock", None)
        )
        self._started_ms = self._clock() if self._clock is not None else None
        self._lineage = self._check_lineage(lineage or {})
        self._attempt0 = attempt
        self._stop = threading.Event()
        self._abandon = threading.Event()  # finish's wait ran out: the worker stops
        self._lock = threading.Lock()
        self._manifest_args: dict[str, Any] = dict(
            config=self._config(config),
            datasets=self._datasets(datasets),
            seed_policy=_text(seed_policy),
            resumed_from=_text(resumed_from),
            parent_run_id=_text(parent_run_id),
            labels=self._labels(labels),
            capture=capture_lineage,
        )
        self._thread = threading.Thread(target=self._work, name="runwatch-sdk", daemon=True)
        self._thread.start()
        os.register_at_fork(after_in_child=functools.partial(_after_fork, weakref.ref(self)))
        self._prev_hook: Any = None
        self._prev_term: Any = None
        if install_hooks:
            self._install_hooks()

    def _config(self, config: Any) -> Any:
        """``config=`` as a mapping or a file path, as the manifest reads it.

        An ``argparse.Namespace``, a dataclass or another object of attributes (what
        ``parse_args()`` and config classes give) is read as the mapping of its fields:
        it made the manifest fail to build, and the run had none. Anything else (a
        list, a number) is left out of the manifest, counted in ``dropped_wrong_type``
        and logged (strict: TypeError); the rest of the manifest is published.
        """
        if config is None or isinstance(config, Mapping | str | os.PathLike):
            return config
        if dataclasses.is_dataclass(config) and not isinstance(config, type):
            try:
                return dataclasses.asdict(config)
            except Exception:  # a field deepcopy cannot copy: its attributes then
                logger.debug("dataclasses.asdict failed on the config", exc_info=True)
        fields = getattr(config, "__dict__", None)
        if isinstance(fields, Mapping) and not isinstance(config, type):
            return dict(fields)
        self._bad("config (a mapping, an argparse.Namespace, a dataclass or a file path)",
                  config, kept="the manifest is published without it")
        return None

    def _datasets(self, datasets: Any) -> tuple[DatasetRef, ...]:
        """Read ``datasets=`` (``uri@version`` strings, mappings, pairs too).

        One without a uri is left out and counted in ``datasets_dropped`` (strict:
        ValueError): a training job does not stop for its telemetry. One dataset
        given alone (``datasets="s3://corpus"``, a mapping, a DatasetRef) is that
        dataset: a string was read as one dataset per character.
        """
        if isinstance(datasets, str | bytes | Mapping | DatasetRef):
            datasets = (datasets,)
        elif not isinstance(datasets, Iterable):
            self._bad("datasets (a list of datasets)", datasets)
            return ()
        out = []
        for d in datasets:
            try:
                out.append(dataset_ref(d))
            except ValueError as exc:
                if self.strict:
                    raise
                self._count_dropped("datasets_dropped", "runwatch run %s: %s (left out of "
                                    "the manifest; counted in datasets_dropped)", exc)
        return tuple(out)

    def _labels(self, labels: Any) -> dict[str, str]:
        """``labels=`` as text to text; anything but a mapping is left out (strict: TypeError)."""
        if not labels:
            return {}
        if not isinstance(labels, Mapping):
            self._bad("labels (a mapping of name to value)", labels)
            return {}
        out = {}
        for k, v in labels.items():
            if k is None or v is None:  # a label unset (None) made the manifest fail to encode
                self._bad(f"label {k!r}", v)
                continue
            out[_text(k)] = _text(v)  # bytes: repaired later
        return out

    def _whole(self, what: str, value: Any, default: int) -> int:
        """A whole number given as one (or as its text, ``"2"``); else ``default``, counted."""
        if type(value) is int:
            return value
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                n = None
        else:
            n = _whole_number(value, floor=False)
        if n is None:
            self._bad(what, value)
            return default
        return n

    def _check_lineage(self, overrides: Mapping[str, Any]) -> dict[str, Any]:
        """Coerce ``lineage=`` overrides; refuse bad fields one by one (strict: raise)."""
        codec = getattr(self.publisher, "codec", None)

        def check(fields: dict[str, Any]) -> None:
            if codec is not None:
                stamp = self.publisher.meta(0, seq=0)  # a trial: no sequence number used
                codec.encode(RunManifest(**stamp, run_id=self.run_id, **fields))

        good, bad = lineage.manifest_overrides(overrides, check)
        if bad:
            why = "; ".join(f"{k}: {v}" for k, v in bad.items())
            if self.strict:
                msg = f"runwatch: lineage= fields refused: {why}"
                raise ValueError(msg)
            self.counters["lineage_dropped"] += len(bad)
            logger.warning(
                "runwatch left %d lineage= field(s) out of the RunManifest of %s (counted in "
                "lineage_dropped): %s", len(bad), self.run_id, why,
            )
        return good

    # ------------------------------------------------------------- hot path
    def step(
        self,
        step: int,
        loss: float | None = None,
        metrics: Mapping[str, float] | None = None,
        lr: float | None = None,
        grad_norm: float | None = None,
        samples: int = 0,
        tokens: int | None = None,
        epoch: int = 0,
        *,
        now_ms: int | None = None,
        step_ms: float | None = None,
        loader_wait_ms: float | None = None,
        effective_batch_size: int | None = None,
        worker_restarts: int | None = None,
    ) -> None:
        """Record one training step (cheap; never blocks).

        Without the keyword-only arguments the SDK measures the step itself:
        the step's wall time is the time since the previous ``step`` call and
        the loader wait is what :meth:`data_wait` timed since then.

        Args:
            step: Global step.
            loss: Training loss.
            metrics: Other scalar metrics.
            lr: Learning rate.
            grad_norm: Gradient norm.
            samples: Samples in this step.
            tokens: Tokens in this step.
            epoch: Epoch.
            now_ms: Event time (UTC epoch ms) of the step; default: the run's
                ``clock`` if it has one, else the wall clock when the record is built.
            step_ms: The step's wall time in ms (default: measured).
            loader_wait_ms: Time the step waited for data in ms (default: measured
                by :meth:`data_wait`).
            effective_batch_size: Effective (global) batch size of the step.
            worker_restarts: Data-loader/worker restarts since the previous step.

        """
        now = time.perf_counter_ns()
        if type(step) is not int or (loss is not None and type(loss) not in _NUM):
            step, loss = self._fix_step(step, loss)
            if step is None:
                return
        if metrics:
            if type(metrics) is not dict and not isinstance(metrics, Mapping):
                metrics = self._fix_metrics(metrics)
            else:
                for v in metrics.values():
                    if type(v) not in _NUM:
                        metrics = self._fix_metrics(metrics)
                        break
                else:  # a copy: a job that reuses one dict for every step changes it later,
                    metrics = metrics.copy() if type(metrics) is dict else dict(metrics)
        if ((lr is not None and type(lr) not in _NUM)
                or (grad_norm is not None and type(grad_norm) not in _NUM)
                or type(samples) is not int or type(epoch) is not int
                or (tokens is not None and type(tokens) is not int)):
            lr, grad_norm, samples, tokens, epoch = self._fix_fields(
                lr, grad_norm, samples, tokens, epoch)
        if len(self._q) >= self._qmax:
            self._drop_step()
            return
        wait = self._wait_ns
        self._wait_ns = 0
        last = self._last_ns
        self._last_ns = now
        extra = None
        if (
            now_ms is not None
            or step_ms is not None
            or loader_wait_ms is not None
            or effective_batch_size is not None
            or worker_restarts is not None
            or self._clock is not None
        ):
            if now_ms is None and self._clock is not None:
                now_ms = self._clock()
            extra = (now_ms, step_ms, loader_wait_ms, effective_batch_size, worker_restarts)
            if any(v is not None and type(v) not in _NUM for v in extra) or (
                    type(now_ms) is float and not math.isfinite(now_ms)):
                extra = self._fix_extra(extra)
        self._q.append(
            (_STEP, step, loss, metrics, lr, grad_norm, samples, tokens, epoch, now - last, wait,
             extra)
        )

    def data_wait(self) -> _DataWait:
        """Context manager timing a data-loader wait, attributed to the next step.

        Returns:
            The (reusable) timer.

        """
        return self._dw

    def _drop_step(self) -> None:
        """Count (and say) a step that is not queued: the queue is full, or a forked child."""
        if self.forked:
            self._drop_forked("run.step")
            return
        if self.finished:
            self._drop_finished("run.step")
            return
        self.counters["dropped_queue_full"] += 1
        if not self._full_logged:
            self._log_full()

    def _log_full(self) -> None:
        """Say how many steps the full queue dropped (first drop, then at most every 30 s)."""
        n = self.counters["dropped_queue_full"]
        self._full_logged, self._full_logged_at = n, time.monotonic()
        logger.warning(
            "runwatch run %s: the SDK's queue is full (%d records, queue_max): %d step(s) "
            "dropped so far, counted in dropped_queue_full; steps come faster than the "
            "publishing thread builds and sends them", self.run_id, self._qmax, n,
        )

    def _drop_finished(self, what: str) -> None:
        """Count a call made after ``finish``: the run's transport is closed."""
        self._count_dropped(
            "dropped_after_finish", "runwatch run %s: %s called after run.finish(): dropped and "
            "counted in dropped_after_finish (the run's transport is closed)", what,
        )

    def _drop_forked(self, what: str) -> None:
        """Count a call made in a forked child, where this run publishes nothing."""
        self._count_dropped(
            "dropped_forked", "runwatch run %s: %s called in process %d, forked from the process "
            "that started the run: a forked child publishes nothing for it (its publishing "
            "thread and Kafka client stay in the parent); the call is dropped and counted in "
            "dropped_forked. Publish from the parent, or call runwatch.init in the child",
            what, os.getpid(),
        )

    def _count_dropped(self, counter: str, message: str, *args: object) -> None:
        """Count a dropped call; the first one of its counter is logged (run id first)."""
        self.counters[counter] += 1
        if self.counters[counter] == 1:
            logger.warning(message, self.run_id, *args)

    # ------------------------------------------------------- bad input paths
    def _choice(self, what: str, value: Any, allowed: Sequence[str], aliases: Mapping[str, str],
                fallback: str | None) -> str | None:
        """One of ``allowed``: as given, in another case or a known spelling, else ``fallback``.

        An unknown value is logged once per call site naming the valid ones
        (strict: ValueError); with no fallback the call is dropped and counted
        in ``dropped_wrong_type``.
        """
        known = _canonical(value, allowed, aliases)
        if known is not None:
            return known
        if self.strict:
            msg = f"runwatch: unknown {what} {value!r} (one of {', '.join(allowed)})"
            raise ValueError(msg)
        if fallback is None:
            self.counters["dropped_wrong_type"] += 1
        site = _call_site()
        if (site, what) not in self._warned:
            self._warned.add((site, what))
            logger.error("runwatch run %s: unknown %s %r at %s:%d (one of %s): %s", self.run_id,
                         what, value, site[0], site[1], ", ".join(allowed),
                         f"published as {fallback!r}" if fallback else
                         "dropped, counted in dropped_wrong_type")
        return fallback

    def _bad(self, what: str, value: object, *, kept: str = "") -> None:
        """Count (and log once per call site and field) a value of the wrong type.

        ``kept`` says what is published instead (default: the value is dropped).
        """
        self.counters["dropped_wrong_type"] += 1
        if self.strict:
            msg = f"runwatch: {what} has wrong type {type(value).__name__}: {value!r:.80}"
            raise TypeError(msg)
        site = _call_site()
        if (site, what) not in self._warned:
            self._warned.add((site, what))
            logger.warning(
                "runwatch run %s dropped %s %s of type %s at %s:%d%s (counted in "
                "dropped_wrong_type; logged once per call site)", self.run_id, what,
                _short(value), type(value).__name__, site[0], site[1],
                f"; {kept}" if kept else "",
            )

    @staticmethod
    def _num(v: object) -> float | None:
        if isinstance(v, bool) or isinstance(v, str | bytes):
            return None
        try:
            return float(v)  # type: ignore[arg-type]  # numpy scalars, 0-d tensors
        except (TypeError, ValueError, OverflowError):  # OverflowError: an int of 10**400
            return None

    def _fix_step(self, step: Any, loss: Any) -> tuple[Any, Any]:
        if type(step) is not int:
            fixed = _whole_number(step)
            if fixed is None:
                self._bad("step", step)
                return None, None
            if fixed != step and ("fraction", _call_site()) not in self._warned:
                self._warned.add(("fraction", _call_site()))
                logger.warning("runwatch run %s: step %r is not a whole number; published as "
                               "step %d (logged once per call site)", self.run_id, step, fixed)
            step = fixed
        if loss is not None and type(loss) not in _NUM:
            number = self._num(loss)
            if number is None:
                self._bad("loss", loss)
            loss = number
        return step, loss

    def _fix_metrics(self, metrics: Any, what: str = "metric") -> dict[str, float]:
        """Name -> number, the entries that are not left out (a non-mapping: all of them)."""
        out: dict[str, float] = {}
        if not isinstance(metrics, Mapping):
            self._bad(f"{what}s (a mapping of name to number)", metrics)
            return out
        for k, v in metrics.items():
            if not isinstance(k, str | bytes):  # bytes: repaired as text by the publisher
                self._bad(f"{what} name {k!r}", k)
                continue
            if type(v) is float or (type(v) is int and _FLOAT_MIN < v < _FLOAT_MAX):
                out[k] = v  # type: ignore[index]
                continue
            fixed = self._num(v)  # an int past a float's range (10**400): None
            if fixed is None:
                self._bad(f"{what} {k!r}", v)
            else:
                out[k] = fixed  # type: ignore[index]
        return out

    def _fix_fields(self, lr: Any, gn: Any, samples: Any, tokens: Any,
                    epoch: Any) -> tuple[Any, Any, int, int | None, int]:
        """A step's other numbers, each one that is not a number left out alone.

        A list of numbers as ``lr`` (``scheduler.get_last_lr()``: one per parameter
        group) is read as its first group's.
        """
        if lr is not None and type(lr) not in _NUM:
            first = lr[0] if isinstance(lr, list | tuple) and lr else lr
            lr = self._num(first)
            if lr is None:
                self._bad("lr", first)
        if gn is not None and type(gn) not in _NUM:
            fixed = self._num(gn)
            if fixed is None:
                self._bad("grad_norm", gn)
            gn = fixed
        return (lr, gn, self._count_field("samples", samples, 0),
                self._count_field("tokens", tokens, None), self._count_field("epoch", epoch, 0))

    def _count_field(self, what: str, value: Any, default: Any) -> Any:
        if value is None:
            return default
        fixed = value if type(value) is int else _whole_number(value)
        if fixed is None or not _LONG_MIN <= fixed <= _LONG_MAX:  # 2**64: lost the record
            self._bad(what, value)
            return default
        return fixed

    def _fix_extra(self, extra: tuple[Any, ...]) -> tuple[Any, ...]:
        """A step's explicit times and counts; one that is not a number is left out alone."""
        now_ms, step_ms, wait_ms, ebs, restarts = extra
        if now_ms is not None and (type(now_ms) not in _NUM or not math.isfinite(now_ms)):
            fixed = self._num(now_ms)
            if fixed is None or not math.isfinite(fixed):  # NaN: the step failed to encode
                self._bad("now_ms", now_ms, kept="the run's clock stamps the step")
                fixed = self._clock() if self._clock is not None else None
            now_ms = fixed
        timed = []
        for what, v in (("step_ms", step_ms), ("loader_wait_ms", wait_ms)):
            if v is not None and type(v) not in _NUM:
                fixed = self._num(v)
                if fixed is None:
                    self._bad(what, v, kept="the SDK's own measurement is published")
                v = fixed
            timed.append(v)
        return (now_ms, *timed, self._count_field("effective_batch_size", ebs, None),
                self._count_field("worker_restarts", restarts, None))

    def _step_metrics(self, metrics: Mapping[Any, Any]) -> dict[str, float]:
        """A step's metrics as floats, on the worker; a name that is no text is dropped.

        (The hot path checks only the values: one name of another type made the
        whole LearningStep, its loss too, fail to encode, logged every step.)
        """
        out: dict[str, float] = {}
        for k, v in metrics.items():
            if type(k) is str or isinstance(k, str | bytes):
                try:
                    out[k] = float(v)  # type: ignore[index]  # bytes: repaired by the publisher
                except OverflowError:  # an int of 10**400
                    self._worker_bad(f"metric {k!r}", v, "left out")
                continue
            self.counters["dropped_wrong_type"] += 1
            if ("key", id(type(k))) not in self._warned:
                self._warned.add(("key", id(type(k))))
                logger.warning("runwatch run %s dropped metric name %r of type %s from its steps "
                               "(counted in dropped_wrong_type; logged once per type)",
                               self.run_id, k, type(k).__name__)
        return self._fitting(out)

    def _fitting(self, metrics: dict[str, float]) -> dict[str, float]:
        """A step's metrics, or none when they alone pass the record limit (1 MB encoded).

        Per-layer statistics (40,000 gradient norms) made the LearningStep too large to
        publish, and its loss (a NaN that should page) went with it; now the step is
        published without them, counted in ``metrics_oversize`` and logged once.
        """
        size = sum(map(len, metrics)) + 10 * len(metrics)  # a name, its length, a double
        limit = int(getattr(self.publisher, "max_record_bytes", MAX_RECORD_BYTES)) - 16_384
        if size <= limit // 4:
            return metrics
        size = sum(len(str(k).encode("utf-8", "replace")) + 10 for k in metrics)
        if size <= limit:
            return metrics
        self._count_dropped(
            "metrics_oversize", "runwatch run %s: a step's %d metrics take about %d bytes, over "
            "the %d-byte record limit: its loss, lr and grad norm are published without them "
            "(counted in metrics_oversize, logged once)", len(metrics), size, limit + 16_384)
        return {}

    def _worker_float(self, what: str, value: Any) -> float | None:
        """A number as a float on the worker; an int past a float's range is left out."""
        if value is None or type(value) is float:
            return value
        try:
            return float(value)
        except OverflowError:
            self._worker_bad(what, value, "left out")
            return None

    def _worker_long(self, what: str, value: Any, default: Any) -> Any:
        """A count on the worker; one past an Avro long's range is published as ``default``."""
        if value is None or _LONG_MIN <= value <= _LONG_MAX:
            return value
        self._worker_bad(what, value, f"published as {default}")
        return default

    def _worker_bad(self, what: str, value: Any, kept: str) -> None:
        """Count (and log once per field) a value no record can hold, found by the worker."""
        self.counters["dropped_wrong_type"] += 1
        if ("range", what) not in self._warned:
            self._warned.add(("range", what))
            logger.warning("runwatch run %s: %s %s is out of the range a record holds: %s "
                           "(counted in dropped_wrong_type; logged once)", self.run_id, what,
                           _short(value), kept)

    # ------------------------------------------------------------ cold path
    def _put(self, kind: int, *item: Any) -> None:
        if self.forked:
            self._drop_forked(f"run.{sys._getframe(1).f_code.co_name}")
            return
        if self.finished:
            self._drop_finished(f"run.{sys._getframe(1).f_code.co_name}")
            return
        self._q.append((kind, *item))

    def _when(self, now_ms: Any) -> int | None:
        """Event time of a cold-path call: explicit, else the run's clock, else None.

        An explicit time that is no number (text, NaN, a list) is counted and logged as
        a wrong type, and the run's clock stamps the call instead: a bad timestamp
        must not raise into the job (it did, from ``int(now_ms)``).
        """
        if now_ms is not None:
            if type(now_ms) is int:
                return now_ms
            fixed = _whole_number(now_ms)
            if fixed is not None:
                return fixed
            self._bad("now_ms", now_ms, kept="the run's clock stamps the call")
        return self._clock() if self._clock is not None else None

    def now_ms(self) -> int:
        """Return the run's time now (UTC epoch ms): its ``clock``, else the wall clock."""
        return self._clock() if self._clock is not None else int(time.time() * 1000)

    def validation(
        self,
        step: int,
        metrics: Mapping[str, float],
        *,
        epoch: int = 0,
        dataset: DatasetRef | str | None = None,
        slice: str | None = None,  # noqa: A002
        now_ms: int | None = None,
    ) -> None:
        """Record validation metrics.

        Args:
            step: Step evaluated.
            metrics: Metric name -> value.
            epoch: Epoch.
            dataset: Validation dataset.
            slice: Slice name, if any.
            now_ms: Event time (UTC epoch ms); default: the run's clock.

        """
        metrics = self._fix_metrics(metrics)
        ds = DatasetRef(uri=dataset) if isinstance(dataset, str) else dataset
        self._put(
            _REC,
            ValidationResult,
            dict(step=self._count_field("step", step, 0),
                 epoch=self._count_field("epoch", epoch, 0), metrics=metrics, dataset=ds,
                 slice=slice),
            self._when(now_ms),
        )

    def evaluation(
        self,
        metrics: Mapping[str, float],
        *,
        dataset: DatasetRef | str,
        slice: str | None = None,  # noqa: A002
        samples: int = 0,
        ci: Mapping[str, tuple[float, float]] | None = None,
        incumbent: str | None = None,
        step: int = 0,
        now_ms: int | None = None,
    ) -> None:
        """Record a release evaluation (the evidence ``runwatch gate check`` weighs).

        One call per slice: without ``slice`` the whole evaluation set, with it
        one slice (a protected population). Published as a ValidationResult of
        kind ``evaluation``; NaN/Inf are published as they are (the gate fails on them).

        Args:
            metrics: Metric name -> value.
            dataset: The evaluation dataset (a ``DatasetRef`` with its version, or a uri).
            slice: Slice name; None for the whole set.
            samples: Samples evaluated.
            ci: Metric -> (low, high) confidence interval, where computed.
            incumbent: Run id of the incumbent model this candidate is compared against.
            step: Step of the evaluated weights.
            now_ms: Event time (UTC epoch ms); default: the run's clock.

        """
        metrics = self._fix_metrics(metrics)
        ds = DatasetRef(uri=dataset) if isinstance(dataset, str) else dataset
        lows: dict[str, float] = {}
        highs: dict[str, float] = {}
        for name, bounds in (ci or {}).items():
            try:
                lo, hi = (float(b) for b in bounds)
            except (TypeError, ValueError):
                self._bad(f"confidence interval {name!r}", bounds)
                continue
            lows[name], highs[name] = lo, hi
        self._put(
            _REC,
            ValidationResult,
            dict(step=self._count_field("step", step, 0), epoch=0, metrics=metrics, dataset=ds,
                 slice=slice, kind="evaluation",
                 sample_count=max(self._count_field("samples", samples, 0), 0), ci_low=lows,
                 ci_high=highs, incumbent_run_id=incumbent),
            self._when(now_ms),
        )

    def checkpoint(
        self,
        path_or_uri: str | os.PathLike[str],
        *,
        step: int = 0,
        started_at_ms: int | None = None,
        duration_ms: float | None = None,
        expected_sha256: str | None = None,
        outcome: str = "ok",
        now_ms: int | None = None,
    ) -> None:
        """Record a checkpoint; size and sha256 of a local file are computed off-thread.

        Args:
            path_or_uri: Local path or remote URI.
            step: Step of the checkpoint.
            started_at_ms: When writing started (defaults to now - duration).
            duration_ms: How long writing took.
            expected_sha256: Checksum the writer expected, when known.
            outcome: ok, failed, corrupt, timeout, unknown.
            now_ms: When writing ended (UTC epoch ms); default: the run's clock.

        """
        end = self._when(now_ms)
        end = end if end is not None else self.now_ms()
        dur = 0.0
        if duration_ms is not None:
            number = self._num(duration_ms)
            if number is None or not math.isfinite(number) or number < 0:
                self._bad("duration_ms", duration_ms, kept="published as 0")
            else:
                dur = number
        outcome = self._choice("checkpoint outcome", outcome, _OUTCOMES, _OUTCOME_ALIASES,
                               "unknown") or "unknown"
        start = None if started_at_ms is None else _whole_number(started_at_ms)
        if start is None:
            if started_at_ms is not None:
                self._bad("started_at_ms", started_at_ms, kept="now_ms - duration_ms is published")
            start = end - int(dur)
        step = self._count_field("step", step, 0)
        expected_sha256 = self._checksum("expected_sha256", expected_sha256)
        uri = str(path_or_uri)
        self._put(
            _FN,
            self._build_checkpoint,
            (uri, step, start, end, dur, expected_sha256, outcome, file_stamp(uri)),
        )

    def _checksum(self, what: str, value: Any) -> str | None:
        """A given sha256 as text: ``hashlib``'s ``digest()`` bytes as hex; another type: None.

        (A checksum of another type failed the whole record: the checkpoint or artifact
        was lost, counted in build or encode errors.)
        """
        if value is None or isinstance(value, str):
            return value
        if isinstance(value, bytes | bytearray) and len(value) == 32:
            return bytes(value).hex()
        self._bad(what, value, kept="the checksum is left out")
        return None

    def _digest(self, uri: str, stamp: tuple[int, int, int] | None) -> tuple[int, str | None]:
        """Size and sha256 of the file a call named, read on this thread later.

        When the file was rewritten since the call (the next save to the same path,
        ``last.ckpt``, began before this thread read it), its digest is not this
        checkpoint's: it is left out (counted in ``checkpoint_changed``, logged once),
        the size kept from the call. The half-written file's digest was compared with
        the expected one and paged a corrupt checkpoint.
        """
        size, digest = file_digest(uri, self._abandon.is_set)
        if digest is None and size and self._abandon.is_set():  # finish's wait ran out
            self._count_dropped(
                "checkpoint_unhashed", "runwatch run %s: run.finish's wait ran out while the "
                "SDK read %s for its sha256: published without it (counted in "
                "checkpoint_unhashed)", uri)
            return size, None
        if stamp is None or digest is None or file_stamp(uri) == stamp:
            return size, digest
        self._count_dropped(
            "checkpoint_changed", "runwatch run %s: %s was rewritten before the SDK could "
            "read it (saved again to the same path): its sha256 is left out (counted in "
            "checkpoint_changed)", uri)
        return stamp[0], None

    def _build_checkpoint(self, args: tuple[Any, ...]) -> CheckpointEvent:
        uri, step, start, end, dur, expected, outcome, stamp = args
        size, digest = self._digest(uri, stamp)
        expected = normalize_sha256(expected)
        # A mismatch is reported as outcome "corrupt" with both checksums; the processor
        # raises rule:checkpoint_checksum for it (rule:checkpoint_serialization is "failed").
        if expected and digest and not same_digest(expected, digest) and outcome == "ok":
            outcome = "corrupt"
        local = "://" not in uri or uri.startswith("file://")
        if local and size == 0 and digest is None and outcome == "ok":  # no file there
            outcome = "unknown"
            self.counters["checkpoint_unreadable"] += 1
            if self.counters["checkpoint_unreadable"] == 1:
                logger.warning("runwatch run %s: checkpoint %s cannot be read (not written yet, "
                               "or elsewhere): reported as outcome unknown, not ok (counted in "
                               "checkpoint_unreadable)", self.run_id, uri)
        return CheckpointEvent(
            **self._meta(end),  # the explicit now_ms, the clock, or the call's wall time
            step=step,
            started_at_ms=start,
            ended_at_ms=end,
            duration_ms=dur,
            size_bytes=size,
            sha256=digest,
            expected_sha256=expected,
            uri=uri,
            outcome=outcome,  # type: ignore[arg-type]
            throughput_bps=(size / (dur / 1000.0)) if dur > 0 and size else None,
        )

    def artifact(
        self,
        uri: str | os.PathLike[str],
        kind: str = "model",
        *,
        sha256: str | None = None,
        serialization_ok: bool = True,
        registry_status: str | None = None,
        now_ms: int | None = None,
    ) -> None:
        """Record an artifact (size and sha256 of a local file computed off-thread).

        Args:
            uri: Local path or remote URI.
            kind: model, dataset, report, ...
            sha256: Known checksum (skips hashing).
            serialization_ok: Whether it loaded back.
            registry_status: Registry state, if any.
            now_ms: Event time (UTC epoch ms); default: the run's clock.

        """
        when = self._when(now_ms)
        if not isinstance(kind, str | bytes):  # bytes: repaired as text by the publisher
            self._bad("artifact kind", kind, kept="published as its text")
            kind = str(kind)
        sha256 = self._checksum("sha256", sha256)
        stamp = file_stamp(str(uri)) if sha256 is None else None

        def build(a: tuple[str, str, str | None, bool, str | None]) -> ArtifactEvent:
            u, k, sha, ok, reg = a
            size, digest = self._digest(u, stamp) if sha is None else (file_size(u), sha)
            return ArtifactEvent(
                **self._meta(when),
                uri=u,
                kind=k,
                size_bytes=size,
                sha256=digest,
                serialization_ok=ok,
                registry_status=reg,
            )

        self._put(_FN, build, (str(uri), kind, sha256, serialization_ok, registry_status))

    def gate(
        self,
        gate: str,
        decision: str,
        *,
        thresholds: Mapping[str, float] | None = None,
        measured: Mapping[str, float] | None = None,
        slices: Sequence[SliceResult] = (),
        reasons: Sequence[str] = (),
        evaluator: str = "sdk",
        now_ms: int | None = None,
    ) -> None:
        """Record a release-gate decision.

        Args:
            gate: Gate name.
            decision: pass, fail or review.
            thresholds: Threshold per metric.
            measured: Measured value per metric.
            slices: Per-slice results.
            reasons: Why.
            evaluator: Who decided.
            now_ms: Event time (UTC epoch ms); default: the run's clock.

        """
        verdict = self._choice("gate decision", decision, _VERDICTS, _VERDICT_ALIASES, "review")
        if not isinstance(gate, str | bytes):  # bytes: repaired as text by the publisher
            self._bad("gate name", gate, kept="published as its text")
            gate = str(gate)
        if isinstance(reasons, str | bytes):
            reasons = (reasons,)  # one reason, not its characters
        elif not isinstance(reasons, Iterable):
            self._bad("reasons (a list of text)", reasons)
            reasons = ()
        reasons = tuple(_text(r) if r is not None else "None" for r in reasons)
        if not isinstance(slices, Iterable) or isinstance(slices, str | bytes):
            self._bad("slices (a list of SliceResult)", slices)
            slices = ()
        self._put(
            _REC,
            GateDecision,
            dict(
                gate=gate,
                decision=verdict,
                thresholds=self._fix_metrics(thresholds or {}, "threshold"),
                measured=self._fix_metrics(measured or {}, "measured value"),
                slices=tuple(slices),
                reasons=tuple(reasons),
                evaluator=evaluator,
            ),
            self._when(now_ms),
        )

    def job_state(
        self,
        state: str,
        reason: str | None = None,
        *,
        attempt: int | None = None,
        now_ms: int | None = None,
    ) -> None:
        """Publish a job state transition.

        Args:
            state: A JobState.
            reason: Why.
            attempt: The run's attempt from now on (a restart increments it).
            now_ms: Event time (UTC epoch ms); default: the run's clock.

        """
        if attempt is not None:
            self.attempt = self._whole("attempt", attempt, self.attempt)
        known = self._choice("job state", state, _JOB_STATES, _JOB_ALIASES, None)
        if known is not None:
            self._put(_REC, JobEvent, self._job_fields(known, reason), self._when(now_ms))

    def _job_fields(self, state: str, reason: str | None) -> dict[str, Any]:
        return dict(
            state=state,
            attempt=self.attempt,
            reason=reason,
            team=self.team,
            experiment_family=self.experiment_family,
        )

    def finish(
        self,
        status: str = "succeeded",
        reason: str | None = None,
        timeout: float = 10.0,
        *,
        now_ms: int | None = None,
    ) -> dict[str, int]:
        """Publish the final JobEvent, drain, flush and close the transport.

        Args:
            status: Final JobState (succeeded, failed, cancelled, preempted).
            reason: Why.
            timeout: Seconds to wait for delivery.
            now_ms: Event time (UTC epoch ms); default: the run's clock.

        Returns:
            SDK and transport counters.

        """
        if self.forked:  # the parent's thread and Kafka client are not in this process
            self._drop_forked("run.finish")
            return dict(self.counters)
        with self._lock:
            if self.finished:
                return dict(self.counters)
            # an unknown status still ends the run (else it pages as stalled later)
            known = _canonical(status, _FINAL_STATES, _JOB_ALIASES)
            if known is None:
                known = self._choice("finish status", status, _FINAL_STATES, {}, "failed")
                reason = f"run.finish({status!r})" + (f": {reason}" if reason else "")
            final = (_REC, JobEvent, self._job_fields(known or "failed", reason),
                     self._when(now_ms))
            self._q.append(final)
            self.finished = True
            self._qmax = -1  # later steps take the drop path (dropped_after_finish)
        self._stop.set()
        self._thread.join(timeout=max(timeout, 1.0))
        if self._thread.is_alive() or self._q:  # out of time, or the worker died
            self._give_up(final, timeout)
        for name in ("encode_errors", "sanitised", "oversize"):  # the publisher's own counts
            count = int(getattr(self.publisher, name, 0))
            if count:
                self.counters[name] = count
        try:
            tc = self.publisher.transport.close(timeout)
            for k in ("sent", "spooled", "replayed", "evicted", "failed", "duplicates", "in_doubt",
                      "in_spool", "missing_topic"):
                self.counters[f"transport_{k}"] = int(getattr(tc, k, 0))
        except Exception:
            logger.exception("runwatch transport close failed")
        self._close_orphans(timeout)
        self._uninstall_hooks()
        lost = sorted(k for k in _LOSS_COUNTERS if self.counters.get(k))
        logger.log(logging.WARNING if lost else logging.INFO,
                   "runwatch run %s finished (%s): %s%s", self.run_id, status,
                   dict(self.counters), f" (not published: {', '.join(lost)})" if lost else "")
        return dict(self.counters)

    def _close_orphans(self, timeout: float) -> None:
        """Close the transports replaying earlier jobs' spools; what is left stays on disk."""
        # no wait while the broker is away: the run's own close waited already
        wait = 0.0 if self.counters.get("transport_in_spool") else min(timeout, 5.0)
        for t in self._orphans:
            try:
                c = t.close(wait)
                self.counters["orphans_replayed"] += int(c.replayed)
            except Exception:
                logger.exception("runwatch could not close the replay of an earlier spool")
        self._orphans = []

    def _give_up(self, final: tuple[Any, ...], timeout: float) -> None:
        """Finish's wait ran out with calls still queued: count them, publish the final event.

        The worker stops after its batch; what it did not take is dropped and
        counted in ``dropped_unsent`` (a step is one call), except the final
        JobEvent, which is published so the run is seen to end.
        """
        self._abandon.set()
        self._thread.join(timeout=5.0)
        left = list(self._q)
        self._q.clear()
        alive = self._thread.is_alive()  # stuck: the publisher is its, publish nothing here
        keep = [] if alive else [item for item in left if item is final]
        if len(left) == len(keep):
            return self._publish_final(keep)
        self.counters["dropped_unsent"] += len(left) - len(keep)
        logger.warning(
            "runwatch run %s: finish(timeout=%gs) ran out with %d call(s) still queued: "
            "dropped, counted in dropped_unsent%s", self.run_id, timeout,
            len(left) - len(keep), "; the final JobEvent is published" if keep else "",
        )
        self._publish_final(keep)

    def _publish_final(self, keep: list[tuple[Any, ...]]) -> None:
        for item in keep:
            try:
                self.counters["published"] += self.publisher.publish(self._build(item))
            except Exception:
                self.counters["publish_errors"] += 1
                logger.exception("runwatch could not publish the final JobEvent")

    # ------------------------------------------------------------- worker
    def _meta(self, now_ms: int | None = None) -> dict[str, Any]:
        m = self.publisher.meta(now_ms)
        m["run_id"] = self.run_id
        return m

    def _manifest(self) -> RunManifest:
        a = self._manifest_args
        rev, dirty = lineage.git_revision() if a["capture"] else (None, False)
        count, model = lineage.gpu_hardware() if a["capture"] else (0, None)
        fields: dict[str, Any] = dict(
            **self._meta(self._started_ms),
            datasets=a["datasets"],
            code_revision=rev,
            code_dirty=dirty,
            image_digest=lineage.image_digest(),
            config_hash=lineage.config_hash(a["config"]),
            config=lineage.flat_config(a["config"]),
            hardware=Hardware(nodes=(lineage.hostname(),), gpu_count=count, gpu_model=model),
            seed_policy=a["seed_policy"],
            framework_versions=lineage.framework_versions() if a["capture"] else {},
            experiment_family=self.experiment_family,
            team=self.team,
            parent_run_id=a["parent_run_id"],
            resumed_from_checkpoint=a["resumed_from"],
            labels=a["labels"],
        )
        fields.update(self._lineage)
        rec = RunManifest(**fields)
        lh, rg = lineage_hash.hashes(rec.to_dict())
        return dataclasses.replace(rec, lineage_hash=lh, repeat_group=rg)

    def _work(self) -> None:
        first: list[Any] = []
        try:
            first.append(self._manifest())
        except Exception:
            self.counters["manifest_errors"] += 1
            logger.exception("runwatch could not build the run manifest of %s", self.run_id)
        try:
            first.append(
                JobEvent(
                    **self._meta(self._started_ms),
                    **{**self._job_fields("running", None), "attempt": self._attempt0},
                )
            )
            self.counters["published"] += self.publisher.publish(first)
        except Exception:
            self.counters["publish_errors"] += 1
            logger.exception("runwatch could not publish the run manifest")
        q = self._q
        while True:
            stopping = self._stop.is_set()
            full = self.counters.get("dropped_queue_full", 0)
            if full > self._full_logged and time.monotonic() - self._full_logged_at > 30:
                self._log_full()
            if not q:
                if stopping:
                    return
                self._stop.wait(0.02)
                continue
            if self._abandon.is_set():
                return
            batch: list[Any] = []
            while q and len(batch) < 512:
                try:
                    batch.extend(self._build(q.popleft()))
                except Exception as exc:
                    self.counters["build_errors"] += 1
                    logger.warning("runwatch could not build a record: %s", exc)
            try:
                self.counters["published"] += self.publisher.publish(batch)
            except Exception:
                self.counters["publish_errors"] += 1
                logger.exception("runwatch publish failed")

    def _build(self, item: tuple[Any, ...]) -> list[Any]:
        kind = item[0]
        if kind == _STEP:
            _, step, loss, metrics, lr, gn, samples, tokens, epoch, dt_ns, wait_ns, extra = item
            when = ebs = restarts = None
            step_ms = dt_ns / 1e6
            wait_ms = wait_ns / 1e6
            if extra is not None:
                when, sms, wms, ebs, restarts = extra
                step_ms = float(sms) if sms is not None else step_ms
                wait_ms = float(wms) if wms is not None else wait_ms
            if type(step) is int and not _LONG_MIN <= step <= _LONG_MAX:  # 2**64: encode fails
                self._worker_bad("step", step, "the call is dropped")
                return []
            # the hot path lets any int through: one past what a record holds (a loss of
            # 10**400, samples of 2**64) made the whole step fail to build or encode
            # (checked only where an int is given: the usual floats and counts pass by)
            if type(loss) is int or type(lr) is int or type(gn) is int:
                loss, lr, gn = (self._worker_float(what, v)
                                for what, v in (("loss", loss), ("lr", lr), ("grad_norm", gn)))
            if (not (_LONG_MIN <= samples <= _LONG_MAX and _LONG_MIN <= epoch <= _LONG_MAX)
                    or (tokens is not None and not _LONG_MIN <= tokens <= _LONG_MAX)
                    or (ebs is not None and not _LONG_MIN <= ebs <= _LONG_MAX)):
                samples, tokens, epoch, ebs = (
                    self._worker_long(what, v, default) for what, v, default in (
                        ("samples", samples, 0), ("tokens", tokens, None), ("epoch", epoch, 0),
                        ("effective_batch_size", ebs, None)))
            if restarts is not None and not -(2**31) <= restarts < 2**31:  # an Avro int
                self._worker_bad("worker_restarts", restarts, "published as 0")
                restarts = None
            bad = 0  # the record's nonfinite_count: its loss, learning rate, gradient norm
            for v in (loss, lr, gn):
                if v is not None and not math.isfinite(v):
                    bad += 1
            mets = self._step_metrics(metrics) if metrics else {}
            # a metric's NaN (accuracy of a batch without labels) is published as it is, and
            # counted here only: in nonfinite_count the processor read it as a gradient's
            odd = sum(1 for v in mets.values() if not math.isfinite(v))
            if bad + odd:
                self.counters["nonfinite"] += bad + odd
            # a step without a loss, metrics, lr or grad norm (a framework hook whose
            # training step returned nothing) is timing only: a LearningStep needs a loss,
            # and the NaN it carried paged a critical non-finite loss
            learned = loss is not None or mets or lr is not None or gn is not None
            learning = None if not learned else LearningStep(
                **self._meta(when),  # (before the timing's: seq follows the publishing order)
                step=step,
                epoch=epoch,
                loss=float(loss) if loss is not None else math.nan,
                metrics=mets,
                lr=float(lr) if lr is not None else None,
                grad_norm=float(gn) if gn is not None else None,
                nonfinite_count=bad,
            )
            timing = StepTiming(
                **self._meta(when),
                step=step,
                loader_wait_ms=wait_ms,
                compute_ms=max(step_ms - wait_ms, 0.0),
                step_ms=step_ms,
                samples=int(samples or 0),
                tokens=tokens,
                effective_batch_size=int(ebs) if ebs is not None else None,
                worker_restarts=int(restarts) if restarts is not None else 0,
            )
            return [timing] if learning is None else [learning, timing]
        if kind == _REC:
            return [item[1](**self._meta(item[3]), **item[2])]
        return [item[1](item[2])]

    def __enter__(self) -> Run:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: object
    ) -> None:
        if et is None:
            self.finish("succeeded")
        else:
            self.finish(*ended_by(et, ev))


def _after_fork(ref: weakref.ReferenceType[Run]) -> None:
    """In a forked child: the run publishes nothing there (its thread and client stay behind).

    librdkafka is not fork-safe: a child that touched the parent's producer at
    exit (atexit, SIGTERM) hung for ever in it.
    """
    run = ref()
    if run is None:
        return
    run.forked = True
    run._qmax = -1  # every step takes the drop path (counted in dropped_forked)
    run._q = collections.deque()  # the parent's pending records: the parent publishes them
    run._lock = threading.Lock()  # the parent's may have been held at the fork


def _text(value: Any) -> Any:
    """Text fields given as another type (an int seed, a job id) as their text; None stays."""
    return value if value is None or isinstance(value, str | bytes) else str(value)


def _canonical(value: Any, allowed: Sequence[str], aliases: Mapping[str, str]) -> str | None:
    """``value`` as one of ``allowed`` (as given, in another case, a known spelling), or None."""
    if value in allowed:
        return str(value)
    key = status_word(str(value))  # "Timed out", "timed-out": "timed_out"
    known = key if key in allowed else aliases.get(key)
    return known if known in allowed else None


def _whole_number(value: Any, *, floor: bool = True) -> int | None:
    """A step or count given as a numpy int, a float or a 0-d tensor, as an int (floored).

    None for what is no number (text, bool, None, NaN, a list), and with ``floor``
    false for a number with a fraction.
    """
    if isinstance(value, str | bytes | bool) or value is None:
        return None
    try:
        return operator.index(value)  # numpy integers
    except TypeError:
        pass
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(f) or (not floor and f != math.floor(f)):
        return None
    return math.floor(f)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _call_site() -> tuple[str, int]:
    """File and line of the first caller outside the SDK (the user's call)."""
    f = sys._getframe(1)
    while f.f_back is not None and f.f_globals.get("__name__", "").startswith("runwatch.client"):
        f = f.f_back
    return f.f_code.co_filename, f.f_lineno
