"""The default univariate detector: ``runwatch bench nab``'s ``default``.

(The processor's indicator watches use :class:`~runwatch.core.detect.EWZScore`,
:class:`~runwatch.core.detect.TrendDetector` and ADWIN, not this ensemble.)

One configuration for every series (no per-series tuning). Per update it
computes three kinds of raw evidence, in pure Python at a few microseconds:

1. the z-score of the value against a long EW baseline (spikes, level shifts);
2. the z-score of the first difference against its own EW baseline (jumps,
   changes of texture);
3. the rarity of the value in a decayed histogram of the values seen so far.

Each raw score passes its own HTM-style likelihood layer
(:class:`~runwatch.core.detect.likelihood.Likelihood`), so each is judged
against its own usual level of surprise in this series; the score is the
maximum of the three. After a score of at least ``fire_level`` the next
``refractory`` updates are multiplied by ``damp`` (0 by default): repeated
alarms about the same event only add false positives. A score of at least
``known_from`` is multiplied by ``known_damp`` (0) when the move from the
previous value's histogram bin to this value's bin was already learned
``known_after`` (3) times: a recurring move (a daily jump, a periodic spike)
is the series' normal behaviour, as CAD OSE's context memory would predict.

Optional seasonal evidence (``season``: ``"day"``, ``"week"`` or
``"day+week"``; off by default): given each value's time (``score_one(x,
t_ms)``), a fourth raw evidence is the value's distance from its hour-of-day
(or hour-of-week) baseline (:class:`~runwatch.core.detect.seasonal.SlotBaseline`),
through its own likelihood layer. ``"day+week"`` uses the hour-of-day
baseline until the series spans two weeks, then the hour-of-week one. The
recurring-move gate does not apply to it: a familiar move at an unfamiliar
hour (a daily drop that does not come, a weekday level on a holiday) is what
it is for. Without a time the detector behaves exactly as without the option.

The score is in [0, 1]; it only uses the past. On NAB the configuration is
checked by leave-one-set-out cross-validation (:mod:`runwatch.bench.crossval`);
see the README's NAB section for what it chose and scored.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import ClassVar, Self

from runwatch.core.detect.base import State, check_finite, check_kind
from runwatch.core.detect.likelihood import Likelihood, tail_score
from runwatch.core.detect.seasonal import (
    DAY_SLOTS,
    HOUR_MS,
    MONDAY_OFFSET_H,
    WEEK_MS,
    WEEK_SLOTS,
    SlotBaseline,
)

_Z_SCALE = 4.0 * math.sqrt(2.0)  # raw = erf(z / (4 sqrt 2)): z = 4 → 0.68


@dataclass(frozen=True, slots=True)
class DefaultConfig:
    """The single configuration of :class:`DefaultDetector`."""

    long_fading: float = 0.002
    diff_fading: float = 0.01
    raw_short: int = 5
    lik_fading: float = 0.002
    lik_warmup: int = 300
    lik_min_std: float = 1e-3
    fire_level: float = 0.5
    refractory: int = 150
    damp: float = 0.0
    min_n: int = 20
    bins: int = 32
    hist_decay: float = 0.9999
    spike_z: float = 10.0
    spike_min_n: int = 30
    known_after: int = 3
    known_damp: float = 0.0
    known_from: float = 0.3
    season: str = "day+week"


_TWO_WEEKS_MS = 2 * WEEK_MS
_NO_TIME = -0.5  # the cache's time entry when no time was given (never an integer ms)
_SEASONS = {
    "off": (),
    "day": (DAY_SLOTS,),
    "week": (WEEK_SLOTS,),
    "day+week": (DAY_SLOTS, WEEK_SLOTS),
}


_PAIR = 1 << 16
_PAIR_OFF = 1 << 15


def _pair(a: int, b: int) -> int:
    """Pack two histogram bins (``-2**15 <= bin < 2**15``) into one int key."""
    return (a + _PAIR_OFF) * _PAIR + (b + _PAIR_OFF)


def _layers(cfg: DefaultConfig) -> list[Likelihood]:
    return [
        Likelihood(cfg.raw_short, cfg.lik_fading, cfg.lik_warmup, cfg.lik_min_std) for _ in range(3)
    ]


@dataclass(slots=True)
class DefaultDetector:
    """The default ensemble (see the module docstring). Score before learn."""

    cfg: DefaultConfig = field(default_factory=DefaultConfig)
    n: int = 0
    prev: float = 0.0
    mean: float = 0.0
    sq: float = 0.0
    dmean: float = 0.0
    dsq: float = 0.0
    quiet: int = 0
    lo: float = 0.0
    hi: float = 0.0
    hist: dict[int, float] = field(default_factory=dict)
    hist_total: float = 0.0
    hist_scale: float = 1.0
    trans: dict[int, int] = field(default_factory=dict)
    layers: list[Likelihood] = field(default_factory=list)
    cache: list[float] = field(default_factory=list)
    seasons: list[SlotBaseline] = field(default_factory=list)
    slayer: list[Likelihood] = field(default_factory=list)
    t_first: int | None = None
    pbin: int | None = None

    uses_time: ClassVar[bool] = True

    def __post_init__(self) -> None:
        """Create the likelihood layers (and seasonal slots) of a fresh detector."""
        if not self.layers:
            self.layers = _layers(self.cfg)
        cfg = self.cfg
        if cfg.season not in _SEASONS:
            msg = f"season must be one of {sorted(_SEASONS)}, got {cfg.season!r}"
            raise ValueError(msg)
        if _SEASONS[cfg.season] and not self.seasons:
            self.seasons = [
                SlotBaseline(slots, cfg.long_fading, cfg.min_n) for slots in _SEASONS[cfg.season]
            ]
            self.slayer = _layers(cfg)[:1]

    def _season_at(self, t_ms: int) -> int:
        """Index of the seasonal baseline in use: the last one (week) once two weeks are seen."""
        t_first = self.t_first
        if t_first is not None and t_ms - t_first >= _TWO_WEEKS_MS:
            return len(self.seasons) - 1
        return 0

    def _seen(self, x: float) -> int:
        """Times the move from the previous value's bin to ``x``'s bin was learned."""
        return self.trans.get(_pair(self._prev_bin(), self._bin(x)), 0)

    def _prev_bin(self) -> int:
        """The previous value's bin (kept from its learning until the range widens)."""
        return self._bin(self.prev) if self.pbin is None else self.pbin

    def _bin(self, x: float) -> int:
        width = (self.hi - self.lo) / self.cfg.bins
        if width <= 0.0:
            return 0 if x == self.lo else (1 if x > self.lo else -1)
        return math.floor((x - self.lo) / width)

    def score_one(self, x: float, t_ms: int | None = None) -> float:
        """Return the anomaly score of ``x`` in [0, 1], without learning it.

        Args:
            x: The value.
            t_ms: Its time (UTC epoch ms), optional: with ``season`` on, the value
                is also judged against its hour-of-day (or -week) baseline.

        """
        x = float(x)
        if x - x != 0.0:  # NaN or infinite
            check_finite(x)
        if self.n < self.cfg.min_n:
            return 0.0
        return self._score(x, t_ms)

    def _score(self, x: float, t_ms: int | None) -> float:
        """Score a finite ``x`` (cached: ``learn_one`` reuses the score of the same value).

        The raw evidence (value z, difference z, rarity, seasonal distance) is
        cached with the score for ``learn_one``. The likelihood layers are
        combined by their largest tail argument (one tail evaluation, see
        :meth:`Likelihood.tail_arg`).
        """
        cache = self.cache
        t_key = _NO_TIME if t_ms is None else float(t_ms)
        if len(cache) == 10 and cache[0] == self.n and cache[1] == x and cache[9] == t_key:
            return cache[8]
        mean = self.mean
        var = self.sq - mean * mean
        eps = 1e-9 * (abs(mean) + 1e-9)
        scale = math.sqrt(var) if var > 0.0 else 0.0
        if scale < eps:
            scale = eps
        z_val = abs(x - mean) / scale
        r_val = math.erf(z_val / _Z_SCALE)
        dmean = self.dmean
        dvar = self.dsq - dmean * dmean
        dscale = math.sqrt(dvar) if dvar > 0.0 else 0.0
        if dscale < eps:
            dscale = eps
        r_diff = math.erf(abs(x - self.prev - dmean) / (dscale * _Z_SCALE))
        r_rare = 0.0
        if self.hist_total > 0.0:
            p = self.hist.get(self._bin(x), 0.0) / (self.hist_total * self.hist_scale)
            r_rare = -math.log10(p + 1e-4) / 4.0
            if r_rare > 1.0:
                r_rare = 1.0
        r_season = 0.0
        seasons = self.seasons
        if seasons and t_ms is not None:
            hour = t_ms // HOUR_MS + MONDAY_OFFSET_H
            r_season = seasons[self._season_at(t_ms)].raw(x, hour, eps, _Z_SCALE)
        score = self._combine(r_val, r_diff, r_rare, z_val, x, r_season)
        self.cache = [float(self.n), x, r_val, r_diff, r_rare, z_val, x, r_season, score, t_key]
        return score

    def _combine(
        self, r_val: float, r_diff: float, r_rare: float, z_val: float, x: float, r_season: float
    ) -> float:
        """The score: the layers' max, the spike path, the silence, the gate, the seasonal layer."""
        cfg = self.cfg
        quiet = self.quiet
        if quiet > 0 and cfg.damp == 0.0:
            return 0.0  # silenced whatever the layers say
        value_layer, diff_layer, rare_layer = self.layers
        arg = value_layer.tail_arg(r_val)
        other = diff_layer.tail_arg(r_diff)
        if other > arg:
            arg = other
        other = rare_layer.tail_arg(r_rare)
        if other > arg:
            arg = other
        score = tail_score(arg)
        if z_val > cfg.spike_z and value_layer.n >= cfg.spike_min_n:
            spike = 1.0 - 0.5 * cfg.spike_z / z_val
            if spike > score:
                score = spike
        if quiet > 0:
            return score * cfg.damp
        gated = False
        if cfg.known_after and score >= cfg.known_from and self._seen(x) >= cfg.known_after:
            score *= cfg.known_damp
            gated = True
        if self.slayer:
            other = self.slayer[0].tail_arg(r_season)
            if other > arg or gated:  # else its score is at most the layers' (monotone)
                season = tail_score(other)
                if season > score:
                    score = season
        return score

    def learn_one(self, x: float, t_ms: int | None = None) -> None:
        """Fold ``x`` into the baselines, the likelihood layers and the refractory clock.

        Args:
            x: The value.
            t_ms: Its time (UTC epoch ms), optional (see :meth:`score_one`).

        """
        x = float(x)
        if x - x != 0.0:  # NaN or infinite
            check_finite(x)
        cfg = self.cfg
        n = self.n
        warm = n >= cfg.min_n
        if warm:
            score = self._score(x, t_ms)
            cache = self.cache
            value_layer, diff_layer, rare_layer = self.layers
            value_layer.learn(cache[2])
            diff_layer.learn(cache[3])
            rare_layer.learn(cache[4])
            if self.slayer and t_ms is not None:
                self.slayer[0].learn(cache[7])
            if self.quiet > 0:
                self.quiet -= 1
            elif score >= cfg.fire_level:
                self.quiet = cfg.refractory
        if n == 0:
            self.mean, self.sq = x, x * x
            self.dmean = self.dsq = 0.0
        else:
            a = cfg.long_fading if warm else 1.0 / (n + 1)
            b = 1 - a
            self.mean = a * x + b * self.mean
            self.sq = a * x * x + b * self.sq
            d = x - self.prev
            c = cfg.diff_fading if warm else 1.0 / n
            b = 1 - c
            self.dmean = c * d + b * self.dmean
            self.dsq = c * d * d + b * self.dsq
        seasons = self.seasons
        if seasons and t_ms is not None:
            if self.t_first is None:
                self.t_first = t_ms
            hour = t_ms // HOUR_MS + MONDAY_OFFSET_H
            at = self._season_at(t_ms)
            seasons[at].learn(x, hour)
            if at + 1 < len(seasons):  # a baseline given up for a longer cycle stops learning
                seasons[at + 1].learn(x, hour)
        bx = self._learn_hist(x)
        if n > 0 and cfg.known_after:
            pbin = self.pbin  # None when the histogram was just widened
            key = _pair(self._bin(self.prev) if pbin is None else pbin, bx)
            trans = self.trans
            trans[key] = trans.get(key, 0) + 1
        self.prev = x
        self.pbin = bx
        self.n = n + 1

    def _learn_hist(self, x: float) -> int:
        """Count ``x`` in the decayed histogram (widening its range if needed); return its bin."""
        if self.n == 0:
            self.lo = self.hi = x
        elif x < self.lo or x > self.hi:
            self._rebin(min(self.lo, x), max(self.hi, x))
        d = self.cfg.hist_decay
        self.hist_total = self.hist_total * d + 1.0
        self.hist_scale /= d
        if self.hist_scale > 1e100:
            self.hist = {k: v / self.hist_scale for k, v in self.hist.items()}
            self.hist_scale = 1.0
        b = self._bin(x)
        self.hist[b] = self.hist.get(b, 0.0) + self.hist_scale
        return b

    def _rebin(self, lo: float, hi: float) -> None:
        """Widen the histogram range, moving old counts by their bin centres."""
        old_lo, old_width = self.lo, (self.hi - self.lo) / self.cfg.bins
        pad = 0.1 * (hi - lo)
        self.lo, self.hi = lo - pad, hi + pad
        self.pbin = None
        remap: dict[int, int] = {}

        def new_bin(b: int) -> int:
            if b not in remap:
                centre = old_lo + (b + 0.5) * old_width if old_width > 0 else old_lo
                remap[b] = self._bin(centre)
            return remap[b]

        moved: dict[int, float] = {}
        for b, c in self.hist.items():
            nb = new_bin(b)
            moved[nb] = moved.get(nb, 0.0) + c
        self.hist = moved
        trans: dict[int, int] = {}
        for key, count in self.trans.items():
            nk = _pair(new_bin(key // _PAIR - _PAIR_OFF), new_bin(key % _PAIR - _PAIR_OFF))
            trans[nk] = trans.get(nk, 0) + count
        self.trans = trans

    def to_state(self) -> State:
        """Return the state as a JSON-able dict (histogram keys as strings)."""
        skip = ("cfg", "hist", "trans", "layers", "seasons", "slayer")
        state = {f: getattr(self, f) for f in self.__slots__ if f not in skip}
        state["hist"] = {str(k): v for k, v in self.hist.items()}
        state["trans"] = {str(k): v for k, v in self.trans.items()}
        state["layers"] = [layer.to_state() for layer in self.layers]
        state["seasons"] = [season.to_state() for season in self.seasons]
        state["slayer"] = [layer.to_state() for layer in self.slayer]
        return {"kind": "default", "cfg": asdict(self.cfg), **state}

    @classmethod
    def from_state(cls, state: State) -> Self:
        """Rebuild from :meth:`to_state` output.

        Raises:
            ValueError: If the state is for another detector kind.

        """
        check_kind(state, "default")
        fields = {k: v for k, v in state.items() if k not in ("kind", "cfg")}
        fields["hist"] = {int(k): float(v) for k, v in fields["hist"].items()}
        fields["trans"] = {int(k): int(v) for k, v in fields.get("trans", {}).items()}
        fields["layers"] = [Likelihood.from_state(s) for s in fields["layers"]]
        fields["seasons"] = [SlotBaseline.from_state(s) for s in fields.get("seasons", [])]
        fields["slayer"] = [Likelihood.from_state(s) for s in fields.get("slayer", [])]
        return cls(cfg=DefaultConfig(**state["cfg"]), **fields)
