-- Sink high-water marks: the largest Kafka offset stored per table and
-- partition, maintained by the server itself as rows land (materialized
-- views), so a restarted sink skips what is already stored even when it died
-- between an insert and its offset commit.

CREATE TABLE IF NOT EXISTS ${db}.sink_watermarks
(
    target_table    LowCardinality(String),
    kafka_topic     LowCardinality(String),
    kafka_partition UInt16,
    max_offset      SimpleAggregateFunction(max, UInt64)
)
ENGINE = AggregatingMergeTree
ORDER BY (target_table, kafka_topic, kafka_partition)
SETTINGS non_replicated_deduplication_window = 1000;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.sink_watermarks_gpu_samples_mv TO ${db}.sink_watermarks AS
SELECT 'gpu_samples' AS target_table, kafka_topic, kafka_partition, max(kafka_offset) AS max_offset
FROM ${db}.gpu_samples WHERE kafka_topic != '' GROUP BY kafka_topic, kafka_partition;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.sink_watermarks_host_samples_mv TO ${db}.sink_watermarks AS
SELECT 'host_samples' AS target_table, kafka_topic, kafka_partition, max(kafka_offset) AS max_offset
FROM ${db}.host_samples WHERE kafka_topic != '' GROUP BY kafka_topic, kafka_partition;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.sink_watermarks_job_events_mv TO ${db}.sink_watermarks AS
SELECT 'job_events' AS target_table, kafka_topic, kafka_partition, max(kafka_offset) AS max_offset
FROM ${db}.job_events WHERE kafka_topic != '' GROUP BY kafka_topic, kafka_partition;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.sink_watermarks_step_timings_mv TO ${db}.sink_watermarks AS
SELECT 'step_timings' AS target_table, kafka_topic, kafka_partition, max(kafka_offset) AS max_offset
FROM ${db}.step_timings WHERE kafka_topic != '' GROUP BY kafka_topic, kafka_partition;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.sink_watermarks_checkpoints_mv TO ${db}.sink_watermarks AS
SELECT 'checkpoints' AS target_table, kafka_topic, kafka_partition, max(kafka_offset) AS max_offset
FROM ${db}.checkpoints WHERE kafka_topic != '' GROUP BY kafka_topic, kafka_partition;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.sink_watermarks_learning_steps_mv TO ${db}.sink_watermarks AS
SELECT 'learning_steps' AS target_table, kafka_topic, kafka_partition, max(kafka_offset) AS max_offset
FROM ${db}.learning_steps WHERE kafka_topic != '' GROUP BY kafka_topic, kafka_partition;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.sink_watermarks_validation_results_mv TO ${db}.sink_watermarks AS
SELECT 'validation_results' AS target_table, kafka_topic, kafka_partition, max(kafka_offset) AS max_offset
FROM ${db}.validation_results WHERE kafka_topic != '' GROUP BY kafka_topic, kafka_partition;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.sink_watermarks_data_quality_reports_mv TO ${db}.sink_watermarks AS
SELECT 'data_quality_reports' AS target_table, kafka_topic, kafka_partition, max(kafka_offset) AS max_offset
FROM ${db}.data_quality_reports WHERE kafka_topic != '' GROUP BY kafka_topic, kafka_partition;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.sink_watermarks_artifacts_mv TO ${db}.sink_watermarks AS
SELECT 'artifacts' AS target_table, kafka_topic, kafka_partition, max(kafka_offset) AS max_offset
FROM ${db}.artifacts WHERE kafka_topic != '' GROUP BY kafka_topic, kafka_partition;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.sink_watermarks_gate_decisions_mv TO ${db}.sink_watermarks AS
SELECT 'gate_decisions' AS target_table, kafka_topic, kafka_partition, max(kafka_offset) AS max_offset
FROM ${db}.gate_decisions WHERE kafka_topic != '' GROUP BY kafka_topic, kafka_partition;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.sink_watermarks_run_manifests_mv TO ${db}.sink_watermarks AS
SELECT 'run_manifests' AS target_table, kafka_topic, kafka_partition, max(kafka_offset) AS max_offset
FROM ${db}.run_manifests WHERE kafka_topic != '' GROUP BY kafka_topic, kafka_partition;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.sink_watermarks_alerts_mv TO ${db}.sink_watermarks AS
SELECT 'alerts' AS target_table, kafka_topic, kafka_partition, max(kafka_offset) AS max_offset
FROM ${db}.alerts WHERE kafka_topic != '' GROUP BY kafka_topic, kafka_partition;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.sink_watermarks_dead_letters_mv TO ${db}.sink_watermarks AS
SELECT 'dead_letters' AS target_table, kafka_topic, kafka_partition, max(kafka_offset) AS max_offset
FROM ${db}.dead_letters WHERE kafka_topic != '' GROUP BY kafka_topic, kafka_partition;
