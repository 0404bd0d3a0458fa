-- Raw learning, data-quality and artifact/release telemetry.

CREATE TABLE IF NOT EXISTS ${db}.learning_steps
(
    event_id        String CODEC(ZSTD(3)),
    ts              DateTime64(3, 'UTC') CODEC(DoubleDelta, ZSTD(1)),
    run_id          LowCardinality(String),
    step            UInt64 CODEC(Delta, ZSTD(1)),
    epoch           UInt64 CODEC(Delta, ZSTD(1)),
    loss            Float64 CODEC(Gorilla, ZSTD(1)),
    metrics         Map(LowCardinality(String), Float64),
    lr              Nullable(Float64) CODEC(Gorilla, ZSTD(1)),
    grad_norm       Nullable(Float64) CODEC(Gorilla, ZSTD(1)),
    nonfinite_count UInt64 CODEC(T64, ZSTD(1)),
    source_kind     LowCardinality(String),
    seq             UInt64 CODEC(Delta, ZSTD(1)),
    kafka_topic     LowCardinality(String),
    kafka_partition UInt16 CODEC(ZSTD(1)),
    kafka_offset    UInt64 CODEC(Delta, ZSTD(1)),
    CONSTRAINT ts_sane CHECK ts > toDateTime64('2000-01-01 00:00:00', 3, 'UTC')
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (run_id, step, ts, event_id)
SETTINGS non_replicated_deduplication_window = 1000;

CREATE TABLE IF NOT EXISTS ${db}.validation_results
(
    event_id        String CODEC(ZSTD(3)),
    ts              DateTime64(3, 'UTC') CODEC(DoubleDelta, ZSTD(1)),
    run_id          LowCardinality(String),
    step            UInt64 CODEC(Delta, ZSTD(1)),
    epoch           UInt64 CODEC(Delta, ZSTD(1)),
    metrics         Map(LowCardinality(String), Float64),
    dataset_uri     LowCardinality(String),
    dataset_version LowCardinality(String),
    slice           LowCardinality(String),
    source_kind     LowCardinality(String),
    seq             UInt64 CODEC(Delta, ZSTD(1)),
    kafka_topic     LowCardinality(String),
    kafka_partition UInt16 CODEC(ZSTD(1)),
    kafka_offset    UInt64 CODEC(Delta, ZSTD(1)),
    CONSTRAINT ts_sane CHECK ts > toDateTime64('2000-01-01 00:00:00', 3, 'UTC')
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (run_id, step, ts, event_id)
SETTINGS non_replicated_deduplication_window = 1000;

CREATE TABLE IF NOT EXISTS ${db}.data_quality_reports
(
    event_id           String CODEC(ZSTD(3)),
    ts                 DateTime64(3, 'UTC') CODEC(DoubleDelta, ZSTD(1)),
    run_id             LowCardinality(String),
    dataset_uri        LowCardinality(String),
    dataset_version    LowCardinality(String),
    data_partition     String CODEC(ZSTD(3)),
    window_start       DateTime64(3, 'UTC') CODEC(DoubleDelta, ZSTD(1)),
    window_end         DateTime64(3, 'UTC') CODEC(DoubleDelta, ZSTD(1)),
    row_count          UInt64 CODEC(T64, ZSTD(1)),
    schema_failures    UInt64 CODEC(T64, ZSTD(1)),
    duplicate_rows     UInt64 CODEC(T64, ZSTD(1)),
    rejected_samples   UInt64 CODEC(T64, ZSTD(1)),
    feature_names      Array(LowCardinality(String)),
    feature_null_pct   Array(Float64),
    feature_psi        Array(Nullable(Float64)),
    feature_ks         Array(Nullable(Float64)),
    label_distribution Map(LowCardinality(String), Float64),
    freshness_lag_ms   Nullable(Int64),
    baseline           LowCardinality(String),
    drifted_features   Array(LowCardinality(String)),
    max_psi            Nullable(Float64),
    max_ks             Nullable(Float64),
    source_kind        LowCardinality(String),
    seq                UInt64 CODEC(Delta, ZSTD(1)),
    kafka_topic        LowCardinality(String),
    kafka_partition    UInt16 CODEC(ZSTD(1)),
    kafka_offset       UInt64 CODEC(Delta, ZSTD(1)),
    CONSTRAINT ts_sane CHECK ts > toDateTime64('2000-01-01 00:00:00', 3, 'UTC')
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (dataset_uri, dataset_version, ts, event_id)
SETTINGS non_replicated_deduplication_window = 1000;

CREATE TABLE IF NOT EXISTS ${db}.artifacts
(
    event_id         String CODEC(ZSTD(3)),
    ts               DateTime64(3, 'UTC') CODEC(DoubleDelta, ZSTD(1)),
    run_id           LowCardinality(String),
    uri              String CODEC(ZSTD(3)),
    kind             LowCardinality(String),
    size_bytes       UInt64 CODEC(T64, ZSTD(1)),
    sha256           String CODEC(ZSTD(3)),
    serialization_ok Bool,
    registry_status  LowCardinality(String),
    source_kind      LowCardinality(String),
    seq              UInt64 CODEC(Delta, ZSTD(1)),
    kafka_topic      LowCardinality(String),
    kafka_partition  UInt16 CODEC(ZSTD(1)),
    kafka_offset     UInt64 CODEC(Delta, ZSTD(1)),
    CONSTRAINT ts_sane CHECK ts > toDateTime64('2000-01-01 00:00:00', 3, 'UTC')
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (run_id, ts, event_id)
SETTINGS non_replicated_deduplication_window = 1000;

CREATE TABLE IF NOT EXISTS ${db}.gate_decisions
(
    event_id        String CODEC(ZSTD(3)),
    ts              DateTime64(3, 'UTC') CODEC(DoubleDelta, ZSTD(1)),
    run_id          LowCardinality(String),
    gate            LowCardinality(String),
    decision        LowCardinality(String),
    thresholds      Map(LowCardinality(String), Float64),
    measured        Map(LowCardinality(String), Float64),
    slice_names     Array(LowCardinality(String)),
    slice_passed    Array(Bool),
    reasons         Array(String),
    evaluator       LowCardinality(String),
    source_kind     LowCardinality(String),
    seq             UInt64 CODEC(Delta, ZSTD(1)),
    kafka_topic     LowCardinality(String),
    kafka_partition UInt16 CODEC(ZSTD(1)),
    kafka_offset    UInt64 CODEC(Delta, ZSTD(1)),
    CONSTRAINT ts_sane CHECK ts > toDateTime64('2000-01-01 00:00:00', 3, 'UTC')
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (run_id, ts, event_id)
SETTINGS non_replicated_deduplication_window = 1000;
