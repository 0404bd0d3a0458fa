-- Raw execution telemetry: GPU samples (one row per GPU per tick), host samples,
-- job events, step timings, checkpoints.  Templated: ${db} is the database and
-- the cluster renderer adds ON CLUSTER / Replicated* / Distributed.
-- Every raw table carries the Kafka coordinates of the record it came from
-- (kafka_topic/kafka_partition/kafka_offset): the sink resumes from them.

CREATE TABLE IF NOT EXISTS ${db}.gpu_samples
(
    event_id         String CODEC(ZSTD(3)),
    ts               DateTime64(3, 'UTC') CODEC(DoubleDelta, ZSTD(1)),
    node             LowCardinality(String),
    gpu_index        UInt8,
    gpu_uuid         LowCardinality(String),
    run_id           LowCardinality(String),
    util_pct         Float32 CODEC(Gorilla, ZSTD(1)),
    sm_active_pct    Nullable(Float32) CODEC(Gorilla, ZSTD(1)),
    mem_used_bytes   UInt64 CODEC(Delta, ZSTD(1)),
    mem_total_bytes  UInt64 CODEC(DoubleDelta, ZSTD(1)),
    power_w          Float32 CODEC(Gorilla, ZSTD(1)),
    temp_c           Float32 CODEC(Gorilla, ZSTD(1)),
    sm_clock_mhz     UInt16 CODEC(Delta, ZSTD(1)),
    mem_clock_mhz    UInt16 CODEC(Delta, ZSTD(1)),
    throttle_reasons UInt64 CODEC(ZSTD(1)),
    ecc_corrected    UInt64 CODEC(DoubleDelta, ZSTD(1)),
    ecc_uncorrected  UInt64 CODEC(DoubleDelta, ZSTD(1)),
    xid              Nullable(Int32) CODEC(ZSTD(1)),
    pcie_rx_bps      Nullable(Float64) CODEC(Gorilla, ZSTD(1)),
    pcie_tx_bps      Nullable(Float64) CODEC(Gorilla, ZSTD(1)),
    nvlink_rx_bps    Nullable(Float64) CODEC(Gorilla, ZSTD(1)),
    nvlink_tx_bps    Nullable(Float64) CODEC(Gorilla, ZSTD(1)),
    process_count    UInt8 CODEC(ZSTD(1)),
    process_mem_bytes UInt64 CODEC(Delta, ZSTD(1)),
    source_kind      LowCardinality(String),
    seq              UInt64 CODEC(Delta, ZSTD(1)),
    kafka_topic      LowCardinality(String),
    kafka_partition  UInt16 CODEC(ZSTD(1)),
    kafka_offset     UInt64 CODEC(Delta, ZSTD(1)),
    CONSTRAINT ts_sane CHECK ts > toDateTime64('2000-01-01 00:00:00', 3, 'UTC'),
    CONSTRAINT util_range CHECK util_pct >= 0 AND util_pct <= 100
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (node, gpu_index, ts)
SETTINGS non_replicated_deduplication_window = 1000;

CREATE TABLE IF NOT EXISTS ${db}.host_samples
(
    event_id         String CODEC(ZSTD(3)),
    ts               DateTime64(3, 'UTC') CODEC(DoubleDelta, ZSTD(1)),
    node             LowCardinality(String),
    run_id           LowCardinality(String),
    cpu_pct          Float32 CODEC(Gorilla, ZSTD(1)),
    mem_used_bytes   UInt64 CODEC(Delta, ZSTD(1)),
    mem_total_bytes  UInt64 CODEC(DoubleDelta, ZSTD(1)),
    disk_read_bps    Float64 CODEC(Gorilla, ZSTD(1)),
    disk_write_bps   Float64 CODEC(Gorilla, ZSTD(1)),
    net_rx_bps       Float64 CODEC(Gorilla, ZSTD(1)),
    net_tx_bps       Float64 CODEC(Gorilla, ZSTD(1)),
    gpu_count        UInt8,
    source_kind      LowCardinality(String),
    seq              UInt64 CODEC(Delta, ZSTD(1)),
    kafka_topic      LowCardinality(String),
    kafka_partition  UInt16 CODEC(ZSTD(1)),
    kafka_offset     UInt64 CODEC(Delta, ZSTD(1)),
    CONSTRAINT ts_sane CHECK ts > toDateTime64('2000-01-01 00:00:00', 3, 'UTC')
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (node, ts)
SETTINGS non_replicated_deduplication_window = 1000;

CREATE TABLE IF NOT EXISTS ${db}.job_events
(
    event_id          String CODEC(ZSTD(3)),
    ts                DateTime64(3, 'UTC') CODEC(DoubleDelta, ZSTD(1)),
    run_id            LowCardinality(String),
    state             LowCardinality(String),
    attempt           UInt16,
    reason            String CODEC(ZSTD(3)),
    queue             LowCardinality(String),
    priority_class    LowCardinality(String),
    nodes             Array(LowCardinality(String)),
    gpu_indices       Array(UInt16),
    gpu_model         LowCardinality(String),
    gpu_count         UInt32 MATERIALIZED length(nodes) * length(gpu_indices),
    deadline          Nullable(DateTime64(3, 'UTC')),
    team              LowCardinality(String),
    experiment_family LowCardinality(String),
    source_kind       LowCardinality(String),
    seq               UInt64 CODEC(Delta, ZSTD(1)),
    kafka_topic       LowCardinality(String),
    kafka_partition   UInt16 CODEC(ZSTD(1)),
    kafka_offset      UInt64 CODEC(Delta, ZSTD(1)),
    CONSTRAINT ts_sane CHECK ts > toDateTime64('2000-01-01 00:00:00', 3, 'UTC')
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (run_id, ts, event_id)
SETTINGS non_replicated_deduplication_window = 1000;

CREATE TABLE IF NOT EXISTS ${db}.step_timings
(
    event_id             String CODEC(ZSTD(3)),
    ts                   DateTime64(3, 'UTC') CODEC(DoubleDelta, ZSTD(1)),
    run_id               LowCardinality(String),
    step                 UInt64 CODEC(Delta, ZSTD(1)),
    loader_wait_ms       Float64 CODEC(Gorilla, ZSTD(1)),
    compute_ms           Float64 CODEC(Gorilla, ZSTD(1)),
    step_ms              Float64 CODEC(Gorilla, ZSTD(1)),
    samples              UInt64 CODEC(T64, ZSTD(1)),
    tokens               Nullable(UInt64) CODEC(T64, ZSTD(1)),
    effective_batch_size Nullable(UInt64) CODEC(T64, ZSTD(1)),
    worker_restarts      UInt32 CODEC(T64, ZSTD(1)),
    source_kind          LowCardinality(String),
    seq                  UInt64 CODEC(Delta, ZSTD(1)),
    kafka_topic          LowCardinality(String),
    kafka_partition      UInt16 CODEC(ZSTD(1)),
    kafka_offset         UInt64 CODEC(Delta, ZSTD(1)),
    CONSTRAINT ts_sane CHECK ts > toDateTime64('2000-01-01 00:00:00', 3, 'UTC'),
    CONSTRAINT step_ms_sane CHECK step_ms >= 0
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (run_id, ts, event_id)
SETTINGS non_replicated_deduplication_window = 1000;

CREATE TABLE IF NOT EXISTS ${db}.checkpoints
(
    event_id        String CODEC(ZSTD(3)),
    ts              DateTime64(3, 'UTC') CODEC(DoubleDelta, ZSTD(1)),
    run_id          LowCardinality(String),
    step            UInt64 CODEC(Delta, ZSTD(1)),
    started_at      DateTime64(3, 'UTC') CODEC(DoubleDelta, ZSTD(1)),
    ended_at        DateTime64(3, 'UTC') CODEC(DoubleDelta, ZSTD(1)),
    duration_ms     Float64 CODEC(Gorilla, ZSTD(1)),
    size_bytes      UInt64 CODEC(T64, ZSTD(1)),
    sha256          String CODEC(ZSTD(3)),
    expected_sha256 String CODEC(ZSTD(3)),
    uri             String CODEC(ZSTD(3)),
    storage_path    LowCardinality(String) MATERIALIZED replaceRegexpOne(uri, '/[^/]*$', ''),
    outcome         LowCardinality(String),
    throughput_bps  Nullable(Float64) CODEC(Gorilla, ZSTD(1)),
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
