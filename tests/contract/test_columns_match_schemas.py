"""Contract: the sink's columns, the DDL and the Avro schemas carry the same fields.

The row mappers (runwatch.core.storage.rows, the fast path in
runwatch.core.storage.colbatch)
stay hand-written: they flatten nested records, rename ``*_ms`` timestamps and
derive counts, and they are the sink's hot path. Instead of generating them,
this test holds them to the schemas:

* the DDL's insertable columns (not MATERIALIZED/ALIAS) are COLUMNS, in order;
* every leaf field of every current schema is stored in a column (same name,
  or as :data:`RENAMED` says) or listed in :data:`NOT_STORED`, and every column
  comes from a field or is listed in :data:`DERIVED`;
* ``rows_for`` really puts each field's value in its column (a datum with a
  distinct value per field is mapped and read back).

A field added to an ``.avsc`` fails here until it gets a column (DDL migration,
storage/columns.py, storage/rows.py) or a line in NOT_STORED.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import pytest
from fastavro.schema import expand_schema

from runwatch.core.codec import load_schema_set
from runwatch.core.storage.columns import COLUMNS, TABLE_OF
from runwatch.core.storage.rows import INSTANT_COLUMNS, UNSIGNED_BITS, Origin, rows_for
from runwatch.resources import schemas_dir

SCHEMAS = load_schema_set()
# (record, leaf path) -> column of the record's table; paths through an array
# of records (``features[].name``) fill an Array column, one value per element.
_COMMON = {"emitted_at_ms": "ts", "source.kind": "source_kind"}
RENAMED: dict[str, dict[str, str]] = {
    "Alert": {"evidence[].signal": "evidence_signals",
              "evidence[].indicator": "evidence_indicators",
              "evidence[].observed": "evidence_observed", "evidence[].at_ms": "evidence_at",
              "first_seen_ms": "first_seen", "last_seen_ms": "last_seen"},
    "CheckpointEvent": {"started_at_ms": "started_at", "ended_at_ms": "ended_at"},
    "DataQualityReport": {"partition": "data_partition", "window_start_ms": "window_start",
                          "window_end_ms": "window_end", "features[].name": "feature_names",
                          "features[].null_pct": "feature_null_pct",
                          "features[].psi": "feature_psi", "features[].ks": "feature_ks",
                          "drift.drifted_features": "drifted_features",
                          "drift.max_psi": "max_psi", "drift.max_ks": "max_ks"},
    "DeadLetter": {"failed_at_ms": "ts", "emitted_at_ms": ""},
    "GateDecision": {"slices[].name": "slice_names", "slices[].passed": "slice_passed"},
    "JobEvent": {"allocation.nodes": "nodes", "allocation.gpu_indices": "gpu_indices",
                 "allocation.gpu_model": "gpu_model", "deadline_ms": "deadline"},
    "NodeSample": {"gpus[].index": "gpu_samples.gpu_index", "gpus[].uuid": "gpu_samples.gpu_uuid"},
    "RunManifest": {"datasets[].uri": "dataset_uris", "datasets[].version": "dataset_versions",
                    "datasets[].content_hash": "dataset_hashes",
                    "transforms[].name": "transform_names",
                    "transforms[].version": "transform_versions",
                    "hardware.nodes": "hardware_nodes", "hardware.gpu_count": "gpu_count",
                    "hardware.gpu_model": "gpu_model"},
    "ValidationResult": {"dataset.uri": "dataset_uri", "dataset.version": "dataset_version"},
    "StageEvent": {"inputs[].uri": "input_uris", "inputs[].version": "input_versions",
                   "inputs[].content_hash": "input_hashes", "window_start_ms": "window_start",
                   "window_end_ms": "window_end", "started_at_ms": "started_at",
                   "features[].name": "feature_names", "features[].null_pct": "feature_null_pct",
                   "features[].min": "feature_min", "features[].max": "feature_max",
                   "features[].mean": "feature_mean", "features[].psi": "feature_psi",
                   "features[].ks": "feature_ks", "drift.drifted_features": "drifted_features",
                   "drift.max_psi": "max_psi", "drift.max_ks": "max_ks",
                   "drift.psi_threshold": "psi_threshold"},
}
#: Fields the tables do not keep (still on the topic and in the dead letters).
NOT_STORED: dict[str, set[str]] = {
    "*": {"source.host", "source.runwatch_version"},
    "Alert": {"evidence[].expected", "evidence[].detail"},
    "DataQualityReport": {"features[].min", "features[].max", "features[].mean",
                          "drift.psi_threshold"},
    "DeadLetter": {"run_id", "seq", "emitted_at_ms"},
    "GateDecision": {"slices[].measured"},
    "ValidationResult": {"dataset.content_hash"},
    "NodeSample": {"gpus[].processes[].pid"},
}
#: Columns computed from several fields (or the Kafka coordinates), not one field's value.
DERIVED: dict[str, set[str]] = {
    "*": {"kafka_topic", "kafka_partition", "kafka_offset"},
    "dead_letters": {"stage", "target_table"},
    "host_samples": {"gpu_count"},
    "gpu_samples": {"process_count", "process_mem_bytes", "run_id"},
}
#: Top-level NodeSample fields also repeated in every gpu_samples row.
REPEATED = {"event_id", "emitted_at_ms", "node", "source.kind", "seq"}
#: NodeSample fields summed or picked over the GPU's processes (DERIVED columns).
AGGREGATED = {"gpus[].processes[].run_id", "gpus[].processes[].used_mem_bytes"}


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _leaves(t: Any, path: str = "") -> list[str]:
    if isinstance(t, list):
        t = t[-1]
    if isinstance(t, dict) and t["type"] == "record":
        return [p for f in t["fields"]
                for p in _leaves(f["type"], f"{path}.{f['name']}" if path else f["name"])]
    if isinstance(t, dict) and t["type"] == "array" and isinstance(t["items"], dict) \
            and t["items"]["type"] == "record":
        return _leaves(t["items"], path + "[]")
    return [path]


def _tables(name: str) -> tuple[str, ...]:
    return ("host_samples", "gpu_samples") if _short(name) == "NodeSample" else (TABLE_OF[name],)


def _columns(name: str, path: str) -> list[str]:
    """The ``table.column``s a field is stored in (none when it is not stored)."""
    rec = _short(name)
    if path in NOT_STORED["*"] | NOT_STORED.get(rec, set()) or path in AGGREGATED:
        return []
    col = RENAMED.get(rec, {}).get(path) or _COMMON.get(path) or path.rsplit(".", 1)[-1]
    if "." in col:
        return [col]
    table = "gpu_samples" if path.startswith("gpus[].") else _tables(name)[0]
    also = [f"gpu_samples.{col}"] if rec == "NodeSample" and path in REPEATED else []
    return [f"{table}.{col}", *also]


def _ddl_columns(types: dict[str, dict[str, str]] | None = None) -> dict[str, list[str]]:
    """Return each table's insertable columns in order; fill ``types`` with every column's
    type when given."""
    tables: dict[str, list[str]] = {}
    kinds: dict[str, dict[str, str]] = {} if types is None else types
    create = re.compile(r"CREATE TABLE IF NOT EXISTS \$\{db\}\.(\w+)\s*\((.*?)\n\)\s*ENGINE", re.S)
    for path in sorted((schemas_dir() / "clickhouse").glob("*.sql")):
        for m in create.finditer(path.read_text(encoding="utf-8")):
            cols = []
            for line in (x.strip() for x in m.group(2).splitlines()):
                if not line or line.startswith(("--", "CONSTRAINT", "INDEX", "PROJECTION")):
                    continue
                kinds.setdefault(m.group(1), {})[line.split()[0]] = line.split()[1].rstrip(",")
                if re.search(r"\b(MATERIALIZED|ALIAS)\b", line):
                    continue
                cols.append(line.split()[0])
            tables[m.group(1)] = cols
        _alter_columns(path.read_text(encoding="utf-8"), tables, kinds)
    return tables


def _alter_columns(text: str, tables: dict[str, list[str]],
                   kinds: dict[str, dict[str, str]]) -> None:
    """Apply a file's ``ALTER TABLE ... ADD COLUMN [IF NOT EXISTS] c T [AFTER x]`` in order
    (a MATERIALIZED or ALIAS column is typed, not insertable)."""
    alter = re.compile(r"ALTER TABLE \$\{db\}\.(\w+)\s+(ADD COLUMN.*?);", re.S)
    add = re.compile(r"ADD COLUMN (?:IF NOT EXISTS )?(\w+)\b(.*)$", re.S)
    for m in alter.finditer(text):
        cols = tables[m.group(1)]
        for clause in re.split(r",\s*\n\s*(?=ADD COLUMN)", m.group(2)):
            a = add.match(clause.strip())
            assert a is not None, f"cannot read {clause!r}"
            name, rest = a.groups()
            kinds.setdefault(m.group(1), {})[name] = rest.split()[0]
            after = (re.findall(r"\bAFTER (\w+)", rest) or [None])[-1]
            if re.search(r"\b(MATERIALIZED|ALIAS)\b", rest):
                continue  # computed on read or on insert: not insertable
            if name not in cols:
                cols.insert(cols.index(after) + 1 if after else len(cols), name)


@pytest.mark.parametrize("table", sorted(COLUMNS))
def test_ddl_insertable_columns_are_columns_in_order(table: str) -> None:
    ddl = _ddl_columns()
    assert table in ddl, f"no CREATE TABLE for {table} in schemas/clickhouse"
    assert ddl[table] == list(COLUMNS[table])


@pytest.mark.parametrize("name", sorted(SCHEMAS.current))
def test_every_field_has_a_column_or_is_declared_not_stored(name: str) -> None:
    for path in _leaves(expand_schema(SCHEMAS.current[name].schema)):
        for col in _columns(name, path):
            table, column = col.split(".")
            assert column in COLUMNS[table], (
                f"{_short(name)}.{path} has no column {table}.{column}: add it (a DDL "
                "migration, core/storage/columns.py, core/storage/rows.py) or list it in "
                "NOT_STORED in this test"
            )


@pytest.mark.parametrize("table", sorted(COLUMNS))
def test_every_column_comes_from_a_field_or_is_derived(table: str) -> None:
    sources = {
        c
        for n in SCHEMAS.current if table in _tables(n)
        for p in _leaves(expand_schema(SCHEMAS.current[n].schema))
        for c in _columns(n, p)
    }
    derived = DERIVED["*"] | DERIVED.get(table, set())
    for column in COLUMNS[table]:
        assert f"{table}.{column}" in sources or column in derived, (
            f"{table}.{column} comes from no schema field: list it in DERIVED or map a field to it"
        )


def _distinct(t: Any, path: str, counter: itertools.count) -> Any:
    """A datum for type ``t`` whose every leaf holds a value no other leaf holds."""
    if isinstance(t, list):
        t = t[-1]
    if isinstance(t, str):
        n = next(counter)
        return {"string": f"v{n}", "long": 1_000 + n, "int": 1_000 + n, "double": n + 0.5,
                "float": n + 0.5, "boolean": True, "bytes": f"b{n}".encode()}[t]
    kind = t["type"]
    if kind == "record":
        return {f["name"]: _distinct(f["type"], f"{path}.{f['name']}", counter)
                for f in t["fields"]}
    if kind == "array":
        return [_distinct(t["items"], path, counter)]
    if kind == "map":
        return {f"k{next(counter)}": _distinct(t["values"], path, counter)}
    if kind == "enum":
        return t["symbols"][-1]
    return _distinct(kind, path, counter)


def _value(datum: Any, path: str) -> Any:
    head, _, rest = path.partition(".")
    if head.endswith("[]"):
        return [_value(x, rest) for x in datum[head[:-2]]]
    return datum[head] if not rest else _value(datum[head], rest)


def _stored(value: Any) -> Any:
    """A field value as the row holds it (bytes as bytes, arrays as lists)."""
    if isinstance(value, list | tuple):
        return [_stored(v) for v in value]
    return value


@pytest.mark.parametrize("name", sorted(SCHEMAS.current))
def test_rows_put_each_field_in_its_column(name: str) -> None:
    schema = expand_schema(SCHEMAS.current[name].schema)
    datum = _distinct(schema, "", itertools.count(1))
    rows = rows_for(name, datum, Origin("rw.t", 1, 2))
    by_table = {t: dict(zip(COLUMNS[t], row, strict=True)) for t, row in rows}
    for path in _leaves(schema):
        value = _value(datum, path)
        if path.startswith("gpus[]."):
            value = value[0]  # one gpu_samples row per GPU
        for col in _columns(name, path):
            table, column = col.split(".")
            assert by_table[table][column] == _stored(value), f"{_short(name)}.{path} -> {col}"


def test_the_declarations_name_real_fields() -> None:
    paths = {(_short(n), p) for n, sv in SCHEMAS.current.items()
             for p in _leaves(expand_schema(sv.schema))}
    every = {p for _, p in paths}
    for rec, renamed in RENAMED.items():
        for path in renamed:
            assert (rec, path) in paths, f"RENAMED {rec}.{path} is no field"
    for rec, names in NOT_STORED.items():
        for path in names:
            assert (rec, path) in paths or (rec == "*" and path in every), (
                f"NOT_STORED {rec}.{path} is no field")
    assert Path(schemas_dir(), "clickhouse").is_dir()



@pytest.mark.parametrize("table", sorted(COLUMNS))
def test_the_unsigned_checks_are_the_ddls_unsigned_columns(table: str) -> None:
    """check_row (and emit) refuse what an unsigned column cannot hold: the list is the DDL's,
    for every table (the node tables were left out, and a GPU index of 300 went to insert)."""
    types: dict[str, dict[str, str]] = {}
    _ddl_columns(types)
    kinds = types[table]
    want = {c: int(m.group(1)) for c in COLUMNS[table]
            if c not in ("kafka_partition", "kafka_offset")
            and (m := re.search(r"UInt(8|16|32|64)", kinds.get(c, ""))) is not None}
    assert UNSIGNED_BITS.get(table, {}) == want


@pytest.mark.parametrize("table", sorted(COLUMNS))
def test_the_instant_checks_are_the_ddls_datetime_columns(table: str) -> None:
    """check_row (and emit) refuse an instant past a DateTime64 column's range: every one."""
    types: dict[str, dict[str, str]] = {}
    _ddl_columns(types)
    want = tuple(c for c in COLUMNS[table]
                 if c != "ts" and "DateTime64" in types[table].get(c, ""))
    assert INSTANT_COLUMNS.get(table, ()) == want
