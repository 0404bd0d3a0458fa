-- A run's timeline across the four signal classes (edit the run id). Data reports: those
-- published for the run, and those of the dataset versions its manifests (every lineage
-- version) read, mostly published without a run id (an unversioned dataset: every version).
SELECT ts, signal, what, detail FROM (
    SELECT ts, 'data' AS signal, 'quality report' AS what,
           concat(dataset_uri, '@', dataset_version, ' rows=', toString(row_count)) AS detail
    FROM data_quality_reports
    WHERE run_id = 'run-5-0'
       OR (toString(dataset_uri), toString(dataset_version)) IN (
              SELECT dataset_uri, dataset_version FROM manifest_datasets WHERE run_id = 'run-5-0')
       OR toString(dataset_uri) IN (
              SELECT dataset_uri FROM manifest_datasets
              WHERE run_id = 'run-5-0' AND dataset_version = '')
    UNION ALL
    SELECT ts, 'execution', concat('job ', state), concat('attempt ', toString(attempt))
    FROM job_events WHERE run_id = 'run-5-0'
    UNION ALL
    SELECT ts, 'execution', 'checkpoint', concat(outcome, ' ', toString(round(duration_ms)), ' ms')
    FROM checkpoints WHERE run_id = 'run-5-0'
    UNION ALL
    SELECT toStartOfMinute(ts) AS ts, 'execution', 'gpu (per minute)',
           concat('avg util ', toString(round(avg(util_pct), 1)), '%')
    FROM gpu_samples WHERE run_id = 'run-5-0' GROUP BY ts
    UNION ALL
    SELECT toStartOfMinute(ts) AS ts, 'learning', 'loss (per minute)',
           concat('last ', toString(round(argMax(loss, step), 4)), ' at step ', toString(max(step)))
    FROM learning_steps WHERE run_id = 'run-5-0' AND has_loss GROUP BY ts
    UNION ALL
    SELECT ts, 'artifact', concat('gate ', gate), decision FROM gate_decisions WHERE run_id = 'run-5-0'
    UNION ALL
    SELECT ts, 'artifact', concat('artifact ', kind), registry_status FROM artifacts WHERE run_id = 'run-5-0'
    UNION ALL
    SELECT ts, 'alert', concat(severity, ' ', probable_cause), title FROM alerts WHERE run_id = 'run-5-0'
) ORDER BY ts, signal
