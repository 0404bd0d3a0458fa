"""Learning and data signals through the public path (checked 2026-12-07 with independent
cases): a validation loss of small scale that overfits, the title of a decline of a negative
metric, and the drift of a row-id column read as the cause of a learning symptom.

Runs are published the way users publish them (``runwatch.init`` with an explicit clock,
``run.step``, ``run.validation``, ``runwatch.client.data.report`` with a pandas DataFrame)
and delivered live to :class:`~runwatch.processor.memory.MemoryProcessor`, each message as
its event time comes, the timer ticking in between.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sdk_kit import Clock, deliver_live, timed

import runwatch
from runwatch.adapters.publisher import CaptureTransport, Publisher
from runwatch.client import data
from runwatch.core.records import Alert, DatasetRef
from runwatch.processor.memory import MemoryProcessor

MIN = 60_000
DAY = 24 * 60 * MIN
T0 = (int(time.time() * 1000) // DAY - 60) * DAY  # midnight, 60 days ago


def live(t: CaptureTransport, tail_ms: int = MIN) -> list[Alert]:
    msgs = timed(t.messages)
    wall = Clock(msgs[0][0])
    m = MemoryProcessor(clock=wall)
    deliver_live(m, wall, msgs)
    end = msgs[-1][0]
    while wall.t < end + tail_ms:
        wall.t += 5_000
        m.tick(wall.t)
    assert [d.reason for d in m.dead] == []
    return [a for a in m.alerts if isinstance(a, Alert)]


def firing(alerts: list[Alert], detector: str) -> list[Alert]:
    return [a for a in alerts if a.status == "firing" and a.detector == detector]


# --- validation decline of a loss of small scale -----------------------------------------

def evaluated(metric: str, value: Callable[[int, random.Random], float], evals: int = 40,
              every: int = 100) -> list[Alert]:
    """A run of ``evals * every`` one-second steps evaluated every ``every`` steps."""
    t = CaptureTransport()
    clock = Clock(T0)
    run = runwatch.init("fam", run_id="v1", team="ml", transport=t, install_hooks=False,
                        capture_lineage=False, clock=clock)
    rng = random.Random(1)
    for i in range(evals * every):
        clock.t = T0 + (i + 1) * 1000
        run.step(i, loss=1.0 + rng.gauss(0, 0.02), lr=1e-3, grad_norm=1.0, samples=64,
                 step_ms=1000.0, loader_wait_ms=10.0)
        if (i + 1) % every == 0:
            run.validation(i, {metric: value((i + 1) // every - 1, rng)})
    run.finish("succeeded", now_ms=clock.t + 1000)
    return live(t)


def overfits(scale: float) -> Callable[[int, random.Random], float]:
    """Falls to its best by the 20th evaluation, then rises 10 % of it an evaluation."""
    def value(k: int, rng: random.Random) -> float:
        best = 1.0 + 3 * math.exp(-4)
        level = 1.0 + 3 * math.exp(-k / 5) if k < 20 else best * (1 + 0.1 * (k - 20))
        return scale * level * (1 + rng.gauss(0, 0.01))
    return value


@pytest.mark.parametrize("scale", [1.0, 0.002])
def test_an_overfitting_validation_loss_pages_whatever_its_scale(scale: float) -> None:
    """A validation MSE of normalised targets at 0.002 rose to four times its best and never
    paged: a decline had to pass 0.02 in the metric's own units (two points of a rate) too."""
    pages = firing(evaluated("val_mse", overfits(scale)), "rule:validation_decline")
    assert pages
    # the same evaluation at every scale (the 24th: the noise is bounded at 95 % confidence)
    assert pages[0].evidence[-1].detail == "step 2399"


def test_an_error_rate_keeps_its_floor_in_points() -> None:
    """A word error rate near 0.01 moving by a few tenths of a point is noise, not a decline."""
    assert not firing(evaluated("val_wer", lambda k, rng: 0.01 + 0.004 * rng.random()),
                      "rule:validation_decline")


def test_a_decline_of_a_negative_metric_names_its_best_with_its_sign() -> None:
    """A reward of -200 falling to -500 was titled "declined to -498 from 193.7"."""
    pages = firing(evaluated("val_reward", lambda k, rng: (-200.0 if k < 20 else -500.0)
                             + rng.gauss(0, 3)), "rule:validation_decline")
    assert pages
    assert "from -19" in pages[0].title and pages[0].expected < 0


# --- a row-id column against a drift baseline --------------------------------------------

FAULT = T0 + 25 * 10 * MIN + 1000
"""Where the loss goes NaN (or the data shifts), between the 26th and 27th report."""


def rows(nrng: np.random.Generator, k: int, shift: float = 0.0) -> pd.DataFrame:
    """500 rows: an auto-increment id, a numeric feature, a category, a label."""
    return pd.DataFrame({"id": np.arange(k * 500, (k + 1) * 500),
                         "x": nrng.normal(10 + shift, 2, 500),
                         "cat": nrng.choice(["a", "b", "c"], 500),
                         "y": nrng.integers(0, 2, 500)})


def nan_cause(shift_at: int | None, tmp_path: Any) -> list[str]:
    """A run that reads the dataset, whose loss goes NaN 2 minutes after ``FAULT``; its
    reports (every 10 minutes, against the named baseline ``ref``) shift ``x`` from the
    ``shift_at``-th on. Return the causes the NaN page named."""
    t = CaptureTransport()
    pub = Publisher(t, kind="sdk")
    run = runwatch.init("fam", run_id="d1", transport=t, install_hooks=False,
                        capture_lineage=False, clock=lambda: T0,
                        datasets=[DatasetRef(uri="s3://d", version="v1")])
    at, step = T0 + 10_000, 0
    while at <= T0 + 41 * 10 * MIN:
        step += 1
        loss = math.nan if at > FAULT + 2 * MIN else 1.0 + 0.01 * math.sin(step)
        run.step(step, loss=loss, lr=1e-3, grad_norm=1.0, samples=64, step_ms=1000.0,
                 now_ms=at)
        at += 10_000
    run.finish("failed", now_ms=at)
    nrng = np.random.default_rng(3)
    for k in range(40):
        shift = 4.0 if shift_at is not None and k >= shift_at else 0.0
        data.report("s3://d", "v1", "all", rows(nrng, k, shift), baseline="ref",
                    publisher=pub, baseline_directory=tmp_path, now_ms=T0 + k * 10 * MIN + 1000)
    return [a.probable_cause for a in firing(live(t), "rule:non_finite")]


def test_a_row_id_column_does_not_make_data_the_cause_of_a_nan_loss(tmp_path) -> None:
    """Each batch's ids lie past the baseline's, so the id "drifted" at every report, and a
    NaN loss in a run whose data never changed was paged with probable cause ``data``."""
    assert nan_cause(None, tmp_path)[0] == "learning"


def test_a_feature_that_drifts_before_a_nan_loss_is_still_its_cause(tmp_path) -> None:
    assert nan_cause(25, tmp_path)[0] == "data"
