-- A run's lineage chain (edit the run id): source stages -> transforms -> dataset
-- versions -> the run (each lineage version it was published with) -> checkpoints ->
-- artifacts -> gates -> registry. One row per link, upstream first. Stages are matched
-- by the output dataset versions the run's manifests name (every lineage version; an
-- unversioned dataset matches every version); "source" rows are the stages that wrote
-- their inputs.
WITH
    'run-5-0' AS rid,
    (SELECT groupUniqArray(arrayJoin(arrayZip(dataset_uris, dataset_versions)))
     FROM run_manifests WHERE run_id = rid) AS ds,
    (SELECT groupUniqArray(tuple(s.dataset_uri, s.dataset_version)) FROM stage_events AS s
     WHERE has(ds, tuple(s.dataset_uri, s.dataset_version))
        OR has(ds, tuple(s.dataset_uri, ''))) AS direct,
    (SELECT groupUniqArray(arrayJoin(arrayZip(input_uris, input_versions))) FROM stage_events
     WHERE has(direct, tuple(dataset_uri, dataset_version))) AS inputs
SELECT link, at, what, detail FROM (
    SELECT if(has(direct, tuple(dataset_uri, dataset_version)), 2, 1) AS ord,
           if(ord = 1, 'source', 'transform') AS link, ts AS at,
           concat(stage, ' -> ', dataset_uri, '@', dataset_version) AS what,
           concat('code ', code_version, '; inputs ',
                  arrayStringConcat(arrayMap((u, v) -> concat(u, '@', v), input_uris,
                                             input_versions), ', '),
                  '; rows ', ifNull(toString(rows_in), '?'), ' -> ',
                  ifNull(toString(rows_out), '?'), '; ', outcome,
                  if(empty(drifted_features), '',
                     concat('; drift vs ', baseline, ': ',
                            arrayStringConcat(drifted_features, ',')))) AS detail
    FROM stage_events FINAL
    WHERE has(direct, tuple(dataset_uri, dataset_version))
       OR has(inputs, tuple(dataset_uri, dataset_version))
    UNION ALL
    SELECT 3, 'dataset', min(ts), concat(tupleElement(d, 1), '@', tupleElement(d, 2)),
           'read by the run'
    FROM run_manifests ARRAY JOIN arrayZip(dataset_uris, dataset_versions) AS d
    WHERE run_id = rid AND has(ds, d) GROUP BY d
    UNION ALL
    SELECT 4, 'run', first_seen, concat(rid, ' lineage ', lineage_hash),
           concat('repeat group ', repeat_group, '; published ', toString(emissions),
                  ' time(s), last ', toString(last_seen))
    FROM lineage_versions WHERE run_id = rid
    UNION ALL
    SELECT 5, 'checkpoint', ts, concat('step ', toString(step), ' ', uri),
           concat(outcome, ' sha256 ', sha256)
    FROM checkpoints FINAL WHERE run_id = rid
    UNION ALL
    SELECT 6, 'artifact', ts, concat(kind, ' ', uri),
           concat('sha256 ', sha256, if(serialization_ok, '', '; serialization FAILED'))
    FROM artifacts FINAL WHERE run_id = rid
    UNION ALL
    -- the reasons, or each metric measured against its threshold ("auc 0.81 >= 0.8")
    SELECT 7, 'gate', ts, concat(gate, ' ', decision),
           if(notEmpty(reasons), arrayStringConcat(reasons, '; '),
              arrayStringConcat(arrayMap(k -> multiIf(
                  mapContains(measured, k) AND mapContains(thresholds, k),
                  concat(k, ' ', toString(measured[k]),
                         if(measured[k] >= thresholds[k], ' >= ', ' < '),
                         toString(thresholds[k])),
                  mapContains(measured, k), concat(k, ' ', toString(measured[k])),
                  concat(k, ' threshold ', toString(thresholds[k]))),
                  arrayDistinct(arrayConcat(arrayMap(x -> toString(x), mapKeys(measured)),
                                            arrayMap(x -> toString(x), mapKeys(thresholds))))),
                  '; '))
    FROM gate_decisions FINAL WHERE run_id = rid
    UNION ALL
    SELECT 8, 'registry', ts, concat(registry_status, ' ', uri), kind
    FROM artifacts FINAL WHERE run_id = rid AND registry_status != ''
)
ORDER BY ord, at
