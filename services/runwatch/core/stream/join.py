"""The run join: ``step(state, event, now_ms, cfg)`` and ``tick(state, now_ms, cfg)``.

Size: the dispatcher and the handlers of job, learning, lineage and data
records (node and artifact handlers are split out).

Dispatches each record type to a handler that updates the
:class:`~runwatch.core.stream.runstate.RunState`, computes leading indicators, applies
the hard rules and feeds the watches. Pure: the processor passes the clock in.
"""

from __future__ import annotations

import math
from typing import Any

from runwatch.core.paging import lifecycle as alerting
from runwatch.core.paging.lifecycle import AlertBook
from runwatch.core.records import (
    ArtifactEvent,
    CheckpointEvent,
    DataQualityReport,
    GateDecision,
    JobEvent,
    LearningStep,
    RunManifest,
    StageEvent,
    StepTiming,
    ValidationResult,
)
from runwatch.core.signals import datachecks, metrics, rules
from runwatch.core.signals import indicators as ind
from runwatch.core.signals.indwatch import IndicatorWatch
from runwatch.core.signals.rules import Finding
from runwatch.core.stream import join_artifact, join_datasets, join_lineage
from runwatch.core.stream.eventtime import absurd_event_time
from runwatch.core.stream.held import expire_pending, hold, take_pending
from runwatch.core.stream.join_node import (
    NodeAgg,
    hst_evidence,
    node_agg,
    step_interval,
    stepped,
    throughput_cause,
)
from runwatch.core.stream.rekey import (
    ENDED,
    DataAck,
    covered_refs,
    manifest_keys,
    manifest_refs,
    report_ref,
)
from runwatch.core.stream.runstate import (
    Output,
    RunConfig,
    RunState,
    context,
    dead_letter,
    emit,
    firing_entry,
    flush_waiting,
    observe,
    resolve_now,
)
from runwatch.core.stream.runstate import clear as clear_healthy

Baseline = dict[str, list[float]]
_RECENT = 200
STEP_WINDOW = 64  # step times behind the stall rule's median (written on every state save)
CHECKPOINT_WINDOW = 3
"""Checkpoint intervals behind the checkpoint share (:func:`indicators.recent_checkpoint_share`:
from the end of one checkpoint to the end of the next). Three: the share follows a growing
checkpoint within a few saves, and one irregular interval (an extra save after a good
validation) moves it by a third, not fully."""
GRAD_WINDOW = 20  # gradient norms behind one variance value (10 read chance runs of large steps)
LR_RISE = 1e-6
"""A learning rate above the previous logged one by more than this share has risen (float
noise aside). A linear warm-up over 2,000 steps rises by less than 1 % a step after its
100th: with 1 %, the rest of it was no warm-up, and its loss bump at the peak paged."""
RESTART_STATES = ("retrying", "preempted")
#: Job states in which a run holds no running attempt: the stall rule waits.
NOT_RUNNING = frozenset({"queued", "scheduled", "preempted", "retrying"})


def step(state: RunState, event: Any, now_ms: int, cfg: RunConfig, *, raw: bytes = b"",
         topic: str = "", baseline: Baseline | None = None) -> tuple[RunState, list[Output]]:
    """Fold one event of this run into its state.

    Args:
        state: The run's state (updated in place and returned).
        event: A decoded record whose ``run_id`` is this run.
        now_ms: Current time (processing time).
        cfg: Processor knobs.
        raw: The event's original bytes (for dead letters).
        topic: The topic it came from (for dead letters).
        baseline: Finished-run statistics of the run's workload, if known.

    Returns:
        The state and the Alert/DeadLetter records to publish.

    """
    if isinstance(event, DataAck):  # the data agent's answer: no event time, no watermark
        data_answered(state, event)
        return state, []
    at = int(event.emitted_at_ms)
    absurd = absurd_event_time(at, now_ms, cfg.min_event_ms, cfg.max_ahead_ms)
    if absurd is not None:  # before the watermark: it must not make later records late
        return state, [dead_letter(state, cfg, absurd, raw, topic, now_ms)]
    if isinstance(event, DataQualityReport):
        why = rules.report_problem(event.dataset_uri, event.row_count, event.schema_failures,
                                   event.duplicate_rows)
        if why is not None:
            return state, [dead_letter(state, cfg, why, raw, topic, now_ms)]
        if report_seen(state, event):
            return state, []  # the same report twice (redelivered, or forwarded again)
    if isinstance(event, StageEvent) and join_lineage.stage_seen(state, event):
        return state, []
    # One watermark per record type: topics (and partitions) are consumed
    # independently, so only a stream's own order says whether it is late.
    stream = _stream(event)
    mark = state.watermarks.get(stream, 0)
    if mark and at < mark - cfg.lateness_ms:
        state.late_count += 1
        why = (f"late event: {mark - at} ms behind the run's {stream} watermark (lateness "
               f"{cfg.lateness_ms} ms)")
        late: list[Output] = [dead_letter(state, cfg, why, raw, topic, now_ms)]
        if isinstance(event, DataQualityReport) and state.known:
            late += _report_hard_rules(state, event, at, now_ms, cfg)
        return state, late
    if not state.known and not isinstance(event, RunManifest | JobEvent | GateDecision) \
            and not join_artifact.release_event(event):
        return state, hold(state, cfg, event, now_ms)
    if baseline is not None and PAUSE_STAT in baseline:  # the workload's usual pause
        state.signals["workload_pause_ms"] = int(baseline[PAUSE_STAT][1])
    state.watermarks[stream] = max(mark, at)
    state.watermark_ms = max(state.watermark_ms, at)
    state.first_at_ms = state.first_at_ms or at
    out = _dispatch(state, event, at, now_ms, cfg, baseline)
    if state.known and state.pending:
        for held in take_pending(state):
            out.extend(step(state, held, now_ms, cfg, baseline=baseline)[1])
    return state, out


def _stream(event: Any) -> str:
    """Return the stream whose watermark an event is judged against.

    One per record type, except data-quality reports: one per dataset reference
    (``DataQualityReport|uri@version``). A run's datasets are reported by
    different pipelines at their own pace, and the stored reports of each are
    replayed when the run starts, oldest first per dataset but datasets in
    any order.
    """
    if isinstance(event, DataQualityReport | StageEvent):  # stages: one per output dataset
        return f"{event.AVRO_NAME}|{report_ref(event)}"
    return str(event.AVRO_NAME)


REPORT_IDS = 20  # event ids kept per dataset of a run: a replay sends at most 17 (first + 16)


def report_seen(state: RunState, e: DataQualityReport) -> bool:
    """Return whether this run has folded this report (same event id) already."""
    kept = state.reports.get(report_ref(e)) or {}
    return e.event_id in kept.get("ids", ())


def _dispatch(state: RunState, e: Any, at: int, now: int, cfg: RunConfig,
              bl: Baseline | None) -> list[Output]:
    if isinstance(e, StepTiming):
        return _step_timing(state, e, at, now, cfg, bl)
    if isinstance(e, NodeAgg):
        return node_agg(state, e, now, cfg, bl)
    if isinstance(e, LearningStep):
        return _learning(state, e, at, now, cfg, bl)
    if isinstance(e, ValidationResult):
        return _validation(state, e, at, now, cfg)
    if isinstance(e, CheckpointEvent):
        return _checkpoint(state, e, at, now, cfg, bl)
    if isinstance(e, JobEvent):
        return _job(state, e, at, now, cfg)
    if isinstance(e, RunManifest):
        return _manifest(state, e, at, now, cfg)
    if isinstance(e, DataQualityReport):
        return _data(state, e, at, now, cfg, bl)
    if isinstance(e, StageEvent):
        return join_lineage.stage(state, e, at, now, cfg)
    if isinstance(e, ArtifactEvent):
        return join_artifact.artifact(state, e, at, now, cfg)
    if isinstance(e, GateDecision):
        return join_artifact.gate(state, e, at, now, cfg)
    return [dead_letter(state, cfg, f"record type {type(e).__name__} not handled by the run "
                        "join", b"", "", now)]


def _push(seq: list[Any], x: Any, n: int = _RECENT) -> None:
    seq.append(x)
    if len(seq) > n:
        del seq[: len(seq) - n]


PAUSE_K = 2.0
"""A run that has come back from a pause (a checkpoint write, an evaluation) of P ms is
stalled only after ``PAUSE_K`` x P without a step: its known pauses are its normal range,
and twice the longest is no longer that (checkpoints grow with the state written and a
slower store, by steps, not by doubling between two saves)."""


def _paused(s: RunState, gap_ms: int) -> None:
    s.signals["pause_ms"] = max(int(s.signals.get("pause_ms", 0)), int(gap_ms))


def _pause(s: RunState, cfg: RunConfig, start: int, end: int, validation: bool) -> None:
    """Note a pause between steps that a checkpoint write or an evaluation explains.

    The pause runs from the run's last step before ``start`` to its first step after
    ``end`` (event time); when that step is in already (topics are read independently)
    it is measured now, otherwise at that step (:data:`PAUSE_K`). It counts only when
    the steps stopped for it and went on right after it: within a step bound
    (``STALL_K`` median steps) of the write's start and end (of an evaluation's result:
    when it began is not reported). A write the steps went on through (asynchronous)
    paused nothing; a gap whose steps resumed long after (a hang, a preemption) is not
    explained by it. The step bound is in the run's step records (:func:`step_period`),
    not its ``step_ms``: a run logging every 40th 3-second step is silent 2 minutes
    between records, and the record after an evaluation, 2 minutes on, never counted
    its pause, so every evaluation paged a stall.
    """
    slack = cfg.stall_k * step_period(s)
    before = [t for t in s.step_at if t <= start]
    if (not before or not math.isfinite(slack) or any(start < t <= end for t in s.step_at)
            or (not validation and start - before[-1] > slack)):
        return
    after = [t for t in s.step_at if t > end]
    if not after:
        s.signals["pause"] = [before[-1], end, int(slack)]
    elif after[0] - end <= slack:
        _paused(s, after[0] - before[-1])


def step_period(s: RunState) -> float:
    """Return the run's typical time per step record, the stall rule's unit (nan: none yet).

    The median step time its ``StepTiming`` records report, or the median interval
    between its step records (timing or learning) when that is longer: a run that
    logs every 1000th one-second step reports ``step_ms`` 1000 and is silent for
    about 17 minutes between records, and each silence paged a stall. With one step
    record so far, the interval is its lead from the run's first event (start-up
    and the first logging interval together).
    """
    median = ind.median(s.step_ms)
    # the longer of the recent records' interval and the whole window's: a run that logged
    # every step for its first minutes and every 100th after waited 2.7 hours (the window's
    # intervals turning over) before its 5-minute silences stopped meaning a stall
    gap = max(step_interval(s.step_at), step_interval(s.step_at[-RECENT_RECORDS - 1:]))
    if len(s.step_at) == 1 and s.first_at_ms and s.step_at[0] > s.first_at_ms:
        gap = float(s.step_at[0] - s.first_at_ms)
    if not math.isfinite(gap):
        return median
    return gap if not math.isfinite(median) else max(median, gap)


RECENT_RECORDS = 8
"""Step records whose median interval :func:`step_period` also weighs: a run's logging
becoming sparser counts after 5 of its records, a single long one (a pause) does not."""


def stall_floor(s: RunState, cfg: RunConfig) -> int:
    """Return the stall rule's floor: ``STALL_MIN_MS``, or twice the longest known pause.

    Known pauses are the run's own and its workload's: the mean of the longest pause
    of the workload's finished runs (:data:`PAUSE_STAT`), so a family whose every run
    evaluates for 15 minutes is not paged at each run's first evaluation.
    """
    known = max(float(s.signals.get("pause_ms", 0)), float(s.signals.get("workload_pause_ms", 0)))
    return max(cfg.stall_min_ms, int(PAUSE_K * known))


RESTART_FLOOR_K = 3
"""A restarted attempt that has not stepped yet is stalled after ``RESTART_FLOOR_K`` x
``STALL_MIN_MS`` (30 min), or twice its first start-up (first ``running`` to first step)
plus its longest checkpoint write, or its stall floor (twice its longest pause), if longer
(3 x the stall floor counted a 9-minute write six times: 54 minutes): it loads a
checkpoint (a 12-minute load paged a healthy Kubernetes restart when the stall clock ran
from the restart at the usual floor),
but a load that never ends is a hang (a requeued or restarted job hanging in its load went
unpaged for 3 hours when the clock waited for a first step)."""


def restart_bound(s: RunState, cfg: RunConfig) -> int:
    """Return how long a restarted attempt may go without a step (:data:`RESTART_FLOOR_K`)."""
    start = s.started_at_ms or s.first_at_ms
    lead = max(s.first_step_at_ms - start, 0) if s.first_step_at_ms and start else 0
    write = max((float(c[1]) for c in s.checkpoints), default=0.0)
    return int(max(RESTART_FLOOR_K * cfg.stall_min_ms, 2 * (lead + write), stall_floor(s, cfg)))


PAUSE_STAT = "pause_ms"
"""Workload-baseline entry of the finished runs' longest explained pause (one value per run)."""


def _step_timing(s: RunState, e: StepTiming, at: int, now: int, cfg: RunConfig,
                 bl: Baseline | None) -> list[Output]:
    out: list[Output] = []
    _push(s.step_ms, e.step_ms, STEP_WINDOW)
    s.last_step_at_ms = max(s.last_step_at_ms, at)  # event time (the stall rule's domain)
    s.first_step_at_ms = min(s.first_step_at_ms or at, at)
    pause = s.signals.get("pause")
    if pause and at > pause[1]:  # the first step after a checkpoint write or an evaluation
        s.signals.pop("pause")
        if at - pause[1] <= pause[2]:
            _paused(s, at - pause[0])
    s.last_step = max(s.last_step, e.step)
    out += stepped(s, at, now, cfg, bl)
    out += _stall_over(s, cfg, now, at)
    cold = int(s.signals.get("cold_steps", 0))
    if cold:  # a restarted process's first steps are not judged for speed (see ``_job``)
        if cold > 1:
            s.signals["cold_steps"] = cold - 1
        else:
            s.signals.pop("cold_steps")
    else:
        out += _speed(s, cfg, e, at, now, bl)
    if e.effective_batch_size is not None:
        out += observe(s, cfg, "effective_batch_size", float(e.effective_batch_size), at, now,
                       bl)
    if e.worker_restarts > 0 and _first_delivery(s, e.event_id):
        # restarts since the previous step (the record's contract): they add up. Read as a
        # running total, a loader crashing at eight steps (1 each) counted one restart, was
        # evidence once and never paged at RunConfig.restart_alert. Counted over the
        # correlation window (a crash loop), not the run's life: a worker respawned now and
        # then over a week-long run is no fault
        s.worker_restarts += e.worker_restarts  # the run's total
        recent = s.signals.setdefault("worker_restarts_at", [])
        recent.append([at, e.worker_restarts])
        recent[:] = [r for r in recent[-RESTART_REPORTS:] if r[0] > at - cfg.window_ms]
        out += _restart_evidence(s, cfg, float(sum(r[1] for r in recent)), at, now,
                                 "worker_restarts")
    return out + hst_evidence(s, cfg, at, now)


RESTART_IDS = 16
"""Event ids of the latest step records that reported worker restarts, kept so that a
redelivered record (at-least-once: a producer's retry) does not count its restarts twice."""
RESTART_REPORTS = 16
"""Step records with restarts kept for the window's count (each reports at least one, so
more than :attr:`RunConfig.restart_alert` of them page whatever the rest; a bound on the
state of a crash loop)."""


def _first_delivery(s: RunState, event_id: str) -> bool:
    """Note ``event_id`` among the run's step records with restarts; False if seen already."""
    seen = s.signals.setdefault("restart_ids", [])
    if event_id in seen:
        return False
    seen.append(event_id)
    del seen[:-RESTART_IDS]
    return True


def _speed(s: RunState, cfg: RunConfig, e: StepTiming, at: int, now: int,
           bl: Baseline | None) -> list[Output]:
    """Feed a step's loader share and throughput to their watches."""
    out = observe(s, cfg, "loader_share", ind.loader_share(e.loader_wait_ms, e.step_ms), at, now,
                  bl, f"loader_wait {e.loader_wait_ms:.0f} ms of step {e.step_ms:.0f} ms")
    # a step that counts its tokens is judged by them: samples a step may halve by design
    # (a curriculum doubling the sequence length), and a job that counts tokens alone
    # reports no samples, whose throughput of 0 could never fall
    name, done = ("token_throughput", e.tokens) if e.tokens else ("throughput", e.samples)
    size = s.signals.get(f"{name}_size")
    if done:  # the step's size (2 significant digits): the run's is its first step's
        here = f"{float(f'{done:.2g}'):g}"
        if size is None:
            size = s.signals[f"{name}_size"] = here
        else:
            size, judged = _phase(s, name, here, str(size))
            if not judged:
                return out
    return out + observe(s, cfg, name, ind.throughput(done, e.step_ms), at, now, bl,
                         cause=lambda: throughput_cause(s, at, cfg),
                         baseline_key=f"{name}@{size}")


PHASE_STEPS = 20
"""Steps at one step size that make it the run's: a run whose steps held one size this long
and then hold another this long has a new phase (its throughput watch learns it again)."""
PHASES_KEPT = 4
"""Earlier phases' throughput watches a run keeps (by step size), to take up again."""


def _phase(s: RunState, name: str, here: str, size: str) -> tuple[str, bool]:
    """Follow a run's step size; return it and whether this step's throughput is judged.

    A run whose step size held for :data:`PHASE_STEPS` steps and then changes to
    another that holds as long has started a new phase (pre-training at 256 samples a
    step, fine-tuning at 32; a sequence-length stage): its throughput watch learns the
    new phase's level, seeded from the workload's runs at that size, and the steps
    between are not judged (fine-tuning at an eighth of the batch paged "throughput
    fell" and never resolved). One odd step (an epoch's smaller last batch) is left
    out. A run whose step size varies from step to step (variable-length batches
    counted in tokens) is judged at every step, as before; a constant size that turns
    into a varying one is a new phase after twice the steps.
    """
    run = s.signals.setdefault(f"{name}_run", [0, None, 0, 0])  # at size, candidate, its n, off
    if here == size:
        run[0], run[1], run[2], run[3] = run[0] + 1, None, 0, 0
        return size, True
    if run[0] < PHASE_STEPS:  # no constant size yet: a step size that varies
        run[0] = 0
        return size, True
    run[3] += 1
    run[1], run[2] = (run[1], run[2] + 1) if here == run[1] else (here, 1)
    if run[2] < PHASE_STEPS and run[3] < 2 * PHASE_STEPS:
        return size, False
    # a new phase: its size held (or the size varies now); its level is learnt again, or
    # taken up where it was left when the run had this size before (blocks of two batch
    # sizes, multi-task training: each block learnt a slowdown as its new level)
    s.signals[f"{name}_size"] = here
    parked = s.signals.setdefault(f"{name}_phases", {})
    left = s.watches.pop(name, None)
    if left is not None:
        parked[size] = left.to_state() if isinstance(left, IndicatorWatch) else left
    back = parked.pop(here, None)
    if back is not None:
        s.watches[name] = back
    for old in list(parked)[:-PHASES_KEPT]:
        del parked[old]
    run[0], run[1], run[2], run[3] = (run[2] if run[2] >= PHASE_STEPS else 0), None, 0, 0
    return here, True


def _stall_over(s: RunState, cfg: RunConfig, now: int, at: int) -> list[Output]:
    """Resolve a firing stall when a step shows it over as of the horizon it was last seen at.

    ``at`` is the step's event time. A step stamped long before that horizon (a spool
    or a backfill delivering the run's old steps while the cluster is live) leaves the
    gap above the bound: the run is still silent. Resolving on it, the next timer round
    paged the stall again, once per backdated step: a page and a resolve every few seconds.
    """
    entry = firing_entry(s, "rule:stalled", "step_gap_ms")
    if entry is None or entry["last_seen_ms"] - at > entry["expected"]:
        return []
    return resolve_now(s, cfg, "rule:stalled", "step_gap_ms", now, at)


def _restart_evidence(s: RunState, cfg: RunConfig, count: float, at: int, now: int,
                      indicator: str) -> list[Output]:
    alert = count >= cfg.restart_alert
    f = Finding("indicator:restarts", indicator, "execution", "warning", count,
                0.0, min(count / cfg.restart_alert, 1.0), at,
                f"{int(count)} restarts", f"{indicator}={int(count)}", alert=alert)
    return emit(s, cfg, f, now, one_shot=True)


def _learning(s: RunState, e: LearningStep, at: int, now: int, cfg: RunConfig,
              bl: Baseline | None) -> list[Output]:
    out: list[Output] = []
    s.last_step_at_ms = max(s.last_step_at_ms, at)  # a step too: the run is not stalled
    s.first_step_at_ms = min(s.first_step_at_ms or at, at)
    out += stepped(s, at, now, cfg, bl)
    out += _stall_over(s, cfg, now, at)
    overflowed = e.nonfinite_count > 0 or (e.grad_norm is not None
                                           and not math.isfinite(e.grad_norm))
    overflows = int(s.signals.get("overflows", 0)) + 1 if overflowed else 0
    if overflows:  # steps in a row with non-finite gradients (a loss scaler skips them)
        s.signals["overflows"] = overflows
    else:
        s.signals.pop("overflows", None)
        if e.grad_norm is not None:  # finite: the loss scaler found its scale
            s.signals["scaled"] = 1
    loss: float | None = e.loss
    if loss != loss and not e.nonfinite_count and e.source.kind == "sdk":
        # the SDK's step with metrics and no loss (an evaluation's): LearningStep needs a
        # loss, so it sends NaN, and it counts a NaN loss it is given in nonfinite_count
        loss = None
    f = rules.non_finite_learning(loss, e.grad_norm, e.nonfinite_count, at, e.lr, overflows,
                                  scaled="scaled" in s.signals)
    if f:
        return out + emit(s, cfg, f, now, one_shot=True)
    if e.lr is not None:  # the latest learning-rate increase (warm-up, a warm restart)
        prev = s.signals.get("lr")
        if prev is None:
            s.signals["lr_first"] = e.step  # where the first cycle began
        rose = prev is not None and e.lr > prev[1] * (1 + LR_RISE)
        if (prev is not None and rose and math.isfinite(e.lr) and e.lr > LR_JUMP * prev[1] > 0
                and not (len(prev) > 2 and prev[2]) and len(s.losses) >= rules.LOSS_SMOOTH):
            # a step change from a rate that held (a bumped rate, a resume with another
            # one: its steps go back, so not by step order; not a warm-up's second step,
            # twice its first): the mechanism of a divergence that follows it
            s.signals["lr_jump"] = [e.step, prev[1], e.lr, 0]
        if prev is not None and e.lr > prev[1] * (1 + LR_RISE) and e.step > prev[0]:
            s.signals["lr_up"] = e.step
            s.signals.pop("loss_lows", None)  # the loss before a warm restart is no best
            top = s.signals.get("lr_max")
            if top is not None and e.lr <= top * (1 + WARM_LR_SLACK):  # back to a known rate
                s.signals["warm"] = [None, 0, None]  # peak, logged steps since, start
                if e.lr >= LR_JUMP * prev[1]:  # a restart, not a warm-up's next step
                    # validation is not judged for half the last cycle (``_validation``)
                    last = s.signals.get("val_warm")
                    since = last[0] if last else s.signals.get("lr_first", e.step)
                    s.signals["val_warm"] = [e.step, e.step + (e.step - since) / 2]
        if math.isfinite(e.lr):
            s.signals["lr_max"] = max(s.signals.get("lr_max", e.lr), e.lr)
        s.signals["lr"] = [e.step, e.lr, int(rose)]
    if loss is not None:
        out += _loss_window(s, float(e.step), loss, at, now, cfg)
    if e.grad_norm is not None and math.isfinite(e.grad_norm):
        out += observe(s, cfg, "grad_norm", e.grad_norm, at, now, bl)
        _push(s.grads, e.grad_norm, GRAD_WINDOW)
        if len(s.grads) >= GRAD_WINDOW:
            # a learning-rate increase (a warm restart, warm-up) swings the gradient norms
            # by design: while it is in the loss window (as for loss divergence), their
            # variance is evidence, not a page
            raised = s.signals.get("lr_up")
            restarted = (raised is not None and bool(s.losses)
                         and raised >= s.losses[0][0])
            out += observe(s, cfg, "grad_norm_variance", ind.grad_norm_variance(s.grads), at,
                           now, bl, f"variance of the last {GRAD_WINDOW} gradient norms",
                           cause=(lambda: ("learning", False)) if restarted else None)
    return out


def _loss_window(s: RunState, step: float, loss: float, at: int, now: int,
                 cfg: RunConfig) -> list[Output]:
    """Fold a finite loss into the run's loss window: its trend (evidence), its divergence."""
    out: list[Output] = []
    _push(s.losses, [step, loss], 50)
    if "warm" in s.signals:
        _warm_rise(s, step)
    earlier, noise = _loss_lows(s)
    diverged = firing_entry(s, "rule:loss_divergence", "loss")
    jump = s.signals.get("lr_jump")
    if jump is not None:
        jump[3] += 1
        if jump[3] > LR_JUMP_POINTS and diverged is None:  # (a firing one keeps its cause)
            del s.signals["lr_jump"]
            jump = None
    if diverged is not None and earlier is not None:
        # the best it diverged from, until the loss comes back: once 500 steps past the
        # rise, the window's own best was the diverged level and the page resolved
        earlier = min(earlier, float(diverged["expected"]))
    if len(s.losses) >= 20:
        slope = ind.loss_trend([p[0] for p in s.losses], [p[1] for p in s.losses])
        first = s.losses[0][1]
        if math.isfinite(slope) and slope > 0 and s.losses[-1][1] > 1.2 * first:
            out += emit(s, cfg, Finding("indicator:loss_trend", "loss_trend", "learning",
                                        "warning", slope, 0.0, 0.5, at, "Loss trending up",
                                        alert=False), now, one_shot=True)
        f = rules.loss_divergence(s.losses, s.signals.get("lr_up"), at, earlier, noise,
                                  rising=False, lr_jump=jump)
        # up for LOSS_PERSIST logged steps, and not coming down: a loss spike that recovers
        # on its own (an LLM's 30 steps at 1.5 x, a PPO value loss's bursts) is no divergence
        held = s.signals["loss_up"] = s.signals.get("loss_up", 0) + 1 if f else 0
        if held == 1:
            s.signals["loss_up_at"] = step
        # held LOSS_PERSIST logged steps, or LOSS_PERSIST training steps over at least
        # LOSS_PERSIST_POINTS logged ones (a run logging every 50th step paged an hour late)
        steps_held = step - s.signals.get("loss_up_at", step)
        lasting = held >= LOSS_PERSIST or (held >= LOSS_PERSIST_POINTS
                                           and steps_held >= LOSS_PERSIST)
        if (f and (lasting or diverged is not None)
                and rules.loss_rising(s.losses)):
            out += emit(s, cfg, f, now, one_shot=True)
    return out


LR_JUMP = 2.0
"""A learning rate at least this many times the previous logged one changed in a step (a
bumped rate, a resume with another rate), not along a schedule: a warm-up over 2,000
steps rises by less than 1 % a step after its 100th."""
WARM_LR_SLACK = 0.05
"""A learning rate that rises back to at most this share above the highest the run had
before is a warm restart (SGDR, a cyclic schedule): the loss it raises rises with a lag.
A rise above every rate the run had (ten times the rate at a resume) is not."""
WARM_POINTS = 200
"""Logged steps after a warm restart while the loss it raises may still be rising."""


def _warm_rise(s: RunState, step: float) -> None:
    """Follow the loss a warm restart raises until it turns; its peak is where judging starts.

    A restart back to a rate the run had raises the loss with a lag (tens to hundreds
    of steps) and keeps it up for much of the next cycle: judged from the first steps
    after the restart, still at the end of the last cycle, a 2-4 x rise paged as a
    divergence 100 steps in. While the 10-step mean makes new highs (for at most
    :data:`WARM_POINTS` logged steps), each new high clears the lows and counts as the
    learning-rate increase (nothing is judged for 50 logged steps after it); a loss
    that keeps rising after that is judged from there.
    """
    warm = s.signals["warm"]
    warm[1] += 1
    tail = s.losses[-rules.LOSS_SMOOTH:]
    mean = sum(p[1] for p in tail) / len(tail)
    if not math.isfinite(mean):
        return
    if warm[2] is None:  # the level the restart started from
        warm[2] = mean
    if warm[0] is None or mean > warm[0]:
        warm[0] = mean
        s.signals["lr_up"] = step
        s.signals.pop("loss_lows", None)
    # turned: down from a peak well above where it started (a loss that first dips as the
    # last cycle's state is left behind, past a noisy high, has not turned: not risen yet)
    turned = warm[0] > WARM_RISEN * warm[2] and mean < WARM_TURN * warm[0]
    if warm[1] >= WARM_POINTS or turned:
        del s.signals["warm"]


WARM_TURN = 0.9
"""The loss a warm restart raised has turned once its 10-step mean is this share of its peak."""
WARM_RISEN = 1.2
"""... a peak at least this share of the 10-step mean the restart started from (a 15 %
step-to-step noise moves a 10-step mean by about 5 %)."""


LOSS_PERSIST = 50
"""Steps the divergence must hold before it pages (then every logged one repeats it):
transient loss spikes last tens of training steps; a learning rate ten times too high
keeps the loss up for good. Held over 50 logged steps, or over 50 training steps (by the
steps' numbers) and at least :data:`LOSS_PERSIST_POINTS` logged ones: counted in logged
steps alone, a run logging every 50th step was paged 66 minutes after its loss jumped."""
LOSS_PERSIST_POINTS = 3
"""Logged steps the divergence must hold at least, however far apart."""


LOSS_BLOCKS, LOSS_BLOCK_STEPS = 10, 50
"""Blocks of 50 logged steps whose lowest 10-step mean loss a run keeps
(``signals["loss_lows"]``: [first step, lowest mean, steps, sum of |step-to-step change|]),
so loss divergence measures a rise from the best of the last 500 logged steps, not only of
the last 50, against the noise of those steps."""
LR_JUMP_POINTS = LOSS_BLOCKS * LOSS_BLOCK_STEPS
"""Logged losses after a jump in the learning rate (:data:`LR_JUMP`) during which a
divergence is its doing: as long as the lowest levels a divergence is measured from."""


def _loss_lows(s: RunState) -> tuple[float | None, float | None]:
    """Fold the run's latest 10-step mean loss into its blocks.

    The blocks hold the steps since the run's latest learning-rate increase (a warm
    restart clears them).

    Returns:
        The lowest 10-step mean kept (None while fewer than 10 losses are known), and
        the loss's step-to-step noise over the kept steps (the standard deviation whose
        normal noise has that mean absolute change: ``sqrt(pi) / 2`` of it; None before
        50 changes are kept): the median change of the 50-step window alone spread from
        0.6 to 1.5 times the truth and let a noisy loss page.

    """
    tail = s.losses[-rules.LOSS_SMOOTH:]
    if len(tail) < rules.LOSS_SMOOTH:
        return None, None
    mean = sum(p[1] for p in tail) / rules.LOSS_SMOOTH
    if not math.isfinite(mean):
        return None, None
    change = abs(tail[-1][1] - tail[-2][1])
    lows: list[list[float]] = s.signals.setdefault("loss_lows", [])
    if lows and lows[-1][2] < LOSS_BLOCK_STEPS:
        block = lows[-1]
        block[1], block[2] = min(block[1], mean), block[2] + 1
        block[3:] = [(block[3] if len(block) > 3 else 0.0) + change]
    else:
        lows.append([tail[-1][0], mean, 1, change])
        del lows[:-LOSS_BLOCKS]
    steps = sum(b[2] for b in lows if len(b) > 3)
    noise = (sum(b[3] for b in lows if len(b) > 3) / steps * math.sqrt(math.pi) / 2
             if steps >= LOSS_BLOCK_STEPS else None)
    return min(b[1] for b in lows), noise


VAL_NOISE_K = 5.0
"""Validation declines must also exceed this many noise sigmas of the run's own evaluations.

The best of n noisy evaluations sits about sqrt(2 ln n) sigma (2.8 for n = 50) above their
mean, so 5 sigma below the best is about 2.2 sigma below it: two evaluations in a row land
there with probability ~2e-4, while a real decline (a shifted or corrupted input) moves the
metric by many sigmas."""


VAL_MIN_EARLIER = 5
"""Evaluations before the one that starts a decline from which the run's noise is estimated
(``successive_noise`` needs five). With fewer, a decline must exceed :data:`VAL_EARLY_REL`
of the best: with only the 0.02 and 5 % bounds a healthy run evaluated on 256 images
(binomial noise 0.026 around 0.78) paged at its 3rd to 6th evaluation in about a third
of runs."""
VAL_EARLY_REL = 0.15
"""The decline from the best that pages before the run's noise can be estimated: for an
accuracy near 0.8 on 256 images about 4.7 noise sigmas (a label shift that takes 0.9 to
0.7 still pages at once)."""


def _val_stream(s: RunState, e: ValidationResult) -> tuple[str, list[Any]]:
    """Return the key of an evaluation's stream and the stream's state.

    The state is [metric, best, history, declines]. Each validation dataset and
    slice is its own stream with its own best: two languages at 0.90 and 0.55 in one
    history read as a decline from 0.90 at every second evaluation, and a healthy
    per-slice validation paged. A state
    written before streams (the ``val_*`` fields) becomes the unnamed stream.
    """
    uri = e.dataset.uri if e.dataset is not None else ""
    key = f"{uri}|{e.slice or ''}" if (uri or e.slice) else ""
    streams = s.val_streams
    if s.val_metric and "" not in streams:
        streams[""] = [s.val_metric, s.val_best, s.val_history, s.val_declines]
        s.val_metric, s.val_best, s.val_history, s.val_declines = "", None, [], 0
    stream = streams.get(key)
    if stream is None:
        stream = streams[key] = ["", None, [], 0]
        del_keys = list(streams)[:-VAL_STREAMS]  # the oldest streams past the bound
        for k in del_keys:
            del streams[k]
    return key, stream


VAL_STREAMS = 32
"""Validation streams (datasets × slices) followed per run; the oldest give way."""
VAL_TIMES = 16
"""Evaluation results whose times the GPU readings are told from (``join_node.settle``)."""


def _validation(s: RunState, e: ValidationResult, at: int, now: int,
                cfg: RunConfig) -> list[Output]:
    _pause(s, cfg, at, at, validation=True)  # an evaluation pass pauses the steps
    # its GPU readings since the step record before it are no training (``join_node.settle``)
    _push(s.signals.setdefault("val_at", []), at, VAL_TIMES)
    if e.kind == "evaluation":  # release evidence (per slice), judged by `runwatch gate check`
        return []
    key, st = _val_stream(s, e)
    current = st[0]
    if current:  # it keeps its metric: another call with other metrics is not judged
        if current not in e.metrics:
            return []
        picked: tuple[str, bool] | None = (current, metrics.higher_is_better(current)
                                           is not False)
    else:
        picked = metrics.primary(e.metrics)
    if picked is None:
        return []
    name, higher = picked
    st[0] = name
    label = " ".join(p for p in (e.slice, e.dataset.uri if e.dataset else None) if p)
    subject = f"{name} [{label}]" if key else name
    value = float(e.metrics[name])
    if not math.isfinite(value):
        if higher or e.slice:  # an accuracy, or a slice, of no samples (0/0) is no fault
            return []
        # a validation loss that is NaN (running statistics gone NaN, an overflow in
        # evaluation) while the training loss is finite: wrong whatever the history says
        f = rules.non_finite_validation(subject, value, at)
        return emit(s, cfg, f, now, one_shot=True)
    point = [float(e.step), value]
    history: list[list[float]] = st[2]
    if point in history:  # delivered again (at least once): one evaluation, not two
        return []
    warm = s.signals.get("val_warm")
    if warm is not None and warm[0] <= e.step < warm[1]:
        # within half a cycle after a warm restart (the rate back up, as SGDR does) the
        # model leaves its minimum by design and its metric dips (0.95 to 0.80 after
        # each restart paged); judged again from there against the same best, so a
        # decline that lasts still pages under a cyclic schedule
        return []
    _push(history, point, 50)
    signed = value if higher else -value
    best = st[1]
    if best is None or signed > best:
        st[1], st[3] = signed, 0
        return clear_healthy(s, cfg, "rule:validation_decline", subject, now, at_ms=at)
    drop = best - signed
    # the noise of the evaluations before this decline began (the decline is not noise)
    earlier = [v for _, v in history[:-(st[3] + 1)]]
    # 5 σ of the noise at 95 % confidence: a median of a few differences is often far under
    # it (a stationary loss paged 2 seeds in 10); before 5 evaluations, also a large decline
    noise = VAL_NOISE_K * rules.noise_upper(earlier)
    if len(earlier) < VAL_MIN_EARLIER:
        noise = max(noise, VAL_EARLY_REL * abs(best))
    # the absolute margin is in rate points; a loss has its data's scale, judged relatively
    floor = 0.0 if metrics.on_loss_scale(name) else cfg.val_decline_abs
    if drop <= max(floor, cfg.val_decline_rel * abs(best), noise):
        st[3] = 0
        return clear_healthy(s, cfg, "rule:validation_decline", subject, now, at_ms=at)
    st[3] += 1
    if st[3] < cfg.val_persist:
        return []
    f = Finding("rule:validation_decline", subject, "learning", "warning", value,
                best if higher else -best, min(drop / max(abs(best), 1e-9), 1.0), at,
                f"Validation {subject} declined to {value:.4g} from "
                f"{best if higher else -best:.4g}",
                f"step {e.step}")
    # resolved by evaluations back near the best, as a watch, not by 15 minutes without a
    # repeat: hourly evaluations of one decline fired and resolved it every hour
    return emit(s, cfg, f, now, one_shot=False)


def _checkpoint(s: RunState, e: CheckpointEvent, at: int, now: int, cfg: RunConfig,
                bl: Baseline | None) -> list[Output]:
    out: list[Output] = []
    s.last_checkpoint = {"step": e.step, "sha256": e.sha256, "uri": e.uri, "outcome": e.outcome}
    _pause(s, cfg, int(e.started_at_ms or at), int(e.ended_at_ms or at), validation=False)
    f = rules.checkpoint_integrity(e.expected_sha256 or "", e.sha256 or "",
                                   e.outcome != "failed", at, e.uri,
                                   corrupt=e.outcome == "corrupt",
                                   timed_out=e.outcome == "timeout", step=e.step)
    # a write that "succeeded" into a full disk: the SDK read it back, and it holds no bytes
    f = f or rules.artifact_empty(e.uri, "checkpoint", e.size_bytes, e.sha256 or "", at)
    if f:
        out += emit(s, cfg, f, now, one_shot=True)
    s.checkpoint_ms += e.duration_ms
    end = int(e.ended_at_ms or at)
    _push(s.checkpoints, [end, float(e.duration_ms)], CHECKPOINT_WINDOW + 1)
    s.checkpoints.sort(key=lambda c: c[0])  # a late event still lands in its place
    # between checkpoints only: the lead before the first one holds the run's start-up
    spent, span = ind.recent_checkpoint_share(s.checkpoints, CHECKPOINT_WINDOW)
    out += observe(s, cfg, "checkpoint_share", ind.checkpoint_share(spent, span), at, now, bl,
                   f"{spent / 1000:.0f} s of the last {span / 1000:.0f} s checkpointing "
                   f"(last {min(len(s.checkpoints) - 1, CHECKPOINT_WINDOW)} intervals)")
    return out


def _job(s: RunState, e: JobEvent, at: int, now: int, cfg: RunConfig) -> list[Output]:
    s.known = True
    out: list[Output] = []
    _push(s.states, e.state, 50)
    if e.state in PLACED:  # its GPUs are its own from then (node readings before are not)
        s.signals["placed_at"] = min(at, int(s.signals.get("placed_at", at)))
    if stale_job_event(s, e):
        _job_facts(s, e, at, stale=True)
        return out
    if e.state == "running":
        s.signals["running_at"] = max(at, int(s.signals.get("running_at", 0)))
    if e.state == "running" and (s.job_state in NOT_RUNNING or s.job_state in ENDED
                                 or e.attempt > s.attempt
                                 or (e.source.kind == "sdk" and at > s.last_step_at_ms > 0)):
        # a resumed attempt (after preemption, a retry, a requeue, the run id started
        # again after it failed, or a new attempt of a job whose last one died without an
        # end event: a node lost, a kill -9) loads again before it steps, as at the start:
        # the stall clock waits for its first step. So does a process that started again
        # after the run's last step with no attempt given (a Kubernetes container restarted
        # after an OOM kill: its SDK's ``running`` comes after steps were seen)
        if s.last_step_at_ms:  # it stepped before: a load that never ends is a hang
            s.signals["restarted_at"] = at
            # its loader starts cold, as the run's did: its first steps are the warm-up
            # the run's first were (a requeued run's 10 slow batches paged the loader)
            s.signals["cold_steps"] = cfg.specs["loader_share"].warmup
            if (e.source.kind == "sdk" and e.attempt <= s.attempt
                    and s.job_state not in NOT_RUNNING | ENDED):
                # a process that started again with nothing else said (a Kubernetes
                # restart): a restart, as a requeue's rising attempt is
                s.signals["sdk_restarts"] = int(s.signals.get("sdk_restarts", 0)) + 1
        s.signals["resumed"] = at  # a new process: it may load a (corrupt) checkpoint
        s.last_step_at_ms = 0
        # a new process: its loss scaler starts again and finds its scale as at the start
        s.signals.pop("scaled", None)
        s.signals.pop("overflows", None)
    if e.state in KILLED and s.job_state not in NOT_RUNNING | ENDED:
        out += _stalled_until_killed(s, at, now, cfg)
    if e.state in ENDED and e.source.kind == "sdk":
        s.signals["sdk_end"] = 1
    elif e.state not in ENDED:
        s.signals.pop("sdk_end", None)
    if not (e.state in ENDED and s.job_state in ENDED and s.signals.get("sdk_end")
            and e.source.kind != "sdk"):
        # the SDK's own end stands over a scheduler hook's later one (as in the run
        # summary): a Slurm epilog that read exit 0 from a batch script whose last
        # command succeeded says succeeded after the trainer said failed, and a failed
        # run's figures must not become its family's healthy baseline
        s.job_state = e.state
    _released(s, e.state, at)
    _job_facts(s, e, at)
    if e.state == "running" and s.started_at_ms is None:
        s.started_at_ms = at
        f = rules.queue_deadline(s.queued_at_ms, at, now, s.deadline_ms)
        if f:
            out += emit(s, cfg, f, now, one_shot=True)
        else:  # it left the queue in time: a page the horizon raised before this arrived
            out += resolve_now(s, cfg, "rule:queue_deadline", "queue_delay_ms", now, at)
    # restarts: a rising attempt or a retrying/preempted transition, never a repeated running
    restarts = int(ind.restart_count(s.states, [s.attempt])) + int(s.signals.get("sdk_restarts",
                                                                               0))
    if restarts > s.restarts:
        s.restarts = restarts
        out += _restart_evidence(s, cfg, float(restarts), at, now, "restart_count")
    return out


def stale_job_event(s: RunState, e: JobEvent) -> bool:
    """Return whether a job event is the past: not running, stamped before the latest start.

    A submit host's ``queued`` spooled until after the SDK's ``running`` (or a prolog's
    ``scheduled`` delivered late) says nothing of the run now. Taken as its state, it held
    the run queued for the rest of its life: no stall judged, and its node readings dropped
    as taken off its GPUs; its allocation is older than the one the run has, if any.
    """
    return e.state in NOT_RUNNING and int(e.emitted_at_ms) < int(s.signals.get("running_at", 0))


def _job_facts(s: RunState, e: JobEvent, at: int, *, stale: bool = False) -> None:
    """Keep what a job event says of the run besides its state.

    Its attempt, owner, queue time, deadline and its allocation (if ``stale``, stamped
    before the run's latest start, only when the run has none: an older one otherwise).
    """
    s.attempt = max(s.attempt, e.attempt)
    s.team = e.team or s.team
    s.family = e.experiment_family or s.family
    if e.state == "queued" and not s.queued_at_ms:
        s.queued_at_ms = at
    if e.deadline_ms:
        s.deadline_ms = int(e.deadline_ms)
    if e.allocation is not None and not (stale and s.nodes):
        s.nodes = list(e.allocation.nodes)
        s.gpu_indices = sorted(set(e.allocation.gpu_indices))
        s.gpu_model = e.allocation.gpu_model or s.gpu_model
        s.gpu_count = s.gpu_count or len(s.gpu_indices) * max(len(s.nodes), 1)


PLACED = frozenset({"scheduled", "running"})
"""Job states of a run given its GPUs: a Slurm prolog's ``scheduled`` names the GPUs the
scheduler gave the job, while a ``queued`` job's nodes may still run another job."""
KILLED = frozenset({"failed", "cancelled"})
"""End states a hung job is ended with (by its watchdog, the scheduler or a person)."""


def _stalled_until_killed(s: RunState, at: int, now: int, cfg: RunConfig) -> list[Output]:
    """Page a stall that lasted until the job was failed or cancelled, by event time alone.

    The timer pages a hang once the processor's horizon passes the stall bound.
    A replay or a backfill reads the run's last step and its end together: the
    run's partition holds the horizon back (it delivered within a minute of wall
    time), the end comes first, and the hang went unpaged. The end event's own
    time says how long the run was silent before it was ended: the same rule, on
    the same bound, judged at the end. Live, the timer paged it already (the
    alert is one-shot); a run that succeeded after a long final phase is not
    judged (it was not hung).
    """
    floor = stall_floor(s, cfg)
    median = step_period(s)
    if not s.last_step_at_ms or not math.isfinite(median) or median <= 0:
        return []
    # judged when the timer would have paged it live (just past the bound), so that the
    # finding correlates with the same evidence (an XID just before the hang, not the end)
    due = s.last_step_at_ms + int(max(cfg.stall_k * median, float(floor))) + 1
    if at < due:
        return []
    f = rules.stalled(s.last_step_at_ms, median, due, cfg.stall_k, floor)
    return emit(s, cfg, f, now, one_shot=True) if f else []


OFF_GPUS_KEPT = 4


def _released(s: RunState, state: str, at: int) -> None:
    """Keep the run's stretches off its GPUs (:data:`OFF_GPUS_KEPT` of them).

    Each runs from an end, a preemption or a requeue after the run ran (or from the
    latest event time the run has shown, if later: the scheduler's or the SDK's clock
    may lag its other producers'), to its next ``running``;
    :func:`~runwatch.core.stream.join_node.node_agg` drops the node readings stamped
    inside one.
    """
    open_gap = s.off_gpus[-1] if s.off_gpus and not s.off_gpus[-1][1] else None
    if state in ENDED or (state in NOT_RUNNING and s.started_at_ms is not None):
        if open_gap is None:  # no earlier than the run's own latest event: a producer
            s.off_gpus.append([max(at, s.watermark_ms), 0])  # clock may lag (a fixed one)
            del s.off_gpus[:-OFF_GPUS_KEPT]
    elif state == "running" and open_gap is not None and at > open_gap[0]:
        open_gap[1] = at


def ended_at(s: RunState) -> int:
    """Return the event time the run ended at (it last stopped running); 0 if it has not."""
    if s.job_state in ENDED and s.off_gpus and not s.off_gpus[-1][1]:
        return int(s.off_gpus[-1][0])
    return 0


def _subscribed(s: RunState, uri: str, ref: str) -> None:
    if [uri, ref] not in s.dataset_keys:
        s.dataset_keys.append([uri, ref])


DATA_ANSWER_WAIT_MS = 60_000
"""How long (the processor's clock) a dataset the run subscribed to waits for the data
agent's answer before ``rule:missing_data_report`` judges it without one: the answer comes
within seconds, unless the data agent is of a release that sends none."""


def _asked(s: RunState, ref: str, now: int) -> None:
    """Count a subscription the runs agent sent the data agent for a manifest dataset.

    ``signals["data_asked"]``: reference → [subscriptions not answered yet, when the
    latest was sent (processor clock)].
    """
    asked: dict[str, list[int]] = s.signals.setdefault("data_asked", {})
    asked[ref] = [asked.get(ref, [0])[0] + 1, now]


def data_answered(s: RunState, ack: DataAck) -> None:
    """Fold the data agent's answer to a subscription: its kept reports have been sent.

    They were sent before the answer on the same partition, so the run has them
    (or the dataset had none): from now on a missing report is missing, however far
    the input's event time ran ahead while the answer was on its way (a backfill).
    """
    asked = s.signals.get("data_asked")
    entry = asked.get(ack.ref) if asked else None
    if asked is None or entry is None:
        return  # not asked by this state (an older release's manifest, or asked twice)
    if entry[0] > 1:
        entry[0] -= 1
    else:
        del asked[ack.ref]
        if not asked:
            del s.signals["data_asked"]


def awaiting_answer(s: RunState, now_ms: int) -> set[str]:
    """Return the dataset references still waiting for the data agent's answer."""
    asked = s.signals.get("data_asked")
    if not asked:
        return set()
    return {ref for ref, (_n, since) in asked.items() if now_ms - since < DATA_ANSWER_WAIT_MS}


def retire_due(s: RunState, cfg: RunConfig, horizon_ms: int) -> bool:
    """Return whether a run's state is to be retired (deleted) now.

    An ended run once the input's event time is ``ended_retention_ms`` past its last
    event (``release_retention_ms`` for a run with a gate decision or a model artifact:
    a registration or a gate check days later is judged against it); a run that never
    ended (a job killed before its end event) once it is ``silent_retention_ms`` past it;
    a run never seen whose held events were dropped at once (it keeps nothing). Never
    while events of it are held or an alert waits for its correlation delay.
    """
    if s.pending or s.waiting:
        return False
    if not s.known:
        return cfg.ended_retention_ms > 0
    last = max(s.watermark_ms, s.first_at_ms, s.manifest_at_ms)
    keep = cfg.ended_retention_ms if ended_at(s) else cfg.silent_retention_ms
    if keep and ("gates" in s.signals or "models" in s.signals):
        # release evidence: a model is promoted, and its gate checked, days after training
        keep = max(keep, cfg.release_retention_ms) if cfg.release_retention_ms else 0
    return keep > 0 and last > 0 and horizon_ms - last > keep


def retire(s: RunState, cfg: RunConfig, now_ms: int, horizon_ms: int) -> list[Output]:
    """Resolve the firing alerts of a run whose state is being retired."""
    if not s.alerts.get("entries"):
        return []
    book = AlertBook.from_state(s.alerts)
    out: list[Output] = list(alerting.resolve_all(book, context(s, cfg), now_ms, horizon_ms))
    s.alerts = book.to_state()
    return out


def _manifest(s: RunState, e: RunManifest, at: int, now: int, cfg: RunConfig) -> list[Output]:
    s.known = True
    refs = manifest_refs(e.datasets)
    if s.manifest_at_ms:  # a later manifest: a dataset it names first waits from its time
        named = s.signals.pop("named_at", {})
        later = {r: named[r] if r in named else at for r in refs
                 if r in named or r not in s.datasets}
        if later:
            s.signals["named_at"] = later
    s.manifest_at_ms = s.manifest_at_ms or at  # event time: judged against the horizon
    s.datasets = refs
    for uri, ref in manifest_keys(e.datasets):  # the data agent's subscriptions of the run
        _subscribed(s, uri, ref)
        _asked(s, ref, now)
    s.image = e.image_digest or s.image
    s.team = e.team or s.team
    s.family = e.experiment_family or s.family
    resumed = s.signals.get("resumed_from") or []
    if e.resumed_from_checkpoint and e.resumed_from_checkpoint not in resumed:
        s.signals["resumed_from"] = [*resumed, e.resumed_from_checkpoint][-8:]
    if e.hardware is not None:
        s.gpu_model = e.hardware.gpu_model or s.gpu_model
        s.gpu_count = e.hardware.gpu_count or s.gpu_count
    out = join_lineage.manifest_lineage(s, e, at, now, cfg)  # rule:lineage_mutated
    f = rules.image_allowed(s.image or "", cfg.image_allow_list, at, cfg.image_missing)
    return out + (emit(s, cfg, f, now, one_shot=True) if f else [])


def _data(s: RunState, e: DataQualityReport, at: int, now: int, cfg: RunConfig,
          bl: Baseline | None) -> list[Output]:
    out: list[Output] = []
    ref = report_ref(e)
    if e.run_id == s.run_id:  # a report naming its run subscribes the run to its dataset
        _subscribed(s, e.dataset_uri, ref)
    prev = s.reports.get(ref)
    labels = dict(e.label_distribution)
    ids = [*(prev or {}).get("ids", []), e.event_id][-REPORT_IDS:]
    hist, found = datachecks.check((prev or {}).get("hist"), e, ref, at)
    rej = [*(prev or {}).get("rej", []), [e.row_count + e.rejected_samples, e.rejected_samples]]
    while len(rej) > 1 and sum(t for t, _ in rej[1:]) >= REJECT_POOL_ROWS:
        rej.pop(0)  # the latest reports holding at least REJECT_POOL_ROWS samples
    s.reports[ref] = {"rows": e.row_count, "at_ms": at, "labels": labels, "ids": ids,
                      "hist": hist, "rej": rej[-REJECT_POOL_MAX:],
                      **_label_reference(s, prev, labels, e.row_count, at)}
    out += _report_hard_rules(s, e, at, now, cfg)
    # freshness, volume, duplicates, nulls, ranges against the dataset's history: judged on
    # each report, they resolve after healthy reports of the dataset (as the hard report
    # rules), not by quiet time, which fired and resolved them again on every report
    for f in found:
        out += emit(s, cfg, f, now, one_shot=False)
    fired = {f.indicator for f in found}
    for name in datachecks.SIGNALS:
        if name not in fired:
            out += clear_healthy(s, cfg, f"watch:{name}", name, now, subject=ref, at_ms=at)
    # a dataset the timer paged silent: its report with newer rows resolves it
    out += join_datasets.refreshed(s, cfg, ref, (prev or {}).get("hist"), hist, found, now, at)
    ref0 = s.reports[ref]
    # the partition that said so: its condition holds until that partition reports again
    # (runstate.evidence_at), whatever the dataset's other partitions say meanwhile
    part = {"partition": e.partition} if e.partition else {}
    shift = ind.label_balance_shift(labels, ref0["labels0"])
    if math.isfinite(shift) and shift > max(cfg.label_shift, ind.label_shift_noise(
            ref0["labels0"], ref0["rows0"], e.row_count)):
        out += emit(s, cfg, Finding("indicator:label_balance", "label_balance", "data", "warning",
                                    shift, cfg.label_shift, min(shift / (2 * cfg.label_shift),
                                                                1.0), at,
                                    f"Label balance of {ref} shifted by {shift:.2f}",
                                    subject=ref, alert=False, labels=part), now, one_shot=True)
    if e.drift is not None and e.drift.drifted_features:
        # evidence, not a page: against a fixed named baseline, daily and weekly cycles
        # and time-like columns mark features drifted for hours at a time
        names = ", ".join(e.drift.drifted_features[:5])
        out += emit(s, cfg, Finding("indicator:drift", "feature_drift", "data", "warning",
                                    float(len(e.drift.drifted_features)), 0.0, 0.5, at,
                                    f"Feature drift in {ref}: {names}", subject=ref,
                                    alert=False, labels=part), now, one_shot=True)
    # the run's rate: the latest REJECT_POOL_ROWS samples of each of its datasets pooled
    # (a run reading a dataset that always rejects 20 % beside one that rejects none swung
    # at every report), as much of it as the samples make sure of (one rejected row in a
    # batch of 10 moved it by 10 points)
    pooled = [p for r in s.reports.values() for p in r.get("rej", ())]
    rejected, total = sum(x for _, x in pooled), sum(t for t, _ in pooled)
    out += observe(s, cfg, "rejected_sample_rate", ind.rejected_sample_rate(rejected, total,
                                                                            sure=True),
                   at, now, bl, f"{rejected} of {total} samples rejected in the latest reports")
    return out


def _label_reference(s: RunState, prev: dict[str, Any] | None, labels: dict[str, float],
                     rows: int, at: int) -> dict[str, Any]:
    """Return the label mix the run started with: ``labels0``, ``rows0``, ``at0``.

    The latest report at the run's start (the data agent replays a dataset's stored
    reports oldest first), else its first: the dataset's oldest report made every run
    of a dataset whose mix changed long ago "shifted".
    """
    start = s.manifest_at_ms or s.first_at_ms
    if prev is None or (labels and prev.get("at0", 0) <= at <= start):
        return {"labels0": labels, "rows0": rows, "at0": at}
    return {"labels0": prev["labels0"], "rows0": prev.get("rows0", 0), "at0": prev.get("at0", 0)}


REJECT_POOL_ROWS = 200
"""Samples of a dataset's latest reports its share of the run's rejected-sample rate holds."""
REJECT_POOL_MAX = 50
"""Reports a dataset's share keeps at most (batches of a few rows)."""


def _report_hard_rules(s: RunState, e: DataQualityReport, at: int, now: int,
                       cfg: RunConfig) -> list[Output]:
    """Judge a report by itself: an empty partition, rows failing the schema.

    Also for a report too late for the dataset's history (its watermark moved on:
    another pipeline worker's reports, a spooled partition delivered late); it is
    dead-lettered for the history watches, but an empty partition is a fault
    whenever it is told.
    """
    out: list[Output] = []
    ref = report_ref(e)
    # judged per report: the alert stays firing while the dataset's reports keep failing
    # and resolves after healthy reports (the watches' hysteresis), not after 15 minutes
    # without a repeat (reports an hour apart fired and resolved every hour, then the
    # run's alert cap muted it)
    judged = ((rules.zero_rows(ref, e.row_count, at), "rule:zero_rows", "rows"),
              (rules.schema_failures(ref, e.schema_failures, e.row_count,
                                     cfg.schema_fail_share, at),
               "rule:schema_failures", "schema_failure_share"))
    for f, detector, indicator in judged:
        if f:
            out += emit(s, cfg, f, now, one_shot=False)
        else:
            out += clear_healthy(s, cfg, detector, indicator, now, subject=ref, at_ms=at)
            # read unversioned, a later version's healthy report is the dataset's too
            out += join_datasets.clear_versions(s, cfg, detector, indicator, e.dataset_uri,
                                                ref, now, at)
    return out


def tick(state: RunState, now_ms: int, cfg: RunConfig,
         horizon_ms: int | None = None) -> tuple[RunState, list[Output]]:
    """Evaluate the time-driven rules of a run (called from the processor's timer).

    Two clocks. The absence rules (stall, missing data reports, a job still
    queued past its deadline) and the quiet-time resolution of one-shot
    alerts compare the run's event times with ``horizon_ms``, the event time
    the processor's input has reached (:mod:`runwatch.core.stream.horizon`), so a
    processor catching up on a backlog judges absence by the data that did
    arrive. Held-event expiry and the correlation wait are the processor's
    own waits and use ``now_ms``, the wall clock.

    Args:
        state: The run state (updated in place and returned).
        now_ms: Current (wall-clock) time.
        cfg: Processor knobs.
        horizon_ms: The processor's event-time horizon (default ``now_ms``:
            for a caller whose clock is event time, e.g. a replay).

    Returns:
        The state and the records to publish.

    """
    s = state
    hz = now_ms if horizon_ms is None else horizon_ms
    out = expire_pending(s, cfg, now_ms)
    out += flush_waiting(s, cfg, now_ms, force=False)
    if not s.known:
        return s, out
    if "registry_wait" in s.signals:
        out += join_artifact.registry_due(s, now_ms, cfg)
    if s.job_state not in rules_ended():
        # no stall bound is below stall_min_ms: skip the median while the gap is shorter;
        # a job that is not running (preempted, queued again) is not stalled
        floor = stall_floor(s, cfg)
        if (s.last_step_at_ms and s.job_state not in NOT_RUNNING
                and hz - s.last_step_at_ms > floor):
            f = rules.stalled(s.last_step_at_ms, step_period(s), hz, cfg.stall_k, floor)
            if f:
                out += emit(s, cfg, f, now_ms, one_shot=True)
        elif (not s.last_step_at_ms and s.job_state not in NOT_RUNNING
              and (since := int(s.signals.get("restarted_at", 0)))):
            f = rules.stalled_after_restart(since, hz, restart_bound(s, cfg))
            if f:
                out += emit(s, cfg, f, now_ms, one_shot=True)
        if s.started_at_ms is None:
            # a start may still arrive up to the lateness allowed behind the horizon (a
            # scheduler hook's spool, a poller): only what is past it is surely queued
            f = rules.queue_deadline(s.queued_at_ms, None, hz - cfg.lateness_ms, s.deadline_ms)
            if f:
                out += emit(s, cfg, f, now_ms, one_shot=True)
    if s.manifest_at_ms:
        # an unversioned ref: any version; a stage that wrote the version (and did not
        # fail) reported it as data.report does (a pipeline of data.stage only)
        wrote = [ref for ref, st in (s.signals.get("stages") or {}).items() if st.get("wrote")]
        reported = covered_refs(s.datasets, [*s.reports, *wrote])
        waiting = awaiting_answer(s, now_ms)  # the data agent's reports may be on their way
        judged = [d for d in s.datasets if d not in waiting] if waiting else s.datasets
        # as of the run's end, if it ended: a run that ended before a report was due
        # (a three-minute job reading an hourly dataset) is not missing it
        until = min(hz, ended_at(s) or hz)
        missing = rules.missing_data_reports(judged, reported, s.manifest_at_ms, until,
                                             cfg.data_wait_ms, s.signals.get("named_at"))
        for f in join_datasets.stage_failures(s, missing):  # a failed stage: named
            out += emit(s, cfg, f, now_ms, one_shot=True)
        if s.job_state not in rules_ended() and s.job_state not in NOT_RUNNING:
            # a dataset whose reports stopped altogether (freshness is judged per report)
            out += join_datasets.silent_datasets(s, cfg, now_ms, hz, waiting)
    if s.alerts.get("entries"):
        book = AlertBook.from_state(s.alerts)
        out += alerting.expire(book, context(s, cfg), now_ms, cfg.policy, hz)
        s.alerts = book.to_state()
    return s, out


def tick_fingerprint(state: RunState) -> tuple[int, ...]:
    """Return a cheap summary of what :func:`tick` may change (to skip unchanged writes)."""
    last = max((e["last"] for e in state.evidence.values()), default=0)
    return (len(state.pending), len(state.waiting), state.dead_seq,
            int(state.alerts.get("seq", 0)), len(state.evidence), int(last))


def rules_ended() -> frozenset[str]:
    """Return the job states after which a run is finished (the node re-keyer's too)."""
    return ENDED


def finished_stats(state: RunState) -> dict[str, list[float]] | None:
    """Return the run's indicator statistics once it succeeded (for workload baselines).

    With them, under :data:`PAUSE_STAT`, the run's longest explained pause (a checkpoint
    write or an evaluation the steps stopped for and went on right after), if it had one.
    """
    if state.job_state != "succeeded":
        return None
    out = dict(state.stats)
    pause = float(state.signals.get("pause_ms", 0))
    if pause > 0:
        out[PAUSE_STAT] = [1, pause, 0.0]
    return out
