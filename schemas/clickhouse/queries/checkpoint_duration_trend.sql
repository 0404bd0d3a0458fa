-- Checkpoint duration trend per storage path (hourly median and p95).
SELECT storage_path, toStartOfHour(ts) AS hour, count() AS checkpoints,
       round(quantile(0.5)(duration_ms)) AS p50_ms, round(quantile(0.95)(duration_ms)) AS p95_ms,
       round(sum(size_bytes) / 1e9, 1) AS gb_written
FROM checkpoints
WHERE outcome = 'ok'
GROUP BY storage_path, hour
ORDER BY storage_path, hour
