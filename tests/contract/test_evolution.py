"""Contract: schema evolution (FULL_TRANSITIVE) and the ``runwatch schemas check`` gate."""

from __future__ import annotations

import copy
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from fastavro import schemaless_reader, schemaless_writer

from runwatch.cli import main
from runwatch.core.codec import MAGIC, Codec, DecodeError, default_schema_dir, load_schema_set
from runwatch.core.codec.compat import check_pair, check_schema_set, sample_datum
from runwatch.core.records import LearningStep, Source, StepTiming

SCHEMAS = load_schema_set()
CODEC = Codec(SCHEMAS)
SRC = Source(kind="sdk", host="h", runwatch_version="0.0.9")
# (record, field added since v1, its default, a current record that sets it)
EVOLVED = [
    ("runwatch.v1.LearningStep", "nonfinite_count", 0,
     LearningStep(event_id="e", run_id="r", emitted_at_ms=5, source=SRC, seq=1, step=10,
                  loss=2.5, nonfinite_count=3, metrics={"acc": 0.5})),
    ("runwatch.v1.StepTiming", "tokens", None,
     StepTiming(event_id="e", run_id="r", emitted_at_ms=5, source=SRC, seq=1, step=10,
                loader_wait_ms=1.0, compute_ms=2.0, step_ms=3.5, samples=64, tokens=4096)),
]


def old_version(name: str):
    history = SCHEMAS.history[name]
    assert history, f"{name} must keep a v1 in schemas/avro/history/"
    return history[0]


@pytest.mark.parametrize(("name", "field", "default", "record"), EVOLVED)
def test_old_writer_new_reader(name: str, field: str, default: Any, record: Any) -> None:
    old = old_version(name)
    assert field not in {f["name"] for f in old.schema["fields"]}
    datum = {k: v for k, v in record.to_dict().items() if k != field}
    body = io.BytesIO()
    schemaless_writer(body, old.parsed, datum)
    decoded = CODEC.decode(MAGIC + old.fingerprint + body.getvalue())
    assert type(decoded) is type(record)
    assert getattr(decoded, field) == default
    assert decoded.step == record.step and decoded.run_id == record.run_id


@pytest.mark.parametrize(("name", "field", "default", "record"), EVOLVED)
def test_new_writer_old_reader(name: str, field: str, default: Any, record: Any) -> None:
    old = old_version(name)
    data = CODEC.encode(record)
    body = io.BytesIO(data[10:])
    as_old = schemaless_reader(body, SCHEMAS.current[name].parsed, old.parsed)
    assert field not in as_old
    expected = {k: v for k, v in record.to_dict().items() if k != field}
    assert as_old == expected


def test_consumer_without_new_schema_rejects_cleanly(tmp_path: Path) -> None:
    # An old consumer (only v1 known as current) must fail with a reason, not crash:
    # roll schemas out to consumers before producers.
    (tmp_path / "LearningStep.avsc").write_text(
        json.dumps(old_version("runwatch.v1.LearningStep").schema)
    )
    old_codec = Codec(load_schema_set(tmp_path))
    with pytest.raises(DecodeError, match="unknown schema fingerprint"):
        old_codec.decode(CODEC.encode(EVOLVED[0][3]))


def test_current_set_is_full_transitive() -> None:
    assert check_schema_set(SCHEMAS) == []


def mutate(schema: dict[str, Any], how: str) -> dict[str, Any]:
    s = copy.deepcopy(schema)
    fields = s["fields"]
    if how == "remove":
        s["fields"] = [f for f in fields if f["name"] != "grad_norm"]
    elif how == "add_no_default":
        fields.append({"name": "new_thing_ms", "type": "long", "doc": "x"})
    elif how == "retype":
        next(f for f in fields if f["name"] == "step")["type"] = "string"
    elif how == "drop_default":
        del next(f for f in fields if f["name"] == "nonfinite_count")["default"]
    elif how == "add_with_default":
        fields.append({"name": "new_thing_ms", "type": "long", "doc": "x", "default": 0})
    elif how == "promote":
        next(f for f in fields if f["name"] == "epoch")["type"] = "double"
    return s


@pytest.mark.parametrize(
    ("how", "field"),
    [("remove", "grad_norm"), ("add_no_default", "new_thing_ms"), ("retype", "step"),
     ("drop_default", "nonfinite_count"), ("promote", "epoch"), ("add_with_default", None)],
)
def test_check_names_the_offending_field(tmp_path: Path, capsys, how: str, field: str | None):
    # Make a copy of the schema dir whose current LearningStep is mutated.
    src = default_schema_dir()
    dst = tmp_path / "avro"
    shutil.copytree(src, dst)
    current = json.loads((src / "LearningStep.avsc").read_text())
    shutil.copy(src / "LearningStep.avsc", dst / "history" / "LearningStep.v2.avsc")
    (dst / "LearningStep.avsc").write_text(json.dumps(mutate(current, how)))
    rc = main(["schemas", "check", "--schema-dir", str(dst)])
    err = capsys.readouterr().err
    if field is None:
        assert rc == 0, err
    else:
        assert rc == 1
        assert f"field '{field}'" in err
        assert "LearningStep" in err


def test_enum_symbol_removal_is_caught() -> None:
    cur = SCHEMAS.current["runwatch.v1.JobEvent"]
    bad = copy.deepcopy(cur.schema)
    state = next(f for f in bad["fields"] if f["name"] == "state")
    state["type"]["symbols"] = state["type"]["symbols"][:-1]
    from dataclasses import replace

    newer = replace(cur, schema=bad, version=cur.version + 1)
    problems = check_pair(cur, newer)
    assert any(p.field == "state" and "enum" in p.message for p in problems)


@pytest.mark.parametrize("variant", ["min", "max"])
@pytest.mark.parametrize("name", sorted(SCHEMAS.current))
def test_samples_fit_their_schema(name: str, variant) -> None:
    from fastavro.schema import expand_schema

    sv = SCHEMAS.current[name]
    datum = sample_datum(expand_schema(sv.schema), variant)
    buf = io.BytesIO()
    schemaless_writer(buf, sv.parsed, datum)
    assert CODEC.decode_dict(MAGIC + sv.fingerprint + buf.getvalue())[0] == name


def test_check_reports_load_errors(tmp_path: Path, capsys) -> None:
    (tmp_path / "Broken.avsc").write_text("{not json")
    assert main(["schemas", "check", "--schema-dir", str(tmp_path)]) == 2
    assert "cannot load schema" in capsys.readouterr().err


def _with_field(name: str, version: int, field: dict):
    from dataclasses import replace

    cur = SCHEMAS.current[name]
    schema = copy.deepcopy(cur.schema)
    schema["fields"].append(field)
    return replace(cur, schema=schema, version=version)


@pytest.mark.parametrize(("old_type", "new_type", "field", "says"), [
    # a middle union branch retyped: the min and max samples (null, long) both resolved
    (["null", "string", "long"], ["null", "boolean", "long"], "tag", "string"),
    # a middle branch's record retypes a field deep inside an array
    (["null", {"type": "array", "items": {"type": "record", "name": "Part", "fields": [
        {"name": "w", "type": "int"}]}}, "string"],
     ["null", {"type": "array", "items": {"type": "record", "name": "Part", "fields": [
         {"name": "w", "type": "string"}]}}, "string"], "tag.w", "int"),
])
def test_every_union_branch_is_checked(old_type, new_type, field: str, says: str) -> None:
    cur = SCHEMAS.current["runwatch.v1.LearningStep"]
    old = _with_field(cur.name, cur.version, {"name": "tag", "type": old_type, "default": None})
    new = _with_field(cur.name, cur.version + 1,
                      {"name": "tag", "type": new_type, "default": None})
    problems = check_pair(old, new) + check_pair(new, old)
    assert any(p.field == field and says in p.message for p in problems), problems
    assert check_pair(old, old) == []


def test_union_branch_added_is_compatible_one_way_only() -> None:
    cur = SCHEMAS.current["runwatch.v1.LearningStep"]
    old = _with_field(cur.name, cur.version, {"name": "tag", "type": ["null", "long"],
                                              "default": None})
    new = _with_field(cur.name, cur.version + 1,
                      {"name": "tag", "type": ["null", "string", "long"], "default": None})
    assert check_pair(old, new) == []  # old data reads with the new union
    problems = check_pair(new, old)  # a new writer's string has no branch for an old reader
    assert [(p.field, "string" in p.message) for p in problems] == [("tag", True)], problems
