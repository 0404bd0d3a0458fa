-- Recompute run summaries for the runs in the runs parameter (the sink runs this as
-- runs end; ReplacingMergeTree(updated_at) keeps the latest).  GPU time per
-- GPU = samples x median tick; idle = util below the idle_pct parameter; wasted = idle +
-- (failed/cancelled runs) busy GPU time after the last good checkpoint.
-- No placeholders in comments: a run id with a newline would end the comment.
-- Cost columns (docs/cost.md): GPU samples are attributed to a run by its
-- allocation inside each running interval (the nodes and GPU indices of the
-- latest job event with one before the interval ends, else the run's latest);
-- each sample of an allocated GPU is one of
-- noproc (no process), stalled (no step for over 300 s), then, by outcome (the SDK's
-- own end over a scheduler hook's later one),
-- no_artifact / lost (after the last good checkpoint) / busy (histogram of
-- utilization, per whole percent, for the below-baseline cause).
INSERT INTO ${db}.run_summaries (
    run_id, team, experiment_family, outcome, started_at, ended_at, duration_s, attempts, steps,
    final_loss, final_metrics, alert_count, critical_alerts, checkpoints, gpu_hours,
    idle_gpu_hours, wasted_gpu_hours, updated_at,
    gpu_model, gpu_count, queue, priority_class, node_pool, tenancy, running_at, queue_delay_s,
    allocated_gpu_hours, observed_gpu_hours, noproc_gpu_hours, stalled_gpu_hours,
    lost_gpu_hours, no_artifact_gpu_hours, busy_util_hours, busy_util_weighted,
    usable_artifact, step_records, skewed_nodes, max_skew_s, queue_waits, queue_wait_gpus)
WITH
    jobs AS (
        -- team and family: the latest event naming one (a Slurm prolog's or epilog's event
        -- names neither: the SDK's team once became '' as the epilog's event came last)
        SELECT toString(run_id) AS rid, argMaxIf(team, ts, team != '') AS team,
               argMaxIf(experiment_family, ts, experiment_family != '') AS fam,
               -- the SDK's own end, when it came after the run's latest running event: a
               -- scheduler hook's later end says less (an epilog read exit 0 from a batch
               -- script whose last command, a log upload, succeeded after training failed)
               -- (the latest state: of one millisecond's events, queued before running
               -- before the rest, as below: a run started and ended in one millisecond ended)
               if(argMax(state, (ts, multiIf(state = 'queued', 0, state = 'running', 1, 2)))
                      IN ('succeeded', 'failed', 'cancelled', 'preempted')
                      AND countIf(source_kind = 'sdk'
                                  AND state IN ('succeeded', 'failed', 'cancelled', 'preempted')) > 0
                      AND maxIf(ts, source_kind = 'sdk'
                                AND state IN ('succeeded', 'failed', 'cancelled', 'preempted'))
                          >= maxIf(ts, state = 'running'),
                  argMaxIf(state, ts, source_kind = 'sdk'
                           AND state IN ('succeeded', 'failed', 'cancelled', 'preempted')),
                  argMax(state, (ts, multiIf(state = 'queued', 0, state = 'running', 1, 2))))
                   AS outcome,
               min(ts) AS started_at, max(ts) AS ended_at,
               max(attempt) AS attempts,
               argMaxIf(gpu_model, ts, gpu_model != '') AS gmodel,
               argMaxIf(arrayMap(n -> toString(n), nodes), ts, length(nodes) > 0) AS anodes,
               argMaxIf(gpu_indices, ts, length(nodes) > 0) AS agpus,
               argMaxIf(queue, ts, queue != '') AS q, argMaxIf(priority_class, ts, priority_class != '') AS pc,
               minIf(ts, state = 'queued') AS queued_at, countIf(state = 'queued') AS nqueued,
               minIf(ts, state = 'running') AS running_at, countIf(state = 'running') AS nrunning,
               -- in time order; in one millisecond queued before running before the rest, so a
               -- queued event stamped with its running one never splits a running interval
               arraySort(x -> (x.1, multiIf(x.2 = 'queued', 0, x.2 = 'running', 1, 2)),
                         groupArray((toUnixTimestamp64Milli(ts), toString(state),
                                     arrayMap(n -> toString(n), nodes), gpu_indices))) AS ev
        FROM ${db}.job_events WHERE run_id IN %(runs)s GROUP BY rid),
    -- Running intervals, each with its own allocation: that of the latest job event with one
    -- before the interval ends (its running event's, or the scheduled event's before it:
    -- hooks send it with either), else the run's latest (a resumed attempt may run on other
    -- nodes and GPUs).
    iv AS (
        SELECT rid, t0, t1, if(length(ia.3) > 0, ia.3, anodes) AS inodes,
               if(length(ia.3) > 0, ia.4, agpus) AS igpus
        FROM (SELECT rid, e.1 AS t0, if(nx.1 > e.1, nx.1, toUnixTimestamp64Milli(ended_at)) AS t1,
                     anodes, agpus,
                     arrayLast(f -> (nx.1 <= e.1 OR f.1 < nx.1) AND length(f.3) > 0, ev) AS ia
              FROM (SELECT rid, ended_at, ev, anodes, agpus,
                           arrayJoin(arrayFilter((x, i) -> x.2 = 'running' AND (i = 1 OR ev[i - 1].2 != 'running'),
                                                 ev, arrayEnumerate(ev))) AS e,
                           arrayFirst(f -> f.1 > e.1 AND f.2 != 'running', ev) AS nx
                    FROM jobs))),
    ivs AS (
        SELECT rid, groupArray((t0, t1)) AS spans, min(t0) AS run_t0, max(t1) AS run_t1,
               sum(t1 - t0) AS running_ms, sum((t1 - t0) * length(inodes) * length(igpus)) AS alloc_ms
        FROM iv GROUP BY rid),
    ag AS (
        SELECT rid, n AS node, toUInt8(g) AS gpu, t0, t1
        FROM iv ARRAY JOIN inodes AS n ARRAY JOIN igpus AS g),
    mf AS (
        SELECT run_id AS rid, argMax(labels['node_pool'], ts) AS pool, argMax(labels['tenancy'], ts) AS ten,
               argMaxIf(gpu_model, ts, gpu_model != '') AS mgpu,
               argMaxIf(gpu_count, ts, gpu_count > 0) AS mgpus
        FROM ${db}.run_manifests WHERE run_id IN %(runs)s GROUP BY rid),
    -- the latest step wins; at one step (a resumed attempt logs it again) the later record.
    -- The final loss is that of the latest step with a loss (has_loss, migration 0060): the
    -- SDK's NaN "no loss" placeholder of a metrics-only step is none, a real NaN loss is
    learn AS (
        SELECT toString(run_id) AS rid, max(step) AS steps,
               if(countIf(has_loss) = 0, NULL, argMaxIf(loss, (step, ts), has_loss)) AS final_loss
        FROM ${db}.learning_steps WHERE run_id IN %(runs)s GROUP BY rid),
    -- each metric's value at the latest step that reported it (a metric logged every 100
    -- steps, or once by an eval step, is not lost because the last step did not carry it)
    lm AS (
        SELECT rid, mapFromArrays(groupArray(k), groupArray(v)) AS final_metrics
        FROM (SELECT toString(run_id) AS rid, k, argMax(v, (step, ts)) AS v
              FROM ${db}.learning_steps ARRAY JOIN mapKeys(metrics) AS k, mapValues(metrics) AS v
              WHERE run_id IN %(runs)s GROUP BY rid, k)
        GROUP BY rid),
    al AS (
        SELECT toString(run_id) AS rid, uniqExact(alert_id) AS alert_count,
               uniqExactIf(alert_id, severity = 'critical') AS critical_alerts
        FROM ${db}.alerts WHERE run_id IN %(runs)s GROUP BY rid),
    ck AS (
        SELECT toString(run_id) AS rid, uniqExactIf(event_id, outcome = 'ok') AS checkpoints,
               maxIf(ts, outcome = 'ok') AS last_ok
        FROM ${db}.checkpoints WHERE run_id IN %(runs)s GROUP BY rid),
    gpu AS (
        SELECT rid, sum(n * tick_s) / 3600 AS gpu_h, sum(idle_n * tick_s) / 3600 AS idle_h,
               sum(late_busy_n * tick_s) / 3600 AS late_busy_h
        FROM (
            -- the median tick, as for the cost columns: a mean over first to last sample would
            -- spread the gap between a resumed run's attempts over every sample. Distinct
            -- sample times: a producer's copy the sink stored again (a spool replayed after a
            -- sink restart) is one sample until a merge removes it
            SELECT toString(g.run_id) AS rid, g.node, g.gpu_index,
                   arraySort(groupUniqArray(toUnixTimestamp64Milli(g.ts))) AS tss, length(tss) AS n,
                   if(n > 1, arrayReduce('median', arrayDifference(tss)) / 1000, 0) AS tick_s,
                   uniqExactIf(g.ts, g.util_pct < %(idle_pct)s) AS idle_n,
                   uniqExactIf(g.ts, g.util_pct >= %(idle_pct)s AND g.ts > ck.last_ok) AS late_busy_n
            FROM ${db}.gpu_samples AS g LEFT JOIN ck ON toString(g.run_id) = ck.rid
            WHERE g.run_id IN %(runs)s
              -- a GPU without a process carries the node's only run: of a run with an
              -- allocation, only its allocated GPUs count (not the free ones of a shared node)
              AND (toString(g.run_id) NOT IN (SELECT rid FROM ag)
                   OR (toString(g.run_id), toString(g.node), g.gpu_index)
                      IN (SELECT rid, node, gpu FROM ag))
            GROUP BY rid, g.node, g.gpu_index)
        GROUP BY rid),
    art AS (
        SELECT toString(run_id) AS rid, countIf(serialization_ok) AS usable
        FROM ${db}.artifacts WHERE run_id IN %(runs)s GROUP BY rid),
    st AS (
        SELECT toString(run_id) AS rid, uniqExact(event_id) AS nsteps,
               arraySort(groupArray(toUnixTimestamp64Milli(ts))) AS sts,
               arraySort(groupArray((toUnixTimestamp64Milli(ts), step))) AS sps
        FROM ${db}.step_timings WHERE run_id IN %(runs)s GROUP BY rid),
    -- Work an interrupted attempt did again: the next attempt's first step (where it
    -- resumed from) against the steps of the attempt before it. From the moment that
    -- attempt reached the step the next one resumed from (redo_at), its busy time was
    -- computed twice. 0: nothing redone (the next attempt went on past its last step), or
    -- nothing to tell by (no next attempt, or no steps in it).
    redo AS (
        SELECT rid, t0,
               arrayFirst(x -> x.1 >= n0 AND x.1 < n1, sps) AS resumed,
               if(resumed.1 > 0,
                  arrayFirst(x -> x.1 >= t0 AND x.1 < t1 AND x.2 >= resumed.2, sps).1, 0) AS redo_at
        FROM (SELECT sp.rid AS rid, cur.1 AS t0, cur.2 AS t1, nxt.1 AS n0, nxt.2 AS n1, st.sps AS sps
              FROM (SELECT rid, arraySort(groupArray((t0, t1))) AS spans FROM iv GROUP BY rid) AS sp
              ARRAY JOIN spans AS cur,
                         arrayPushBack(arrayPopFront(spans), (toInt64(0), toInt64(0))) AS nxt
              INNER JOIN st ON st.rid = sp.rid)
        WHERE n1 > 0),
    ctx AS (
        SELECT jobs.rid AS rid,
               jobs.outcome IN ('failed', 'cancelled', 'preempted') AS bad,
               ck.checkpoints > 0 OR art.usable > 0 AS usable,
               if(ck.checkpoints > 0, toUnixTimestamp64Milli(ck.last_ok), 0) AS last_ok_ms
        FROM jobs LEFT JOIN ck ON ck.rid = jobs.rid LEFT JOIN art ON art.rid = jobs.rid),
    -- Stretches of over 300 s without a step record, one row each (g0, g1): rows, not an
    -- array joined to every GPU sample (which copied the run's step times into each row).
    -- Per running interval, its start and end the ends of its first and last gap: a resumed
    -- attempt's start-up is measured from its own running start, not from the last step
    -- of the attempt before it.
    -- A validation or evaluation pass (its result published as it ends, as the SDK's
    -- callbacks do) is progress too: the stretch that ends with its result is the pass,
    -- not a stall (an 8-minute validation every 30 minutes was stalled GPU time).
    vr AS (
        SELECT toString(run_id) AS rid, groupArray(toUnixTimestamp64Milli(ts)) AS vts
        FROM ${db}.validation_results WHERE run_id IN %(runs)s GROUP BY rid),
    gp AS (
        SELECT rid, g.1 AS g0, g.2 AS g1
        FROM (SELECT iv.rid AS rid,
                     arrayFilter(x -> x >= iv.t0 AND x <= iv.t1, vr.vts) AS vals,
                     arraySort(arrayConcat(arrayFilter(x -> x >= iv.t0 AND x < iv.t1, st.sts),
                                           vals)) AS own,
                     arrayJoin(arrayFilter(p -> p.2 - p.1 > 300000 AND NOT has(vals, p.2),
                                           arrayZip(arrayPushFront(own, iv.t0),
                                                    arrayPushBack(own, iv.t1)))) AS g
              FROM iv INNER JOIN st ON st.rid = iv.rid LEFT JOIN vr ON vr.rid = iv.rid)),
    -- DISTINCT: a stored copy of a sample (as in gpu) is the same row
    s AS (
        SELECT DISTINCT ag.rid AS rid, g.node AS node, g.gpu_index AS gpu, toUnixTimestamp64Milli(g.ts) AS t,
               g.util_pct AS util, g.process_count AS npr, ag.t0 AS it0
        FROM ${db}.gpu_samples AS g INNER JOIN ag ON g.node = ag.node AND g.gpu_index = ag.gpu
        WHERE g.node IN (SELECT node FROM ag)
          AND g.ts >= fromUnixTimestamp64Milli((SELECT min(t0) FROM ag), 'UTC')
          AND g.ts < fromUnixTimestamp64Milli((SELECT max(t1) FROM ag), 'UTC')
          AND toUnixTimestamp64Milli(g.ts) >= ag.t0 AND toUnixTimestamp64Milli(g.ts) < ag.t1
        UNION DISTINCT
        -- a run no job event gave an allocation (a hook that sends none): the samples
        -- attributed to it (its processes, the agent's allocation file) are what it used
        SELECT DISTINCT toString(g.run_id) AS rid, g.node AS node, g.gpu_index AS gpu,
               toUnixTimestamp64Milli(g.ts) AS t, g.util_pct AS util, g.process_count AS npr,
               toInt64(0) AS it0
        FROM ${db}.gpu_samples AS g
        WHERE g.run_id IN %(runs)s AND toString(g.run_id) NOT IN (SELECT rid FROM ag)),
    cls AS (
        SELECT s.rid AS rid, s.node AS node, s.gpu AS gpu, s.t AS t, s.util AS util,
               s.npr = 0 AS idle,
               -- the gaps do not overlap: only the latest one starting before t can hold t
               s.npr > 0 AND s.t < gp.g1 AS stalled,
               s.t > ctx.last_ok_ms AS late, ctx.bad AS bad, ctx.usable AS usable,
               redo.redo_at > 0 AND s.t >= redo.redo_at AS redone
        FROM s INNER JOIN ctx ON ctx.rid = s.rid
        LEFT JOIN redo ON redo.rid = s.rid AND redo.t0 = s.it0
        ASOF LEFT JOIN gp ON gp.rid = s.rid AND s.t > gp.g0),
    pergpu AS (
        SELECT rid, node, gpu, count() AS n, any(bad) AS run_bad, any(usable) AS run_usable,
               if(count() > 1, arrayReduce('median', arrayDifference(arraySort(groupArray(t)))) / 1000, 0) AS tick_s,
               countIf(idle) AS idle_n, countIf(stalled) AS stalled_n,
               -- after the last good checkpoint of a run that ended badly, or done again by
               -- the attempt after it (a run without a usable artifact: all no_artifact)
               countIf(NOT idle AND NOT stalled AND ((bad AND usable AND late)
                                                     OR (redone AND NOT (bad AND NOT usable)))) AS lost_n,
               countIf(NOT idle AND NOT stalled) AS busy_n,
               sumMapIf(map(toUInt8(least(floor(util), 100)), toFloat64(1)),
                        NOT idle AND NOT stalled AND NOT redone
                        AND (NOT bad OR (usable AND NOT late))) AS hist_c,
               sumMapIf(map(toUInt8(least(floor(util), 100)), toFloat64(util)),
                        NOT idle AND NOT stalled AND NOT redone
                        AND (NOT bad OR (usable AND NOT late))) AS hist_w
        FROM cls GROUP BY rid, node, gpu),
    cost AS (
        SELECT rid, count() AS ngpus, sum(n * tick_s) / 3600 AS observed_h,
               sum(idle_n * tick_s) / 3600 AS noproc_h,
               sum(stalled_n * tick_s) / 3600 AS stalled_h,
               sum(if(run_bad AND NOT run_usable, busy_n, 0) * tick_s) / 3600 AS no_artifact_h,
               sum(lost_n * tick_s) / 3600 AS lost_h,
               sumMap(mapApply((k, v) -> (k, v * tick_s / 3600), hist_c)) AS hist_h,
               sumMap(mapApply((k, v) -> (k, v * tick_s / 3600), hist_w)) AS hist_u
        FROM pergpu GROUP BY rid),
    -- A node's busy period against each running interval it was allocated in (a resumed
    -- attempt on other nodes has its own interval): its samples with a process of the run
    -- (or of no known run), not those of the job before or after it on the same GPUs.
    sx AS (
        SELECT ag.rid AS rid, ag.node AS node, ag.t0 AS it0,
               minIf(toUnixTimestamp64Milli(g.ts), g.process_count > 0
                     AND toString(g.run_id) IN (ag.rid, '')) - it0 AS d0,
               maxIf(toUnixTimestamp64Milli(g.ts), g.process_count > 0
                     AND toString(g.run_id) IN (ag.rid, '')) - any(ag.t1) AS d1
        FROM ${db}.gpu_samples AS g INNER JOIN ag ON g.node = ag.node AND g.gpu_index = ag.gpu
        WHERE g.node IN (SELECT node FROM ag)
          AND g.ts >= fromUnixTimestamp64Milli((SELECT min(t0) FROM ag) - 900000, 'UTC')
          AND g.ts < fromUnixTimestamp64Milli((SELECT max(t1) FROM ag) + 900000, 'UTC')
          AND toUnixTimestamp64Milli(g.ts) >= ag.t0 - 900000
          AND toUnixTimestamp64Milli(g.ts) < ag.t1 + 900000
        GROUP BY rid, node, it0
        -- a node without any process sample has no busy period (minIf/maxIf would say 0)
        HAVING countIf(g.process_count > 0 AND toString(g.run_id) IN (ag.rid, '')) > 0),
    -- every wait that ended running: a queued event not preceded by another (queued or
    -- scheduled) to the first later event in another state, when that is a running one
    -- (an event of the queued one's millisecond in another state, say the preemption
    -- it follows, sorts after it and is passed over; so is a preemption after the queued
    -- one: the same preemption told late, by the SDK after the scheduler's requeue)
    qw AS (
        SELECT rid,
               arrayFilter(w -> w.2 > w.1,
                   arrayMap(p -> (p.1, if(p.2.2 = 'running', p.2.1, toInt64(0))),
                       arrayMap(i -> (ev[i].1,
                                      arrayFirst(f -> f.2 NOT IN ('queued', 'scheduled',
                                                                  'preempted')
                                                      AND (f.1 > ev[i].1 OR f.2 = 'running'),
                                                 arraySlice(ev, i + 1))),
                                arrayFilter(i -> ev[i].2 = 'queued'
                                                 AND (i = 1 OR ev[i - 1].2 NOT IN ('queued', 'scheduled')),
                                            arrayEnumerate(ev))))) AS waits
        FROM jobs),
    -- the GPUs each running interval was allocated, by its start (a wait's GPUs are those
    -- of the interval it ended in: a resumed attempt may run on fewer or more)
    ivg AS (
        SELECT rid, groupArray((t0, toUInt32(length(inodes) * length(igpus)))) AS starts
        FROM iv GROUP BY rid),
    -- same direction by sign (a product of the offsets can overflow)
    skew AS (
        SELECT rid, uniqExactIf(node, sign(d0) = sign(d1) AND least(abs(d0), abs(d1)) > 60000) AS skewed,
               maxIf(least(abs(d0), abs(d1)) / 1000, sign(d0) = sign(d1) AND d0 != 0) AS max_skew
        FROM sx GROUP BY rid)
SELECT jobs.rid, jobs.team, jobs.fam, jobs.outcome, jobs.started_at, jobs.ended_at,
       (toUnixTimestamp64Milli(jobs.ended_at) - toUnixTimestamp64Milli(jobs.started_at)) / 1000,
       jobs.attempts, learn.steps, if(learn.rid = '', NULL, learn.final_loss), lm.final_metrics,
       al.alert_count, al.critical_alerts, ck.checkpoints, gpu.gpu_h, gpu.idle_h,
       gpu.idle_h + if(jobs.outcome IN ('failed', 'cancelled'), gpu.late_busy_h, 0),
       now64(3),
       -- the allocation's GPU model, else the one the run's manifest saw (NVML)
       if(jobs.gmodel != '', jobs.gmodel, mf.mgpu),
       -- the allocation's GPUs, else those the samples attributed to the run showed, else
       -- (the SDK alone: no hook, no agent) those its manifest names
       toUInt32(multiIf(length(jobs.anodes) * length(jobs.agpus) > 0,
                        length(jobs.anodes) * length(jobs.agpus), cost.ngpus > 0, cost.ngpus,
                        mf.mgpus)),
       jobs.q, jobs.pc, mf.pool, mf.ten,
       if(jobs.nrunning > 0, jobs.running_at, NULL),
       if(jobs.nqueued > 0 AND jobs.nrunning > 0 AND jobs.running_at >= jobs.queued_at,
          (toUnixTimestamp64Milli(jobs.running_at) - toUnixTimestamp64Milli(jobs.queued_at)) / 1000, NULL),
       -- a run with neither an allocation nor a GPU sample is billed its running time x
       -- its manifest's GPUs (not 0: docs/cost.md, bad input), all of it unobserved
       if(ivs.alloc_ms = 0 AND cost.ngpus = 0, ivs.running_ms * mf.mgpus, ivs.alloc_ms) / 3600000,
       cost.observed_h, cost.noproc_h, cost.stalled_h, cost.lost_h, cost.no_artifact_h,
       cost.hist_h, cost.hist_u, toUInt8(ctx.usable), st.nsteps, skew.skewed, skew.max_skew,
       qw.waits,
       arrayMap(w -> arrayFirst(x -> x.1 = w.2, ivg.starts).2, qw.waits)
FROM jobs
LEFT JOIN learn ON learn.rid = jobs.rid
LEFT JOIN lm ON lm.rid = jobs.rid
LEFT JOIN al ON al.rid = jobs.rid
LEFT JOIN ck ON ck.rid = jobs.rid
LEFT JOIN gpu ON gpu.rid = jobs.rid
LEFT JOIN ivs ON ivs.rid = jobs.rid
LEFT JOIN mf ON mf.rid = jobs.rid
LEFT JOIN ctx ON ctx.rid = jobs.rid
LEFT JOIN st ON st.rid = jobs.rid
LEFT JOIN cost ON cost.rid = jobs.rid
LEFT JOIN skew ON skew.rid = jobs.rid
LEFT JOIN qw ON qw.rid = jobs.rid
LEFT JOIN ivg ON ivg.rid = jobs.rid
