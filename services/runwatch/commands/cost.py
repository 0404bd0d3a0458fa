"""``runwatch cost`` and ``runwatch capacity``: cost, waste by cause, the bottleneck.

What each run costs, what was wasted and why, and where the cluster's
bottleneck is (docs/cost.md).

Both read the views of ``schemas/clickhouse/0031_cost_views.sql`` as the
readonly user; the attribution itself is :mod:`runwatch.core.cost`.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from runwatch.core.cost.capacity import (
    CkptBucket,
    NodeMinute,
    QueueWait,
    StepBucket,
    capacity_report,
)
from runwatch.core.cost.prices import Prices, PricesError, parse_prices
from runwatch.core.cost.waste import (
    GROUP_KEYS,
    HISTORY_S,
    RUN_COST_COLUMNS,
    RunCost,
    attribute,
    baselines,
    cost_report,
    run_cost_from_row,
)
from runwatch.core.jsontext import json_text
from runwatch.errors import FatalError

#: The run_costs columns (kept under this name for benchmarks/cost.py).
_RUN_COLS = RUN_COST_COLUMNS


def _since_s(text: str) -> int:
    from runwatch.core.storage.retention import RetentionError, parse_duration

    try:
        since = parse_duration(text)
    except RetentionError as exc:
        msg = f"--since {text!r}: {exc}"
        raise FatalError(msg) from None
    if since * 1000 > time.time() * 1000:
        msg = f"--since {text!r} reaches back before 1970 (the store's time starts there)"
        raise FatalError(msg)
    return since


def load_prices(path: Path | None) -> Prices:
    """Read and validate the prices file (``--prices``, ``$RUNWATCH_COSTS_FILE`` or the example).

    Raises:
        FatalError: The file is missing or invalid (the message names file, line and key).

    """
    from runwatch.resources import costs_file, read_config

    file = path or costs_file()
    try:
        text = read_config(file)
    except OSError as exc:
        msg = f"cannot read prices file {file}: {exc.strerror or exc}"
        raise FatalError(msg) from None
    try:
        return parse_prices(text, str(file))
    except PricesError as exc:
        raise FatalError(str(exc)) from None


def _client(database: str | None) -> Any:
    from runwatch.adapters import clickhouse as ch
    from runwatch.adapters.settings import ClickHouseSettings

    settings = ClickHouseSettings(database=database) if database else ClickHouseSettings()
    try:  # a bad name, no such database, no runwatch tables: one line, as investigate and slo
        return ch.open_database(settings, readonly=True, as_default=True)
    except (ch.ClickHouseUnavailable, ch.ClickHouseRejected) as exc:
        raise FatalError(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - the client's first query: show ClickHouse's words
        msg = f"the store refused the connection: {exc}"
        raise FatalError(msg) from None


def _query(client: Any, sql: str) -> list[tuple[Any, ...]]:
    """Run one query (times are inlined as integers: no bound parameters)."""
    from runwatch.adapters import clickhouse as ch

    try:
        return ch.query_rows(client, sql)
    except (ch.ClickHouseUnavailable, ch.ClickHouseRejected) as exc:
        msg = f"the store refused the cost query: {exc}"
        raise FatalError(msg) from None


def _runs(client: Any, since_s: int, now_ms: int) -> tuple[list[RunCost], list[RunCost]]:
    """Return the window's runs and the history the baselines are learnt from."""
    start = now_ms - since_s * 1000
    first = int(now_ms - max(since_s, HISTORY_S) * 1000)
    rows = _query(client, f"SELECT {_RUN_COLS} FROM run_costs "  # noqa: S608 - fixed columns, int
                  f"WHERE ended_at >= fromUnixTimestamp64Milli({first}, 'UTC')")
    history = [run_cost_from_row(r) for r in rows]
    window = [h for h, r in zip(history, rows, strict=True) if int(r[-1]) >= start]
    return window, history


def cost(args: argparse.Namespace) -> int:
    """``runwatch cost``."""
    prices = load_prices(args.prices)
    since = _since_s(args.since)
    now_ms = int(time.time() * 1000)
    window, history = _runs(_client(args.database), since, now_ms)
    report = cost_report(window, history, prices, args.by)
    report["window"] = {"since": args.since, "from_ms": now_ms - since * 1000, "to_ms": now_ms}
    if args.json:
        print(json_text(report, sort_keys=False))
        return 0
    _print_cost(report)
    return 0


def _fig(value: float) -> str:
    """A figure as the JSON holds it (up to 3 decimals), never in exponent notation.

    ``:g`` kept 6 digits: 1,440,000 GPU-hours (a month of 2,000 GPUs) printed ``1.44e+06``
    and 123,456.789 printed ``123457``.
    """
    text = f"{value:.3f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


def _or_dash(value: float | None) -> str:
    """A figure, or ``-`` when there is none (0 is a figure: a job that did not wait)."""
    return "-" if value is None else _fig(value)


def _print_cost(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    cur = report["currency"]
    table = Table(report["by"], "runs", "done", "GPU-h", escape(f"cost {cur}"), "GPU-h/done",
                  "queue p50/p95 s", "no artifact", "wasted GPU-h", "unpriced",
                  title=f"cost by {report['by']} since {report['window']['since']}")
    for g in [*report["groups"], {"key": "total", **report["totals"]}]:
        waste = g["wasted_gpu_hours"]
        detail = ", ".join(f"{c} {_fig(h)}" for c, h in waste.items() if h)
        # A group key is a user's label (family, team, queue, run id): text, never markup.
        table.add_row(Text(str(g["key"])), str(g["runs"]), str(g["completed_runs"]),
                      _fig(g["gpu_hours"]), "-" if g["cost"] is None else f"{g['cost']:,.2f}",
                      "-" if g["gpu_hours_per_completed_run"] is None
                      else _fig(g["gpu_hours_per_completed_run"]),
                      f"{_or_dash(g['queue_delay_p50_s'])}/{_or_dash(g['queue_delay_p95_s'])}",
                      "-" if g["terminated_without_artifact_share"] is None
                      else f"{g['terminated_without_artifact_share']:.0%}",
                      _fig(g["wasted_gpu_hours_total"]) + (f" ({detail})" if detail else ""),
                      f"{g['unpriced_runs']} ({_fig(g['unpriced_gpu_hours'])} GPU-h)")
    console = Console(width=200)
    console.print(table)
    bad = dict(report["bad_input"])
    for key in ("unpriced_reasons", "unknown_gpu_models"):  # counts by name, not a repr
        bad[key] = ", ".join(f"{k} {v}" for k, v in bad[key].items()) or "none"
    console.print("unpriced runs: {unpriced_runs} ({unpriced_reasons}); unknown GPU models: "
                  "{unknown_gpu_models}; telemetry gaps: {telemetry_gap_runs} runs "
                  "({unobserved_gpu_hours} GPU-h unobserved); clock skew: {clock_skew_runs} "
                  "runs; no baseline: {no_baseline_runs} runs; no step telemetry: "
                  "{no_step_telemetry_runs} runs".format(**bad), markup=False)


def capacity(args: argparse.Namespace) -> int:
    """``runwatch capacity``."""
    prices = load_prices(args.prices)
    since = _since_s(args.since)
    now_ms = int(time.time() * 1000)
    start = now_ms - since * 1000
    client = _client(args.database)

    def rows(cols: str, table: str, where: str, after_ms: int = start, tail: str = "") -> list[Any]:
        # Only fixed names and an integer time are put into the statement.
        return _query(client, f"SELECT {cols} FROM {table} WHERE {where} >= "  # noqa: S608
                      f"fromUnixTimestamp64Milli({int(after_ms)}, 'UTC') {tail}")

    waits = [QueueWait(str(r[0]), int(r[1]), int(r[2]), int(r[3])) for r in rows(
        "run_id, toUnixTimestamp64Milli(queued_at), toUnixTimestamp64Milli(running_at), "
        "gpu_count", "queue_waits", "running_at")]
    first = min([start, *(w.queued_ms for w in waits)])
    first -= first % 60_000
    minutes = [NodeMinute(int(r[0]), str(r[1]), int(r[2]), int(r[3])) for r in rows(
        "toUnixTimestamp64Milli(toDateTime64(minute, 3)), node, gpus, free_gpus",
        "gpu_occupancy_1m", "minute", first)]
    ms = "run_id, toUnixTimestamp64Milli(toDateTime64(bucket, 3))"
    steps = [StepBucket(str(r[0]), int(r[1]), int(r[2]), float(r[3]), float(r[4]))
             for r in rows(f"{ms}, steps, loader_ms, compute_ms", "step_buckets_5m", "bucket")]
    ckpts = [CkptBucket(str(r[0]), int(r[1]), int(r[2]), float(r[3]))
             for r in rows(f"{ms}, checkpoints, duration_ms", "checkpoint_buckets_5m", "bucket")]
    nodes, gpus = _allocations(client, start)
    window, history = _runs(client, since, now_ms)
    base = baselines(history)
    below = []
    for run in window:
        b = base.get((run.family, run.gpu_model))
        w = attribute(run, b, prices)
        below.append((run.run_id, w.waste_h["below_baseline"], run.busy_median_util,
                      None if b is None else b.util_p50))
    report = capacity_report(waits, minutes, steps, ckpts, gpus, nodes, below)
    report["window"] = {"since": args.since, "from_ms": start, "to_ms": now_ms}
    if args.json:
        print(json_text(report))
        return 0
    _print_capacity(report)
    return 0


def _allocations(client: Any, after_ms: int) -> tuple[dict[str, list[str]], dict[str, int]]:
    """Nodes and GPUs of the runs with steps or checkpoints since ``after_ms``.

    The latest job event naming an allocation, whenever it came (a run that started before
    the window, a day-long pretraining job in ``--since 24h``, was once counted on 1 GPU
    and on no node); without one naming GPUs, the run's manifest (the nodes and GPUs the SDK
    saw), as ``runwatch cost`` bills such a run.
    """
    # Only fixed names and an integer time are put into the statements.
    after = f"ts >= fromUnixTimestamp64Milli({int(after_ms)}, 'UTC')"
    runs = ("toString(run_id) IN (SELECT toString(run_id) FROM step_timings "  # noqa: S608
            f"WHERE {after} UNION DISTINCT SELECT toString(run_id) FROM checkpoints "
            f"WHERE {after})")
    alloc = _query(client, "SELECT toString(run_id), argMax(nodes, ts), "  # noqa: S608
                   "argMax(length(nodes) * length(gpu_indices), ts) FROM job_events "
                   f"WHERE length(nodes) > 0 AND {runs} GROUP BY run_id")
    nodes = {str(r[0]): [str(n) for n in r[1]] for r in alloc}
    gpus = {str(r[0]): int(r[2]) for r in alloc if int(r[2]) > 0}
    seen = _query(client, "SELECT toString(run_id), "  # noqa: S608
                  "argMaxIf(hardware_nodes, ts, length(hardware_nodes) > 0), "
                  f"argMaxIf(gpu_count, ts, gpu_count > 0) FROM run_manifests WHERE {runs} "
                  "GROUP BY run_id")
    for rid, mnodes, mgpus in seen:
        if not nodes.get(str(rid)) and len(mnodes) > 0:
            nodes[str(rid)] = [str(n) for n in mnodes]
        if str(rid) not in gpus and int(mgpus) > 0:
            gpus[str(rid)] = int(mgpus)
    return nodes, gpus


def _print_capacity(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table("cause", "lost GPU-h", "evidence",
                  title=f"capacity since {report['window']['since']}: "
                        f"bottleneck {report['bottleneck'] or 'none'}")
    for c in report["causes"]:
        # The evidence names runs and nodes: text, never markup.
        table.add_row(c["cause"], _fig(c["lost_gpu_hours"]), Text(json.dumps(c["evidence"])))
    Console(width=200).print(table)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``cost`` and ``capacity`` commands.

    Args:
        sub: The top-level sub-parsers.
    """
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print the report as JSON")
    common.add_argument("--prices", type=Path,
                        help="prices file (default RUNWATCH_COSTS_FILE or the packaged example)")
    common.add_argument("--database", help="database (default CLICKHOUSE_DATABASE or runwatch)")
    parser = sub.add_parser("cost", parents=[common],
                            help="GPU-hours, cost and wasted GPU time by cause, per group")
    parser.add_argument("--by", choices=GROUP_KEYS, default="family",
                        help="group by (run: one line per run)")
    parser.add_argument("--since", default="7d", help="window, e.g. 7d, 24h, 90m (default 7d)")
    parser.set_defaults(func=cost)
    cap = sub.add_parser("capacity", parents=[common],
                         help="where the cluster's lost throughput went, with the evidence")
    cap.add_argument("--since", default="24h", help="window (default 24h)")
    cap.set_defaults(func=capacity)
