"""``runwatch bench nab``: score detectors on a NAB-format corpus."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``bench`` command group."""
    bench = sub.add_parser("bench", help="benchmark detectors on public labeled data")
    bench_sub = bench.add_subparsers(dest="bench_command", metavar="BENCH", required=True)
    nab = bench_sub.add_parser("nab", help="Numenta Anomaly Benchmark (NAB-format folder)")
    nab.add_argument("--data", type=Path, required=True, help="corpus folder (data/, labels/)")
    nab.add_argument(
        "--out", type=Path, default=Path(".runwatch/nab"), help="per-row score files folder"
    )
    nab.add_argument(
        "--detectors",
        default="default,windowed_gaussian,hst,random",
        help=(
            "comma-separated detectors: default, windowed_gaussian, hst, random, and the"
            " slower cad_ose and relative_entropy"
        ),
    )
    nab.add_argument(
        "--hst-time-every",
        type=int,
        default=1,
        help="time HalfSpaceTrees on every k-th file only (it still scores all files)",
    )
    nab.set_defaults(func=_nab)


def _nab(args: argparse.Namespace) -> int:
    from runwatch.bench.baselines import DETECTORS, GRIDS
    from runwatch.bench.corpus import list_series
    from runwatch.bench.nab import (
        SHIPPED,
        format_folds,
        format_table,
        format_thresholds,
        run_benchmark,
    )

    names = [n.strip() for n in args.detectors.split(",") if n.strip()]
    unknown = [n for n in names if n not in DETECTORS]
    if unknown or not names:
        print(f"unknown detectors {unknown}; choose from {sorted(DETECTORS)}", file=sys.stderr)
        return 2
    try:
        n_files = len(list_series(args.data))
    except FileNotFoundError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    chosen = {n: DETECTORS[n] for n in names}
    grids = {n: GRIDS[n] for n in names if n in GRIDS}
    runs_per_file = len(names) + sum(len([c for c in g if c != SHIPPED]) for g in grids.values())
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, transient=False) as bar:
        task = bar.add_task("detecting", total=n_files * runs_per_file)

        def progress(detector: str, key: str, rows: int) -> None:
            bar.update(task, advance=1, description=f"{detector:>18} {key} ({rows} rows)")

        reports = run_benchmark(
            args.data,
            chosen,
            args.out,
            progress=progress,
            time_every={"hst": max(1, args.hst_time_every)},
            grids=grids,
        )
    print("In-sample (NAB's way: thresholds optimised on every file's labels) and")
    print("leave-one-set-out cross-validated (CV: configuration and threshold chosen on the")
    print("other sets, scores pooled over the held-out sets):\n")
    print(format_table(reports))
    print()
    if all(r.cv for r in reports):
        print(format_folds(reports))
    else:
        print("CV n/a: leave-one-set-out needs at least two sets under data/")
    print()
    print("In-sample thresholds:")
    print(format_thresholds(reports))
    print(f"\nper-row scores written under {args.out}")
    return 0
