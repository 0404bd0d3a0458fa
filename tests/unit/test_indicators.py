import math

import numpy as np
import pytest

from runwatch.core.signals import indicators as ind

NAN = float("nan")


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b)


@pytest.mark.parametrize(
    ("fn", "args", "expected"),
    [
        (ind.loader_share, (250.0, 1000.0), 0.25),
        (ind.loader_share, (0.0, 1000.0), 0.0),
        (ind.loader_share, (2000.0, 1000.0), 1.0),
        (ind.loader_share, (10.0, 0.0), NAN),
        (ind.checkpoint_share, (30_000.0, 600_000.0), 0.05),
        (ind.checkpoint_share, (1.0, -5.0), NAN),
        (ind.gpu_utilization, ([90.0, 70.0],), 0.8),
        (ind.gpu_utilization, ([],), NAN),
        (ind.gpu_utilization, ([NAN, 50.0],), 0.5),
        (ind.gpu_occupancy, ([40.0, 60.0, 80.0],), 0.6),
        (ind.throughput, (512.0, 2000.0), 256.0),
        (ind.throughput, (512.0, 0.0), NAN),
        (ind.effective_batch_size, (32.0, 8.0, 4.0), 1024.0),
        (ind.effective_batch_size, (32.0, 6.0, 0.0), 192.0),
        (ind.effective_batch_size, (-1.0, 8.0, 1.0), NAN),
        # half the mean squared log ratio of consecutive norms, less the two largest
        (ind.grad_norm_variance, ([1.0, 3.0, 5.0, 100.0],), math.log(5 / 3) ** 2 / 2),
        (ind.grad_norm_variance, ([1.0, 3.0, 5.0],), NAN),
        (ind.grad_norm_variance, ([1.0, NAN, 3.0, math.inf, 5.0, 0.0, 4.0, 6.0],),
         (math.log(4 / 5) ** 2 + math.log(6 / 4) ** 2) / 4),  # 0 has no log: left out
        (ind.grad_norm_variance, ([1.0, 2.0] * 5,), math.log(2) ** 2 / 2),  # every step swings
        # relative: the same swings of norms 250 times larger read the same
        (ind.grad_norm_variance, ([250.0, 500.0] * 5,), math.log(2) ** 2 / 2),
        (ind.loss_trend, ([0, 1000, 2000], [1.0, 2.0, 3.0]), 1.0),
        (ind.loss_trend, ([0, 500, 1000, 1500], [4.0, 3.0, 2.0, 1.0]), -2.0),
        (ind.loss_trend, ([0, 1], [1.0, 2.0]), NAN),
        (ind.loss_trend, ([5, 5, 5], [1.0, 2.0, 3.0]), NAN),
        (ind.rejected_sample_rate, (5.0, 100.0), 0.05),
        (ind.rejected_sample_rate, (0.0, 0.0), NAN),
        (
            ind.restart_count,
            (["queued", "running", "retrying", "running", "preempted", "running"],),
            2.0,
        ),
        (ind.restart_count, (["queued", "running", "succeeded"],), 0.0),
        (ind.restart_count, ([],), 0.0),
        # a repeated running state is not a restart
        (ind.restart_count, (["queued", "running", "running", "running"], [1, 1, 1]), 0.0),
        # a new attempt without a retrying/preempted state in between is one
        (ind.restart_count, (["running", "running"], [1, 2]), 1.0),
        (ind.restart_count, (["running", "retrying", "running"], [1, 2, 2]), 1.0),
        (ind.restart_count, (["running", "preempted", "preempted"], [1, 1, 1]), 1.0),
        (ind.restart_count, (["running", "retrying", "running", "retrying"], [1, 2, 2, 3]),
         2.0),
        (ind.queue_delay_ratio, (1000, 61_000, 30_000.0), 2.0),
        (ind.queue_delay_ratio, (1000, 500, 30_000.0), 0.0),
        (ind.queue_delay_ratio, (0, 10, 0.0), NAN),
        (ind.label_balance_shift, ({"a": 0.5, "b": 0.5}, {"a": 0.5, "b": 0.5}), 0.0),
        (ind.label_balance_shift, ({"a": 1.0}, {"b": 1.0}), 1.0),
        (ind.label_balance_shift, ({"a": 60, "b": 40}, {"a": 0.5, "b": 0.5}), 0.1),
        (ind.label_balance_shift, ({}, {"a": 1.0}), NAN),
        (ind.median, ([3.0, 1.0, 2.0, NAN],), 2.0),
        (ind.median, ([],), NAN),
    ],
)
def test_indicator_table(fn, args, expected) -> None:
    assert same(fn(*args), expected)


def test_loss_trend_matches_polyfit() -> None:
    rng = np.random.default_rng(3)
    x = np.arange(100, dtype=float)
    y = 0.002 * x + rng.normal(0, 0.1, 100)
    assert ind.loss_trend(x, y) == pytest.approx(np.polyfit(x, y, 1)[0] * 1000)


def test_loss_trend_rejects_mismatched_lengths() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        ind.loss_trend([1, 2, 3], [1.0, 2.0])


@pytest.mark.parametrize(
    ("sm", "util", "value", "source"),
    [
        ([40.0, 60.0], [90.0, 90.0], 0.5, "sm_occupancy"),
        ([None, None], [90.0, 70.0], 0.8, "gpu_utilization"),
        ([], [], NAN, "gpu_utilization"),
        # some GPUs without SM occupancy: the measured ones count
        ([None, 30.0], [95.0, 95.0], 0.3, "sm_occupancy"),
        # non-finite SM values count as missing
        ([NAN, None], [50.0, 30.0], 0.4, "gpu_utilization"),
        ([NAN, 20.0], [50.0, 30.0], 0.2, "sm_occupancy"),
        # clipped to [0, 1]
        ([None], [150.0], 1.0, "gpu_utilization"),
        ([None], [NAN], NAN, "gpu_utilization"),
    ],
)
def test_occupancy_or_utilization(sm, util, value, source) -> None:
    got, src = ind.occupancy_or_utilization(sm, util)
    assert src == source and same(got, value)
    if src == "sm_occupancy":
        assert same(got, ind.gpu_occupancy([x for x in sm if x is not None]))
    else:
        assert same(got, ind.gpu_utilization(util))


STEADY = [1.0, 1.02, 0.98, 1.01, 0.99, 1.0, 0.98, 1.02, 1.0, 0.99]


@pytest.mark.parametrize("norms", [
    STEADY[:5] + [x * 0.3 for x in STEADY[5:]],  # a new level (an LR decay)
    STEADY[:5] + [x * 2.5 for x in STEADY[5:]],  # a warm restart's higher level
    STEADY[:4] + [6.0] + STEADY[5:],  # one hard batch
])
def test_grad_norm_variance_is_not_raised_by_a_new_level_or_one_large_norm(norms) -> None:
    steady = ind.grad_norm_variance(STEADY)
    # under the watch's effect bound (rel_effect 3: four times the baseline); the plain
    # variance of these windows is 0.12 and 2.3, 600 and 12,000 times the steady one's
    assert ind.grad_norm_variance(norms) < 3 * steady
    assert ind.grad_norm_variance([1.0, 1.5, 0.6, 1.4, 0.5, 1.6, 0.7, 1.3, 0.4, 1.5]) > 100 * steady


def test_label_shift_noise_allows_for_small_samples() -> None:
    mix = {"0": 0.7, "1": 0.3}
    rng = np.random.default_rng(3)
    small = [ind.label_balance_shift({"1": float(k), "0": 10.0 - k}, mix)
             for k in rng.binomial(10, 0.3, size=2000)]
    noise = ind.label_shift_noise(mix, 10, 10)
    assert max(small) > 0.15  # ten-row batches of the same mix: a fixed 0.15 marked them
    assert sum(x > noise for x in small) <= 20  # under 1 % beyond the allowance
    assert ind.label_shift_noise(mix, 100_000, 100_000) < 0.01
    assert ind.label_shift_noise(mix, 0, 10) == 0.0
