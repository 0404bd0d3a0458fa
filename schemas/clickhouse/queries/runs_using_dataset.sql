-- Runs that used dataset X@v (edit the uri and version).
SELECT run_id, team, min(ts) AS first_seen, any(code_revision) AS code_revision
FROM run_manifests FINAL
WHERE arrayExists((u, v) -> u = 's3://data/imagenet' AND v = 'v1', dataset_uris, dataset_versions)
GROUP BY run_id, team
ORDER BY first_seen
