-- Cost and capacity (docs/cost.md): the run-summary columns behind
-- `runwatch cost` and the waste-by-cause attribution.  Filled by
-- summary/run_summary.sql as runs end; rows written before this migration
-- keep the defaults (no allocation known: reported as unpriced).

ALTER TABLE ${db}.run_summaries
    ADD COLUMN IF NOT EXISTS gpu_model LowCardinality(String) DEFAULT '',
    ADD COLUMN IF NOT EXISTS gpu_count UInt32 DEFAULT 0,
    ADD COLUMN IF NOT EXISTS queue LowCardinality(String) DEFAULT '',
    ADD COLUMN IF NOT EXISTS priority_class LowCardinality(String) DEFAULT '',
    ADD COLUMN IF NOT EXISTS node_pool LowCardinality(String) DEFAULT '',
    ADD COLUMN IF NOT EXISTS tenancy LowCardinality(String) DEFAULT '',
    ADD COLUMN IF NOT EXISTS running_at Nullable(DateTime64(3, 'UTC')),
    ADD COLUMN IF NOT EXISTS queue_delay_s Nullable(Float64),
    ADD COLUMN IF NOT EXISTS allocated_gpu_hours Float64 DEFAULT 0,
    ADD COLUMN IF NOT EXISTS observed_gpu_hours Float64 DEFAULT 0,
    ADD COLUMN IF NOT EXISTS noproc_gpu_hours Float64 DEFAULT 0,
    ADD COLUMN IF NOT EXISTS stalled_gpu_hours Float64 DEFAULT 0,
    ADD COLUMN IF NOT EXISTS lost_gpu_hours Float64 DEFAULT 0,
    ADD COLUMN IF NOT EXISTS no_artifact_gpu_hours Float64 DEFAULT 0,
    ADD COLUMN IF NOT EXISTS busy_util_hours Map(UInt8, Float64),
    ADD COLUMN IF NOT EXISTS busy_util_weighted Map(UInt8, Float64),
    ADD COLUMN IF NOT EXISTS usable_artifact UInt8 DEFAULT 0,
    ADD COLUMN IF NOT EXISTS step_records UInt64 DEFAULT 0,
    ADD COLUMN IF NOT EXISTS skewed_nodes UInt32 DEFAULT 0,
    ADD COLUMN IF NOT EXISTS max_skew_s Float64 DEFAULT 0;
