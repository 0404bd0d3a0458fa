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


def _flatten(
    files: Sequence[LabeledScores], cm: CostMatrix
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.int64], int, int]:
    """Concatenate the scorable rows of every file.

    Returns:
        ``(scores, sweep, window_id, n_windows, n_scorable)``: per scorable row
        its score, weighted value and corpus-wide window id (-1 outside); the
        number of windows, and of windows with at least one scorable row.

    """
    all_scores, all_sweep, all_wid = [], [], []
    n_windows = 0
    for f in files:
        sweep, wid = sweep_scores(len(f.scores), f.windows, cm)
        keep = np.arange(len(f.scores)) >= probation_length(len(f.scores))
        all_scores.append(np.asarray(f.scores, dtype=np.float64)[keep])
        all_sweep.append(sweep[keep])
        all_wid.append(np.where(wid[keep] >= 0, wid[keep] + n_windows, -1))
        n_windows += len(f.windows)
    scores = np.concatenate(all_scores) if all_scores else np.zeros(0)
    sweep = np.concatenate(all_sweep) if all_sweep else np.zeros(0)
    wid = np.concatenate(all_wid) if all_wid else np.zeros(0, dtype=np.int64)
    return scores, sweep, wid, n_windows, len(np.unique(wid[wid >= 0]))


def _result(
    profile: str, threshold: float, raw: float, null: float, perfect: float, counts: tuple[int, ...]
) -> ProfileResult:
    denom = perfect - null
    normalized = 100.0 * (raw - null) / denom if denom else 0.0
    tp, fp, fn = counts
    return ProfileResult(
        profile=profile,
        threshold=threshold,
        raw=raw,
        null=null,
        perfect=perfect,
        normalized=normalized,
        tp=tp,
        fp=fp,
        fn=fn,
    )


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
    scores, sweep, wid, n_windows, n_scorable = _flatten(files, cm)
    scorable = np.unique(wid[wid >= 0])
    null = -cm.fn * n_scorable
    perfect = cm.tp * n_windows
    order = np.argsort(-scores, kind="stable")
    s_sorted, sw_sorted, w_sorted = scores[order], sweep[order], wid[order]
    n = len(order)
    if n == 0:
        return _result(profile, math.inf, null, null, perfect, (0, 0, n_scorable))
    # What firing each row (in decreasing score order) adds to the total: its
    # FP weight outside windows; inside a window, how much it raises that
    # window's best detection so far (from -fn when it is the first).
    delta = np.where(w_sorted < 0, sw_sorted, 0.0)
    first = np.zeros(n, dtype=bool)
    for w in scorable.tolist():
        at = np.flatnonzero(w_sorted == w)
        best_so_far = np.maximum.accumulate(np.maximum(sw_sorted[at], -cm.fn))
        prev = np.concatenate(([-cm.fn], best_so_far[:-1]))
        delta[at] = best_so_far - prev
        first[at[0]] = True
    total = np.cumsum(np.concatenate(([null], delta)))[1:]
    # A threshold is a score value: only the last row of a run of equal scores counts.
    ends = np.flatnonzero(np.append(s_sorted[1:] != s_sorted[:-1], True))
    j = int(ends[int(np.argmax(total[ends]))])
    if not total[j] > null:
        return _result(profile, math.inf, null, null, perfect, (0, 0, n_scorable))
    in_window = w_sorted[: j + 1] >= 0
    tp = int(in_window.sum())
    detected = int(first[: j + 1].sum())
    best = (float(total[j]), float(s_sorted[j]), tp, j + 1 - tp, n_scorable - detected)
    raw, threshold, n_tp, n_fp, n_fn = best
    return _result(profile, threshold, raw, null, perfect, (n_tp, n_fp, n_fn))


def score_at_threshold(
    files: Sequence[LabeledScores], profile: str, threshold: float, cost: CostMatrix | None = None
) -> ProfileResult:
    """Score a corpus with a threshold chosen elsewhere (rows with score >= threshold fire).

    The held-out half of a cross-validation: nothing here is optimised.

    Args:
        files: Scores and windows of every file scored.
        profile: Profile name (key of :data:`PROFILES` unless ``cost`` is given).
        threshold: The detection threshold (``math.inf``: never fire).
        cost: Explicit weights, overriding the profile's.

    Returns:
        Raw, null, perfect and normalised scores at ``threshold`` (normalised
        is 0 when the files hold no window, where it is undefined).

    """
    cm = cost if cost is not None else PROFILES[profile]
    scores, sweep, wid, n_windows, n_scorable = _flatten(files, cm)
    fire = scores >= threshold
    fp_rows = fire & (wid < 0)
    raw = float(sweep[fp_rows].sum())
    hits = fire & (wid >= 0)
    best: dict[int, float] = {}
    for w, value in zip(wid[hits].tolist(), sweep[hits].tolist(), strict=True):
        best[w] = max(best.get(w, -math.inf), value)
    raw += sum(best.values()) - cm.fn * (n_scorable - len(best))
    counts = (int(hits.sum()), int(fp_rows.sum()), n_scorable - len(best))
    return _result(profile, threshold, raw, -cm.fn * n_scorable, cm.tp * n_windows, counts)


def score_corpus(files: Sequence[LabeledScores]) -> dict[str, ProfileResult]:
    """Optimise and score every profile of :data:`PROFILES`."""
    return {name: optimize_threshold(files, name) for name in PROFILES}
