"""The default detector the processor runs on every indicator series.

One configuration for every series (no per-series tuning). Per update it
combines, in pure Python at a few microseconds:

1. spike evidence: the z-score of the value against a long EW baseline and of
   the first difference against its own EW baseline;
2. level-shift evidence: the short EW mean against the long baseline;
3. a likelihood layer like HTM's anomaly likelihood: the short average of the
   raw evidence against its long-run mean and spread, mapped to a Gaussian
   tail probability and a log scale, so each series is judged against its
   own usual level of surprise;
4. a direct spike path: a z-score above ``spike_z`` (20) scores at least
   ``1 - spike_z / z`` even when the likelihood layer is slow to react;
5. a refractory period: after a score above ``fire_level`` the following
   ``refractory`` updates are damped, since repeated alarms about the same
   event only add false positives.

The score is in [0, 1]; it only uses the past.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Self

from runwatch.core.detect.base import State, check_finite, check_kind

_SQRT2 = math.sqrt(2.0)
_LOG_SCALE = -23.02585084720009  # log(1e-10), as HTM's log likelihood


@dataclass(frozen=True, slots=True)
class DefaultConfig:
    """The single configuration of :class:`DefaultDetector`."""

    long_fading: float = 0.002
    short_fading: float = 0.2
    diff_fading: float = 0.01
    raw_short: int = 5
    lik_fading: float = 0.002
    lik_warmup: int = 300
    fire_level: float = 0.4
    refractory: int = 50
    damp: float = 0.2
    min_n: int = 20
    bins: int = 32
    hist_decay: float = 0.9999
    rarity_weight: float = 1.0
    spike_z: float = 20.0


@dataclass(slots=True)
class DefaultDetector:
    """The default ensemble (see the module docstring). Score before learn."""

    cfg: DefaultConfig = field(default_factory=DefaultConfig)
    n: int = 0
    prev: float = 0.0
    mean: float = 0.0
    sq: float = 0.0
    smean: float = 0.0
    dmean: float = 0.0
    dsq: float = 0.0
    raw_buf: list[float] = field(default_factory=list)
    raw_pos: int = 0
    raw_sum: float = 0.0
    lmean: float = 0.0
    lsq: float = 0.0
    ln: int = 0
    quiet: int = 0
    lo: float = 0.0
    hi: float = 0.0
    hist: dict[int, float] = field(default_factory=dict)
    hist_total: float = 0.0
    hist_scale: float = 1.0
    cache: list[float] = field(default_factory=list)

    def _raw(self, x: float) -> tuple[float, float]:
        """Raw evidence in [0, 1] for ``x`` and its largest z-score."""
        var = self.sq - self.mean * self.mean
        scale = math.sqrt(var) if var > 0.0 else 0.0
        eps = 1e-9 * (abs(self.mean) + 1e-9)
        scale = max(scale, eps)
        z_val = abs(x - self.mean) / scale
        a = self.cfg.short_fading
        z_lvl = abs(a * x + (1 - a) * self.smean - self.mean) / scale
        dvar = self.dsq - self.dmean * self.dmean
        dscale = max(math.sqrt(dvar) if dvar > 0.0 else 0.0, eps)
        z_diff = abs(x - self.prev - self.dmean) / dscale
        z = max(z_val, z_diff, 2.0 * z_lvl)
        raw = math.erf(z / (4.0 * _SQRT2))
        if self.cfg.rarity_weight > 0.0 and self.hist_total > 0.0:
            p = self.hist.get(self._bin(x), 0.0) / (self.hist_total * self.hist_scale)
            rarity = min(1.0, -math.log10(p + 1e-4) / 4.0)
            raw = max(raw, self.cfg.rarity_weight * rarity)
        return raw, z

    def _bin(self, x: float) -> int:
        width = (self.hi - self.lo) / self.cfg.bins
        if width <= 0.0:
            return 0 if x == self.lo else (1 if x > self.lo else -1)
        return math.floor((x - self.lo) / width)

    def score_one(self, x: float) -> float:
        """Return the anomaly score of ``x`` in [0, 1], without learning it."""
        x = check_finite(x)
        if self.n < self.cfg.min_n:
            return 0.0
        if self.cache and self.cache[0] == self.n and self.cache[1] == x:
            return self.cache[3]
        raw, z = self._raw(x)
        score = self._score(raw)
        if z > self.cfg.spike_z and self.quiet == 0:
            score = max(score, 1.0 - self.cfg.spike_z / z)
        self.cache = [float(self.n), x, raw, score]
        return score

    def _score(self, raw: float) -> float:
        buf = self.raw_buf
        k = self.cfg.raw_short
        if len(buf) < k:
            short = (self.raw_sum + raw) / (len(buf) + 1)
        else:
            short = (self.raw_sum - buf[self.raw_pos] + raw) / k
        if self.ln < self.cfg.lik_warmup:
            return 0.0
        lvar = self.lsq - self.lmean * self.lmean
        lstd = math.sqrt(lvar) if lvar > 1e-6 else 1e-3
        z = (short - self.lmean) / lstd
        tail = 0.5 * math.erfc(z / _SQRT2)
        score = math.log(1.0000000001 - (1.0 - tail)) / _LOG_SCALE if tail < 1.0 else 0.0
        score = min(1.0, max(0.0, score))
        if self.quiet > 0:
            score *= self.cfg.damp
        return score

    def learn_one(self, x: float) -> None:
        """Fold ``x`` into the baselines, the likelihood layer and the refractory clock."""
        x = check_finite(x)
        cfg = self.cfg
        if self.n >= cfg.min_n:
            score = self.score_one(x)
            raw = self.cache[2]
            buf = self.raw_buf
            if len(buf) < cfg.raw_short:
                buf.append(raw)
                self.raw_sum += raw
            else:
                self.raw_sum += raw - buf[self.raw_pos]
                buf[self.raw_pos] = raw
                self.raw_pos = (self.raw_pos + 1) % cfg.raw_short
            short = self.raw_sum / len(buf)
            b = cfg.lik_fading if self.ln >= cfg.lik_warmup else 1.0 / (self.ln + 1)
            self.lmean = b * short + (1 - b) * self.lmean
            self.lsq = b * short * short + (1 - b) * self.lsq
            self.ln += 1
            if self.quiet > 0:
                self.quiet -= 1
            elif score >= cfg.fire_level:
                self.quiet = cfg.refractory
        if self.n == 0:
            self.mean, self.sq, self.smean = x, x * x, x
            self.dmean = self.dsq = 0.0
        else:
            a = cfg.long_fading if self.n >= cfg.min_n else 1.0 / (self.n + 1)
            self.mean = a * x + (1 - a) * self.mean
            self.sq = a * x * x + (1 - a) * self.sq
            s = cfg.short_fading
            self.smean = s * x + (1 - s) * self.smean
            d = x - self.prev
            c = cfg.diff_fading if self.n >= cfg.min_n else 1.0 / self.n
            self.dmean = c * d + (1 - c) * self.dmean
            self.dsq = c * d * d + (1 - c) * self.dsq
        if self.cfg.rarity_weight > 0.0:
            self._learn_hist(x)
        self.prev = x
        self.n += 1

    def _learn_hist(self, x: float) -> None:
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

    def _rebin(self, lo: float, hi: float) -> None:
        """Widen the histogram range, moving old counts by their bin centres."""
        old_lo, old_width = self.lo, (self.hi - self.lo) / self.cfg.bins
        pad = 0.1 * (hi - lo)
        self.lo, self.hi = lo - pad, hi + pad
        moved: dict[int, float] = {}
        for b, c in self.hist.items():
            centre = old_lo + (b + 0.5) * old_width if old_width > 0 else old_lo
            nb = self._bin(centre)
            moved[nb] = moved.get(nb, 0.0) + c
        self.hist = moved

    def to_state(self) -> State:
        """Return the state as a JSON-able dict (histogram keys as strings)."""
        state = {f: getattr(self, f) for f in self.__slots__ if f != "cfg"}
        state["raw_buf"] = list(self.raw_buf)
        state["hist"] = {str(k): v for k, v in self.hist.items()}
        return {"kind": "default", "cfg": asdict(self.cfg), **state}

    @classmethod
    def from_state(cls, state: State) -> Self:
        """Rebuild from :meth:`to_state` output."""
        check_kind(state, "default")
        fields = {k: v for k, v in state.items() if k not in ("kind", "cfg")}
        fields["raw_buf"] = [float(v) for v in fields["raw_buf"]]
        fields["hist"] = {int(k): float(v) for k, v in fields["hist"].items()}
        return cls(cfg=DefaultConfig(**state["cfg"]), **fields)
