-- Release-gate evidence (issue 22): what `runwatch gate check` reads back.
-- ValidationResult v2: the kind (validation or release evaluation), sample
-- counts, confidence intervals and the incumbent reference of an evaluation.
-- GateDecision v2: the policy that decided and, for a human approval, the
-- decision it approves (the automated decision stays stored as it was).
-- The columns go before source_kind: the Kafka coordinates stay last.

ALTER TABLE ${db}.validation_results
    ADD COLUMN IF NOT EXISTS kind LowCardinality(String) DEFAULT 'validation' AFTER slice,
    ADD COLUMN IF NOT EXISTS sample_count UInt64 DEFAULT 0 AFTER kind,
    ADD COLUMN IF NOT EXISTS ci_low Map(LowCardinality(String), Float64) AFTER sample_count,
    ADD COLUMN IF NOT EXISTS ci_high Map(LowCardinality(String), Float64) AFTER ci_low,
    ADD COLUMN IF NOT EXISTS incumbent_run_id String DEFAULT '' AFTER ci_high;

ALTER TABLE ${db}.gate_decisions
    ADD COLUMN IF NOT EXISTS policy String DEFAULT '' AFTER evaluator,
    ADD COLUMN IF NOT EXISTS approves String DEFAULT '' AFTER policy;
