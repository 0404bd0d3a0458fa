"""The evaluator's SQL: one query per indicator kind, returning its rows' shape.

Each query reads the raw tables the sink fills (``job_events``,
``validation_results``, ``gate_decisions``, ``artifacts``, ``checkpoints``,
``data_quality_reports``, ``run_manifests``) from ``since`` (the window's
start, less what an event may reach back) and returns rows in the order of
the kind's row type in :mod:`runwatch.core.slo.indicators`. Parameters are
bound by clickhouse-connect (``%(name)s``); ``${db}`` is the database.

Repeated lineages are grouped by (config hash, code revision, dataset URIs
and versions) of their RunManifest; runs without a config hash are in no group.
"""

from __future__ import annotations

from typing import Any

from runwatch.core.slo import indicators as ind
from runwatch.core.slo.spec import Objective

_T = "('succeeded', 'failed', 'cancelled')"
_SINCE = "fromUnixTimestamp64Milli(toInt64(%(since)s))"
_NOW = "fromUnixTimestamp64Milli(toInt64(%(now)s))"
_STARTED = ("toUnixTimestamp64Milli(if(countIf(state = 'running') > 0, "
            "minIf(ts, state = 'running'), min(ts)))")
_ENDED = (f"if(countIf(state IN {_T}) > 0, toUnixTimestamp64Milli(maxIf(ts, state IN {_T})), "
          "NULL)")
_FAMILY_RUNS = "SELECT run_id FROM ${db}.run_manifests WHERE experiment_family = %(family)s"

SQL: dict[str, str] = {
    "data_availability": f"""
SELECT toUnixTimestamp64Milli(ts), toString(dataset_version), row_count, schema_failures,
       length(drifted_features), toString(run_id), toString(dataset_uri)
FROM ${{db}}.data_quality_reports
WHERE dataset_uri LIKE %(dataset_like)s AND ts > {_SINCE} AND ts <= {_NOW}
ORDER BY ts""",  # noqa: S608 - constants; values are bound parameters
    "training_window": f"""
SELECT toString(run_id) AS rid, {_STARTED}, {_ENDED},
       if(countIf(state IN {_T}) > 0, argMaxIf(state, ts, state IN {_T}), argMax(state, ts))
FROM ${{db}}.job_events
WHERE run_id IN (SELECT run_id FROM ${{db}}.job_events
                 WHERE experiment_family = %(family)s AND ts > {_SINCE} AND ts <= {_NOW})
  AND ts <= {_NOW}
GROUP BY rid""",  # noqa: S608 - constants; values are bound parameters
    "evaluation_retained": f"""
WITH runs AS (
    SELECT toString(run_id) AS rid, toUnixTimestamp64Milli(max(ts)) AS ended,
           argMax(state, ts) AS st
    FROM ${{db}}.job_events
    WHERE experiment_family = %(family)s AND state IN {_T} AND ts > {_SINCE} AND ts <= {_NOW}
    GROUP BY rid)
SELECT r.rid, r.ended, r.st, v.n, g.n
FROM runs AS r
LEFT JOIN (SELECT toString(run_id) AS rid, count() AS n FROM ${{db}}.validation_results
           WHERE toString(run_id) IN (SELECT rid FROM runs) GROUP BY rid) AS v ON v.rid = r.rid
LEFT JOIN (SELECT toString(run_id) AS rid, count() AS n FROM ${{db}}.gate_decisions
           WHERE toString(run_id) IN (SELECT rid FROM runs) GROUP BY rid) AS g ON g.rid = r.rid""",  # noqa: S608 - constants; values are bound parameters
    "registry_control": f"""
SELECT a.event_id, toString(a.run_id), toUnixTimestamp64Milli(a.ts), a.uri,
       toString(a.registry_status), g.first_pass
FROM ${{db}}.artifacts AS a
LEFT JOIN (SELECT toString(run_id) AS rid, toUnixTimestamp64Milli(min(ts)) AS first_pass
           FROM ${{db}}.gate_decisions WHERE decision IN %(passing)s GROUP BY rid) AS g
       ON g.rid = toString(a.run_id)
WHERE a.registry_status IN %(statuses)s AND a.ts > {_SINCE} AND a.ts <= {_NOW}
      {{family_filter}}""",  # noqa: S608 - constants; values are bound parameters
    "resumability": f"""
WITH pre AS (SELECT toString(run_id) AS rid, toUnixTimestamp64Milli(ts) AS at
             FROM ${{db}}.job_events
             WHERE state = 'preempted' AND ts > {_SINCE} AND ts <= {_NOW} {{family_filter}})
SELECT pre.rid, pre.at, c.cks, s.starts
FROM pre
LEFT JOIN (SELECT toString(run_id) AS rid, groupArray(toUnixTimestamp64Milli(ts)) AS cks
           FROM ${{db}}.checkpoints
           WHERE outcome = 'ok' AND toString(run_id) IN (SELECT rid FROM pre) GROUP BY rid) AS c
       ON c.rid = pre.rid
LEFT JOIN (SELECT toString(run_id) AS rid, groupArray(toUnixTimestamp64Milli(ts)) AS starts
           FROM ${{db}}.job_events
           WHERE state = 'running' AND toString(run_id) IN (SELECT rid FROM pre) GROUP BY rid)
       AS s ON s.rid = pre.rid""",  # noqa: S608 - constants; values are bound parameters
    "reproducibility": f"""
WITH m AS (
    SELECT run_id AS rid,
           argMax(concat(config_hash, '|', code_revision, '|', arrayStringConcat(arraySort(
               arrayMap((u, v) -> concat(u, '@', v), dataset_uris, dataset_versions)), ',')),
               ts) AS grp
    FROM ${{db}}.run_manifests
    WHERE experiment_family = %(family)s AND config_hash != ''
    GROUP BY rid)
SELECT v.rid, m.grp, v.at, v.val
FROM (SELECT toString(run_id) AS rid, toUnixTimestamp64Milli(max(ts)) AS at,
             argMax(metrics[%(metric)s], ts) AS val
      FROM ${{db}}.validation_results
      WHERE mapContains(metrics, %(metric)s) AND ts > {_SINCE} AND ts <= {_NOW}
        AND toString(run_id) IN (SELECT rid FROM m)
      GROUP BY rid) AS v
JOIN m ON m.rid = v.rid""",  # noqa: S608 - constants; values are bound parameters
    "fairness": f"""
SELECT j.rid, if(j.team != '', j.team, m.team), j.started, j.ended, greatest(j.gpus, m.gpus)
FROM (SELECT toString(run_id) AS rid, anyIf(toString(team), team != '') AS team,
             {_STARTED} AS started, {_ENDED} AS ended, max(gpu_count) AS gpus
      FROM ${{db}}.job_events
      WHERE run_id IN (SELECT run_id FROM ${{db}}.job_events WHERE ts > {_SINCE} AND ts <= {_NOW})
        AND ts <= {_NOW}
      GROUP BY rid) AS j
LEFT JOIN (SELECT run_id AS rid, anyIf(toString(team), team != '') AS team,
                  max(gpu_count) AS gpus
           FROM ${{db}}.run_manifests GROUP BY rid) AS m ON m.rid = j.rid""",  # noqa: S608 - constants; values are bound parameters
}

#: How far before the window's start a kind's facts may lie (a run started earlier).
_REACH_MS = {"training_window": 2 * 86_400_000, "fairness": 2 * 86_400_000,
             "data_availability": 32 * 86_400_000}


def query_for(obj: Objective, db: str, now_ms: int) -> tuple[str, dict[str, Any]]:
    """Return the SQL and parameters that fetch an objective's rows.

    Args:
        obj: The objective.
        db: The database.
        now_ms: Evaluation time (rows after it are not read).

    Returns:
        (statement, parameters).

    """
    p = obj.params
    start = obj.window.start(now_ms)
    reach = _REACH_MS.get(obj.kind, 0)
    if obj.kind == "training_window" and p["max_duration_ms"]:
        reach = max(reach, p["max_duration_ms"])
    if obj.kind == "data_availability" and p["lookback_ms"]:
        reach = p["lookback_ms"]
    params: dict[str, Any] = {"since": start - reach, "now": now_ms}
    for key in ("family", "metric", "team"):
        if p.get(key) is not None:
            params[key] = p[key]
    if obj.kind == "data_availability":
        params["dataset_like"] = glob_to_like(p["dataset"])
    if obj.kind == "registry_control":
        params["statuses"] = list(p["statuses"])
        params["passing"] = list(p["passing"])
    sql = SQL[obj.kind]
    if "{family_filter}" in sql:
        column = "a.run_id" if obj.kind == "registry_control" else "run_id"
        sql = sql.replace("{family_filter}", f"AND {column} IN ({_FAMILY_RUNS})"
                          if p.get("family") else "")
    return sql.replace("${db}", db), params


def glob_to_like(pattern: str) -> str:
    """Turn a dataset glob (``*``, ``?``) into a LIKE pattern (``%``, ``_``; the rest escaped)."""
    out = []
    for ch in pattern:
        if ch == "*":
            out.append("%")
        elif ch == "?":
            out.append("_")
        elif ch in "%_\\":
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def causes_sql(db: str) -> str:
    """Return the query for the probable causes of the alerts raised on some runs."""
    return (f"SELECT toString(probable_cause) FROM {db}.alerts "  # noqa: S608 - db is ours
            "WHERE toString(run_id) IN %(runs)s AND NOT startsWith(detector, 'slo:') "
            "AND status = 'firing'")


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
    if kind == "training_window":
        return [ind.RunRow(str(r), int(s), None if e is None else int(e), str(st))
                for r, s, e, st in raw]
    if kind == "evaluation_retained":
        return [ind.RetainedRow(str(r), int(e), str(st), int(v or 0), int(g or 0))
                for r, e, st, v, g in raw]
    if kind == "registry_control":
        return [ind.RegistryRow(str(i), str(r), int(a), str(u), str(s), int(g) if g else None)
                for i, r, a, u, s, g in raw]
    if kind == "resumability":
        return [ind.PreemptionRow(str(r), int(a), tuple(int(x) for x in c or ()),
                                  tuple(int(x) for x in s or ())) for r, a, c, s in raw]
    if kind == "reproducibility":
        return [ind.ReproRow(str(r), str(g), int(a), float(v)) for r, g, a, v in raw]
    return [ind.UsageRow(str(r), str(t), int(s), None if e is None else int(e), int(g or 0))
            for r, t, s, e, g in raw]
