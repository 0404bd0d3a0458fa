"""The processor's internal JSON (topics and tables) against schemas/internal/*.json.

What a worker actually writes, driven in memory by the simulator's published
messages (faults and controls on nodes, datasets, learning and artifacts),
must conform to the documented formats; the code's parsers must accept the
documents' examples; the run state's format must list exactly its fields.
"""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest

from runwatch.client.publisher import CaptureTransport
from runwatch.core.formats import check_formats, conforms, load_formats
from runwatch.core.stream import rekey, runstate
from runwatch.core.stream.join_node import AllocChange, NodeAgg
from runwatch.core.topics import load_tables, load_topics
from runwatch.processor.memory import MemoryProcessor
from runwatch.sim import scenarios as sc
from runwatch.sim.replay import replay_worker
from runwatch.sim.runner import SimConfig, run_simulation

FORMATS = load_formats()
TOPICS = load_topics()
TABLES = load_tables()


@pytest.fixture(scope="module")
def worker() -> MemoryProcessor:
    transport = CaptureTransport()
    cfg = SimConfig(nodes=3, runs=2, seed=4, speed=100.0, duration_s=650.0, tick_s=0.02,
                    scenarios=tuple(sc.get(n) for n in ("gpu_occupancy", "label_shift",
                                                        "nan_loss")),
                    collect_alerts=False)
    run_simulation(cfg, transport=transport)
    return replay_worker(transport.messages)


def _values(worker: MemoryProcessor, topic: str) -> list[bytes]:
    return [v for t, _k, v, _p in worker.internal if t == topic]


def _format_of_topic(topic: str) -> dict:
    name = TOPICS[topic].format
    assert name is not None, topic
    return FORMATS[name]


def test_the_map_and_the_formats_check() -> None:
    assert check_formats(FORMATS, TOPICS, TABLES) == []
    assert {t.format for t in TOPICS.values() if t.format} == {
        "NodeAggLine.v1", "AllocChange.v1", "ManifestRef.v1", "DataAck.v1"}
    assert set(TABLES) == {"runstate", "baselines", "node-runs", "dataset-index",
                           "dataset-reports"}


@pytest.mark.parametrize("topic", ["rw.internal.node-by-run", "rw.internal.job-by-node",
                                   "rw.internal.manifest-by-dataset", "rw.internal.data-by-run"])
def test_what_the_worker_sends_on_internal_topics_conforms(worker, topic) -> None:
    fmt = _format_of_topic(topic)
    lines = [line for v in _values(worker, topic) if v[:1] == b"{"  # data-by-run: Avro too
             for line in v.split(b"\n") if line.strip()]
    assert len(lines) > 3, topic
    for line in lines:
        assert conforms(json.loads(line), fmt) == [], line[:200]


@pytest.mark.parametrize(("table", "part", "attr"), [
    ("runstate", "runs", "runstate"), ("baselines", "runs", "baselines"),
    ("node-runs", "nodes", "node_runs"), ("dataset-index", "datasets", "dataset_index"),
    ("dataset-reports", "datasets", "dataset_reports"),
])
def test_what_the_worker_keeps_in_its_tables_conforms(worker, table, part, attr) -> None:
    values = list(getattr(getattr(worker.p, part), attr).values())
    assert values, f"the simulated cluster left nothing in {table}"
    fmt = FORMATS[TABLES[table].format]
    for raw in values:
        assert conforms(json.loads(raw), fmt) == [], raw[:200]


@pytest.mark.parametrize(("name", "parse"), [
    ("NodeAggLine.v1", lambda b: NodeAgg.from_json(b)),
    ("AllocChange.v1", lambda b: AllocChange.from_json(b)),
    ("ManifestRef.v1", lambda b: rekey.parse_manifest_ref(b)),
    ("DataAck.v1", lambda b: rekey.DataAck.from_json(b)),
    ("RunState.v1", lambda b: runstate.loads(b)),
])
def test_the_code_parses_the_documented_examples(name, parse) -> None:
    for ex in FORMATS[name]["examples"]:
        parse(json.dumps(ex).encode())


def test_the_run_state_format_lists_exactly_its_fields() -> None:
    fields = {f.name for f in dataclasses.fields(runstate.RunState)}
    fmt = FORMATS["RunState.v1"]
    assert set(fmt["properties"]) == fields
    assert fmt["additionalProperties"] is False


def test_a_format_the_code_does_not_follow_is_caught(worker) -> None:
    fmt = copy.deepcopy(_format_of_topic("rw.internal.job-by-node"))
    fmt["required"].append("priority")  # a field the code does not write
    raw = _values(worker, "rw.internal.job-by-node")[0]
    assert conforms(json.loads(raw), fmt) == ["$: missing 'priority'"]


@pytest.mark.parametrize(("edit", "problem"), [
    (lambda f, t: f.pop("AllocChange.v1"), "topic rw.internal.job-by-node: format AllocChange.v1"),
    (lambda f, t: f["NodeRuns.v1"].update(patternProperties={}), "unsupported keyword"),
    (lambda f, t: f["ManifestRef.v1"].update({"x-version": 2}), "x-version 2 is not 1"),
    (lambda f, t: f["ManifestRef.v1"]["examples"].append({"v": 1}), "example 2: $: missing"),
    (lambda f, t: t.update({"rw.internal.job-by-node": dataclasses.replace(
        t["rw.internal.job-by-node"], format=None)}), "neither records nor format"),
])
def test_check_formats_names_each_problem(edit, problem) -> None:
    formats, topics = copy.deepcopy(FORMATS), dict(TOPICS)
    edit(formats, topics)
    found = check_formats(formats, topics, TABLES)
    assert any(problem in p for p in found), found
