"""The investigation page: one self-contained HTML file (inline styles, inline SVG, no script).

Size: one page of a dozen sections and its two kinds of plot (indicator lines,
cost bars) sharing one style, scale and escaping; apart they would share
their helpers through a third module.

The page needs no network and runs no JavaScript: the plots are SVG drawn
here, one per indicator (loss, validation metric, loader share, checkpoint
share, GPU utilization), each marking alert onsets (red lines) and
checkpoints (triangles: green trustworthy, red not). Below them: the answers,
the lineage diff and the affected-runs table. Every plot is an
``<svg class="plot" data-indicator=...>``; one without data says so in the
plot and carries ``data-empty="true"``. The cost answer has its own plot,
``<svg class="costplot" data-plot="cost">``: stacked bars of GPU-hours by waste
cause of the family's earlier runs and this run (highlighted, last), the cost
over each bar (``unpriced`` where there is no price, never 0).
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from runwatch.core.investigate.cost import money

PLOTS: tuple[tuple[str, str], ...] = (
    ("loss", "Loss"),
    ("validation", "Validation metric"),
    ("loader_share", "Loader share of step time"),
    ("checkpoint_share", "Checkpoint share of wall time"),
    ("gpu_util", "GPU utilization (%)"),
)
W, H, PAD_L, PAD_R, PAD_T, PAD_B = 720, 170, 56, 12, 14, 26
#: The cost plot: its height, and the colour of each stacked part (waste causes, then use).
COST_H = 240
COST_COLOURS: tuple[tuple[str, str, str], ...] = (
    ("useful", "#2b6cb0", "not wasted"),
    ("below_baseline", "#805ad5", "below the baseline"),
    ("work_lost", "#dd6b20", "work lost"),
    ("no_artifact", "#b4232a", "no usable artifact"),
    ("stalled", "#d69e2e", "stalled"),
    ("idle", "#9aa5b1", "idle"),
    ("unobserved", "#e2e8f0", "no telemetry"),
)

_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1d2330;
background:#fafbfc;max-width:1100px}
h1{font-size:22px;margin:0 0 4px}
h2{font-size:17px;margin:26px 0 8px;border-bottom:1px solid #d8dde6;padding-bottom:4px}
.sub{color:#5b6576;margin:0 0 12px}
table{border-collapse:collapse;margin:6px 0 10px;background:#fff}
th,td{border:1px solid #d8dde6;padding:4px 8px;text-align:left;vertical-align:top;font-size:13px}
th{background:#eef1f6}.bad{color:#b4232a;font-weight:600}.good{color:#1f7a3a;font-weight:600}
.note{color:#5b6576;font-style:italic}.miss li{color:#8a5a00}
.plots{display:grid;grid-template-columns:1fr;gap:10px}
svg.plot,svg.costplot{background:#fff;border:1px solid #d8dde6;border-radius:4px}
.legend span{display:inline-block;margin-right:14px;font-size:12px;color:#5b6576}
code{background:#eef1f6;padding:0 3px;border-radius:3px}
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _when(ms: int | None) -> str:
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


def _num(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1000 or abs(v) < 0.01:
        return f"{v:.3g}"
    return f"{v:.3f}".rstrip("0").rstrip(".")


def plot_svg(key: str, title: str, points: Sequence[tuple[int, float]], span: tuple[int, int],
             onsets: Sequence[int], checkpoints: Sequence[Mapping[str, Any]]) -> str:
    """Return one indicator's plot as an inline SVG element.

    Args:
        key: Indicator key (``data-indicator``).
        title: Title drawn in the plot.
        points: (epoch ms, value) pairs, ascending.
        span: The x range (epoch ms).
        onsets: Alert onsets to mark.
        checkpoints: Checkpoints (ts_ms, step, trustworthy) to mark.

    Returns:
        The ``<svg>`` markup.
    """
    t0, t1 = span
    t1 = max(t1, t0 + 1)
    iw, ih = W - PAD_L - PAD_R, H - PAD_T - PAD_B
    finite = [(t, v) for t, v in points if v == v and abs(v) != float("inf")]

    def x(t: int) -> float:
        return PAD_L + (min(max(t, t0), t1) - t0) / (t1 - t0) * iw

    parts = [f'<rect x="{PAD_L}" y="{PAD_T}" width="{iw}" height="{ih}" fill="#fbfcfe" '
             'stroke="#e3e7ee"/>',
             f'<text x="{PAD_L + 6}" y="{PAD_T + 14}" font-size="12" fill="#1d2330" '
             f'font-weight="600">{_e(title)}</text>']
    empty = not finite
    if finite:
        lo, hi = min(v for _, v in finite), max(v for _, v in finite)
        if hi - lo < 1e-12:  # a flat line: a band around it (never below 0 for a share)
            pad = abs(lo) * 0.1 or 0.5
            lo, hi = (max(lo - pad, 0.0) if lo >= 0 else lo - pad), hi + pad

        def y(v: float) -> float:
            return PAD_T + ih - (v - lo) / (hi - lo) * ih

        for frac in (0.0, 0.5, 1.0):
            val = lo + frac * (hi - lo)
            yy = y(val)
            parts.append(f'<line x1="{PAD_L}" x2="{PAD_L + iw}" y1="{yy:.1f}" y2="{yy:.1f}" '
                         'stroke="#eef1f6"/>')
            parts.append(f'<text x="{PAD_L - 4}" y="{yy + 4:.1f}" font-size="10" '
                         f'text-anchor="end" fill="#5b6576">{_num(val)}</text>')
        pts = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in finite)
        parts.append(f'<polyline class="series" fill="none" stroke="#2b6cb0" stroke-width="1.6" '
                     f'points="{pts}"/>')
        if len(finite) == 1:
            t, v = finite[0]
            parts.append(f'<circle cx="{x(t):.1f}" cy="{y(v):.1f}" r="3" fill="#2b6cb0"/>')
    else:
        parts.append(f'<text x="{PAD_L + iw / 2}" y="{PAD_T + ih / 2 + 4}" font-size="12" '
                     'text-anchor="middle" fill="#8a5a00">no data recorded</text>')
    for c in checkpoints:
        cx = x(int(c["ts_ms"]))
        color = "#1f7a3a" if c.get("trustworthy") else "#b4232a"
        by = PAD_T + ih
        parts.append(f'<path class="checkpoint" d="M{cx:.1f},{by - 9:.1f} l-5,9 l10,0 z" '
                     f'fill="{color}"><title>checkpoint step {_e(c.get("step"))}'
                     f'{"" if c.get("trustworthy") else " (not trustworthy)"}</title></path>')
    for o in onsets:
        ox = x(o)
        parts.append(f'<line class="onset" x1="{ox:.1f}" x2="{ox:.1f}" y1="{PAD_T}" '
                     f'y2="{PAD_T + ih}" stroke="#b4232a" stroke-width="1.4" '
                     f'stroke-dasharray="4 3"><title>alert onset {_e(_when(o))}</title></line>')
    parts.append(f'<text x="{PAD_L}" y="{H - 8}" font-size="10" fill="#5b6576">'
                 f'{_e(_when(t0))}</text>')
    parts.append(f'<text x="{PAD_L + iw}" y="{H - 8}" font-size="10" text-anchor="end" '
                 f'fill="#5b6576">{_e(_when(t1))}</text>')
    return (f'<svg class="plot" data-indicator="{_e(key)}" data-empty="{str(empty).lower()}" '
            f'xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
            f'viewBox="0 0 {W} {H}" role="img" aria-label="{_e(title)}">{"".join(parts)}</svg>')


def cost_svg(cost: Mapping[str, Any]) -> str:
    """Return the cost plot: stacked GPU-hours by waste cause, the family's peers and this run.

    Args:
        cost: The ``cost`` answer (:func:`runwatch.core.investigate.cost.cost_answer`).

    Returns:
        The ``<svg class="costplot">`` markup; ``data-empty="true"`` without the run's figures.
    """
    run = cost.get("run")
    peers = (cost.get("peers") or {}).get("runs") or []
    bars = [*peers, run] if run is not None else []
    iw, top, bottom = W - PAD_L - PAD_R, PAD_T + 34, COST_H - 40
    ih = bottom - top
    title = "GPU-hours by waste cause: this run (outlined, last) and its family's earlier runs"
    parts = [f'<rect x="{PAD_L}" y="{top}" width="{iw}" height="{ih}" fill="#fbfcfe" '
             'stroke="#e3e7ee"/>',
             f'<text x="{PAD_L}" y="{PAD_T + 2}" font-size="12" fill="#1d2330" '
             f'font-weight="600">{_e(title)}</text>']
    lx = float(PAD_L)
    for _key, colour, label in COST_COLOURS:
        parts.append(f'<rect x="{lx:.1f}" y="{PAD_T + 10}" width="10" height="10" '
                     f'fill="{colour}" stroke="#cbd2dc"/><text x="{lx + 14:.1f}" '
                     f'y="{PAD_T + 19}" font-size="10" fill="#5b6576">{_e(label)}</text>')
        lx += 22 + 5.6 * len(label)
    if run is None:
        parts.append(f'<text x="{PAD_L + iw / 2}" y="{top + ih / 2 + 4}" font-size="12" '
                     f'text-anchor="middle" fill="#8a5a00">{_e(cost.get("note") or "no cost")}'
                     '</text>')
    cur = cost.get("currency")
    labels = [money(b.get("cost"), cur, b.get("unpriced_reason")) for b in bars]
    # the scale leaves room over each bar for its cost, written upwards (about 6 px a letter)
    hi = max([float(b["gpu_hours"]) * ih / max(ih - 6.0 * len(t) - 10, ih / 4)
              for b, t in zip(bars, labels, strict=True)] + [0.0]) or 1.0
    slot = iw / max(len(bars), 1)
    bw = min(slot * 0.62, 60.0)

    def y(v: float) -> float:
        return bottom - v / hi * ih

    for frac in (0.0, 0.5, 1.0):
        val = frac * hi
        parts.append(f'<line x1="{PAD_L}" x2="{PAD_L + iw}" y1="{y(val):.1f}" y2="{y(val):.1f}" '
                     f'stroke="#eef1f6"/><text x="{PAD_L - 4}" y="{y(val) + 4:.1f}" '
                     f'font-size="10" text-anchor="end" fill="#5b6576">{_num(val)}</text>')
    parts.append(f'<text x="12" y="{top + ih / 2:.1f}" font-size="10" fill="#5b6576" '
                 f'transform="rotate(-90 12 {top + ih / 2:.1f})" text-anchor="middle">'
                 'GPU-hours</text>')
    if len(bars) > 1 and slot < 72:  # too narrow to name each run: their titles do
        parts.append(f'<text x="{PAD_L}" y="{bottom + 13}" font-size="9" fill="#5b6576">'
                     "earlier runs of the family, oldest first →</text>")
    median = (cost.get("peers") or {}).get("median_gpu_hours")
    if median is not None and run is not None:
        ym = y(float(median))
        parts.append(f'<line class="median" x1="{PAD_L}" x2="{PAD_L + iw}" y1="{ym:.1f}" '
                     f'y2="{ym:.1f}" stroke="#1d2330" stroke-dasharray="5 4" stroke-width="1">'
                     f'<title>family median {_num(float(median))} GPU-h</title></line>')
    for i, b in enumerate(bars):
        mine = b is run
        cx = PAD_L + slot * (i + 0.5)
        x0 = cx - bw / 2
        wasted = b.get("wasted_gpu_hours") or {}
        parts_h = {"useful": float(b.get("useful_gpu_hours") or 0.0),
                   "unobserved": float(b.get("unobserved_gpu_hours") or 0.0),
                   **{k: float(v or 0.0) for k, v in wasted.items()}}
        label = labels[i]
        segs = []
        base = 0.0
        for key, colour, name in COST_COLOURS:
            h = parts_h.get(key, 0.0)
            if h <= 0:
                continue
            y1, y0 = y(base + h), y(base)
            edge = ' stroke="#a0aec0" stroke-dasharray="3 2"' if key == "unobserved" else ""
            segs.append(f'<rect class="seg" data-cause="{key}" data-gpu-hours="{h:g}" '
                        f'x="{x0:.1f}" y="{y1:.1f}" width="{bw:.1f}" '
                        f'height="{max(y0 - y1, 0.5):.1f}" fill="{colour}"{edge}>'
                        f'<title>{_e(name)}: {_num(h)} GPU-h</title></rect>')
            base += h
        top_y = y(float(b["gpu_hours"]))
        outline = (f'<rect class="this-run" x="{x0 - 2:.1f}" y="{top_y - 2:.1f}" '
                   f'width="{bw + 4:.1f}" height="{bottom - top_y + 2:.1f}" fill="none" '
                   'stroke="#1d2330" stroke-width="2"/>') if mine else ""
        weight = ' font-weight="700"' if mine else ""
        faded = "" if mine else ' opacity="0.6"'
        name = "this run" if mine else (str(b["run_id"])[-12:] if slot >= 72 else "")
        parts.append(
            f'<g class="bar" data-run="{_e(b["run_id"])}" data-this="{str(mine).lower()}" '
            f'data-gpu-hours="{float(b["gpu_hours"]):g}" data-cost="{_e(label)}"'
            f'{faded}>'
            f'<title>{_e(b["run_id"])} ({_e(b.get("outcome"))}): {_num(float(b["gpu_hours"]))} '
            f'GPU-h, {_e(label)}; wasted {_num(float(b.get("wasted_gpu_hours_total") or 0))} '
            f'GPU-h</title>{"".join(segs)}{outline}'
            f'<text class="cost-label" x="{cx:.1f}" y="{top_y - 6:.1f}" font-size="10" '
            f'fill="#1d2330"{weight} transform="rotate(-90 {cx:.1f} {top_y - 6:.1f})">'
            f'{_e(label)}</text>'
            f'<text x="{cx:.1f}" y="{bottom + 13}" font-size="9" text-anchor="middle" '
            f'fill="#5b6576"{weight}>{_e(name)}</text></g>')
    if run is not None:
        tail = ("" if median is None else
                f"; dashed: the family's median, {_num(float(median))} GPU-h")
        parts.append(f'<text x="{PAD_L}" y="{COST_H - 10}" font-size="11" fill="#1d2330">'
                     f'this run: {_num(float(run["gpu_hours"]))} GPU-h, '
                     f'{_e(money(run.get("cost"), cur, run.get("unpriced_reason")))}, wasted '
                     f'{_num(float(run.get("wasted_gpu_hours_total") or 0))} GPU-h{_e(tail)}'
                     '</text>')
    empty = run is None
    return (f'<svg class="costplot" data-plot="cost" data-empty="{str(empty).lower()}" '
            f'xmlns="http://www.w3.org/2000/svg" width="{W}" height="{COST_H}" '
            f'viewBox="0 0 {W} {COST_H}" role="img" aria-label="{_e(title)}">'
            f'{"".join(parts)}</svg>')


def checkpoint_share(checkpoints: Sequence[Mapping[str, Any]], span: tuple[int, int],
                     buckets: int = 60) -> list[tuple[int, float]]:
    """Return the share of wall time spent writing checkpoints, per time bucket.

    Args:
        checkpoints: Rows with ts_ms (end) and duration_ms.
        span: The run's time span (epoch ms).
        buckets: How many buckets.

    Returns:
        (bucket middle, share) pairs; empty without checkpoints.
    """
    if not checkpoints:
        return []
    t0, t1 = span
    width = max(1, (t1 - t0) // buckets + 1)
    spent = [0.0] * buckets
    for c in checkpoints:
        end = int(c["ts_ms"])
        dur = float(c.get("duration_ms") or 0.0)
        start = end - int(dur)
        for k in range(max(0, (start - t0) // width), min(buckets, (end - t0) // width + 1)):
            lo, hi = t0 + k * width, t0 + (k + 1) * width
            spent[k] += max(0, min(end, hi) - max(start, lo))
    return [(t0 + k * width + width // 2, min(spent[k] / width, 1.0)) for k in range(buckets)]


def _table(head: Sequence[str], rows: Sequence[Sequence[Any]], cls: str = "") -> str:
    th = "".join(f"<th>{_e(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'


def _flag(ok: bool | None, yes: str = "yes", no: str = "no") -> str:
    if ok is None:
        return '<span class="note">unknown</span>'
    return f'<span class="good">{yes}</span>' if ok else f'<span class="bad">{no}</span>'


def _cost_section(cost: Mapping[str, Any] | None) -> str:
    if not cost:
        return ""
    out = ["<h2>Cost</h2>"]
    run, peers, cur = cost.get("run"), cost.get("peers") or {}, cost.get("currency")
    if run is not None:
        waste = ", ".join(f"{k.replace('_', ' ')} {_num(float(v))}"
                          for k, v in (run.get("wasted_gpu_hours") or {}).items() if v)
        price = (f" ({_e(run.get('gpu_model'))} at {_num(float(run['per_gpu_hour']))} "
                 f"{_e(cur)} per GPU-hour)" if run.get("priced") else "")
        out.append(f"<p><b>{_num(float(run['gpu_hours']))}</b> GPU-hours, "
                   f"<b>{_e(money(run.get('cost'), cur, run.get('unpriced_reason')))}</b>"
                   f"{price}; wasted {_num(float(run.get('wasted_gpu_hours_total') or 0))} "
                   f"GPU-hours{f' ({_e(waste)})' if waste else ''}.</p>")
        if peers.get("runs"):
            ranks = f"ranks {peers['gpu_hours_rank']} of {peers['ranked_of']} by GPU-hours"
            if peers.get("cost_rank") is not None:
                ranks += f", {peers['cost_rank']} of {peers['priced_of']} by cost"
            out.append(f"<p>Against the {len(peers['runs'])} earlier run(s) of family "
                       f"<code>{_e(peers.get('family'))}</code>: median "
                       f"{_num(float(peers['median_gpu_hours']))} GPU-hours, "
                       f"{_e(money(peers.get('median_cost'), cur, 'no priced peer'))}; "
                       f"this run {_e(ranks)} (1 = the most).</p>")
        lost = cost.get("resume_lost")
        if lost:
            out.append(f"<p>Resuming from step {_e(lost.get('step'))} loses "
                       f"{_num(float(lost['gpu_hours']))} GPU-hours = "
                       f"<b>{_e(money(lost.get('cost'), cur, lost.get('unpriced_reason')))}</b>"
                       ".</p>")
    if cost.get("note"):
        out.append(f'<p class="note">{_e(cost["note"])}</p>')
    out.append(f'<div class="plots">{cost_svg(cost)}</div>')
    return "".join(out)


def render(result: Mapping[str, Any], series: Mapping[str, Sequence[tuple[int, float]]]) -> str:
    """Return the investigation page of one run.

    Args:
        result: The ``investigate`` answer (JSON shape version 1).
        series: Indicator → points (keys of :data:`PLOTS`; ``validation:<metric>``
            for the validation metric).

    Returns:
        The HTML document.
    """
    run = result.get("run") or {}
    trust = result.get("trustworthy") or {}
    cks = trust.get("checkpoints") or []
    onsets = sorted({int(a["onset_ms"]) for a in result.get("alerts") or ()
                     if a.get("status") == "firing" and a.get("onset_ms")})
    times = [t for pts in series.values() for t, _v in pts] + [int(c["ts_ms"]) for c in cks]
    times += [v for v in (run.get("started_ms"), run.get("ended_ms")) if v is not None]
    span = (min(times), max(times)) if times else (0, 1)
    plots = []
    for key, title in PLOTS:
        pts: Sequence[tuple[int, float]] = series.get(key, ())
        if key == "validation":
            for name, values in series.items():
                if name.startswith("validation"):
                    pts, metric = values, name.partition(":")[2]
                    title = f"Validation {metric}" if metric else title
        plots.append(plot_svg(key, title, pts, span, onsets, cks))
    out = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
           f"<title>runwatch investigate {_e(result.get('run_id'))}</title>"
           f"<style>{_STYLE}</style></head><body>",
           f"<h1>Run {_e(result.get('run_id'))}</h1>",
           f'<p class="sub">family <code>{_e(run.get("experiment_family"))}</code> · team '
           f'<code>{_e(run.get("team"))}</code> · state <code>{_e(run.get("state"))}</code> · '
           f'{_e(run.get("gpu_count"))} GPUs on {_e(", ".join(run.get("nodes") or []))} · '
           f'database <code>{_e(result.get("database"))}</code> · generated '
           f'{_e(_when(result.get("generated_at_ms")))} UTC</p>']
    missing = result.get("missing") or []
    if missing:
        out.append('<h2>What is missing</h2><ul class="miss">'
                   + "".join(f"<li>{_e(m)}</li>" for m in missing) + "</ul>")
    out.append('<h2>Indicators</h2><p class="legend"><span>— value</span>'
               '<span style="color:#b4232a">┆ alert onset</span>'
               '<span style="color:#1f7a3a">▲ trustworthy checkpoint</span>'
               '<span style="color:#b4232a">▲ untrustworthy checkpoint</span></p>'
               f'<div class="plots">{"".join(plots)}</div>')
    alerts = result.get("alerts") or []
    if alerts:
        out.append("<h2>Alerts</h2>" + _table(
            ("first seen", "status", "severity", "detector", "probable cause", "title"),
            [(_e(_when(a.get("first_seen_ms"))), _e(a.get("status")), _e(a.get("severity")),
              f"<code>{_e(a.get('detector'))}</code>", _e(a.get("probable_cause")),
              _e(a.get("title"))) for a in alerts]))
    changed = result.get("what_changed") or {}
    out.append("<h2>What changed</h2>")
    ref = changed.get("reference_run_id")
    out.append(f'<p>Against <code>{_e(ref)}</code> ({_e(changed.get("reference"))}).</p>'
               if ref else f'<p class="note">{_e(changed.get("reference"))}</p>')
    changes = changed.get("changes") or []
    if changes:
        out.append(_table(("kind", "what", "old", "new", ""), [
            (_e(c["kind"]), f"<code>{_e(c['key'])}</code>", _e(c["old"]), _e(c["new"]),
             '<span class="note">intentional</span>' if c["intentional"]
             else '<span class="bad">suspect</span>') for c in changes], "diff"))
    elif ref:
        out.append('<p class="note">no lineage change</p>')
    for q in changed.get("input_quality") or []:
        out.append(f'<p class="bad">Input {_e(q["dataset_uri"])}@{_e(q["dataset_version"])}: '
                   f'{_e("; ".join(q["problems"]))} ({_e(_when(q["ts_ms"]))})</p>')
    for s in changed.get("stages") or []:
        out.append(f'<p>Stage <code>{_e(s.get("stage"))}</code> {_e(s.get("code_version"))} → '
                   f'{_e(s.get("dataset_uri"))}@{_e(s.get("dataset_version"))}: '
                   f'{_e(s.get("outcome"))}, rows {_e(s.get("rows_in"))} → '
                   f'{_e(s.get("rows_out"))}</p>')
    for g in changed.get("infrastructure") or []:
        out.append(f'<p class="bad">GPU {_e(g["node"])}/{_e(g["gpu_index"])}: xid '
                   f'{_e(g["xid"])}, uncorrected ECC {_e(g["ecc_uncorrected"])} from '
                   f'{_e(_when(g["first_ms"]))}</p>')
    aff = result.get("affected_runs") or {}
    out.append("<h2>Affected runs</h2>")
    runs = aff.get("runs") or []
    if runs:
        out.append(_table(("run", "family", "team", "state", "firing alerts", "shares"), [
            (f"<code>{_e(r['run_id'])}</code>", _e(r["experiment_family"]), _e(r["team"]),
             _e(r["state"]), _e(f"{r['alerts']} ({', '.join(r['detectors'])})"
                               if r["alerts"] else "0"),
             _e("; ".join(r["shared"]))) for r in runs], "affected"))
    else:
        out.append(f'<p class="note">{_e(aff.get("note") or "no other run shares a suspect input")}'
                   "</p>")
    det = result.get("deterministic") or {}
    out.append(f"<h2>Deterministic?</h2><p>{_flag(det.get('deterministic'), 'yes', 'no')} — "
               f"{_e(det.get('reason'))}</p>")
    out.append("<h2>Trustworthy artifacts</h2>")
    if cks:
        out.append(_table(("step", "written", "checkpoint", "trustworthy", "why not"), [
            (_e(c["step"]), _e(_when(c["ts_ms"])), f"<code>{_e(c['uri'])}</code>",
             _flag(c["trustworthy"]), _e("; ".join(c["reasons"]))) for c in cks]))
    for a in trust.get("artifacts") or []:
        out.append(f"<p>{_e(a['kind'])} <code>{_e(a['uri'])}</code>: "
                   f"{_flag(a['trustworthy'], 'trustworthy', 'not trustworthy')} "
                   f"{_e('; '.join(a['reasons']))}</p>")
    res = result.get("resume_point") or {}
    out.append("<h2>Resume point</h2>")
    if res.get("step") is not None:
        lost = res.get("gpu_hours_lost")
        out.append(f"<p>Step <b>{_e(res['step'])}</b> from <code>{_e(res['uri'])}</code> "
                   f"({_e(_when(res['ts_ms']))}); resuming loses "
                   f"<b>{_e(lost if lost is not None else 'unknown')}</b> GPU-hours "
                   f"({_e(res.get('gpu_count'))} GPUs).</p>")
    else:
        out.append(f'<p class="bad">{_e(res.get("reason"))}</p>')
    out.append(_cost_section(result.get("cost")))
    rel = result.get("release") or {}
    out.append("<h2>Release</h2>")
    out.append(f'<p>{_flag(not rel.get("blocked"), "not blocked", "blocked")} '
               f'{_e("; ".join(rel.get("reasons") or []) or rel.get("note") or "")}</p>')
    own = result.get("owner") or {}
    out.append("<h2>Owner</h2>"
               f"<p><b>{_e(own.get('team') or 'nobody')}</b> "
               f"(receiver <code>{_e(own.get('receiver'))}</code>; owns {_e(own.get('owns'))})"
               f" — {_e(own.get('why'))}</p>")
    paged = own.get("paged") or []
    if paged:
        out.append(_table(("alert", "cause", "owner", "pager receivers", "why"), [
            (f"<code>{_e(p['detector'])}</code>", _e(p["probable_cause"]), _e(p["team"]),
             _e(", ".join(p["receivers"])), _e(p["why"])) for p in paged]))
    out.append("</body></html>\n")
    return "".join(out)
