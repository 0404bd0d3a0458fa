-- Kept forever: run manifests (lineage) and run summaries.  Alerts and dead
-- letters get their TTL from schemas/retention.yaml.

CREATE TABLE IF NOT EXISTS ${db}.run_manifests
(
    event_id                String CODEC(ZSTD(3)),
    ts                      DateTime64(3, 'UTC') CODEC(DoubleDelta, ZSTD(1)),
    run_id                  String,
    dataset_uris            Array(String),
    dataset_versions        Array(String),
    dataset_hashes          Array(String),
    transform_names         Array(String),
    transform_versions      Array(String),
    code_revision           String,
    code_dirty              Bool,
    image_digest            String,
    config_hash             String,
    config                  Map(String, String),
    hardware_nodes          Array(String),
    gpu_count               UInt32,
    gpu_model               LowCardinality(String),
    seed_policy             LowCardinality(String),
    framework_versions      Map(LowCardinality(String), String),
    experiment_family       LowCardinality(String),
    team                    LowCardinality(String),
    parent_run_id           String,
    resumed_from_checkpoint String,
    labels                  Map(LowCardinality(String), String),
    source_kind             LowCardinality(String),
    seq                     UInt64,
    kafka_topic             LowCardinality(String),
    kafka_partition         UInt16,
    kafka_offset            UInt64,
    CONSTRAINT ts_sane CHECK ts > toDateTime64('2000-01-01 00:00:00', 3, 'UTC')
)
ENGINE = ReplacingMergeTree
ORDER BY (run_id, event_id)
SETTINGS non_replicated_deduplication_window = 1000;

CREATE TABLE IF NOT EXISTS ${db}.alerts
(
    event_id          String CODEC(ZSTD(3)),
    ts                DateTime64(3, 'UTC') CODEC(DoubleDelta, ZSTD(1)),
    run_id            LowCardinality(String),
    alert_id          String,
    dedup_key         String,
    status            LowCardinality(String),
    severity          LowCardinality(String),
    detector          LowCardinality(String),
    indicator         LowCardinality(String),
    observed          Nullable(Float64),
    expected          Nullable(Float64),
    score             Float64,
    probable_cause    LowCardinality(String),
    evidence_signals  Array(LowCardinality(String)),
    evidence_indicators Array(LowCardinality(String)),
    evidence_observed Array(Nullable(Float64)),
    evidence_at       Array(DateTime64(3, 'UTC')),
    title             String,
    summary           String,
    team              LowCardinality(String),
    experiment_family LowCardinality(String),
    node              LowCardinality(String),
    labels            Map(LowCardinality(String), String),
    first_seen        DateTime64(3, 'UTC'),
    last_seen         DateTime64(3, 'UTC'),
    source_kind       LowCardinality(String),
    seq               UInt64,
    kafka_topic       LowCardinality(String),
    kafka_partition   UInt16,
    kafka_offset      UInt64,
    CONSTRAINT ts_sane CHECK ts > toDateTime64('2000-01-01 00:00:00', 3, 'UTC')
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(ts)
ORDER BY (run_id, ts, event_id)
SETTINGS non_replicated_deduplication_window = 1000;

-- Records nobody could decode or store, with the reason and the original bytes.
CREATE TABLE IF NOT EXISTS ${db}.dead_letters
(
    event_id        String,
    ts              DateTime64(3, 'UTC') CODEC(DoubleDelta, ZSTD(1)),
    stage           LowCardinality(String),
    target_table    LowCardinality(String),
    topic           LowCardinality(String),
    partition       Int32,
    offset          Int64,
    reason          String CODEC(ZSTD(3)),
    original        String CODEC(ZSTD(3)),
    key             Nullable(String),
    source_kind     LowCardinality(String),
    kafka_topic     LowCardinality(String),
    kafka_partition UInt16,
    kafka_offset    UInt64
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (topic, partition, offset, event_id)
SETTINGS non_replicated_deduplication_window = 1000;

-- One row per run, rewritten as the run ends (latest updated_at wins).
CREATE TABLE IF NOT EXISTS ${db}.run_summaries
(
    run_id            String,
    team              LowCardinality(String),
    experiment_family LowCardinality(String),
    outcome           LowCardinality(String),
    started_at        DateTime64(3, 'UTC'),
    ended_at          DateTime64(3, 'UTC'),
    duration_s        Float64,
    attempts          UInt32,
    steps             UInt64,
    final_loss        Nullable(Float64),
    final_metrics     Map(LowCardinality(String), Float64),
    alert_count       UInt32,
    critical_alerts   UInt32,
    checkpoints       UInt32,
    gpu_hours         Float64,
    idle_gpu_hours    Float64,
    wasted_gpu_hours  Float64,
    updated_at        DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree(updated_at)
ORDER BY run_id;

-- Per-run retention marks fed by materialized views; the retained_runs
-- dictionary (rendered from retention.yaml) reads them, raw TTLs ask it.
CREATE TABLE IF NOT EXISTS ${db}.retention_marks
(
    run_id      String,
    last_active SimpleAggregateFunction(max, DateTime64(3, 'UTC')),
    anomalous   SimpleAggregateFunction(max, UInt8),
    material    SimpleAggregateFunction(max, UInt8)
)
ENGINE = AggregatingMergeTree
ORDER BY run_id
SETTINGS non_replicated_deduplication_window = 1000;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.retention_marks_jobs_mv TO ${db}.retention_marks AS
SELECT toString(run_id) AS run_id, max(ts) AS last_active, toUInt8(0) AS anomalous, toUInt8(0) AS material
FROM ${db}.job_events WHERE run_id != '' GROUP BY run_id;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.retention_marks_learning_mv TO ${db}.retention_marks AS
SELECT toString(run_id) AS run_id, max(ts) AS last_active, toUInt8(0) AS anomalous, toUInt8(0) AS material
FROM ${db}.learning_steps WHERE run_id != '' GROUP BY run_id;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.retention_marks_alerts_mv TO ${db}.retention_marks AS
SELECT toString(run_id) AS run_id, max(ts) AS last_active, toUInt8(1) AS anomalous, toUInt8(0) AS material
FROM ${db}.alerts WHERE run_id != '' GROUP BY run_id;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.retention_marks_gates_mv TO ${db}.retention_marks AS
SELECT toString(run_id) AS run_id, max(ts) AS last_active, toUInt8(0) AS anomalous, toUInt8(1) AS material
FROM ${db}.gate_decisions WHERE run_id != '' GROUP BY run_id;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.retention_marks_registry_mv TO ${db}.retention_marks AS
SELECT toString(run_id) AS run_id, max(ts) AS last_active, toUInt8(0) AS anomalous, toUInt8(1) AS material
FROM ${db}.artifacts WHERE run_id != '' AND registry_status IN ('registered', 'staged', 'production', 'promoted')
GROUP BY run_id;
