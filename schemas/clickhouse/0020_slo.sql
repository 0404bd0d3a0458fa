-- SLO evaluator (runwatch slo): one SLI point per objective and evaluation
-- round, and each objective's alert book (the budget state the evaluator
-- resumes from).  Both are replacing: a round written twice (a retried insert)
-- keeps one row per (objective, evaluated_at) and the latest book.

CREATE TABLE IF NOT EXISTS ${db}.slo_points
(
    objective        LowCardinality(String),
    evaluated_at     DateTime64(3, 'UTC'),
    kind             LowCardinality(String),
    window_start     DateTime64(3, 'UTC'),
    good             UInt64,
    valid            UInt64,
    sli              Nullable(Float64),
    target           Float64,
    budget_consumed  Nullable(Float64),
    state            LowCardinality(String),
    burn_rates       Map(LowCardinality(String), Float64),
    conditions       Array(LowCardinality(String)),
    bad_keys         Array(String),
    bad_runs         Array(String)
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(evaluated_at)
ORDER BY (objective, evaluated_at)
SETTINGS non_replicated_deduplication_window = 1000;

CREATE TABLE IF NOT EXISTS ${db}.slo_state
(
    objective   String,
    updated_at  DateTime64(3, 'UTC'),
    book        String CODEC(ZSTD(3))
)
ENGINE = ReplacingMergeTree(updated_at)
ORDER BY objective
SETTINGS non_replicated_deduplication_window = 1000;
