"""NAB scoring, implemented from the published rules and NAB's sweeper.

Follows NAB v1.1 (``nab/sweeper.py``, ``nab/runner.py``, ``config/profiles.json``):

* probationary period: the first ``min(floor(0.15 * n), 0.15 * 5000)`` rows of
  each file are not scored;
* a row inside a window scores ``scaledSigmoid(-(right - i + 1) / width) *
  tp / scaledSigmoid(-1)``; only the best (earliest) detection of a window
  counts; a window without detection costs ``-fn``;
* a row outside any window that fires costs ``scaledSigmoid(|prev_right - i| /
  (prev_width - 1)) * fp``, i.e. less right after the preceding window, the
  full ``-fp`` before the first window or three widths past it;
* detections are ``score >= threshold``; the threshold is chosen per detector
  and profile to maximise the corpus total (ties: the higher threshold);
* normalised score ``100 * (S - S_null) / (S_perfect - S_null)`` with
  ``S_perfect = tp * (number of windows)`` and ``S_null`` the score of a
  detector that never fires.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import numpy.typing as npt

PROBATION_FRACTION = 0.15


@dataclass(frozen=True, slots=True)
class CostMatrix:
    """Weights of one NAB application profile."""

    tp: float
    fp: float
    fn: float
    tn: float = 1.0


PROFILES: dict[str, CostMatrix] = {
    "standard": CostMatrix(tp=1.0, fp=0.11, fn=1.0),
    "reward_low_FP_rate": CostMatrix(tp=1.0, fp=0.22, fn=1.0),
    "reward_low_FN_rate": CostMatrix(tp=1.0, fp=0.11, fn=2.0),
}


@dataclass(frozen=True, slots=True)
class LabeledScores:
    """One file's detector scores beside its anomaly windows (row indices).

    Attributes:
        key: Data file key.
        scores: Anomaly score per row.
        windows: ``(left, right)`` inclusive row indices of each window, in order.

    """

    key: str
    scores: npt.NDArray[np.float64]
    windows: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class ProfileResult:
    """Best threshold and scores of one detector under one profile."""

    profile: str
    threshold: float
    raw: float
    null: float
    perfect: float
    normalized: float
    tp: int
    fp: int
    fn: int


def scaled_sigmoid(position: float) -> float:
    """NAB's scaled sigmoid: ``2 * sigmoid(-5 x) - 1``, and -1 from x >= 3."""
    if position >= 3.0:
        return -1.0
    return 2.0 / (1.0 + math.exp(5.0 * position)) - 1.0


def probation_length(n_rows: int, fraction: float = PROBATION_FRACTION) -> float:
    """Rows of the probationary period (NAB: ``min(floor(f * n), f * 5000)``)."""
    return min(math.floor(fraction * n_rows), fraction * 5000)


def window_indices(
    timestamps: Sequence[datetime], windows: Sequence[tuple[datetime, datetime]]
) -> tuple[tuple[int, int], ...]:
    """Map window limits to inclusive row indices (rows with start <= t <= end).

    Args:
        timestamps: Row timestamps, increasing.
        windows: Window limits.

    Returns:
        ``(left, right)`` per window that covers at least one row.

    """
    out = []
    for start, end in windows:
        left = bisect.bisect_left(timestamps, start)
        right = bisect.bisect_right(timestamps, end) - 1
        if right >= left:
            out.append((left, right))
    return tuple(out)


def sweep_scores(
    n_rows: int, windows: Sequence[tuple[int, int]], cost: CostMatrix
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """Per-row weighted score if the row fires, and its window (-1 outside).

    Args:
        n_rows: Rows in the file.
        windows: Inclusive row index windows, in order.
        cost: Profile weights.

    Returns:
        ``(sweep, window_id)`` arrays of length ``n_rows``.

    """
    max_tp = scaled_sigmoid(-1.0)
    sweep = np.empty(n_rows)
    wid = np.full(n_rows, -1, dtype=np.int64)
    prev_right: int | None = None
    prev_width = 0.0
    cursor = 0
    for w, (left, right) in enumerate(list(windows) + [(n_rows, n_rows)]):
        for i in range(cursor, min(left, n_rows)):
            if prev_right is None or prev_width <= 1:
                pos = 3.0
            else:
                pos = abs(prev_right - i) / (prev_width - 1)
            sweep[i] = scaled_sigmoid(pos) * cost.fp
        if left >= n_rows:
            break
        width = float(right - left + 1)
        for i in range(left, right + 1):
            sweep[i] = scaled_sigmoid(-(right - i + 1) / width) * cost.tp / max_tp
            wid[i] = w
        prev_right, prev_width = right, width
        cursor = right + 1
    return sweep, wid


def optimize_threshold(
    files: Sequence[LabeledScores], profile: str, cost: CostMatrix | None = None
) -> ProfileResult:
    """Pick the one threshold that maximises the corpus score under a profile.

    Args:
        files: Scores and windows of every file of the corpus.
        profile: Profile name (key of :data:`PROFILES` unless ``cost`` is given).
        cost: Explicit weights, overriding the profile's.

    Returns:
        The best threshold with raw, null, perfect and normalised scores.

    """
    cm = cost if cost is not None else PROFILES[profile]
    all_scores, all_sweep, all_wid = [], [], []
    n_windows = 0
    base = 0
    for f in files:
        sweep, wid = sweep_scores(len(f.scores), f.windows, cm)
        keep = np.arange(len(f.scores)) >= probation_length(len(f.scores))
        all_scores.append(np.asarray(f.scores, dtype=np.float64)[keep])
        all_sweep.append(sweep[keep])
        all_wid.append(np.where(wid[keep] >= 0, wid[keep] + base, -1))
        n_windows += len(f.windows)
        base += len(f.windows)
    scores = np.concatenate(all_scores) if all_scores else np.zeros(0)
    sweep = np.concatenate(all_sweep) if all_sweep else np.zeros(0)
    wid = np.concatenate(all_wid) if all_wid else np.zeros(0, dtype=np.int64)
    scorable = np.unique(wid[wid >= 0])
    null = -cm.fn * len(scorable)
    perfect = cm.tp * n_windows
    order = np.argsort(-scores, kind="stable")
    best = (null, math.inf, 0, 0, len(scorable))
    part = dict.fromkeys(scorable.tolist(), -cm.fn)
    total = null
    tp = fp = 0
    detected = 0
    s_sorted, sw_sorted, w_sorted = scores[order], sweep[order], wid[order]
    n = len(order)
    for j in range(n):
        w = int(w_sorted[j])
        if w < 0:
            total += float(sw_sorted[j])
            fp += 1
        else:
            tp += 1
            old = part[w]
            if old == -cm.fn:
                detected += 1
            new = max(old, float(sw_sorted[j]))
            total += new - old
            part[w] = new
        if j + 1 == n or s_sorted[j + 1] != s_sorted[j]:
            if total > best[0]:
                best = (total, float(s_sorted[j]), tp, fp, len(scorable) - detected)
    raw, threshold, n_tp, n_fp, n_fn = best
    denom = perfect - null
    normalized = 100.0 * (raw - null) / denom if denom else 0.0
    return ProfileResult(
        profile=profile,
        threshold=threshold,
        raw=raw,
        null=null,
        perfect=perfect,
        normalized=normalized,
        tp=n_tp,
        fp=n_fp,
        fn=n_fn,
    )


def score_corpus(files: Sequence[LabeledScores]) -> dict[str, ProfileResult]:
    """Optimise and score every profile of :data:`PROFILES`."""
    return {name: optimize_threshold(files, name) for name in PROFILES}
