-- DataQualityReport v2 (issue 22): the bottom-k sketch of a batch's row keys
-- (data.report(..., key=...)), read by `runwatch gate check` to tell whether
-- evaluation data shares rows with training data. Before the Kafka coordinates.

ALTER TABLE ${db}.data_quality_reports
    ADD COLUMN IF NOT EXISTS key_sketch Array(Int64) AFTER max_ks;
