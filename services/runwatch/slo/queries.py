# ruff: noqa: S608 - the statements are constants; every value is a bound parameter
"""The evaluator's SQL: one query per indicator kind, returning its rows' shape.

One query serves every objective of a kind (and, for reproducibility, of a
metric): it reads all families from the earliest ``since`` the objectives
need, and returns each row's experiment family, so the evaluator filters
per objective in memory; the store answers a handful of queries per round,
whatever the number of objectives. Each query reads the raw tables the sink fills (``job_events``,
``validation_results``, ``gate_decisions``, ``artifacts``, ``checkpoints``,
``data_quality_reports``, ``run_manifests``) from ``since`` (the window's
start, less what an event may reach back) and returns rows in the order of
the kind's row type in :mod:`runwatch.core.slo.indicators`. Parameters are
bound by clickhouse-connect (``%(name)s``); ``${db}`` is the database.

A run's outcome and end come from its job events as the run summary draws them
(``OUTCOME_SQL``: the SDK's own end over a scheduler hook's later one, a run running again
after an end not ended), its family from the events that name one (a Slurm epilog's names
none); the summary fills in only for a run whose job events are gone.

Training windows and retained evaluations also read ``run_summaries`` (kept
for ever), so a routine run whose raw job events expired (``raw.ttl`` of
``schemas/retention.yaml``, 7 days) still counts for a 30-day window; its
window starts at the summary's ``running_at`` (the first ``running`` event, as
from the job events), not at ``started_at`` (its first event, a ``queued`` one).

Fairness returns each run's job events (time, state, allocated GPUs), not a span: the
pure kind draws the run's running intervals from them as the run summary draws them for
``runwatch cost`` (:mod:`runwatch.core.cost.running`), so a preempted run's wait in the
queue is no GPU use.

Repeated lineages are grouped by the RunManifest's ``repeat_group`` (the
lineage hash without the seed); a manifest without one (written before it
existed) falls back to (config hash, code revision, dataset URIs and
versions), and a run with neither is in no group.
"""

from __future__ import annotations

from typing import Any

from runwatch.core.slo import indicators as ind
from runwatch.core.slo.spec import Objective
from runwatch.core.storage.outcome import OUTCOME_SQL, TERMINAL_SQL

_T = TERMINAL_SQL
_OUTCOME = OUTCOME_SQL  # as the run summary's: the SDK's own end over a scheduler hook's later one
# a run that trained: one queued (or scheduled) and never running was cancelled or failed in
# the queue, no training outcome (the queue deadline judges the queue)
_RAN = "countIf(state = 'running') > 0 OR countIf(state IN ('queued', 'scheduled')) = 0"
_SINCE = "fromUnixTimestamp64Milli(toInt64(%(since)s))"
_NOW = "fromUnixTimestamp64Milli(toInt64(%(now)s))"
_STARTED = ("toUnixTimestamp64Milli(if(countIf(state = 'running') > 0, "
            "minIf(ts, state = 'running'), min(ts)))")
_ENDED = (f"if(countIf(state IN {_T}) > 0, toUnixTimestamp64Milli(maxIf(ts, state IN {_T})), "
          "NULL)")
_FAMILY = "anyIf(toString(experiment_family), experiment_family != '')"
_MANIFEST_FAMILY = (
    "LEFT JOIN (SELECT run_id AS rid, anyIf(toString(experiment_family), experiment_family != '')"
    " AS fam FROM ${db}.run_manifests GROUP BY rid) AS mf ON mf.rid = {rid}")

SQL: dict[str, str] = {
    "data_availability": f"""
SELECT toUnixTimestamp64Milli(ts), toString(dataset_version), row_count, schema_failures,
       length(drifted_features), toString(run_id), toString(dataset_uri)
FROM ${{db}}.data_quality_reports
WHERE ts > {_SINCE} AND ts <= {_NOW}
ORDER BY ts""",
    "training_window": f"""
SELECT toString(run_id) AS rid, {_STARTED}, {_ENDED},
       {_OUTCOME},
       {_FAMILY}, 0
FROM ${{db}}.job_events
WHERE run_id IN (SELECT run_id FROM ${{db}}.job_events WHERE ts > {_SINCE} AND ts <= {_NOW})
  AND ts <= {_NOW}
GROUP BY rid
HAVING {_RAN}
UNION ALL
SELECT run_id, toUnixTimestamp64Milli(coalesce(running_at, started_at)),
       toUnixTimestamp64Milli(ended_at), toString(outcome), toString(experiment_family), 1
FROM ${{db}}.run_summaries FINAL
WHERE outcome IN {_T} AND ended_at > {_SINCE} AND ended_at <= {_NOW}
  AND (running_at IS NOT NULL OR outcome != 'cancelled')""",
    "evaluation_retained": f"""
WITH runs AS (
    SELECT rid, argMin(ended, part) AS ended, argMin(st, part) AS st, argMin(fam, part) AS fam
    FROM (SELECT toString(run_id) AS rid, {_ENDED} AS ended, {_OUTCOME} AS st,
                 {_FAMILY} AS fam, 0 AS part
          FROM ${{db}}.job_events
          WHERE run_id IN (SELECT run_id FROM ${{db}}.job_events
                           WHERE state IN {_T} AND ts > {_SINCE} AND ts <= {_NOW})
            AND ts <= {_NOW}
          GROUP BY rid
          HAVING countIf(state IN {_T}) > 0
          UNION ALL
          SELECT run_id, toUnixTimestamp64Milli(ended_at), toString(outcome),
                 toString(experiment_family), 1
          FROM ${{db}}.run_summaries FINAL
          WHERE outcome IN {_T} AND ended_at > {_SINCE} AND ended_at <= {_NOW})
    GROUP BY rid)
SELECT r.rid, r.ended, r.st, v.n, g.n, r.fam
FROM runs AS r
LEFT JOIN (SELECT toString(run_id) AS rid, count() AS n FROM ${{db}}.validation_results
           WHERE toString(run_id) IN (SELECT rid FROM runs) GROUP BY rid) AS v ON v.rid = r.rid
LEFT JOIN (SELECT toString(run_id) AS rid, count() AS n FROM ${{db}}.gate_decisions
           WHERE toString(run_id) IN (SELECT rid FROM runs) GROUP BY rid) AS g
       ON g.rid = r.rid""",
    "registry_control": f"""
WITH a AS (SELECT event_id, toString(run_id) AS rid, toUnixTimestamp64Milli(ts) AS at, uri,
                  toString(registry_status) AS status, toString(kind) AS kind
           FROM ${{db}}.artifacts
           WHERE registry_status != '' AND ts > {_SINCE} AND ts <= {_NOW})
SELECT a.event_id, a.rid, a.at, a.uri, a.status, g.times, g.gates, g.decisions, mf.fam, a.kind
FROM a
LEFT JOIN (SELECT toString(run_id) AS rid, groupArray(toUnixTimestamp64Milli(ts)) AS times,
                  groupArray(toString(gate)) AS gates, groupArray(toString(decision)) AS decisions
           FROM ${{db}}.gate_decisions
           WHERE toString(run_id) IN (SELECT rid FROM a) GROUP BY rid) AS g
       ON g.rid = a.rid
{_MANIFEST_FAMILY.replace("{rid}", "a.rid")}""",
    "resumability": f"""
WITH pre AS (SELECT toString(run_id) AS rid, toUnixTimestamp64Milli(ts) AS at,
                    toString(experiment_family) AS fam
             FROM ${{db}}.job_events
             WHERE state = 'preempted' AND ts > {_SINCE} AND ts <= {_NOW})
SELECT pre.rid, pre.at, c.cks, s.starts, if(pre.fam != '', pre.fam, mf.fam)
FROM pre
LEFT JOIN (SELECT toString(run_id) AS rid, groupArray(toUnixTimestamp64Milli(ts)) AS cks
           FROM ${{db}}.checkpoints
           WHERE outcome = 'ok' AND toString(run_id) IN (SELECT rid FROM pre) GROUP BY rid) AS c
       ON c.rid = pre.rid
LEFT JOIN (SELECT toString(run_id) AS rid, groupArray(toUnixTimestamp64Milli(ts)) AS starts
           FROM ${{db}}.job_events
           WHERE state = 'running' AND toString(run_id) IN (SELECT rid FROM pre) GROUP BY rid)
       AS s ON s.rid = pre.rid
{_MANIFEST_FAMILY.replace("{rid}", "pre.rid")}""",
    "reproducibility": f"""
WITH m AS (
    SELECT run_id AS rid,
           argMax(if(repeat_group != '', repeat_group, concat(config_hash, '|', code_revision,
               '|', arrayStringConcat(arraySort(arrayMap((u, v) -> concat(u, '@', v),
               dataset_uris, dataset_versions)), ','))), ts) AS grp,
           anyIf(toString(experiment_family), experiment_family != '') AS fam
    FROM ${{db}}.run_manifests
    WHERE repeat_group != '' OR config_hash != ''
    GROUP BY rid)
SELECT v.rid, concat(m.fam, '|', m.grp), v.at, v.val, m.fam
FROM (SELECT toString(run_id) AS rid, toUnixTimestamp64Milli(max(ts)) AS at,
             argMax(metrics[%(metric)s], ts) AS val
      FROM ${{db}}.validation_results
      WHERE mapContains(metrics, %(metric)s) AND slice = '' AND ts > {_SINCE} AND ts <= {_NOW}
      GROUP BY rid) AS v
JOIN m ON m.rid = v.rid""",
    "fairness": f"""
SELECT j.rid, if(j.team != '', j.team, m.team), j.jobs, m.gpus
FROM (SELECT toString(run_id) AS rid, anyIf(toString(team), team != '') AS team,
             groupArray((toUnixTimestamp64Milli(ts), toString(state), toUInt32(gpu_count)))
                 AS jobs
      FROM ${{db}}.job_events
      WHERE run_id IN (SELECT run_id FROM ${{db}}.job_events WHERE ts > {_SINCE} AND ts <= {_NOW})
        AND ts <= {_NOW}
      GROUP BY rid) AS j
LEFT JOIN (SELECT run_id AS rid, anyIf(toString(team), team != '') AS team,
                  max(gpu_count) AS gpus
           FROM ${{db}}.run_manifests GROUP BY rid) AS m ON m.rid = j.rid""",
}

#: How far before the window's start a kind's facts may lie (a run started earlier).
_REACH_MS = {"training_window": 2 * 86_400_000, "fairness": 2 * 86_400_000,
             "data_availability": 32 * 86_400_000}


def reach_ms(obj: Objective) -> int:
    """Return how far before the window's start an objective's rows may lie."""
    p = obj.params
    reach = _REACH_MS.get(obj.kind, 0)
    if obj.kind == "training_window" and p["max_duration_ms"]:
        reach = max(reach, p["max_duration_ms"])
    if obj.kind == "data_availability" and p["lookback_ms"]:
        reach = max(p["lookback_ms"], reach)
    return reach


def batch_key(obj: Objective) -> tuple[str, str]:
    """Return what objectives share one query: the kind (and the metric it reads)."""
    return obj.kind, str(obj.params.get("metric") or "")


def query_for(objs: list[Objective], db: str, now_ms: int,
              starts: dict[str, int]) -> tuple[str, dict[str, Any]]:
    """Return the SQL and parameters that fetch the rows of objectives of one batch.

    Args:
        objs: Objectives sharing a :func:`batch_key`.
        db: The database.
        now_ms: Evaluation time (rows after it are not read).
        starts: Objective name -> the (exclusive) start it counts from.

    Returns:
        (statement, parameters).

    """
    kind = objs[0].kind
    since = min(starts[o.name] - reach_ms(o) for o in objs)
    params: dict[str, Any] = {"since": since, "now": now_ms}
    if kind == "reproducibility":
        params["metric"] = objs[0].params["metric"]
    return SQL[kind].replace("${db}", db), params


def mine(obj: Objective, rows: list[Any]) -> list[Any]:
    """Keep the rows of a batch that belong to one objective (its family)."""
    family = obj.params.get("family")
    if not family or obj.kind in ("data_availability", "fairness"):
        return rows
    return [r for r in rows if r.family == family]


def causes_sql(db: str) -> str:
    """Return the query for (run, cause, first seen ms) of the alerts fired since ``%(since)s``.

    One row per alert (its latest cause: a page re-sent with a cause its node watch
    confirmed counts once), oldest first. Every run's, filtered in memory: a list of
    thousands of bad runs in an ``IN`` clause costs the store more than reading the
    window's alerts.
    """
    return ("SELECT r, c, f FROM (SELECT toString(run_id) AS r, alert_id, "
            "argMax(toString(probable_cause), ts) AS c, "
            "toUnixTimestamp64Milli(min(first_seen)) AS f "
            f"FROM {db}.alerts "
            f"WHERE ts > {_SINCE} AND run_id != '' AND NOT startsWith(detector, 'slo:') "
            "AND status = 'firing' GROUP BY r, alert_id) ORDER BY f, r")


def to_rows(kind: str, raw: list[tuple[Any, ...]]) -> list[Any]:
    """Convert a query's rows into the kind's row type (zeros of outer joins to None).

    Args:
        kind: The indicator kind.
        raw: Rows as the store returned them.

    Returns:
        Typed rows.

    """
    if kind == "data_availability":
        return [ind.DataReportRow(int(a), str(v), int(n), int(f), int(d), str(r), str(u))
                for a, v, n, f, d, r, u in raw]
    if kind == "training_window":  # job events first: a run's summary only fills in for them
        seen: dict[str, ind.RunRow] = {}
        # UNION ALL keeps no order between its parts: the last column says which part a row is
        for r, s, e, st, f, _part in sorted(raw, key=lambda row: row[5]):
            seen.setdefault(str(r), ind.RunRow(str(r), int(s), None if e is None else int(e),
                                               str(st), str(f or "")))
        return list(seen.values())
    if kind == "evaluation_retained":
        return [ind.RetainedRow(str(r), int(e), str(st), int(v or 0), int(g or 0), str(f or ""))
                for r, e, st, v, g, f in raw]
    if kind == "registry_control":
        return [ind.RegistryRow(str(i), str(r), int(a), str(u), str(s),
                                tuple(zip((int(t) for t in ts or ()), gs or (), ds or (),
                                          strict=True)), str(f or ""), str(k))
                for i, r, a, u, s, ts, gs, ds, f, k in raw]
    if kind == "resumability":
        return [ind.PreemptionRow(str(r), int(a), tuple(int(x) for x in c or ()),
                                  tuple(int(x) for x in s or ()), str(f or ""))
                for r, a, c, s, f in raw]
    if kind == "reproducibility":
        return [ind.ReproRow(str(r), str(g), int(a), float(v), str(f or ""))
                for r, g, a, v, f in raw]
    return [ind.UsageRow(str(r), str(t), tuple((int(a), str(st), int(n or 0))
                                               for a, st, n in jobs or ()), int(g or 0))
            for r, t, jobs, g in raw]
