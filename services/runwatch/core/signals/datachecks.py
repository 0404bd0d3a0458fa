"""Data-integrity signals of data-quality reports, judged against each dataset's own history.

Size: one judge per signal of a report (its band, its floor, its finding), all reading the
one history document of a (run, dataset); split, each would take that document apart.

A data-quality report (``runwatch.client.data.report``) carries freshness
lag, row count, duplicate rows, per-feature null shares and ranges. What is
normal for them depends on the dataset: a weekly snapshot's rows are days
old on every report, a sparse feature is mostly null, a nightly partition is
a hundred times a streaming micro-batch. So each signal is judged against the
history of the same dataset as this run has seen it (its reports, including
the stored first and recent ones replayed when the run starts), never
against an absolute bound:

========================  =========================================  =========
signal                    judged as                                  direction
========================  =========================================  =========
``freshness_lag``         lag (ms) of new data against its history   up
                          band; the newest row's age against twice
                          its usual refresh interval
``row_count``             log rows against its history band (one     both
                          per kind of partition: :func:`partition_kind`)
``duplicate_share``       duplicate rows / rows against its band     up
``null_share``            per feature, null share against its band   up
``feature_range``         per feature, batch min/max against the     out
                          range seen so far, widened by its width;
                          a non-negative feature's batch mean and     down
                          width, both below their bands (a unit change)
``partition_missing``     a partition reported on a cadence that     absent
                          stopped while the others go on
========================  =========================================  =========

A *band* (:class:`Band`) is an exponentially weighted mean and mean absolute
deviation of the signal. A value fires when it lies beyond
``max(K · σ, floor)`` from the mean, σ estimated from the deviation, once
the band holds :data:`MIN_HISTORY` reports. Learning is winsorized: a value
is learned clipped to the band, so a one-off outlier barely moves it, while a
lasting change fires and then becomes the dataset's new normal after a few
reports (each one moves the centre by ``ALPHA`` of the bound). Pure, and the
state is a small JSON document per (run, dataset).
"""

from __future__ import annotations

import math
import re
import zlib
from dataclasses import dataclass
from typing import Any, Literal

from runwatch.core.records import DataQualityReport
from runwatch.core.signals.rules import Finding

K = 4.0
"""Band half-width in σ: the level gates of the indicator watches use the same
(``indwatch.default_specs``, ``k=4``); a one-sided normal tail beyond it is 3e-5
per report and signal."""
SIGMA_PER_DEV = math.sqrt(math.pi / 2)
"""σ of a normal distribution per unit of mean absolute deviation."""
ALPHA = 0.2
"""Weight of the newest report in the band (memory of about 2/ALPHA - 1 = 9 reports);
the first reports are plain averages (weight 1/n until it falls below ALPHA)."""
MIN_HISTORY = 5
"""Reports of a dataset a band or range needs before it judges (fewer give no spread)."""
MIN_SHARE = 0.01
"""Least change of a share (duplicates, nulls) that fires: one row in a hundred more
than usual; below it a batch-to-batch wobble of a clean dataset is not worth a page."""
REL_FLOOR = 0.5
"""Least change of a freshness lag, relative to its usual value: a dataset whose
newest rows are half again as old as they usually are has missed an update."""
MIN_LAG_MS = 60_000
"""Least change of a freshness lag in ms (reports are per batch; seconds are jitter)."""
LAG_BACK = 8
"""Lags (of the latest reports that brought newer rows, the new one included) whose trend
:func:`lag_rising` judges: a consumer that falls 4 minutes behind at every fourth report
and holds in between rises over 8 of them as a line does."""
RISE_T = 3.0
"""A trend of the latest lags rises when its slope is this many standard errors above
zero (the residuals' own spread: a consumer's lag jittering by minutes either way); for
steady jitter, a one-sided chance of about 1 % per report with 6 degrees of freedom,
and such a report is merely not learnt."""
VOLUME_FACTOR = 2.0
"""Least change of the row count: half or twice the usual volume."""
RANGE_REL = 0.5
"""Least widening of a feature's range, relative to its magnitude (for a constant feature)."""
MAX_FEATURES = 32
"""Features followed per dataset (the first ones reported); bounds the run state."""

PART_K = 3.0
"""A partition reported on a cadence is missing past this many of its usual intervals."""
PART_REGULAR = 2.0
"""A partition's cadence is regular when its longest kept interval is less than this many
times their median (an hourly job whose run time varies from 5 to 20 minutes reports
45-75 minutes apart): one reported at irregular times (a random sample of shards each
cycle, a source that skips empty batches) has no cadence to miss, and is not judged."""
PART_KEPT = 8
"""Intervals between a partition's reports kept (their median is its cadence)."""
MAX_PARTITIONS = 128
"""Partitions followed per dataset; bounds the run state (each costs about 110 bytes of
the dataset's JSON history with its 8 intervals: 128 ``shard=NN`` partitions made 14 KB,
16 made 1.8 KB; longer names cost their length). At 16, a dataset of 17 shards or more
reported round-robin followed none: each report evicted the shard reported next, and no
shard built a cadence. Past the cap the followed set stays put (:func:`_evict`)."""
PART_GONE = 2 * PART_K
"""A followed partition not reported for this many of its usual intervals is gone (it
was missing past :data:`PART_K` and paged then): it is the first to make room."""

MAX_KINDS = 8
"""Row-count bands per dataset, one per kind of partition (:func:`partition_kind`); a
dataset's further kinds share one more band (a bound on the run state)."""
_VALUE = re.compile(r"[^/=_.:,\-\s]*[0-9][^/=_.:,\-\s]*")

SIGNALS = ("freshness_lag", "row_count", "duplicate_share", "null_share", "feature_range",
           "partition_missing")
"""The signals :func:`check` judges (``watch:<signal>``, one alert per dataset each)."""

Direction = Literal["up", "both"]


@dataclass(slots=True)
class Band:
    """Exponentially weighted mean and mean absolute deviation of one signal.

    ``score_one`` never changes the band; ``learn_one`` does. JSON state:
    ``[n, mean, dev]``.
    """

    n: int = 0
    mean: float = 0.0
    dev: float = 0.0

    @classmethod
    def from_state(cls, state: list[float] | None) -> Band:
        """Rebuild a band from :meth:`to_state` output (None: an empty band)."""
        if not state:
            return cls()
        return cls(int(state[0]), float(state[1]), float(state[2]))

    def to_state(self) -> list[float]:
        """Return the JSON state ``[n, mean, dev]``."""
        return [self.n, self.mean, self.dev]

    def bound(self, floor: float) -> float:
        """Return the distance from the mean beyond which a value fires."""
        return max(K * SIGMA_PER_DEV * self.dev, floor)

    def score_one(self, x: float, floor: float, direction: Direction = "up") -> float:
        """Return how far ``x`` lies beyond the band, in bounds (> 1 fires; 0: cold or NaN).

        Args:
            x: The value.
            floor: Least distance from the mean that counts (the signal's floor).
            direction: ``up`` judges rises only; ``both`` judges either way.

        """
        if self.n < MIN_HISTORY or not math.isfinite(x):
            return 0.0
        d = x - self.mean if direction == "up" else abs(x - self.mean)
        b = self.bound(floor)
        return max(d, 0.0) / b if b > 0 else (math.inf if d > 0 else 0.0)

    def learn_one(self, x: float, floor: float) -> None:
        """Fold ``x`` in, clipped to the band once it judges (winsorized); NaN is ignored."""
        if not math.isfinite(x):
            return
        if self.n >= MIN_HISTORY:
            b = self.bound(floor)
            x = min(max(x, self.mean - b), self.mean + b)
        a = max(ALPHA, 1.0 / (self.n + 1))
        self.dev += a * (abs(x - self.mean) - self.dev) if self.n else 0.0
        self.mean += a * (x - self.mean)
        self.n += 1


def range_width(lo: float, hi: float) -> float:
    """Return how far past ``[lo, hi]`` a feature's batch min/max may go.

    The range's width, and at least :data:`RANGE_REL` of its magnitude.
    """
    return max(hi - lo, RANGE_REL * max(abs(lo), abs(hi)), 1e-12)


RANGE_WIDTHS = 2.0
"""A batch's min or max pages beyond this many widths of the range seen: a unit change
(metres to centimetres) or a sentinel (-999) lands hundreds of widths out, while the
largest of a skewed feature's next batch (lognormal amounts) passed one width about once
in twenty runs of 20-row batches."""
RANGE_MIN_ROWS = 1_000
"""Rows a feature's range must have seen before it judges: the range of five 20-row
batches of a skewed feature is narrow, and the next batch's largest value passed it by
a width about once a run."""


def range_score(state: list[float] | None, lo: float, hi: float) -> float:
    """Return how far a batch's ``[lo, hi]`` lies outside a feature's range, in widths.

    Args:
        state: ``[n, min, max, rows]`` of the feature so far (None: unseen; a state
            without its rows, from an older release, judges by its reports alone).
        lo: The batch's minimum.
        hi: The batch's maximum.

    Returns:
        The excess in range widths (past :data:`RANGE_WIDTHS` it fires), 0 while the
        range is cold.

    """
    if not state or state[0] < MIN_HISTORY or (len(state) > 3 and state[3] < RANGE_MIN_ROWS):
        return 0.0
    w = range_width(state[1], state[2])
    return max(hi - state[2], state[1] - lo, 0.0) / w


def range_learn(state: list[float] | None, lo: float, hi: float,
                rows: int = RANGE_MIN_ROWS) -> list[float]:
    """Return the feature's range with a batch of ``rows`` rows folded in.

    Once it judges, the range widens by at most one width per batch.
    """
    if not state:
        return [1, lo, hi, rows]
    n, rlo, rhi = int(state[0]), state[1], state[2]
    seen = state[3] if len(state) > 3 else RANGE_MIN_ROWS
    if n >= MIN_HISTORY and seen >= RANGE_MIN_ROWS:
        w = range_width(rlo, rhi)
        lo, hi = max(lo, rlo - w), min(hi, rhi + w)
    return [n + 1, min(rlo, lo), max(rhi, hi), min(seen + rows, 10**9)]


SCALE_FACTOR = 8.0
"""Least change of a non-negative feature's scale, as a factor, that fires: a unit change
(milliseconds to seconds, grams to kilograms, a percent to a fraction) moves it a hundred
or a thousand times, while values shrinking into their old range (seconds where
milliseconds were) never leave it. A tenth is the coarsest unit step in use (mm to cm);
the factor sits a fifth under it so that a tenfold change fires with the batches' noise
to spare: at 10 exactly, the width of a 400-row batch divided by 10 (or 11) fell short of
its bound one time in two, and mm to cm paged nothing. Finer moves are the volume and
drift checks' business."""


SCALE_WIDTH_SHARE = 0.5
"""Share of its bound the width's fall must reach beside the mean's whole bound: a batch's
width is its extremes, and a 400-row batch's width divided by ten fell short of the bound
where its mean did not (an identifier block near zero moves the mean alone, and its width
not at all)."""


SCALE_MIN_SPREAD = 3.0
"""Least spread of a batch (:func:`scale_spread`: how many widths of mass lie above its
minimum) the scale check judges or learns. The spread is at most the number of values
above the minimum (each adds at most one width) and a unit change leaves it as it was
(mean - min and max - min move by the same factor), so the threshold costs a unit change
nothing where the feature's batches are a sample of its scale, while a batch of one or two
non-zero values of a zero-inflated amount (about 3 % of 150-row batches: 0 to 10 of them)
never is one: its mean and width are those few values, and one small refund moved both
below their bands together (6 of 14 steady runs paged "changed scale"). 3 admits no batch
of fewer than three such values; at 2, one to three steady runs in a hundred still paged
(simulated: zero-inflated lognormal amounts, 1 to 50 % non-zero, 20- to 2,000-row batches,
72 batches a run), at 3 none of those whose values are lognormal with sigma 1."""


def scale_spread(f_min: float, f_max: float, mean: float, values: float) -> float:
    """Return a batch's spread: its mass above its minimum, in widths.

    ``values · (mean − min) / (max − min)`` (0 for a constant batch): 1 when a single
    value lies above the minimum, at most the number of values above it, and the same
    after a unit change (both differences move by its factor).
    """
    width = f_max - f_min
    return values * (mean - f_min) / width if width > 0.0 else 0.0


def scale_judge(state: list[list[float]] | None, f_min: float, f_max: float,
                mean: float | None, range_state: list[float] | None,
                values: float | None = None) -> tuple[float, list[list[float]] | None]:
    """Judge a non-negative feature's scale; return (excess, new state).

    A unit change multiplies every value: the batch's mean and its width (max - min)
    move by the same factor. Each has a band (:class:`Band`, floor
    ``log(SCALE_FACTOR)``) on a log scale, and the batch fires only when both lie
    below their bands: an identifier block near zero moves the mean alone, a small
    batch (a retry of late rows) narrows the width alone. A scale that grows is the
    range check's (the values leave the range seen); judged here, one outlier of a
    heavy-tailed count in a 20-row batch raised the mean and the width together.
    Followed while every batch of the feature was non-negative (a signed feature's
    mean can pass zero, where the log says nothing; a negative value ends it); judged
    once the feature's range has seen :data:`RANGE_MIN_ROWS` rows. A batch whose
    spread (:func:`scale_spread`) is under :data:`SCALE_MIN_SPREAD` is neither judged
    nor learnt: a zero-inflated feature's batch with one or two non-zero values is no
    sample of its scale, and the bands follow the batches that are.

    Args:
        state: The two bands' states (None: none yet; an empty list: a signed
            feature, no longer followed).
        f_min: The batch's minimum.
        f_max: The batch's maximum.
        mean: The batch's mean (None: not reported).
        range_state: The feature's range state before this batch (:func:`range_learn`).
        values: The batch's non-null values (None: unknown, not required).

    Returns:
        The excess in bounds (past 1 it fires) and the state to keep.

    """
    if state == [] or mean is None or not math.isfinite(mean):
        return 0.0, state
    if f_min < 0.0:
        return 0.0, []
    width = f_max - f_min
    if mean <= 0.0 or width <= 0.0:  # a constant batch: nothing to compare on a log scale
        return 0.0, state
    if values is not None and scale_spread(f_min, f_max, mean, values) < SCALE_MIN_SPREAD:
        return 0.0, state  # a few values above the minimum: no sample of the scale
    bands = [Band.from_state(b) for b in state] if state else [Band(), Band()]
    floor = math.log(SCALE_FACTOR)
    rows_seen = range_state[3] if range_state and len(range_state) > 3 else 0
    moves = []
    for band, x in zip(bands, (math.log(mean), math.log(width)), strict=True):
        if band.n >= MIN_HISTORY and rows_seen >= RANGE_MIN_ROWS:
            moves.append((x - band.mean) / band.bound(floor))
        band.learn_one(x, floor)
    excess = 0.0
    if len(moves) == 2 and moves[0] < 0 and moves[1] < 0:  # both shrank
        # the mean by its bound; the width, the noisier (a batch's extremes), by half of it
        excess = min(-moves[0], -moves[1] / SCALE_WIDTH_SHARE)
    return excess, [b.to_state() for b in bands]


REFRESH_K = 2.0
"""A dataset whose newest row is older than this many of its usual refresh intervals has
missed its refreshes (a daily partition two days old): the lag band alone follows the lag's
climb between refreshes, so reports much more frequent than the refreshes (hourly reports
of a daily ETL) hid a pipeline that stopped."""
SILENT_K = PART_K
"""A dataset whose reports stopped altogether is silent past its usual delay and this many
refresh intervals, with no report for as many (:func:`reports_stopped`): a partition is
missing past as many of its own intervals. One more than :data:`REFRESH_K`, which judges
a report of old rows: between reports nothing says a report is more than late (a run
training 14 minutes past its 5-minute feed's last report paged at 2 intervals)."""
REFRESH_KEPT = 8
"""Intervals between refreshes a dataset keeps (their median is its usual interval; the
longest of them is a gap it has shown recently, :func:`_refresh_bound`): 8 intervals of a
business-day feed (five a week) always hold a weekend."""


FRESH_JITTER_MS = 1_000
"""A report brings newer rows when its newest row is later than the dataset's newest by
more than this (the stamp of a report and the reference of its lag may differ by clock
jitter when a producer computes the lag itself)."""


def refresh_overdue(h: dict[str, Any], at_ms: int, lag_ms: float
                    ) -> tuple[bool, float, float | None, tuple[float, float] | None]:
    """Follow when a dataset's newest row advances; say whether its age is past its bound.

    The newest row's time is the report's time less its freshness lag; the
    dataset's newest row is the latest of them over its reports (a report of an
    older partition, a backfill or a retry of the same batch brings no newer
    rows: the dataset is as fresh as its freshest data). Each time it
    advances, the interval since the previous advance (the dataset's refresh cadence:
    a day for a daily partition, minutes for a stream) and the lag then (the pipeline's
    own delay: rows land ten minutes after they happen) are kept (``h["refresh"]``:
    ``[newest row ms, [intervals], [lags at a refresh]]``, the latest
    :data:`REFRESH_KEPT`). The bound is the usual delay plus ``REFRESH_K`` intervals
    (or, when longer, the longest kept interval and one usual one, :func:`_refresh_bound`):
    without the delay, a stream reported every two minutes whose rows always land ten
    minutes late read as not refreshed for five intervals, on every report.

    Args:
        h: The dataset's history (updated in place).
        at_ms: The report's event time.
        lag_ms: Its freshness lag.

    Returns:
        Whether the report brought newer rows than the dataset had
        (:data:`FRESH_JITTER_MS`), the age of the dataset's newest row at ``at_ms``,
        its usual refresh interval (None until :data:`MIN_HISTORY` are known), and
        (the bound, the usual interval) when that age is past the bound, else None.

    """
    newest = int(at_ms - lag_ms)
    had = h.get("refresh")
    last, gaps, *kept = had or [newest, []]
    gaps, lags = list(gaps), list(kept[0]) if kept else []
    newer = not had or newest > last + FRESH_JITTER_MS
    if newest > last + MIN_LAG_MS:  # a refresh: rows newer than the dataset had
        gaps = [*gaps, newest - last][-REFRESH_KEPT:]
        lags = [*lags, int(lag_ms)][-REFRESH_KEPT:]
        last = newest
    last = max(last, newest)
    h["refresh"] = [last, gaps, lags]
    age = float(at_ms - last)
    cadence = _refresh_bound(gaps, lags)
    if cadence is None:
        return newer, age, None, None
    bound, usual = cadence
    return newer, age, usual, ((bound, usual) if age > max(bound, MIN_LAG_MS) else None)


def _refresh_bound(gaps: list[int], lags: list[int],
                   k: float = REFRESH_K) -> tuple[float, float] | None:
    """Return (bound on the newest row's age, usual refresh interval); None without a cadence.

    The bound is the usual delay (the median lag at the kept refreshes) plus ``k`` usual
    intervals (the median of the kept intervals, once :data:`MIN_HISTORY` are known),
    or plus the longest kept interval and one usual interval when that is longer: a gap
    the dataset has shown among its latest :data:`REFRESH_KEPT` refreshes is its normal
    range. A business-day feed (daily at 06:00 and up to an hour late, nothing on
    weekends) refreshes every day but for a three-day gap each week, and the weekend
    and a late Monday passed 3 usual intervals (a page for a healthy feed every other
    week); its bound is now 4 days, while a daily feed without gaps keeps ``k`` days
    (its longest interval is a day and its jitter). A gap is learnt only by refreshes
    that end it, so a feed that stops raises no bound.
    """
    if len(gaps) < MIN_HISTORY:
        return None
    usual = float(sorted(gaps)[len(gaps) // 2])
    delay = sorted(lags)[len(lags) // 2] if lags else 0
    return delay + max(k * usual, max(gaps) + usual), usual


def reports_stopped(h: dict[str, Any], last_report_ms: int, at_ms: int
                    ) -> tuple[float, float, float, float] | None:
    """Say whether a dataset whose reports stopped is past its freshness bound at ``at_ms``.

    The wall-clock side of :func:`refresh_overdue`, which judges a report when it
    arrives: a dataset that stops being reported altogether is never judged there. It
    is past its bound when its newest row (``h["refresh"]``) is older than its usual
    delay and :data:`SILENT_K` refresh intervals (or its longest recent interval and one
    more, :func:`_refresh_bound`) and no report of it came for
    :data:`SILENT_K` intervals either (reports that keep coming with old rows are the
    report's own judgement). A dataset with no learned cadence yet (fewer than
    :data:`MIN_HISTORY` refreshes) is not judged.

    Args:
        h: The dataset's history (:func:`check` output).
        last_report_ms: Event time of its latest report.
        at_ms: The time judged at (the processor's event-time horizon).

    Returns:
        (the newest row's age, the bound, the usual interval, the time since the last
        report) when past the bound, else None.

    """
    kept = h.get("refresh")
    if not kept:
        return None
    last, gaps, *rest = kept
    cadence = _refresh_bound(list(gaps), list(rest[0]) if rest else [], SILENT_K)
    if cadence is None:
        return None
    bound, usual = cadence
    age, quiet = float(at_ms - last), float(at_ms - last_report_ms)
    if age > max(bound, MIN_LAG_MS) and quiet > SILENT_K * usual:
        return age, bound, usual, quiet
    return None


def lag_rising(lags: list[float]) -> bool:
    """Return whether a dataset's latest freshness lags keep rising (a consumer falling behind).

    The least-squares slope of the last :data:`LAG_BACK` lags (at least 4) rises over
    them by more than :data:`MIN_LAG_MS` and lies :data:`RISE_T` standard errors above
    zero, measured by the lags' own scatter about the line, not by the band's noise: the
    band's noise grew with each rise it learnt, so a lag that rose 2 minutes per report
    with a minute and a half of jitter was learnt once its first rises were.
    """
    ys = lags[-LAG_BACK:]
    n = len(ys)
    if n < 4:
        return False
    mx, my = (n - 1) / 2.0, sum(ys) / n
    sxx = sum((i - mx) ** 2 for i in range(n))
    slope = sum((i - mx) * (y - my) for i, y in enumerate(ys)) / sxx
    if slope * (n - 1) <= MIN_LAG_MS:
        return False
    resid = sum((y - my - slope * (i - mx)) ** 2 for i, y in enumerate(ys))
    se = math.sqrt(resid / (n - 2) / sxx)
    return se == 0.0 or slope > RISE_T * se


def _share_floor(mean: float, rows: int) -> float:
    p = min(max(mean, 1.0 / rows), 1.0)
    return max(MIN_SHARE, K * math.sqrt(p * (1 - p) / rows))  # at least the sampling noise


def _finding(indicator: str, ref: str, observed: float, expected: float, excess: float,
             at_ms: int, title: str, detail: str) -> Finding:
    return Finding(f"watch:{indicator}", indicator, "data", "warning", observed, expected,
                   min(excess / 2.0, 1.0), at_ms, title, detail, subject=ref)


def partition_kind(partition: str) -> str:
    """Return a partition's kind: its name with each part that holds a digit as ``*``.

    ``dt=2026-12-01/src=batch`` is ``dt=*-*-*/src=batch``, ``part-00017`` is ``part-*``:
    the partitions of one kind (a day's, a shard's) hold batches of one size, while kinds
    differ (a streaming micro-batch of 55 rows beside a nightly backfill of 20,000, a
    ``train`` split beside a ``val`` split). One row-count band per dataset paged the
    backfill every night and the next micro-batch resolved it.
    """
    return _VALUE.sub("*", partition)


def _rows_band(h: dict[str, Any], partition: str | None) -> tuple[str, str]:
    """Return the history key of a report's row-count band and its partition kind.

    The dataset's first kind keeps ``rows`` (a history of an older release goes on), and a
    report without a partition shares it; kinds past :data:`MAX_KINDS` share one band of
    their own (as every kind did before).
    """
    if not partition:
        return "rows", ""
    kind = partition_kind(partition)
    kinds = list(h.get("row_kinds") or ())
    if kind not in kinds:
        if len(kinds) >= MAX_KINDS:
            return "rows:*", ""
        kinds.append(kind)
        h["row_kinds"] = kinds
    if len(kinds) == 1:
        return "rows", ""  # one kind: the dataset's band, named as before
    return ("rows" if kind == kinds[0] else f"rows:{kind}"), kind


def check(hist: dict[str, Any] | None, e: DataQualityReport, ref: str,
          at_ms: int) -> tuple[dict[str, Any], list[Finding]]:
    """Judge a report's integrity signals against the dataset's history, then learn them.

    Args:
        hist: The dataset's history in this run (:func:`check` output; None: first report).
        e: The report.
        ref: Its dataset reference (``uri@version``).
        at_ms: Its event time.

    Returns:
        The updated history (JSON) and the findings that fire (signal ``data``).

    """
    h: dict[str, Any] = dict(hist or {})
    out: list[Finding] = []
    if e.partition:
        out += _partitions(h, e.partition, ref, at_ms)
    rows = int(e.row_count)
    if e.freshness_lag_ms is not None:
        # the lag band judges the delay of new data (reports that bring newer rows); a
        # report that brings none (an older partition, a backfill, a retry of the same
        # batch) is judged only by the age of the dataset's newest row against its cadence
        lag = float(e.freshness_lag_ms)
        band = Band.from_state(h.get("lag"))
        newer, age, every, overdue = refresh_overdue(h, at_ms, lag)
        # within one refresh interval of its usual lag, a dataset missed no refresh (a
        # quiet hour's newest event is older, though its partition landed on time)
        floor = max(REL_FLOOR * abs(band.mean), MIN_LAG_MS, every or 0.0)
        excess = band.score_one(lag, floor) if newer else 0.0
        if overdue is not None and excess <= 1:
            stale, every = overdue
            out.append(_finding("freshness_lag", ref, age, stale, age / stale, at_ms,
                                f"Data of {ref} is not being refreshed: newest row "
                                f"{age / 3_600_000:.3g} h old (it is usually refreshed every "
                                f"{every / 3_600_000:.3g} h)",
                                f"newest row age {age:.0f} ms (this report's lag "
                                f"{lag:.0f} ms); bound {stale:.0f} ms "
                                f"(its usual delay and {REFRESH_K:g} refresh intervals, or "
                                f"its longest recent interval and one more)"))
        if excess > 1:
            hours, usual = lag / 3_600_000, band.mean / 3_600_000
            out.append(_finding("freshness_lag", ref, lag, band.mean, excess, at_ms,
                                f"Data of {ref} is staler than usual: newest row "
                                f"{hours:.3g} h old (usually {usual:.3g} h)",
                                f"freshness_lag_ms={lag:.0f}; bound {band.bound(floor):.0f} ms"))
        if newer:
            # a lag that rose from the previous one by more than the band's noise is not
            # learnt: a step becomes the new normal once it stops rising, while a consumer
            # falling further behind at every report was learnt away as it fell; nor is one
            # that keeps rising over the latest reports (lag_rising): judged against the
            # previous lag alone, a lag rising 3.5 and 0.5 minutes at alternate reports
            # learnt each small rise, and the band followed the fall
            recent = [float(x) for x in h.get("lag_recent") or ()]
            if not recent and h.get("lag_prev") is not None:  # a state of an older release
                recent = [float(h["lag_prev"])]
            noise = max(K * SIGMA_PER_DEV * band.dev, MIN_LAG_MS)
            if band.n < MIN_HISTORY or not recent or (
                    lag - recent[-1] <= noise and not lag_rising([*recent, lag])):
                band.learn_one(lag, floor)
                h["lag"] = band.to_state()
            h["lag_recent"] = [*recent, lag][-(LAG_BACK - 1):]
            h.pop("lag_prev", None)
    if rows <= 0:
        return h, out  # nothing to compare: rule:zero_rows speaks for an empty batch
    log_rows = math.log(rows)
    key, kind = _rows_band(h, e.partition)
    band = Band.from_state(h.get(key))
    floor = math.log(VOLUME_FACTOR)
    excess = band.score_one(log_rows, floor, "both")
    if excess > 1:
        usual = math.exp(band.mean)
        like = f" in partitions like {kind}" if kind else ""
        out.append(_finding("row_count", ref, float(rows), usual, excess, at_ms,
                            f"Volume of {ref} changed: {rows} rows{like} (usually about "
                            f"{usual:.0f})",
                            f"row_count={rows}; bound x{math.exp(band.bound(floor)):.2f}"))
    band.learn_one(log_rows, floor)
    h[key] = band.to_state()
    dup = e.duplicate_rows / rows
    band = Band.from_state(h.get("dup"))
    floor = _share_floor(band.mean, rows)
    excess = band.score_one(dup, floor)
    if excess > 1:
        out.append(_finding("duplicate_share", ref, dup, band.mean, excess, at_ms,
                            f"Duplicate rows of {ref} rose to {dup:.1%} (usually {band.mean:.1%})",
                            f"duplicate_rows={e.duplicate_rows} of rows={rows}"))
    band.learn_one(dup, floor)
    h["dup"] = band.to_state()
    out += _features(h, e, ref, rows, at_ms)
    return h, out


def _features(h: dict[str, Any], e: DataQualityReport, ref: str, rows: int,
              at_ms: int) -> list[Finding]:
    nulls: dict[str, list[float]] = dict(h.get("nulls", {}))
    ranges: dict[str, list[float]] = dict(h.get("ranges", {}))
    scales: dict[str, list[list[float]]] = dict(h.get("scales", {}))
    null_hits: list[tuple[float, str, float, float]] = []
    range_hits: list[tuple[float, str, float, float, list[float]]] = []
    scale_hits: list[tuple[float, str, float, float]] = []
    for f in e.features:
        if f.name not in nulls and len(nulls) >= MAX_FEATURES:
            continue
        share = float(f.null_pct) / 100.0
        band = Band.from_state(nulls.get(f.name))
        floor = _share_floor(band.mean, rows)
        excess = band.score_one(share, floor)
        if excess > 1:
            null_hits.append((excess, f.name, share, band.mean))
        band.learn_one(share, floor)
        nulls[f.name] = band.to_state()
        if f.min is None or f.max is None or not (math.isfinite(f.min) and math.isfinite(f.max)):
            continue
        prev = ranges.get(f.name)
        excess = range_score(prev, f.min, f.max)
        if excess > RANGE_WIDTHS and prev is not None:
            range_hits.append((excess, f.name, f.min, f.max, prev))
        ranges[f.name] = range_learn(prev, f.min, f.max, rows)
        old_scale = scales.get(f.name)
        excess, scale = scale_judge(old_scale, f.min, f.max, f.mean, prev,
                                    rows * (1.0 - float(f.null_pct) / 100.0))
        if excess > 1 and old_scale:
            scale_hits.append((excess, f.name, float(f.mean or 0.0),
                               math.exp(old_scale[0][1])))
        if scale is not None:
            scales[f.name] = scale
    h["nulls"], h["ranges"], h["scales"] = nulls, ranges, scales
    out: list[Finding] = []
    if null_hits:
        excess, name, share, usual = max(null_hits)
        names = ", ".join(sorted(n for _, n, _, _ in null_hits))
        out.append(_finding("null_share", ref, share, usual, excess, at_ms,
                            f"Nulls in {ref}.{name} rose to {share:.1%} (usually {usual:.1%})",
                            f"features with more nulls than usual: {names}"))
    if range_hits:
        excess, name, lo, hi, prev = max(range_hits, key=lambda x: x[0])
        names = ", ".join(sorted({n for _, n, _, _, _ in range_hits}
                                 | {n for _, n, _, _ in scale_hits}))
        out.append(_finding("feature_range", ref, hi if hi > prev[2] else lo,
                            prev[2] if hi > prev[2] else prev[1], excess, at_ms,
                            f"{ref}.{name} left its range: [{lo:.4g}, {hi:.4g}] "
                            f"(seen [{prev[1]:.4g}, {prev[2]:.4g}])",
                            f"features outside their range or scale: {names}"))
    elif scale_hits:
        excess, name, mean, usual = max(scale_hits)
        names = ", ".join(sorted(n for _, n, _, _ in scale_hits))
        out.append(_finding("feature_range", ref, mean, usual, excess, at_ms,
                            f"{ref}.{name} changed scale: batch mean {mean:.4g} (usually "
                            f"about {usual:.4g}, x{mean / usual:.3g}; a unit change?)",
                            f"features off their scale: {names}"))
    return out


def _partitions(h: dict[str, Any], partition: str, ref: str, at_ms: int) -> list[Finding]:
    """Follow when each partition of a dataset is reported; find those that stopped.

    ``h["parts"]``: partition → ``[first seen ms, last reported ms, [intervals]]``
    (an interval counts from :data:`MIN_LAG_MS` on: the batches of one report cycle are
    one report). A partition that had a regular cadence (:data:`PART_REGULAR`, at least
    :data:`MIN_HISTORY` intervals) is missing when it is more than :data:`PART_K` of its
    intervals late, judged at a report of another partition that was itself reported on
    its cadence: the dataset goes on without it (a
    pipeline coming back from an outage reports its partitions one after another, and
    the first of them must not find the others missing). Every partition reported since
    the missing one's last report must keep a cadence too: a pipeline that reports a
    random sample of its shards each cycle gives a shard a regular-looking streak by
    chance, and then three cycles without it. A partition first seen after the missing
    one's last report (the next day's ``date=``, a resharding) replaced it: nothing is
    missing then.

    Returns:
        One finding naming the missing partitions (the latest-overdue first), or none.

    """
    parts: dict[str, list[Any]] = dict(h.get("parts", {}))
    mine = parts.get(partition)
    prev = mine[1] if mine else None
    if mine is None:
        mine = [at_ms, at_ms, []]
    elif at_ms > mine[1] + MIN_LAG_MS:
        mine = [mine[0], at_ms, [*mine[2], at_ms - mine[1]][-PART_KEPT:]]
    else:
        mine = [mine[0], max(mine[1], at_ms), mine[2]]
    parts[partition] = mine
    if len(parts) > MAX_PARTITIONS:
        del parts[_evict(parts, partition, at_ms)]
        if partition not in parts:  # not followed: the followed ones are all live
            h["parts"] = parts
            return []
    h["parts"] = parts
    own = _cadence(mine[2])
    if prev is None or own is None or at_ms - prev > PART_K * own:
        return []  # this partition was itself silent: the dataset may be resuming
    cadence = {name: _cadence(gaps) for name, (_, _, gaps) in parts.items()}
    missing = []
    for name, (_, last, _) in parts.items():
        usual = cadence[name]
        if (name == partition or usual is None
                or at_ms - last <= max(PART_K * usual, MIN_LAG_MS)
                or any(first > last or (later > last and cadence[other] is None)
                       for other, (first, later, _) in parts.items() if other != name)):
            continue
        missing.append((at_ms - last, name, usual))
    if not missing:
        return []
    age, name, usual = max(missing)
    names = ", ".join(sorted(n for _, n, _ in missing))
    return [_finding("partition_missing", ref, float(age), usual, age / (PART_K * usual),
                     at_ms, f"Partition {name} of {ref} is no longer reported: last "
                     f"{age / 60_000:.3g} min ago, usually every {usual / 60_000:.3g} min, "
                     "while the dataset's other partitions go on",
                     f"partitions missing: {names}")]


def _evict(parts: dict[str, list[Any]], partition: str, at_ms: int) -> str:
    """Return the partition to stop following when a new one (``partition``) passes the cap.

    The longest-gone partition (:data:`PART_GONE` of its usual intervals without a report:
    yesterday's ``date=`` partition); when none is gone, the one whose name hashes highest
    (CRC-32), the new one included: the followed set is then the same shards report after
    report (evicting the least recently reported, a dataset of more shards than the cap
    reported round-robin evicted each shard just before its next report, and none built a
    cadence), and a shard that stops stays followed until it is gone.
    """
    gone = [(last, name) for name, (_, last, gaps) in parts.items()
            if name != partition and gaps
            and at_ms - last > PART_GONE * sorted(gaps)[len(gaps) // 2]]
    if gone:
        return min(gone)[1]
    return max(parts, key=lambda name: (zlib.crc32(name.encode()), name))


def _cadence(gaps: list[int]) -> float | None:
    """Return a partition's usual interval between reports; None without a regular one."""
    if len(gaps) < MIN_HISTORY:
        return None
    usual = float(sorted(gaps)[len(gaps) // 2])
    return usual if max(gaps) < PART_REGULAR * usual else None
