"""Leading indicators: pure functions over a run's recent telemetry.

Every function takes plain numbers or sequences (never records, never the
clock) and returns a float, so the run-state join, the detectors and the unit
tests all share one definition. Undefined values (empty input, zero
denominators) come back as ``nan``; callers skip non-finite indicators rather
than feeding them to detectors.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np

NAN = float("nan")

OccupancySource = Literal["sm_occupancy", "gpu_utilization"]
"""What an occupancy value was computed from: SM occupancy (NVML GPM / DCGM) or,
where no GPU of the reading has it, GPU utilization."""


def _ratio(num: float, den: float) -> float:
    if den <= 0 or not math.isfinite(num) or not math.isfinite(den):
        return NAN
    return num / den


def loader_share(loader_wait_ms: float, step_ms: float) -> float:
    """Share of a step spent waiting on the data loader.

    Args:
        loader_wait_ms: Time the step waited for its batch.
        step_ms: Total wall time of the step.

    Returns:
        A value in [0, 1] (clipped), or nan when ``step_ms`` is not positive.

    """
    share = _ratio(loader_wait_ms, step_ms)
    return share if math.isnan(share) else min(max(share, 0.0), 1.0)


def checkpoint_share(checkpoint_ms: float, wall_ms: float) -> float:
    """Share of the run's wall clock spent writing checkpoints.

    Args:
        checkpoint_ms: Sum of checkpoint durations in the window.
        wall_ms: Wall-clock length of the window.

    Returns:
        A value in [0, 1] (clipped), or nan when ``wall_ms`` is not positive.

    """
    share = _ratio(checkpoint_ms, wall_ms)
    return share if math.isnan(share) else min(max(share, 0.0), 1.0)


def recent_checkpoint_share(checkpoints: Sequence[Sequence[float]],
                            intervals: int) -> tuple[float, float]:
    """Checkpoint time and wall time of the run's last ``intervals`` checkpoint intervals.

    An interval runs from the end of one checkpoint to the end of the next, so
    the share ``checkpoint_ms / wall_ms`` is the part of recent wall-clock time
    spent writing checkpoints. A share since the run began would dilute a
    growing checkpoint in the run's history; a few intervals follow it, and
    more than one keeps an irregular cadence (an extra save after a good
    validation) from swinging it. The lead before the first checkpoint is no
    interval: it holds the run's start-up (queueing, loading, compilation) as
    well as training, so a run that loaded for 20 minutes and then saved every
    2 minutes read a share of 0.03 → 0.07 for its first saves against 0.25
    after, learnt the low one as its level and paged "checkpoint share trending
    up" hours into a healthy run.

    Args:
        checkpoints: ``[ended_at_ms, duration_ms]`` of recent checkpoints, by end time.
        intervals: Intervals in the window.

    Returns:
        ``(checkpoint_ms, wall_ms)`` over the window; ``(0, 0)`` for fewer than two
        checkpoints (no interval yet).

    """
    if len(checkpoints) < 2 or intervals < 1:
        return 0.0, 0.0
    window = checkpoints[-intervals:] if len(checkpoints) > intervals else checkpoints[1:]
    begin = checkpoints[-len(window) - 1][0]
    return float(sum(c[1] for c in window)), float(window[-1][0] - begin)


def gpu_utilization(util_pct: Sequence[float]) -> float:
    """Mean utilization of the run's own GPUs, as a fraction.

    Args:
        util_pct: Utilization of each GPU the run owns, in percent.

    Returns:
        Mean in [0, 1], or nan for no GPUs.

    """
    arr = np.asarray(util_pct, dtype=np.float64)
    arr = arr[np.isfinite(arr)]
    return float(np.clip(arr.mean() / 100.0, 0.0, 1.0)) if arr.size else NAN


def gpu_occupancy(sm_occupancy_pct: Sequence[float]) -> float:
    """Mean SM occupancy of the run's own GPUs, as a fraction.

    Args:
        sm_occupancy_pct: SM occupancy of each GPU the run owns, in percent.

    Returns:
        Mean in [0, 1], or nan for no GPUs.

    """
    return gpu_utilization(sm_occupancy_pct)


def occupancy_or_utilization(sm_occupancy_pct: Sequence[float | None],
                             util_pct: Sequence[float]) -> tuple[float, OccupancySource]:
    """Occupancy of the run's own GPUs, falling back to utilization where SM occupancy is null.

    SM occupancy counts when any GPU of the reading has it (the mean over those
    that do); when none has it (no GPM/DCGM on the node), the mean utilization
    stands in, so clusters without SM counters keep the leading indicator.
    Pure Python: a node has a handful of GPUs and this runs per node sample.

    Args:
        sm_occupancy_pct: SM occupancy of each GPU in percent, None where not measured.
        util_pct: Utilization of the same GPUs in percent.

    Returns:
        (mean as a fraction in [0, 1] or nan for no finite values, the source used).

    """
    sm = [x for x in sm_occupancy_pct if x is not None and math.isfinite(x)]
    if sm:
        return _pct_fraction(sm), "sm_occupancy"
    return _pct_fraction([x for x in util_pct if math.isfinite(x)]), "gpu_utilization"


def _pct_fraction(xs: list[float]) -> float:
    return min(max(sum(xs) / len(xs) / 100.0, 0.0), 1.0) if xs else NAN


def throughput(samples: float, duration_ms: float) -> float:
    """Training throughput in samples per second.

    Args:
        samples: Samples processed in the window.
        duration_ms: Length of the window.

    Returns:
        Samples per second, or nan when ``duration_ms`` is not positive.

    """
    return _ratio(samples * 1000.0, duration_ms)


def effective_batch_size(per_device_batch: float, world_size: float, grad_accum: float) -> float:
    """Return the samples contributing to one optimizer update.

    Args:
        per_device_batch: Micro-batch per device.
        world_size: Number of data-parallel workers alive.
        grad_accum: Gradient-accumulation steps.

    Returns:
        ``per_device_batch * world_size * grad_accum``; nan if any is negative.

    """
    if min(per_device_batch, world_size, grad_accum) < 0:
        return NAN
    return float(per_device_batch * world_size * max(grad_accum, 1))


def grad_norm_variance(grad_norms: Sequence[float]) -> float:
    """Step-to-step variance of the recent log gradient norms: unstable gradients, not a level.

    Half the mean squared difference between consecutive log norms (von Neumann's
    estimator of the variance around a local level, relative: norms of 250 and of 1
    with the same relative noise read the same, and a level 2.5 times higher after a
    warm restart, with noise in proportion, is no more unstable), leaving out the two
    largest differences. A plain variance of the window rose for as many steps as the
    window holds after any change of level (a learning-rate decay, a change of
    gradient accumulation, the end of warm-up: norms that settle from 1.0 to 0.3)
    and after one large norm (a hard batch), and paged healthy runs; a level
    change is one large difference and a lone large norm two, both left out.
    Unstable or exploding norms (many large differences) still raise it.

    Args:
        grad_norms: Recent gradient norms, oldest first.

    Returns:
        The variance estimate from the finite positive norms (squared log ratio, so 0.25
        is a step-to-step spread of about 50 %), or nan with fewer than four.

    """
    arr = np.asarray(grad_norms, dtype=np.float64)
    arr = arr[np.isfinite(arr) & (arr > 0)]
    if arr.size < 4:
        return NAN
    d2 = np.sort(np.diff(np.log(arr)) ** 2)[:-2]
    return float(d2.mean() / 2.0)


def loss_trend(steps: Sequence[float], losses: Sequence[float]) -> float:
    """Least-squares slope of loss against step, per 1,000 steps.

    Positive means the loss is rising.

    Args:
        steps: Step numbers.
        losses: Loss at each step (non-finite pairs are dropped).

    Returns:
        Slope per 1,000 steps, or nan with fewer than three usable points.

    """
    x = np.asarray(steps, dtype=np.float64)
    y = np.asarray(losses, dtype=np.float64)
    if x.shape != y.shape:
        msg = f"steps and losses differ in length: {x.size} != {y.size}"
        raise ValueError(msg)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if x.size < 3 or np.ptp(x) == 0:
        return NAN
    xc = x - x.mean()
    return float((xc @ (y - y.mean())) / (xc @ xc) * 1000.0)


def rejected_sample_rate(rejected: float, total: float, *, sure: bool = False) -> float:
    """Share of samples a data pipeline rejected.

    Args:
        rejected: Rejected samples.
        total: All samples seen (accepted plus rejected).
        sure: Return the least share the samples make sure of instead: the lower end of
            the Wilson interval at 3 standard deviations (10 samples with one rejected:
            0.5 %, not 10 %; 10,000 with 1,000: 9.1 %).

    Returns:
        A value in [0, 1], or nan when ``total`` is not positive.

    """
    rate = _ratio(rejected, total)
    if math.isnan(rate):
        return rate
    rate = min(max(rate, 0.0), 1.0)
    if not sure:
        return rate
    z2 = 9.0  # (3 sigma)^2
    centre = rate + z2 / (2 * total)
    spread = 3.0 * math.sqrt(rate * (1 - rate) / total + z2 / (4 * total * total))
    return max((centre - spread) / (1 + z2 / total), 0.0)


def restart_count(states: Sequence[str], attempts: Sequence[int] = ()) -> float:
    """Restarts of a run from its attempts and job-state transitions.

    A restart is a new attempt (the ``attempt`` number rising above 1) or a
    transition into ``retrying`` or ``preempted``; the count is the larger of
    the two, since a retry usually shows as both. A repeated ``running``
    state (a duplicate or a heartbeat) is not a restart.

    Args:
        states: Job states in arrival order.
        attempts: Attempt numbers seen (1-based).

    Returns:
        The number of restarts.

    """
    transitions = 0
    prev = ""
    for state in states:
        if state in ("retrying", "preempted") and state != prev:
            transitions += 1
        prev = state
    top = max((a for a in attempts), default=1)
    return float(max(transitions, top - 1, 0))


def queue_delay_ratio(queued_at_ms: int, started_at_ms: int, expected_ms: float) -> float:
    """Queue delay as a multiple of the expected delay.

    Args:
        queued_at_ms: When the job was queued.
        started_at_ms: When it started (or now, while still queued).
        expected_ms: The expected queue delay for this workload.

    Returns:
        ``delay / expected``; nan when ``expected_ms`` is not positive.

    """
    return _ratio(float(max(started_at_ms - queued_at_ms, 0)), expected_ms)


def label_shift_noise(baseline: dict[str, float], rows0: int, rows: int, k: float = 3.0) -> float:
    """Return the label-balance shift two samples of one distribution reach by chance.

    ``k`` standard deviations of the total-variation distance between a sample of
    ``rows`` and the reference of ``rows0`` drawn from the reference's shares: half
    the sum over labels of ``sqrt(p(1 - p)(1/rows + 1/rows0))``. Ten-row batches of an
    unchanged 70/30 label mix differ by 0.2 often; a fixed 0.15 bound marked them
    shifted, and the shift then explained a NaN loss as data.

    Args:
        baseline: Label -> share in the reference report.
        rows0: Rows of the reference report (0: unknown, no allowance).
        rows: Rows of the report judged (0: unknown, no allowance).
        k: Standard deviations.

    Returns:
        The distance (0 when a size is unknown).

    """
    if rows0 <= 0 or rows <= 0:
        return 0.0
    total = sum(v for v in baseline.values() if v > 0)
    if total <= 0:
        return 0.0
    inv = 1.0 / rows + 1.0 / rows0
    return k * 0.5 * sum(math.sqrt(max(p / total * (1 - p / total), 0.0) * inv)
                         for p in baseline.values() if p > 0)


def label_balance_shift(current: dict[str, float], baseline: dict[str, float]) -> float:
    """Total-variation distance between two label distributions.

    Args:
        current: Label → share (or count) now.
        baseline: Label → share (or count) in the reference.

    Returns:
        Distance in [0, 1]; nan when either side is empty.

    """
    cur_total = sum(v for v in current.values() if v > 0)
    base_total = sum(v for v in baseline.values() if v > 0)
    if cur_total <= 0 or base_total <= 0:
        return NAN
    labels = set(current) | set(baseline)
    return 0.5 * sum(
        abs(max(current.get(k, 0.0), 0.0) / cur_total - max(baseline.get(k, 0.0), 0.0) / base_total)
        for k in labels
    )


def median(values: Sequence[float]) -> float:
    """Median of the finite values.

    Args:
        values: Numbers.

    Returns:
        The median, or nan for no finite values.

    """
    vals = sorted(float(v) for v in values if math.isfinite(v))  # short lists: no numpy
    n = len(vals)
    if not n:
        return NAN
    mid = n // 2
    return vals[mid] if n % 2 else (vals[mid - 1] + vals[mid]) / 2.0
