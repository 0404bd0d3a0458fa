-- Views behind `runwatch cost` and `runwatch capacity` (docs/cost.md), for
-- ad hoc SQL too: filter them on their time column.

-- One row per ended run: what `runwatch cost` prices and attributes.
CREATE VIEW IF NOT EXISTS ${db}.run_costs AS
SELECT run_id, team, experiment_family, queue, priority_class, node_pool, tenancy, gpu_model,
       gpu_count, outcome, started_at, ended_at, running_at, queue_delay_s, allocated_gpu_hours,
       observed_gpu_hours, noproc_gpu_hours, stalled_gpu_hours, no_artifact_gpu_hours,
       lost_gpu_hours, busy_util_hours, busy_util_weighted, usable_artifact, step_records,
       skewed_nodes, max_skew_s
FROM ${db}.run_summaries FINAL;

-- Queue waits of runs that got to run: queued_at .. running_at, GPUs asked for.
CREATE VIEW IF NOT EXISTS ${db}.queue_waits AS
SELECT run_id, team, queue, priority_class, gpu_count,
       running_at - toIntervalMillisecond(toInt64(queue_delay_s * 1000)) AS queued_at,
       assumeNotNull(running_at) AS running_at, queue_delay_s
FROM ${db}.run_summaries FINAL
WHERE queue_delay_s IS NOT NULL AND queue_delay_s > 0;

-- Per node and minute: GPUs that reported, and how many ran no process all minute.
CREATE VIEW IF NOT EXISTS ${db}.gpu_occupancy_1m AS
SELECT minute, node, count() AS gpus, countIf(max_procs = 0) AS free_gpus
FROM (SELECT toStartOfMinute(ts) AS minute, node, gpu_index, max(process_count) AS max_procs
      FROM ${db}.gpu_samples GROUP BY minute, node, gpu_index)
GROUP BY minute, node;

-- Step timings per run and 5-minute bucket.
CREATE VIEW IF NOT EXISTS ${db}.step_buckets_5m AS
SELECT toString(run_id) AS run_id, toStartOfInterval(ts, INTERVAL 5 MINUTE) AS bucket,
       count() AS steps, sum(loader_wait_ms) AS loader_ms, sum(compute_ms) AS compute_ms
FROM ${db}.step_timings GROUP BY run_id, bucket;

-- Checkpoints per run and 5-minute bucket, with the storage they went to.
CREATE VIEW IF NOT EXISTS ${db}.checkpoint_buckets_5m AS
SELECT toString(run_id) AS run_id, toStartOfInterval(ts, INTERVAL 5 MINUTE) AS bucket,
       count() AS checkpoints, sum(duration_ms) AS duration_ms, any(storage_path) AS storage_path
FROM ${db}.checkpoints GROUP BY run_id, bucket;
