"""Contract: schemas/topics.yaml agrees with the Avro schemas."""

from __future__ import annotations

import pytest

from runwatch.core.codec import load_schema_set
from runwatch.core.topics import TopicMapError, load_topics, parse_topics

TOPICS = load_topics()
SCHEMAS = load_schema_set()
REQUIRED = {"rw.lineage", "rw.data", "rw.exec.job", "rw.exec.node", "rw.learning",
            "rw.artifact", "rw.alerts", "rw.dlq", "rw.internal.node-by-run",
            "rw.internal.data-by-run"}


def test_every_topic_present() -> None:
    assert REQUIRED <= set(TOPICS)


@pytest.mark.parametrize("topic", sorted(TOPICS))
def test_records_exist_and_carry_the_key(topic: str) -> None:
    spec = TOPICS[topic]
    assert spec.records or spec.format, f"{topic}: Avro records or a JSON format"
    # both only on an internal topic: its JSON values start with '{', Avro with 0xC3 0x01
    assert not (spec.records and spec.format) or spec.internal, f"{topic}: both, not internal"
    for rec in spec.records:
        assert rec in SCHEMAS.current, f"{topic}: unknown record {rec}"
        if spec.key is not None:
            names = [f["name"] for f in SCHEMAS.current[rec].schema["fields"]]
            assert spec.key in names, f"{topic}: key {spec.key} missing from {rec}"


def test_every_record_has_a_topic() -> None:
    carried = {r for t in TOPICS.values() for r in t.records}
    assert carried == set(SCHEMAS.current)


def test_run_keyed_topics_share_partitions() -> None:
    counts = {t.partitions for t in TOPICS.values() if t.key == "run_id"}
    assert len(counts) == 1


@pytest.mark.parametrize(
    ("topic", "key", "cleanup"),
    [("rw.lineage", "run_id", "compact"), ("rw.exec.node", "node", "delete"),
     ("rw.data", "dataset_uri", "delete"), ("rw.alerts", "dedup_key", "delete"),
     ("rw.dlq", None, "delete")],
)
def test_design_table(topic: str, key: str | None, cleanup: str) -> None:
    assert TOPICS[topic].key == key
    assert TOPICS[topic].cleanup == cleanup
    assert TOPICS[topic].topic_config()["cleanup.policy"] == cleanup


@pytest.mark.parametrize(
    ("doc", "match"),
    [
        ({}, "topics"),
        ({"topics": {"t": {"records": ["x"], "partitions": 1}}}, "bad entry"),
        ({"topics": {"t": {"key": None, "records": [], "partitions": "run"}}}, "partitions"),
        ({"run_partitions": 2, "topics": {"t": {"key": None, "records": [], "partitions": 1,
                                                "cleanup": "nope"}}}, "cleanup"),
    ],
)
def test_bad_maps_rejected(doc, match: str) -> None:
    with pytest.raises(TopicMapError, match=match):
        parse_topics(doc)


def test_missing_file(tmp_path) -> None:
    with pytest.raises(TopicMapError, match="cannot read"):
        load_topics(tmp_path / "nope.yaml")


@pytest.mark.parametrize(
    ("record", "topic"),
    [
        ("RunManifest", "rw.lineage"),
        ("DataQualityReport", "rw.data"),
        ("JobEvent", "rw.exec.job"),
        ("StepTiming", "rw.exec.job"),
        ("CheckpointEvent", "rw.exec.job"),
        ("NodeSample", "rw.exec.node"),
        ("LearningStep", "rw.learning"),
        ("ValidationResult", "rw.learning"),
        ("ArtifactEvent", "rw.artifact"),
        ("GateDecision", "rw.artifact"),
        ("Alert", "rw.alerts"),
        ("DeadLetter", "rw.dlq"),
    ],
)
def test_record_topics_follow_the_design_table(record: str, topic: str) -> None:
    from runwatch.core.topics import load_topics, record_topics

    assert record_topics(load_topics())[record] == topic
