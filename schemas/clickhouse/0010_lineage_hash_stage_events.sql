-- Issue 19: lineage you can trust, boundary events of data stages.
--
-- RunManifest v2 carries its lineage hash and repeat group (docs/contracts.md,
-- "Lineage hash"). run_manifests keeps every version of a run's manifest (one
-- row per event id; rw.lineage itself is compacted to the latest), so the
-- first version stays on record; lineage_versions lists them per run. The
-- columns go before the Kafka coordinates, which stay every table's last three.
ALTER TABLE ${db}.run_manifests
    ADD COLUMN IF NOT EXISTS lineage_hash String DEFAULT '' AFTER labels,
    ADD COLUMN IF NOT EXISTS repeat_group String DEFAULT '' AFTER lineage_hash;

-- Each distinct lineage a run was published with: when first and last seen.
CREATE VIEW IF NOT EXISTS ${db}.lineage_versions AS
SELECT run_id, lineage_hash, any(repeat_group) AS repeat_group,
       min(ts) AS first_seen, max(ts) AS last_seen, uniqExact(event_id) AS emissions,
       argMin(event_id, ts) AS first_event_id
FROM ${db}.run_manifests
GROUP BY run_id, lineage_hash;

-- StageEvent: one ingestion or transformation stage (inputs → output dataset
-- version), kept forever like the lineage it extends.
CREATE TABLE IF NOT EXISTS ${db}.stage_events
(
    event_id           String CODEC(ZSTD(3)),
    ts                 DateTime64(3, 'UTC') CODEC(DoubleDelta, ZSTD(1)),
    run_id             LowCardinality(String),
    stage              LowCardinality(String),
    code_version       String,
    input_uris         Array(String),
    input_versions     Array(String),
    input_hashes       Array(String),
    dataset_uri        LowCardinality(String),
    dataset_version    LowCardinality(String),
    content_hash       String,
    window_start       Nullable(DateTime64(3, 'UTC')),
    window_end         Nullable(DateTime64(3, 'UTC')),
    started_at         DateTime64(3, 'UTC') CODEC(DoubleDelta, ZSTD(1)),
    duration_ms        Float64,
    rows_in            Nullable(Int64),
    rows_out           Nullable(Int64),
    outcome            LowCardinality(String),
    error              String CODEC(ZSTD(3)),
    feature_names      Array(LowCardinality(String)),
    feature_null_pct   Array(Float64),
    feature_min        Array(Nullable(Float64)),
    feature_max        Array(Nullable(Float64)),
    feature_mean       Array(Nullable(Float64)),
    feature_psi        Array(Nullable(Float64)),
    feature_ks         Array(Nullable(Float64)),
    baseline           LowCardinality(String),
    drifted_features   Array(LowCardinality(String)),
    max_psi            Nullable(Float64),
    max_ks             Nullable(Float64),
    psi_threshold      Nullable(Float64),
    labels             Map(LowCardinality(String), String),
    source_kind        LowCardinality(String),
    seq                UInt64 CODEC(Delta, ZSTD(1)),
    kafka_topic        LowCardinality(String),
    kafka_partition    UInt16 CODEC(ZSTD(1)),
    kafka_offset       UInt64 CODEC(Delta, ZSTD(1)),
    CONSTRAINT ts_sane CHECK ts > toDateTime64('2000-01-01 00:00:00', 3, 'UTC')
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(ts)
ORDER BY (dataset_uri, dataset_version, ts, event_id)
SETTINGS non_replicated_deduplication_window = 1000;
