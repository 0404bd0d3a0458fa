-- Recompute run summaries for the runs in %(runs)s (the sink runs this as
-- runs end; ReplacingMergeTree(updated_at) keeps the latest).  GPU time per
-- GPU = samples x median tick; idle = util below %(idle_pct)s; wasted = idle +
-- (failed/cancelled runs) busy GPU time after the last good checkpoint.
INSERT INTO ${db}.run_summaries
WITH
    jobs AS (
        SELECT toString(run_id) AS rid, anyLast(team) AS team, anyLast(experiment_family) AS fam,
               argMax(state, ts) AS outcome, min(ts) AS started_at, max(ts) AS ended_at,
               max(attempt) AS attempts
        FROM ${db}.job_events WHERE run_id IN %(runs)s GROUP BY rid),
    learn AS (
        SELECT toString(run_id) AS rid, max(step) AS steps, argMax(loss, step) AS final_loss,
               argMax(metrics, step) AS final_metrics
        FROM ${db}.learning_steps WHERE run_id IN %(runs)s GROUP BY rid),
    al AS (
        SELECT toString(run_id) AS rid, uniqExact(alert_id) AS alert_count,
               uniqExactIf(alert_id, severity = 'critical') AS critical_alerts
        FROM ${db}.alerts WHERE run_id IN %(runs)s GROUP BY rid),
    ck AS (
        SELECT toString(run_id) AS rid, countIf(outcome = 'ok') AS checkpoints,
               maxIf(ts, outcome = 'ok') AS last_ok
        FROM ${db}.checkpoints WHERE run_id IN %(runs)s GROUP BY rid),
    gpu AS (
        SELECT rid, sum(n * tick_s) / 3600 AS gpu_h, sum(idle_n * tick_s) / 3600 AS idle_h,
               sum(late_busy_n * tick_s) / 3600 AS late_busy_h
        FROM (
            SELECT toString(g.run_id) AS rid, g.node, g.gpu_index, count() AS n,
                   if(count() > 1, (toUnixTimestamp64Milli(max(g.ts)) - toUnixTimestamp64Milli(min(g.ts)))
                      / 1000 / (count() - 1), 0) AS tick_s,
                   countIf(g.util_pct < %(idle_pct)s) AS idle_n,
                   countIf(g.util_pct >= %(idle_pct)s AND g.ts > ck.last_ok) AS late_busy_n
            FROM ${db}.gpu_samples AS g LEFT JOIN ck ON toString(g.run_id) = ck.rid
            WHERE g.run_id IN %(runs)s
            GROUP BY rid, g.node, g.gpu_index)
        GROUP BY rid)
SELECT jobs.rid, jobs.team, jobs.fam, jobs.outcome, jobs.started_at, jobs.ended_at,
       (toUnixTimestamp64Milli(jobs.ended_at) - toUnixTimestamp64Milli(jobs.started_at)) / 1000,
       jobs.attempts, learn.steps, if(learn.rid = '', NULL, learn.final_loss), learn.final_metrics,
       al.alert_count, al.critical_alerts, ck.checkpoints, gpu.gpu_h, gpu.idle_h,
       gpu.idle_h + if(jobs.outcome IN ('failed', 'cancelled'), gpu.late_busy_h, 0),
       now64(3)
FROM jobs
LEFT JOIN learn ON learn.rid = jobs.rid
LEFT JOIN al ON al.rid = jobs.rid
LEFT JOIN ck ON ck.rid = jobs.rid
LEFT JOIN gpu ON gpu.rid = jobs.rid
