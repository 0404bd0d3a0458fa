-- Issue 19: Alert v2 carries its owning team (ownership.yaml, by probable cause,
-- family, team and dataset); stored next to the run's team and family. The
-- column goes before the Kafka coordinates, which stay every table's last three.

ALTER TABLE ${db}.alerts
    ADD COLUMN IF NOT EXISTS owner LowCardinality(String) DEFAULT '' AFTER experiment_family;
