"""The ``cost`` answer of ``runwatch investigate``: what the run cost, what it wasted, its peers.

The figures are ``runwatch cost``'s, not a second computation: the run
summaries come from the same ``run_costs`` view (read as
:data:`~runwatch.core.cost.waste.RUN_COST_COLUMNS`), baselines are learnt
from the family's runs of the last
:data:`~runwatch.core.cost.waste.HISTORY_S` like the cost report's, and each
run is priced and its waste attributed by
:func:`~runwatch.core.cost.waste.attribute` from the same ``costs.yaml``.

Rules:

* **the run**: its run summary (written when the run ends); without one the
  answer says so and has no figures;
* **peers**: the :data:`PEERS` latest runs of the same family that ended
  before the run (before now when the run has not ended);
* **rank**: 1 is the most GPU-hours (cost) among the run and its peers; the
  cost rank counts priced runs only;
* **unpriced** runs have ``cost: null`` and say why (``unknown GPU model``,
  ``no price in effect``, ``no prices file``), never 0;
* **resume**: the resume point's GPU-hours lost, at the run's price.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import median
from typing import Any

from runwatch.core.cost.prices import Prices
from runwatch.core.cost.waste import (
    CAUSES,
    RunCost,
    RunWaste,
    attribute,
    bad_input,
    baselines,
    ran,
)

#: How many of the family's earlier runs the run is compared with.
PEERS = 20
NO_PRICES = "no prices file"


@dataclass(frozen=True, slots=True)
class CostRow:
    """One run summary as the investigation reads it: the cost fields and when it ended."""

    run: RunCost
    ended_ms: int


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


def _item(w: RunWaste, ended_ms: int) -> dict[str, Any]:
    wasted = sum(w.waste_h.values())
    return {
        "run_id": w.run.run_id, "ended_ms": ended_ms, "outcome": w.run.outcome,
        "gpu_model": w.run.gpu_model, "gpu_count": w.run.gpu_count,
        "gpu_hours": round(w.run.gpu_hours, 3), "priced": w.price is not None,
        "ran": ran(w.run),
        "per_gpu_hour": w.price, "cost": _r(w.cost, 2),
        "unpriced_reason": "" if w.price is not None else w.unpriced_reason,
        "wasted_gpu_hours": {c: round(w.waste_h[c], 3) for c in CAUSES},
        "wasted_gpu_hours_total": round(wasted, 3),
        "wasted_cost": None if w.price is None else round(w.price * wasted, 2),
        "useful_gpu_hours": round(max(w.run.gpu_hours - wasted - w.unobserved_h, 0.0), 3),
        "unobserved_gpu_hours": round(w.unobserved_h, 3),
        "baseline_util_p50": None if w.baseline is None else round(w.baseline.util_p50, 1),
    }


def _rank(mine: float, others: Sequence[float]) -> int:
    return 1 + sum(1 for o in others if o > mine)


def cost_answer(run_id: str, family: str, rows: Sequence[CostRow] | None,
                prices: Prices | None, resume: Mapping[str, Any], now_ms: int,
                peers: int = PEERS) -> dict[str, Any]:
    """Answer what the run cost, what it wasted by cause, and how it compares with its family.

    Args:
        run_id: The run.
        family: Its experiment family ("" when unknown).
        rows: The run's summary and its family's of the baseline history (None: the
            database has no ``run_costs`` view).
        prices: The prices file (None: none read; every run is unpriced).
        resume: The ``resume_point`` answer (its ``gpu_hours_lost``).
        now_ms: Now (peers of a run that has not ended end before it).
        peers: How many earlier runs of the family to compare with.

    Returns:
        The ``cost`` section of the JSON shape (docs/investigation.md).
    """
    out: dict[str, Any] = {
        "currency": prices.currency if prices is not None else None,
        "prices_file": prices.source if prices is not None else None,
        "attribution_order": list(CAUSES), "run": None,
        "peers": {"family": family, "runs": [], "median_gpu_hours": None, "median_cost": None,
                  "gpu_hours_rank": None, "cost_rank": None, "ranked_of": 0, "priced_of": 0},
        "resume_lost": None, "bad_input": bad_input([]), "note": ""}
    if rows is None:
        out["note"] = "no run_costs view in the database (migration 0031): no cost"
        return out
    base = baselines(r.run for r in rows)
    empty = Prices("", ())

    def priced(r: CostRow) -> RunWaste:
        w = attribute(r.run, base.get((r.run.family, r.run.gpu_model)), prices or empty)
        if prices is None:
            w.price, w.unpriced_reason = None, NO_PRICES
        return w

    mine = next((r for r in rows if r.run.run_id == run_id), None)
    until = mine.ended_ms if mine is not None else now_ms
    earlier = sorted((r for r in rows if r.run.run_id != run_id and family
                      and r.run.family == family and r.ended_ms <= until),
                     key=lambda r: (-r.ended_ms, r.run.run_id))[:peers]
    peer_w = [(priced(r), r.ended_ms) for r in reversed(earlier)]  # oldest first
    out["peers"]["runs"] = [_item(w, t) for w, t in peer_w]
    if mine is None:
        out["note"] = ("no run summary for this run (one is written when the run ends): "
                       "no cost yet")
        out["bad_input"] = bad_input([w for w, _t in peer_w])
        return out
    me = priced(mine)
    item = _item(me, mine.ended_ms)
    out["run"] = item
    out["bad_input"] = bad_input([me, *(w for w, _t in peer_w)])
    hours = [w.run.gpu_hours for w, _t in peer_w]
    costs = [w.cost for w, _t in peer_w if w.cost is not None]
    p = out["peers"]
    p["median_gpu_hours"] = _r(median(hours)) if hours else None
    p["median_cost"] = _r(median(costs), 2) if costs else None
    p["ranked_of"] = len(hours) + 1
    p["gpu_hours_rank"] = _rank(me.run.gpu_hours, hours)
    if me.cost is not None:
        p["priced_of"] = len(costs) + 1
        p["cost_rank"] = _rank(me.cost, costs)
    if not family:
        out["note"] = "the run names no experiment family: no peers to compare with"
    elif not peer_w:
        out["note"] = f"no earlier finished run of family {family!r} to compare with"
    lost = resume.get("gpu_hours_lost")
    if lost is not None:
        out["resume_lost"] = {
            "step": resume.get("step"), "gpu_hours": lost,
            "cost": None if me.price is None else round(me.price * float(lost), 2),
            "unpriced_reason": "" if me.price is not None else me.unpriced_reason}
    return out


def money(amount: Any, currency: Any, reason: Any = "") -> str:
    """Return an amount for people: ``12.34 USD``, or ``unpriced (reason)``, never 0."""
    if amount is None:
        return f"unpriced ({reason})" if reason else "unpriced"
    return f"{float(amount):,.2f} {currency or ''}".rstrip()
