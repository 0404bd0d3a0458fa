-- Top wasted GPU hours by team (idle GPU time + busy time lost by failed runs).
SELECT team, round(sum(wasted_gpu_hours), 3) AS wasted_gpu_hours,
       round(sum(idle_gpu_hours), 3) AS idle_gpu_hours, round(sum(gpu_hours), 3) AS gpu_hours,
       count() AS runs, countIf(outcome = 'failed') AS failed_runs
FROM run_summaries FINAL
GROUP BY team
ORDER BY wasted_gpu_hours DESC
LIMIT 20
