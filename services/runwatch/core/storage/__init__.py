"""ClickHouse storage: versioned DDL, retention rules, record-to-row mapping, column batches."""
