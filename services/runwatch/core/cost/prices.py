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
never as zero.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import yaml

MATCH_KEYS: tuple[str, ...] = ("queue", "priority_class", "node_pool", "tenancy")
_PRICE_KEYS = frozenset({"gpu_model", "per_gpu_hour", "effective_from", "effective_to", "match"})
UNKNOWN_MODEL = "unknown GPU model"
NO_PRICE = "no price in effect"


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
            gpu_model: The run's GPU model ("" when unknown).
            at_ms: When the run started running (UTC epoch ms).
            attrs: The run's ``queue``, ``priority_class``, ``node_pool``, ``tenancy``.

        Returns:
            The quote; ``per_gpu_hour`` is None with ``reason`` :data:`UNKNOWN_MODEL`
            or :data:`NO_PRICE` when there is no price.

        """
        attrs = attrs or {}
        if gpu_model not in self.models:
            return Quote(None, UNKNOWN_MODEL)
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


def _where(source: str, node: yaml.Node) -> str:
    return f"{source}:{node.start_mark.line + 1}"


def _fail(source: str, node: yaml.Node, text: str) -> PricesError:
    return PricesError(f"{_where(source, node)}: {text}")


def _pairs(node: yaml.Node, source: str, what: str) -> dict[str, tuple[yaml.Node, yaml.Node]]:
    if not isinstance(node, yaml.MappingNode):
        raise _fail(source, node, f"{what} must be a mapping")
    out: dict[str, tuple[yaml.Node, yaml.Node]] = {}
    for k, v in node.value:
        name = str(k.value) if isinstance(k, yaml.ScalarNode) else ""
        if not name:
            raise _fail(source, k, f"keys of {what} must be plain strings")
        if name in out:
            raise _fail(source, k, f"duplicate key {name!r} in {what}")
        out[name] = (k, v)
    return out


def _date_ms(node: yaml.Node, source: str, key: str) -> int:
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
        raise _fail(source, node, f"{key!r} must be a date (YYYY-MM-DD) or an ISO "
                    f"date-time, not {text!r}") from None
    return int(when.timestamp() * 1000)


def _price(node: yaml.Node, source: str, index: int) -> Price:
    what = f"prices[{index}]"
    items = _pairs(node, source, what)
    for name, (k, _v) in items.items():
        if name not in _PRICE_KEYS:
            raise _fail(source, k, f"unknown key {name!r} in {what} "
                        f"(known: {', '.join(sorted(_PRICE_KEYS))})")
    for need in ("gpu_model", "per_gpu_hour", "effective_from"):
        if need not in items:
            raise _fail(source, node, f"{what} needs {need!r}")
    model_node = items["gpu_model"][1]
    if not isinstance(model_node, yaml.ScalarNode) or not str(model_node.value).strip():
        raise _fail(source, model_node, f"'gpu_model' in {what} must be a non-empty string")
    amount_node = items["per_gpu_hour"][1]
    try:
        amount = float(amount_node.value) if isinstance(amount_node, yaml.ScalarNode) else -1.0
    except ValueError:
        amount = -1.0
    if not amount >= 0 or amount == float("inf"):
        raise _fail(source, amount_node, f"'per_gpu_hour' in {what} must be a number >= 0, "
                    f"not {getattr(amount_node, 'value', '?')!r}")
    start = _date_ms(items["effective_from"][1], source, "effective_from")
    end = None
    if "effective_to" in items:
        end = _date_ms(items["effective_to"][1], source, "effective_to")
        if end <= start:
            raise _fail(source, items["effective_to"][1],
                        f"'effective_to' in {what} must be after 'effective_from'")
    match: dict[str, str] = {}
    if "match" in items:
        for name, (k, v) in _pairs(items["match"][1], source, f"{what}.match").items():
            if name not in MATCH_KEYS:
                raise _fail(source, k, f"unknown key {name!r} in {what}.match "
                            f"(known: {', '.join(MATCH_KEYS)})")
            if not isinstance(v, yaml.ScalarNode) or not str(v.value):
                raise _fail(source, v, f"{what}.match.{name} must be a non-empty string")
            match[name] = str(v.value)
    return Price(str(model_node.value).strip(), amount, start, end, match,
                 node.start_mark.line + 1)


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
    try:
        root: Any = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        msg = f"{source}: invalid YAML: {exc}"
        raise PricesError(msg) from exc
    if root is None:
        msg = f"{source}:1: empty prices file (it needs 'currency' and 'prices')"
        raise PricesError(msg)
    top = _pairs(root, source, "the prices file")
    for name, (k, _v) in top.items():
        if name not in ("currency", "prices"):
            raise _fail(source, k, f"unknown key {name!r} at the top level "
                        "(known: currency, prices)")
    if "prices" not in top:
        raise _fail(source, root, "the prices file needs 'prices'")
    currency = "USD"
    if "currency" in top:
        node = top["currency"][1]
        if not isinstance(node, yaml.ScalarNode) or not str(node.value).strip():
            raise _fail(source, node, "'currency' must be a non-empty string")
        currency = str(node.value).strip()
    seq = top["prices"][1]
    if not isinstance(seq, yaml.SequenceNode) or not seq.value:
        raise _fail(source, seq, "'prices' must be a non-empty list")
    prices = tuple(_price(item, source, i) for i, item in enumerate(seq.value))
    seen: dict[tuple[Any, ...], Price] = {}
    for p in prices:
        key = (p.gpu_model, p.effective_from_ms, tuple(sorted(p.match.items())))
        if key in seen:
            msg = (f"{source}:{p.line}: a second price for {p.gpu_model} with the same match "
                   f"and effective_from (the first is on line {seen[key].line})")
            raise PricesError(msg)
        seen[key] = p
    return Prices(currency, prices, source)
