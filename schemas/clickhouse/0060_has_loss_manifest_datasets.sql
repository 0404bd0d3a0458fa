-- has_loss. A LearningStep needs a loss: the SDK publishes a step logged with metrics and no
-- loss (an evaluation logged as a step) with a NaN loss and nonfinite_count 0, its
-- "no loss" (a NaN loss it is given is counted in nonfinite_count; the processor reads
-- it so too, docs/sdk.md). learning_steps keeps the row as published; has_loss says
-- whether its loss is one (a real NaN, counted or from another producer, is): the
-- loss rollups (retention.yaml `where: has_loss`) and the run summary's final loss
-- read only the rows that have one.

ALTER TABLE ${db}.learning_steps
    ADD COLUMN IF NOT EXISTS has_loss UInt8
        ALIAS NOT (isNaN(loss) AND nonfinite_count = 0 AND source_kind = 'sdk');

-- One row per dataset version each manifest (every lineage version of a run) names: an
-- unversioned dataset has dataset_version ''. The retained_datasets dictionary
-- (retention.yaml) reads it: a data-quality report, mostly published without a run id,
-- is kept while a retained run reads its dataset version.
CREATE VIEW IF NOT EXISTS ${db}.manifest_datasets AS
SELECT run_id, ts, event_id, tupleElement(d, 1) AS dataset_uri,
       tupleElement(d, 2) AS dataset_version
FROM ${db}.run_manifests ARRAY JOIN arrayZip(dataset_uris, dataset_versions) AS d;
