"""Contextual Anomaly Detector, Open Source Edition (CAD OSE), as in NAB.

A port of NAB's ``contextOSE`` detector (M. Smirnov's CAD OSE, published
NAB v1.1 standard score 69.9 on the 58 files): each value is quantized into
``bits`` binary "facts"; contexts pair a left group of facts (the previous
value's facts plus the ids of the previously active contexts, the "neurons")
with a right group (the current facts). The anomaly of a value that was not
predicted is ``(1 - active / selected + new / potential_new) / 2``; after a
score of at least ``base_threshold`` the next ``rest_period`` values score 0.

The port keeps the original's behaviour, including its quirks: semi-contexts
are keyed by Python 2's tuple hash (emulated, so tie-breaks between equally
active contexts are as in NAB's published results), context id 0 is skipped
when no zero-level context is new (``False == 0`` in the original), and values
below the range quantize as in ``bin(negative)``. The only change is speed:
each step touches only the semi-contexts that share a fact with the input,
in creation order, which gives the same results as scanning all of them.

NAB gives the detector the min and max of the whole file and
``rest_period = probation / 5``; a streaming caller has neither, so
:class:`CadOse` takes them as parameters and :func:`causal_range` (used by the
bench's causal ``cad_ose``) fixes them from a warm-up prefix instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field

_M64 = (1 << 64) - 1
_NEURON = 2**31
_SENSOR = 65536


def py2_tuple_hash(items: tuple[int, ...]) -> int:
    """Return CPython 2.7's 64-bit ``hash`` of a tuple of non-negative ints."""
    x = 0x345678
    mult = 1000003
    n = len(items)
    for y in items:
        n -= 1
        x = ((x ^ y) * mult) & _M64
        mult = (mult + 82520 + n + n) & _M64
    x = (x + 97531) & _M64
    if x >= 1 << 63:
        x -= 1 << 64
    return -2 if x == -1 else x


@dataclass(slots=True)
class _Semi:
    """A semi-context: its facts, the facts of the input it crossed, and (left) its contexts."""

    idx: int
    size: int
    crossed: list[int] = field(default_factory=list)
    count: int = 0
    contexts: dict[int, int] = field(default_factory=dict)


@dataclass(slots=True)
class _Context:
    """A context's counters (selected, predicted, active), right facts, level and hashes."""

    right: tuple[int, ...]
    zero: bool
    lhash: int
    rhash: int
    selected: int = 0
    predicted: int = 0
    active: int = 0


class CadOse:
    """CAD OSE over one series (NAB ``ContextualAnomalyDetectorOSE``).

    Args:
        min_value: Low end of the value range (NAB: the file's min).
        max_value: High end of the value range (NAB: the file's max).
        base_threshold: Score after which the detector rests.
        rest_period: Values scored 0 after a score >= ``base_threshold``
            (NAB: ``probation / 5``); the first ``rest_period`` values score 0.
        max_left: Longest left semi-context grown by crossing.
        max_active: Most active contexts fed back as neurons.
        bits: Bits of the value quantization.

    """

    def __init__(
        self,
        min_value: float,
        max_value: float,
        base_threshold: float = 0.75,
        rest_period: int = 30,
        max_left: int = 7,
        max_active: int = 15,
        bits: int = 3,
    ) -> None:
        """Create an empty context memory for the given value range."""
        self.min_value = float(min_value)
        self.base_threshold = base_threshold
        self.rest_period = int(rest_period)
        self.max_left = max_left
        self.max_active = max_active
        self.bits = bits
        self.max_bin = 2.0**bits - 1.0
        full = float(max_value) - self.min_value
        self.step_size = (full if full != 0.0 else self.max_bin) / self.max_bin
        self.left_group: tuple[int, ...] = ()
        self.predicted: set[int] = set()
        self.facts: tuple[dict[int, list[_Semi]], dict[int, list[_Semi]]] = ({}, {})
        self.semi_ids: tuple[dict[int, int], dict[int, int]] = ({}, {})
        self.semis: tuple[list[_Semi], list[_Semi]] = ([], [])
        self.crossed: list[list[_Semi]] = [[], []]
        self.contexts: list[_Context] = []
        self.new_context_id = 0  # the original's False, which equals context id 0
        self.t = 0  # values seen; the history holds an initial 1.0 at index 0
        self.last_hot = 0

    # -- the value encoder ------------------------------------------------------

    def sensor_facts(self, x: float) -> tuple[int, ...]:
        """Return the sorted sensor facts of ``x`` (``bin()`` of its bucket, as NAB)."""
        norm = int((x - self.min_value) / self.step_size)
        digits = bin(norm).lstrip("0b").rjust(self.bits, "0")
        n = len(digits)
        return tuple(
            sorted({_SENSOR + i * 2 + (1 if digits[n - 1 - i] == "1" else 0) for i in range(n)})
        )

    # -- the context memory -------------------------------------------------------

    def _semi(self, side: int, facts: tuple[int, ...], fhash: int) -> tuple[int, bool]:
        ids = self.semi_ids[side]
        sid = ids.get(fhash)
        if sid is not None:
            return sid, False
        sid = len(ids)
        ids[fhash] = sid
        rec = _Semi(idx=sid, size=len(facts))
        self.semis[side].append(rec)
        index = self.facts[side]
        for f in facts:
            index.setdefault(f, []).append(rec)
        return sid, True

    def _context(self, left: tuple[int, ...], right: tuple[int, ...], zero: bool) -> bool:
        """Find or create the context ``left → right``; return True if it is new."""
        lh, rh = py2_tuple_hash(left), py2_tuple_hash(right)
        lid, _ = self._semi(0, left, lh)
        rid, _ = self._semi(1, right, rh)
        ctx_map = self.semis[0][lid].contexts
        cid = ctx_map.get(rid)
        if cid is None:
            cid = len(self.contexts)
            ctx_map[rid] = cid
            self.contexts.append(_Context(right=right, zero=zero, lhash=lh, rhash=rh))
            if zero:
                self.new_context_id = cid
            return True
        if zero:
            self.contexts[cid].zero = True
        return False

    def _cross(self, side: int, facts: tuple[int, ...]) -> list[_Semi]:
        for rec in self.crossed[side]:
            rec.crossed = []
            rec.count = 0
        index = self.facts[side]
        touched: dict[int, _Semi] = {}
        for f in facts:
            for rec in index.get(f, ()):
                rec.crossed.append(f)
                touched[rec.idx] = rec
        out = [touched[i] for i in sorted(touched)]
        for rec in out:
            rec.count = len(rec.crossed)
        self.crossed[side] = out
        return out

    def _update_active(
        self, new_flag: bool
    ) -> tuple[list[tuple[int, int, int, int]], int, list[tuple[tuple[int, ...], tuple[int, ...]]]]:
        active: list[tuple[int, int, int, int]] = []
        selected = 0
        potential: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
        rights = self.semis[1]
        contexts = self.contexts
        skip = self.new_context_id
        for left in self.crossed[0]:
            full = left.size == left.count
            grow = new_flag and left.count <= self.max_left
            for rid, cid in left.contexts.items():
                if cid == skip:
                    continue
                ctx = contexts[cid]
                right = rights[rid]
                if full:
                    selected += 1
                    ctx.selected += right.size
                    if right.count > 0:
                        ctx.predicted += right.count
                        if right.size == right.count:
                            ctx.active += 1
                            active.append((cid, ctx.active, ctx.lhash, ctx.rhash))
                        elif ctx.zero and grow:
                            potential.append((tuple(left.crossed), tuple(right.crossed)))
                elif ctx.zero and grow and right.count > 0:
                    potential.append((tuple(left.crossed), tuple(right.crossed)))
        self.new_context_id = 0
        return active, selected, potential

    def _predict(self) -> set[int]:
        best = 0.0
        chosen: list[_Context] = []
        contexts = self.contexts
        for left in self.crossed[0]:
            if left.size != left.count:
                continue
            for cid in left.contexts.values():
                ctx = contexts[cid]
                weight = ctx.predicted / ctx.selected if ctx.selected > 0 else 0.0
                if weight > best:
                    best = weight
                    chosen = [ctx]
                elif weight == best:
                    chosen.append(ctx)
        out: set[int] = set()
        for ctx in chosen:
            out.update(ctx.right)
        return out

    def _step(self, sens: tuple[int, ...]) -> tuple[float, float]:
        uniq: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()
        new_flag = False
        if self.left_group and sens:
            zero_ctx = (self.left_group, sens)
            uniq.add(zero_ctx)
            new_flag = self._context(self.left_group, sens, zero=True)
        self._cross(1, sens)
        active, selected, potential = self._update_active(new_flag)
        uniq.update(potential)
        frac_active = len(active) / float(selected) if selected > 0 else 0.0
        active.sort(key=lambda a: (a[1], a[2], a[3]))
        neurons = {_NEURON + a[0] for a in active[-self.max_active :]}
        self.left_group = tuple(sorted(set(sens) | neurons))
        added = sum(1 for left, right in potential if self._context(left, right, zero=False))
        self._cross(0, self.left_group)
        self.predicted = self._predict()
        added += 1 if new_flag else 0
        frac_added = added / float(len(uniq)) if new_flag and uniq else 0.0
        return frac_active, frac_added

    def update(self, x: float) -> float:
        """Score ``x`` and learn it (NAB's ``getAnomalyScore``); return the score."""
        sens = self.sensor_facts(x)
        error = sum(2 ** ((f - _SENSOR) // 2) for f in sens if f not in self.predicted)
        frac_active, frac_added = self._step(sens)
        current = (1.0 - frac_active + frac_added) / 2.0 if error > 0 else 0.0
        self.t += 1
        resting = self.last_hot >= self.t - self.rest_period
        if current >= self.base_threshold:
            self.last_hot = self.t
        return 0.0 if resting else current

    @property
    def n_contexts(self) -> int:
        """Contexts in memory (the memory grows with the variety of the series)."""
        return len(self.contexts)


def causal_range(prefix: list[float]) -> tuple[float, float]:
    """Return a value range from a warm-up prefix, widened by half its span each side.

    Raises:
        ValueError: If the prefix is empty.

    """
    if not prefix:
        msg = "causal_range needs at least one value"
        raise ValueError(msg)
    lo, hi = min(prefix), max(prefix)
    pad = 0.5 * (hi - lo) if hi > lo else 0.5 * max(abs(lo), 1.0)
    return lo - pad, hi + pad


class CadOseDetector:
    """Causal CAD OSE for a stream: the range comes from a warm-up prefix.

    The first ``warmup`` values score 0 and are buffered; then the range is
    fixed by :func:`causal_range` over them, and they are replayed into a
    :class:`CadOse` with a fixed ``rest_period`` (NAB's value for files of
    5000 rows or more). CAD OSE scores and learns in one step, so
    ``score_one`` advances the model and caches its score; ``learn_one`` of
    the same value then only commits it (call them in pairs, as the harness
    and the processor do).
    """

    __slots__ = ("warmup", "rest_period", "buf", "cad", "pending")

    def __init__(self, warmup: int = 150, rest_period: int = 150) -> None:
        """Create with a warm-up length and a rest period (values)."""
        self.warmup = warmup
        self.rest_period = rest_period
        self.buf: list[float] = []
        self.cad: CadOse | None = None
        self.pending: tuple[float, float] | None = None

    def score_one(self, x: float) -> float:
        """Return the CAD OSE score of ``x`` (0 during the warm-up)."""
        if self.cad is None:
            return 0.0
        if self.pending is not None and self.pending[0] == x:
            return self.pending[1]
        if self.pending is not None:
            msg = "CadOseDetector.score_one called twice with different values before learn_one"
            raise ValueError(msg)
        self.pending = (x, self.cad.update(x))
        return self.pending[1]

    def learn_one(self, x: float) -> None:
        """Commit ``x`` (scoring it first if ``score_one`` was not called)."""
        if self.cad is None:
            self.buf.append(x)
            if len(self.buf) >= self.warmup:
                lo, hi = causal_range(self.buf)
                self.cad = CadOse(lo, hi, rest_period=self.rest_period)
                for v in self.buf:
                    self.cad.update(v)
                self.buf = []
            return
        if self.pending is None or self.pending[0] != x:
            self.pending = None
            self.score_one(x)
        self.pending = None

    def to_state(self) -> dict[str, object]:
        """Return the context memory as a JSON-able dict (its size is the memory figure)."""
        cad = self.cad
        if cad is None:
            return {"kind": "cad_ose", "buf": list(self.buf)}
        return {
            "kind": "cad_ose",
            "range": [cad.min_value, cad.step_size],
            "t": cad.t,
            "last_hot": cad.last_hot,
            "left_group": list(cad.left_group),
            "predicted": sorted(cad.predicted),
            "semis": [
                [[r.size, r.crossed, r.count, r.contexts] for r in side] for side in cad.semis
            ],
            "contexts": [
                [c.right, c.zero, c.lhash, c.rhash, c.selected, c.predicted, c.active]
                for c in cad.contexts
            ],
        }
