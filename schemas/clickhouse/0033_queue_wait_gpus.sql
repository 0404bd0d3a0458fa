-- The GPUs of each queue wait (docs/cost.md): those of the running interval the wait ended
-- in. A run resumed on fewer or more GPUs waited for those, not for its latest allocation's.
-- Filled by summary/run_summary.sql as runs end; a summary written before this migration
-- has none, and the view takes the summary's gpu_count for its waits, as before.

ALTER TABLE ${db}.run_summaries
    ADD COLUMN IF NOT EXISTS queue_wait_gpus Array(UInt32);

CREATE OR REPLACE VIEW ${db}.queue_waits AS
SELECT run_id, team, queue, priority_class,
       if(wg > 0, wg, gpu_count) AS gpu_count,
       fromUnixTimestamp64Milli(w.1, 'UTC') AS queued_at,
       fromUnixTimestamp64Milli(w.2, 'UTC') AS running_at,
       (w.2 - w.1) / 1000 AS queue_delay_s
FROM (SELECT run_id, team, queue, priority_class, gpu_count, wt.1 AS w, wt.2 AS wg
      FROM (SELECT run_id, team, queue, priority_class, gpu_count,
                   arrayJoin(if(length(queue_waits) > 0,
                       arrayMap((x, i) -> (x, if(i <= length(queue_wait_gpus),
                                                 queue_wait_gpus[i], toUInt32(0))),
                                queue_waits, arrayEnumerate(queue_waits)),
                       if(queue_delay_s IS NOT NULL AND queue_delay_s > 0 AND running_at IS NOT NULL,
                          [((toUnixTimestamp64Milli(assumeNotNull(running_at))
                             - toInt64(assumeNotNull(queue_delay_s) * 1000),
                             toUnixTimestamp64Milli(assumeNotNull(running_at))), toUInt32(0))],
                          CAST([], 'Array(Tuple(Tuple(Int64, Int64), UInt32))')))) AS wt
            FROM ${db}.run_summaries FINAL));
