"""``runwatch investigate RUN_ID`` / ``--since 6h [--family F]``: the incident questions answered.

Reads ClickHouse as the readonly user (like ``runwatch sql``). Output: a
terminal view, ``--json`` (shape version 1, docs/investigation.md) or
``--html FILE`` (one self-contained page). Exit status 0; 1 when the run is
unknown (nothing recorded); 2 (``error: ...``) when the store cannot be read,
a file is invalid or an argument is (a ``--since`` reaching back before 1970
included).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runwatch.core.jsontext import json_text
from runwatch.errors import FatalError


def _ownership(path: Path | None) -> Any:
    from runwatch.core.paging.ownership import RulesError, load_ownership
    from runwatch.resources import configured_ownership_file

    try:
        return load_ownership(configured_ownership_file(path))
    except RulesError as exc:
        raise FatalError(str(exc)) from exc


def _router(path: Path | None) -> Any:
    from runwatch.core.paging.routes import RulesError, parse_rules, receivers_for
    from runwatch.resources import pager_routes_file, read_config

    env = os.environ.get("RUNWATCH_PAGER_RULES_FILE")
    chosen = path or (Path(env) if env else pager_routes_file())
    try:
        rules = parse_rules(read_config(chosen), str(chosen))
    except (RulesError, OSError) as exc:
        msg = f"pager rules: {exc}"
        raise FatalError(msg) from exc

    def route(attrs: Mapping[str, str]) -> list[str]:
        return [r.name for r in receivers_for(rules, attrs)]

    return route


def _client(database: str | None) -> tuple[Any, str]:
    from runwatch.adapters import clickhouse as ch
    from runwatch.adapters.settings import ClickHouseSettings

    settings = ClickHouseSettings(database=database) if database else ClickHouseSettings()
    try:  # the check every governance command shares: name, existence, runwatch tables
        return ch.open_database(settings, readonly=True), settings.database
    except (ch.ClickHouseUnavailable, ch.ClickHouseRejected) as exc:
        raise FatalError(str(exc)) from exc


def _run(args: argparse.Namespace) -> int:
    from runwatch.adapters.evidence import EvidenceError, EvidenceReader, investigate_run
    from runwatch.core.investigate import answers
    from runwatch.core.paging.routes import parse_duration_ms

    if args.family and not args.since:
        msg = "--family goes with --since (e.g. --since 6h --family F)"
        raise FatalError(msg)
    if bool(args.run_id) == bool(args.since):
        msg = ("give a RUN_ID or --since DURATION (e.g. --since 6h), not both" if args.run_id
               else "give a RUN_ID or --since DURATION (e.g. --since 6h)")
        raise FatalError(msg)
    now_ms = int(time.time() * 1000)
    window = 0
    if args.since:  # a bad --since is refused before the store is reached
        try:
            window = parse_duration_ms(args.since)
        except ValueError as exc:
            msg = f"--since: {exc}"
            raise FatalError(msg) from exc
        if window <= 0:
            msg = f"--since {args.since!r}: the window must be longer than 0 (e.g. 6h)"
            raise FatalError(msg)
        if window > now_ms:  # as runwatch cost --since: no date before 1970 to show
            msg = (f"--since {args.since!r} reaches back before 1970 (the store's time "
                   "starts there)")
            raise FatalError(msg)
    ownership = _ownership(args.ownership)
    client, database = _client(args.database)
    try:
        if args.since:
            reader = EvidenceReader(client, database)
            result = answers.hurting(reader.hurting(now_ms - window, args.family), now_ms - window,
                                     now_ms, args.family, ownership, database)
            series: dict[str, Any] = {}
        else:
            from runwatch.commands.cost import load_prices

            result, series = investigate_run(client, database, args.run_id, now_ms,
                                             ownership=ownership, route=_router(args.routes),
                                             prices=load_prices(args.prices))
    except EvidenceError as exc:
        raise FatalError(str(exc)) from exc
    if args.html:
        if args.since:
            msg = "--html draws one run's page: give a RUN_ID"
            raise FatalError(msg)
        from runwatch.core.investigate.html import render

        try:
            args.html.parent.mkdir(parents=True, exist_ok=True)
            args.html.write_text(render(result, series), encoding="utf-8")
        except OSError as exc:
            msg = f"cannot write {args.html}: {exc}"
            raise FatalError(msg) from exc
        print(f"wrote {args.html}", file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json_text(result, default=str, sort_keys=False))
    elif not args.html:
        _show(result)
    return 0 if result.get("found", True) else 1


def _when(ms: Any) -> str:
    from datetime import UTC, datetime

    if ms is None:
        return "?"
    return datetime.fromtimestamp(int(ms) / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


def _show(result: Mapping[str, Any]) -> None:
    """Print the answer for people: one section per question, evidence under each."""
    from rich.console import Console
    from rich.markup import escape as esc
    from rich.table import Table

    con = Console(width=max(120, Console().width), highlight=False)
    if result.get("kind") == "since":
        runs = result["runs"]
        con.print(f"[bold]Runs with firing alerts since {_when(result['since_ms'])} UTC"
                  + (f" (family {esc(result['experiment_family'])})"
                     if result.get("experiment_family") else "") + "[/bold]")
        other = result.get("alerts_without_run") or 0
        note = (f"  {other} firing alert(s) of no single run (SLOs, the fleet): runwatch slo "
                "status" if other else "")
        if not runs:
            con.print("  none: no firing alert of a run in the window")
            if note:
                con.print(note)
            return
        table = Table("run", "family", "team", "state", "alerts", "critical", "causes", "owner",
                      "first onset (UTC)")
        for r in runs:
            table.add_row(esc(r["run_id"]), esc(r["experiment_family"]), esc(r["team"]),
                          esc(r["state"]), str(r["alerts"]), str(r["critical"]),
                          esc(", ".join(r["causes"])), esc(r["owner"]),
                          _when(r["first_onset_ms"]))
        con.print(table)
        if note:
            con.print(note)
        return
    run = result["run"]
    con.print(f"[bold]Run {esc(result['run_id'])}[/bold]  family {esc(run['experiment_family'])}"
              f" · team {esc(run['team'])} · state {esc(run['state'] or '?')} · "
              f"{run['gpu_count']} GPUs on {esc(', '.join(run['nodes']) or '?')}")
    for m in result["missing"]:
        con.print(f"  [yellow]missing:[/yellow] {esc(m)}")
    if not result["found"]:
        return
    for a in result["alerts"]:
        con.print(f"  alert {esc(str(a['status']))} {esc(str(a['detector']))} "
                  f"({esc(str(a['probable_cause']))}) from {_when(a['onset_ms'])}: "
                  f"{esc(str(a['title']))}")
    changed = result["what_changed"]
    con.print("\n[bold]What changed[/bold]  " + esc(
        f"against {changed['reference_run_id']} ({changed['reference']})"
        if changed["reference_run_id"] else changed["reference"]))
    for c in changed["changes"]:
        tag = "[dim]intentional[/dim]" if c["intentional"] else "[red]suspect[/red]"
        con.print(f"  {tag} {esc(c['kind'])} {esc(c['key'])}: {esc(c['old'] or '—')} → "
                  f"{esc(c['new'] or '—')}")
    for q in changed["input_quality"]:
        con.print(f"  [red]input quality[/red] {esc(q['dataset_uri'])}@"
                  f"{esc(q['dataset_version'])}: {esc('; '.join(q['problems']))} "
                  f"({_when(q['ts_ms'])})")
    for g in changed["infrastructure"]:
        con.print(f"  [red]GPU fault[/red] {esc(g['node'])}/{g['gpu_index']} xid {g['xid']} "
                  f"from {_when(g['first_ms'])}")
    if not (changed["changes"] or changed["input_quality"] or changed["infrastructure"]):
        con.print("  nothing: no lineage change, input quality problem or GPU fault found")
    aff = result["affected_runs"]
    con.print("\n[bold]Affected runs[/bold]" + ("" if aff["runs"] else
                                               f"  {esc(aff['note'] or 'none')}"))
    for r in aff["runs"]:
        con.print(f"  {esc(r['run_id'])} ({esc(r['experiment_family'])}, {esc(r['state'])}, "
                  f"{r['alerts']} firing) shares {esc('; '.join(r['shared']))}")
    det = result["deterministic"]
    verdict = {True: "yes", False: "no", None: "unknown"}[det["deterministic"]]
    con.print(f"\n[bold]Deterministic[/bold]  {verdict}: {esc(det['reason'])}")
    con.print("\n[bold]Trustworthy artifacts[/bold]")
    for c in result["trustworthy"]["checkpoints"]:
        mark = "[green]yes[/green]" if c["trustworthy"] else "[red]no[/red] "
        con.print(f"  {mark} checkpoint step {c['step']} {esc(c['uri'])}"
                  + (f"  ({esc('; '.join(c['reasons']))})" if c["reasons"] else ""))
    for a in result["trustworthy"]["artifacts"]:
        mark = "[green]yes[/green]" if a["trustworthy"] else "[red]no[/red] "
        con.print(f"  {mark} {esc(a['kind'])} {esc(a['uri'])}"
                  + (f"  ({esc('; '.join(a['reasons']))})" if a["reasons"] else ""))
    res = result["resume_point"]
    done = run["state"] == "succeeded"  # nothing to resume: the loss would be no loss
    if res["step"] is None:
        resume = esc(res["reason"])
    elif done:
        resume = (f"none needed (the run succeeded); its last trustworthy checkpoint is step "
                  f"{res['step']} ({esc(res['uri'])})")
    elif res.get("gpu_hours_lost") is None:  # no GPU count known: say why, not "None"
        resume = (f"step {res['step']} ({esc(res['uri'])}); the GPU-hours it loses are "
                  f"unknown: {esc(res.get('reason') or 'no GPU count reported')}")
    else:
        resume = (f"step {res['step']} ({esc(res['uri'])}), loses {res['gpu_hours_lost']} "
                  "GPU-hours")
    con.print("\n[bold]Resume point[/bold]  " + resume)
    rel = result["release"]
    if rel["blocked"]:
        release = "[red]blocked[/red]: " + esc("; ".join(rel["reasons"]))
    else:
        release = "not blocked" + (f" ({esc(rel['note'])})" if rel["note"] else "")
    con.print("\n[bold]Release[/bold]  " + release)
    for g in rel["gates"]:
        con.print(f"  gate {esc(g['gate'])}: {esc(g['decision'])} ({_when(g['ts_ms'])} UTC)"
                  + (f": {esc('; '.join(g['reasons']))}" if g["reasons"] else ""))
    _show_cost(con, result["cost"], resume=not done)
    own = result["owner"]
    con.print(f"\n[bold]Owner[/bold]  {esc(own['team'] or 'nobody')} (receiver "
              f"{esc(own['receiver'] or '?')}): {esc(own['why'])}")
    for p in own["paged"]:
        con.print(f"  {esc(p['detector'])} → {esc(p['team'])} via "
                  f"{esc(', '.join(p['receivers']) or p['receiver'])}")


def _show_cost(con: Any, cost: Mapping[str, Any], *, resume: bool = True) -> None:
    """Print the cost answer: the run's GPU-hours and cost, waste by cause, its peers.

    ``resume``: print what resuming from the resume point loses (not for a run that
    succeeded).
    """
    from rich.markup import escape as esc

    from runwatch.core.investigate.cost import money

    cur, run, peers = cost["currency"], cost["run"], cost["peers"]
    if run is None:
        con.print(f"\n[bold]Cost[/bold]  {esc(cost['note'])}")
        return
    price = (" (never ran)" if not run.get("ran", True) else
             f" ({esc(run['gpu_model'])} at {run['per_gpu_hour']:g} {esc(cur)}/GPU-h)"
             if run["priced"] else "")
    con.print(f"\n[bold]Cost[/bold]  {run['gpu_hours']:g} GPU-h, "
              f"{esc(money(run['cost'], cur, run['unpriced_reason']))}{price}")
    waste = ", ".join(f"{c} {h:g}" for c, h in run["wasted_gpu_hours"].items() if h)
    con.print(f"  wasted {run['wasted_gpu_hours_total']:g} GPU-h"
              + (f" ({esc(waste)})" if waste else "")
              + (f" = {esc(money(run['wasted_cost'], cur))}" if run["priced"] else ""))
    if peers["runs"]:
        con.print(f"  family {esc(peers['family'])}: median of {len(peers['runs'])} earlier "
                  f"run(s) {peers['median_gpu_hours']:g} GPU-h, "
                  f"{esc(money(peers['median_cost'], cur, 'no priced peer'))}; this run ranks "
                  f"{peers['gpu_hours_rank']} of {peers['ranked_of']} by GPU-hours"
                  + (f", {peers['cost_rank']} of {peers['priced_of']} by cost"
                     if peers["cost_rank"] is not None else ""))
    elif cost["note"]:
        con.print(f"  {esc(cost['note'])}")
    lost = cost["resume_lost"]
    if lost is not None and resume:
        con.print(f"  resuming from step {lost['step']} loses {lost['gpu_hours']:g} GPU-h = "
                  f"{esc(money(lost['cost'], cur, lost['unpriced_reason']))}")
    bad = cost["bad_input"]
    if bad["unpriced_runs"] or bad["telemetry_gap_runs"] or bad["clock_skew_runs"]:
        con.print(f"  [yellow]of this run and its peers:[/yellow] {bad['unpriced_runs']} "
                  f"unpriced {esc(json.dumps(bad['unpriced_reasons']))}, "
                  f"{bad['telemetry_gap_runs']} with telemetry gaps "
                  f"({bad['unobserved_gpu_hours']:g} GPU-h unobserved), "
                  f"{bad['clock_skew_runs']} with clock skew")


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``investigate``.

    Args:
        sub: The top-level sub-parsers.
    """
    p = sub.add_parser(
        "investigate",
        help="answer the incident questions about a run (or: which runs hurt now)",
        description="What changed, affected runs, deterministic, trustworthy artifacts, resume "
                    "point, release, owner, cost: each answered with its evidence from ClickHouse "
                    "(docs/investigation.md).")
    p.add_argument("run_id", nargs="?", help="the run to investigate")
    p.add_argument("--since", help="instead of a run: runs with firing alerts in the last "
                                   "DURATION (30m, 6h, 2d)")
    p.add_argument("--family", help="with --since: only this experiment family")
    p.add_argument("--json", action="store_true", help="print the answer as JSON (version 1)")
    p.add_argument("--html", type=Path, metavar="FILE",
                   help="write the self-contained investigation page to FILE")
    p.add_argument("--database", help="database (default CLICKHOUSE_DATABASE or runwatch)")
    p.add_argument("--ownership", type=Path, metavar="FILE",
                   help="ownership file (default RUNWATCH_PROCESSOR_OWNERSHIP_FILE or the "
                        "packaged infra/pager/ownership.yaml)")
    p.add_argument("--prices", type=Path, metavar="FILE",
                   help="prices file for the cost answer (default RUNWATCH_COSTS_FILE or the "
                        "packaged infra/cost/costs.yaml, as runwatch cost)")
    p.add_argument("--routes", type=Path, metavar="FILE",
                   help="pager rules, to say who is paged (default RUNWATCH_PAGER_RULES_FILE "
                        "or the packaged infra/pager/routes.yaml)")
    p.set_defaults(func=_run)
