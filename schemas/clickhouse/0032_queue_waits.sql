-- Every queue wait of a run (docs/cost.md): a preempted run queued again waits again,
-- and `runwatch capacity` attributes each wait to its cause. Filled by
-- summary/run_summary.sql as runs end; a summary written before this migration has
-- none, and the view reads its first wait from queue_delay_s as before.

ALTER TABLE ${db}.run_summaries
    ADD COLUMN IF NOT EXISTS queue_waits Array(Tuple(Int64, Int64));

-- Queue waits of runs that got to run: queued_at .. running_at, GPUs asked for.
CREATE OR REPLACE VIEW ${db}.queue_waits AS
SELECT run_id, team, queue, priority_class, gpu_count,
       fromUnixTimestamp64Milli(w.1, 'UTC') AS queued_at,
       fromUnixTimestamp64Milli(w.2, 'UTC') AS running_at,
       (w.2 - w.1) / 1000 AS queue_delay_s
FROM (SELECT run_id, team, queue, priority_class, gpu_count,
             arrayJoin(if(length(queue_waits) > 0, queue_waits,
                 if(queue_delay_s IS NOT NULL AND queue_delay_s > 0 AND running_at IS NOT NULL,
                    [(toUnixTimestamp64Milli(assumeNotNull(running_at))
                      - toInt64(assumeNotNull(queue_delay_s) * 1000),
                      toUnixTimestamp64Milli(assumeNotNull(running_at)))],
                    CAST([], 'Array(Tuple(Int64, Int64))')))) AS w
      FROM ${db}.run_summaries FINAL);
