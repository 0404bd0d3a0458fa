"""Prices per GPU-hour from ``costs.yaml``: parsing with file/line/key errors, and lookup.

A prices file holds a ``currency`` and a list of ``prices``. Each price names a
``gpu_model``, a ``per_gpu_hour`` amount, an ``effective_from`` date (and
optionally ``effective_to``, exclusive) and optionally ``match``: equality on
the run's ``queue``, ``priority_class``, ``node_pool`` or ``tenancy``
(``on_demand``/``reserved``). The price of a run is the most specific price of
its GPU model in effect when the run started running: the one matching the
most of its attributes, then the latest ``effective_from``. A run whose GPU
model no price names is *unknown model*; a known model without a price in
effect at that time is *no price in effect*: both are reported as unpriced,
never as zero. A run's model is the one a price names when the names are equal
(case aside), else when the price's name is a whole word (or words) of the
run's: NVML's ``NVIDIA H100 80GB HBM3``, which the SDK's manifest gives when the
scheduler hook names no model, is an ``H100`` (:func:`resolve_model`). The file
is read through :mod:`runwatch.core.yamlconf`.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from runwatch.core.yamlconf import Reader, compose

MATCH_KEYS: tuple[str, ...] = ("queue", "priority_class", "node_pool", "tenancy")
_PRICE_KEYS = frozenset({"gpu_model", "per_gpu_hour", "effective_from", "effective_to", "match"})
UNKNOWN_MODEL = "unknown GPU model"
NO_PRICE = "no price in effect"


_WORD = re.compile(r"[0-9a-z]+")


def _words(name: str) -> tuple[str, ...]:
    return tuple(_WORD.findall(name.lower()))


def resolve_model(gpu_model: str, known: frozenset[str]) -> str | None:
    """Return the priced model a run's GPU model is, or None when no price names it.

    The same name (case and surrounding blanks aside) first; else the priced names whose
    words appear, in order and whole, among the words of ``gpu_model`` (NVML's ``NVIDIA
    H100 80GB HBM3`` or ``NVIDIA A100-SXM4-80GB``; ``NVIDIA A10G`` is no ``A10``), the one
    of most words; several of as many words are ambiguous: None.

    Args:
        gpu_model: The run's model, as the allocation or its manifest names it.
        known: The models the prices name.

    Returns:
        A name of ``known``, or None.

    """
    name = gpu_model.strip().lower()
    if not name:
        return None
    same = [k for k in known if k.strip().lower() == name]
    if len(same) == 1:
        return same[0]
    words = _words(name)
    best: list[str] = []
    most = 0
    for k in sorted(known):
        kw = _words(k)
        if not kw or not any(words[i:i + len(kw)] == kw for i in range(len(words))):
            continue
        if len(kw) > most:
            best, most = [k], len(kw)
        elif len(kw) == most:
            best.append(k)
    return best[0] if len(best) == 1 else None


class PricesError(ValueError):
    """A prices file cannot be used; the message names file, line and key."""


@dataclass(frozen=True, slots=True)
class Price:
    """One price rule.

    Attributes:
        gpu_model: GPU model it prices (as schedulers report it, e.g. ``H100``).
        per_gpu_hour: Amount per GPU-hour, in the file's currency.
        effective_from_ms: Start of validity, UTC epoch ms (inclusive).
        effective_to_ms: End of validity (exclusive); None when open.
        match: Run attributes it requires (``queue``, ``priority_class``,
            ``node_pool``, ``tenancy``).
        line: Line of the rule in its file.

    """

    gpu_model: str
    per_gpu_hour: float
    effective_from_ms: int
    effective_to_ms: int | None = None
    match: dict[str, str] = field(default_factory=dict)
    line: int = 0


@dataclass(frozen=True, slots=True)
class Quote:
    """The outcome of a price lookup: a price, or why there is none."""

    per_gpu_hour: float | None
    reason: str = ""
    rule: Price | None = None


@dataclass(frozen=True, slots=True)
class Prices:
    """A validated prices file."""

    currency: str
    prices: tuple[Price, ...]
    source: str = "<prices>"

    @property
    def models(self) -> frozenset[str]:
        """GPU models some price names."""
        return frozenset(p.gpu_model for p in self.prices)

    def quote(self, gpu_model: str, at_ms: int, attrs: dict[str, str] | None = None) -> Quote:
        """Return the price of one GPU-hour of ``gpu_model`` at ``at_ms`` for a run.

        Args:
            gpu_model: The run's GPU model ("" when unknown), as named or as NVML names it
                (:func:`resolve_model`).
            at_ms: When the run started running (UTC epoch ms).
            attrs: The run's ``queue``, ``priority_class``, ``node_pool``, ``tenancy``.

        Returns:
            The quote; ``per_gpu_hour`` is None with ``reason`` :data:`UNKNOWN_MODEL`
            or :data:`NO_PRICE` when there is no price.

        """
        attrs = attrs or {}
        model = gpu_model if gpu_model in self.models else resolve_model(gpu_model, self.models)
        if model is None:
            return Quote(None, UNKNOWN_MODEL)
        gpu_model = model
        best: Price | None = None
        for p in self.prices:
            if p.gpu_model != gpu_model or at_ms < p.effective_from_ms:
                continue
            if p.effective_to_ms is not None and at_ms >= p.effective_to_ms:
                continue
            if any(attrs.get(k, "") != v for k, v in p.match.items()):
                continue
            if best is None or (len(p.match), p.effective_from_ms) > (
                len(best.match), best.effective_from_ms):
                best = p
        if best is None:
            return Quote(None, NO_PRICE)
        return Quote(best.per_gpu_hour, "", best)


_Reader = Reader[PricesError]


def _date_ms(r: _Reader, node: yaml.Node, key: str) -> int:
    text = str(node.value).strip() if isinstance(node, yaml.ScalarNode) else ""
    try:
        if len(text) == 10:
            day = dt.date.fromisoformat(text)
            when = dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC)
        else:
            when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
            if when.tzinfo is None:
                when = when.replace(tzinfo=dt.UTC)
    except ValueError:
        raise r.err(node, "", f"{key!r} must be a date (YYYY-MM-DD) or an ISO "
                    f"date-time, not {text!r}") from None
    return int(when.timestamp() * 1000)


def _price(r: _Reader, node: yaml.Node, index: int) -> Price:
    what = f"prices[{index}]"
    items = r.mapping(node, allowed=set(_PRICE_KEYS), where=what)
    for need in ("gpu_model", "per_gpu_hour", "effective_from"):
        if need not in items:
            raise r.err(node, "", f"{what} needs {need!r}")
    model = r.string(items["gpu_model"][1], f"'gpu_model' in {what}").strip()
    amount = r.number(items["per_gpu_hour"][1], f"'per_gpu_hour' in {what}", minimum=0)
    start = _date_ms(r, items["effective_from"][1], "effective_from")
    end = None
    if "effective_to" in items:
        end = _date_ms(r, items["effective_to"][1], "effective_to")
        if end <= start:
            raise r.err(items["effective_to"][1], "",
                        f"'effective_to' in {what} must be after 'effective_from'")
    match: dict[str, str] = {}
    if "match" in items:
        pairs = r.mapping(items["match"][1], allowed=set(MATCH_KEYS), where=f"{what}.match")
        match = {name: r.string(v, f"{what}.match.{name}") for name, (_k, v) in pairs.items()}
    return Price(model, amount, start, end, match, r.line(node))


def parse_prices(text: str, source: str = "<prices>") -> Prices:
    """Parse and validate a prices file.

    Args:
        text: The YAML text.
        source: File name for error messages.

    Returns:
        The prices.

    Raises:
        PricesError: On any problem, naming ``source:line`` and the key.

    """
    root = compose(text, source, PricesError)
    if root is None:
        msg = f"{source}:1: empty prices file (it needs 'currency' and 'prices')"
        raise PricesError(msg)
    r = Reader(source, PricesError)
    top = r.mapping(root, allowed={"currency", "prices"}, where="the prices file")
    if "prices" not in top:
        raise r.err(root, "", "the prices file needs 'prices'")
    currency = r.string(top["currency"][1], "'currency'").strip() if "currency" in top else "USD"
    items = r.sequence(top["prices"][1], "'prices'", non_empty=True)
    prices = tuple(_price(r, item, i) for i, item in enumerate(items))
    seen: dict[tuple[Any, ...], Price] = {}
    for p in prices:
        key = (p.gpu_model, p.effective_from_ms, tuple(sorted(p.match.items())))
        if key in seen:
            msg = (f"{source}:{p.line}: a second price for {p.gpu_model} with the same match "
                   f"and effective_from (the first is on line {seen[key].line})")
            raise PricesError(msg)
        seen[key] = p
    return Prices(currency, prices, source)
