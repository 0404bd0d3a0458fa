"""Pure logic, grouped by concern; imports no I/O library and never reads the clock.

* ``records``: the record classes, generated from ``schemas/avro``.
* ``codec``: Avro single-object encoding, schema loading and compatibility, the
  JSON shape checker of the internal formats.
* ``stream``: the run join, run state, held events, the input horizon, re-keying.
* ``signals``: indicators, watches, workload baselines, data checks, hard rules, cause.
* ``detect``: detectors (river semantics, numpy fast paths).
* ``paging``: alert lifecycle, routing rules, delivery decisions, payloads, signing.
* ``storage``: ClickHouse DDL, retention, rows and column batches.
* ``topics``, ``formats``: the topic map and the internal JSON formats.
"""
