"""Perturbed copies of a NAB-format corpus: a robustness check that cannot overfit.

A detector whose design was chosen on a corpus may only win on those very
files. Scoring it again on copies of the files changed in ways real telemetry
differs (coarser or irregular sampling, heavy tails, compressed range,
quantised values, noise, counts, another scale or clock) shows whether it
collapses. No labels are used to build a copy: the windows move with the
timestamps (only ``tshift`` moves the clock, and it moves the windows with
it), so each copy is scored with NAB's own labels.

The value transforms read the whole file's min, mean or spread to set their
scale (a transform of the data, not a detector: nothing here is causal).
Random draws are seeded by ``"<kind>/<file key>"``, so every copy is
reproducible. Write the copies, then score each with ``runwatch bench nab
--data <out>/<kind>``::

    python -m runwatch.bench.perturb --data path/to/NAB --out /tmp/nab-perturbed
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import random
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path

from runwatch.bench.corpus import list_series, parse_timestamp, read_series

Rows = list[tuple[datetime, float]]
Perturbation = Callable[[Rows, random.Random], Rows]

SHIFT = timedelta(days=3, hours=7)  # moves hour of day and day of week
_FORMAT = "%Y-%m-%d %H:%M:%S"


def downsample(rows: Rows, rng: random.Random, step: int = 3) -> Rows:
    """Keep every ``step``-th row (a series sampled three times more coarsely, a third as long)."""
    return rows[::step]


def gaps(rows: Rows, rng: random.Random) -> Rows:
    """Drop one block of 5-60 rows per 400 rows, then 5 % of single rows (irregular sampling)."""
    n = len(rows)
    keep = [True] * n
    for _ in range(max(1, n // 400)):
        start = rng.randrange(n)
        for i in range(start, min(n, start + rng.randint(5, 60))):
            keep[i] = False
    for i in range(n):
        if rng.random() < 0.05:
            keep[i] = False
    keep[0] = True
    return [r for r, k in zip(rows, keep, strict=True) if k]


def squared(rows: Rows, rng: random.Random) -> Rows:
    """``(x - min)^2``: a heavy right tail (monotone, so every anomaly is still there)."""
    lo = min(v for _, v in rows)
    return [(t, (v - lo) ** 2) for t, v in rows]


def log(rows: Rows, rng: random.Random) -> Rows:
    """``log(1 + x - min)``: a compressed range (spikes shrink)."""
    lo = min(v for _, v in rows)
    return [(t, math.log1p(v - lo)) for t, v in rows]


def quantise(rows: Rows, rng: random.Random, levels: int = 40) -> Rows:
    """Round to ``range / levels`` steps (a low-resolution sensor)."""
    values = [v for _, v in rows]
    step = (max(values) - min(values)) / levels or 1.0
    return [(t, round(v / step) * step) for t, v in rows]


def noise(rows: Rows, rng: random.Random, fraction: float = 0.1) -> Rows:
    """Add Gaussian noise of ``fraction`` times the series' standard deviation."""
    values = [v for _, v in rows]
    mean = sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values)) or 1.0
    return [(t, v + rng.gauss(0.0, fraction * sd)) for t, v in rows]


def poisson(rows: Rows, rng: random.Random, rate: float = 10.0) -> Rows:
    """Counts: a Poisson draw of rate ``rate * (x - min) / (mean - min)`` per row.

    Heavy-tailed, quantised and heteroscedastic like event counts (mean rate 10).
    """
    values = [v for _, v in rows]
    lo = min(values)
    scale = sum(values) / len(values) - lo or 1.0
    return [(t, float(_poisson_draw(rate * (v - lo) / scale, rng))) for t, v in rows]


def _poisson_draw(lam: float, rng: random.Random) -> int:
    if lam >= 30.0:  # normal approximation
        return max(0, round(rng.gauss(lam, math.sqrt(lam))))
    limit, k, p = math.exp(-lam), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


def scale(rows: Rows, rng: random.Random) -> Rows:
    """``1000 x + 10^6``: another unit and offset (a detector should not notice)."""
    return [(t, 1000.0 * v + 1e6) for t, v in rows]


def tshift(rows: Rows, rng: random.Random) -> Rows:
    """Move every timestamp by :data:`SHIFT` (the labels move with it)."""
    return [(t + SHIFT, v) for t, v in rows]


PERTURBATIONS: dict[str, Perturbation] = {
    "down3": downsample,
    "gaps": gaps,
    "squared": squared,
    "log": log,
    "quant40": quantise,
    "noise10": noise,
    "poisson": poisson,
    "scale": scale,
    "tshift": tshift,
}
_TIME_SHIFT = {"tshift": SHIFT}


def write_perturbed(src: Path, dst: Path, kind: str) -> list[str]:
    """Write a perturbed copy of the corpus at ``src`` to ``dst`` (``data/`` and ``labels/``).

    Args:
        src: Corpus folder (``data/<set>/<name>.csv``, ``labels/combined_windows.json``).
        dst: Output folder (created; files in it are overwritten).
        kind: A key of :data:`PERTURBATIONS`.

    Returns:
        The file keys written.

    Raises:
        ValueError: If ``kind`` is unknown.

    """
    if kind not in PERTURBATIONS:
        msg = f"unknown perturbation {kind!r}; known: {', '.join(PERTURBATIONS)}"
        raise ValueError(msg)
    perturb = PERTURBATIONS[kind]
    keys = list_series(src)
    for key in keys:
        series = read_series(src, key)
        rows = [
            (parse_timestamp(t), v) for t, v in zip(series.timestamps, series.values, strict=True)
        ]
        out = dst / "data" / key
        out.parent.mkdir(parents=True, exist_ok=True)
        _write_rows(out, perturb(rows, random.Random(f"{kind}/{key}")))
    shift = _TIME_SHIFT.get(kind, timedelta(0))
    labels = json.loads((src / "labels" / "combined_windows.json").read_text())
    moved = {
        key: [
            [_stamp(parse_timestamp(a) + shift), _stamp(parse_timestamp(b) + shift)] for a, b in w
        ]
        for key, w in labels.items()
    }
    (dst / "labels").mkdir(parents=True, exist_ok=True)
    (dst / "labels" / "combined_windows.json").write_text(json.dumps(moved, indent=1))
    return keys


def _stamp(t: datetime) -> str:
    return t.strftime(_FORMAT)


def _write_rows(path: Path, rows: Rows) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["timestamp", "value"])
        writer.writerows((_stamp(t), repr(v)) for t, v in rows)


def main(argv: Sequence[str] | None = None) -> int:
    """Write every perturbation (or those named) of a corpus under ``--out/<kind>``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--data", type=Path, required=True, help="NAB-format corpus folder")
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("--kinds", default=",".join(PERTURBATIONS), help="comma-separated")
    args = parser.parse_args(argv)
    for kind in [k for k in args.kinds.split(",") if k]:
        keys = write_perturbed(args.data, args.out / kind, kind)
        print(f"{kind}: {len(keys)} series -> {args.out / kind}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
