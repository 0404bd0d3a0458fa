-- Alerts by probable cause over time (hourly, firing only).
SELECT toStartOfHour(ts) AS hour, probable_cause, count() AS alerts, uniqExact(run_id) AS runs
FROM alerts FINAL
WHERE status = 'firing'
GROUP BY hour, probable_cause
ORDER BY hour, alerts DESC
