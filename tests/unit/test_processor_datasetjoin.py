"""The dataset → run join of the data agent: manifest refs and reports meet in local tables."""

import itertools
import json

import pytest

from runwatch.core.codec import load_codec
from runwatch.core.records import DataQualityReport, DatasetRef, Source
from runwatch.core.stream import rekey
from runwatch.core.stream.rekey import DataAck
from runwatch.processor.datasets import RECENT_MAX
from runwatch.processor.memory import MemoryProcessor
from runwatch.processor.outbox import DATA_BY_RUN, MANIFEST_BY_DATASET
from runwatch.processor.provision import check_copartitioned

SRC = Source(kind="sdk", host="h", runwatch_version="0")
CODEC = load_codec()


class Driven:
    """A real worker's data agent fed through the in-memory driver; what it forwarded."""

    def __init__(self, m: MemoryProcessor) -> None:
        self.dataset_index = m.p.datasets.dataset_index
        self.dataset_reports = m.p.datasets.dataset_reports
        self.sent = [(key.decode(), value) for topic, key, value, _part in m.internal
                     if topic == DATA_BY_RUN and value[:1] != b"{"]  # reports, not the acks
        self.acks = [DataAck.from_json(value) for topic, _k, value, _p in m.internal
                     if topic == DATA_BY_RUN and value[:1] == b"{"]
        self.dead = [d.reason for d in m.dead if d.topic != DATA_BY_RUN]


def event(topic: str, value: bytes, key: bytes = b"k") -> tuple[str, bytes, bytes]:
    return (topic, key, value)


def report(seq: int, version: str | None = "v1", uri: str = "s3://d") -> bytes:
    rec = DataQualityReport(event_id=f"e{seq}", emitted_at_ms=seq, source=SRC, seq=seq,
                            dataset_uri=uri, dataset_version=version, window_start_ms=0,
                            window_end_ms=1, row_count=10, schema_failures=0,
                            duplicate_rows=0, rejected_samples=seq)
    return CODEC.encode(rec)


def ref_event(run: str, version: str | None = "v1", uri: str = "s3://d"):
    ref = rekey.dataset_ref(uri, version)
    return event(MANIFEST_BY_DATASET, rekey.manifest_ref_json(run, uri, ref), uri.encode())


def run_events(events: list[tuple[str, bytes, bytes]]) -> Driven:
    """The messages handed, in order, to a real worker's data agent."""
    m = MemoryProcessor()
    m.feed(events)
    return Driven(m)


REPORTS = [report(i) for i in range(3)]


@pytest.mark.parametrize("position", range(len(REPORTS) + 1))
def test_a_run_gets_every_report_whatever_the_order(position: int) -> None:
    evs = [event("rw.data", r) for r in REPORTS]
    evs.insert(position, ref_event("R"))
    p = run_events(evs)
    got = [v for run, v in p.sent if run == "R"]
    assert set(got) == set(REPORTS)
    assert len(got) == len(REPORTS)  # forwarded once each: stored ones on the ref, then live
    assert p.dead == []


@pytest.mark.parametrize(("version", "runs"), [("v1", {"A", "C"}), ("v2", {"B", "C"}),
                                               (None, {"A", "B", "C"})])
def test_reports_reach_runs_of_their_version(version, runs) -> None:
    """C declared the dataset unversioned: it gets the reports of every version."""
    evs = [ref_event("A", "v1"), ref_event("B", "v2"), ref_event("C", None),
           ref_event("X", "v1", uri="s3://other"), event("rw.data", report(7, version))]
    p = run_events(evs)
    assert {run for run, _ in p.sent} == runs


@pytest.mark.parametrize(("declared", "got"), [(None, [0, 1, 2]), ("v1", [0, 2]), ("v2", [1])])
def test_a_late_run_gets_the_stored_reports_it_declared(declared, got) -> None:
    reports = [report(0, "v1"), report(1, "v2"), report(2, "v1")]
    p = run_events([event("rw.data", r) for r in reports] + [ref_event("late", declared)])
    assert [v for _, v in p.sent] == [reports[i] for i in got]


def test_first_and_recent_reports_are_kept() -> None:
    n = RECENT_MAX + 5
    reports = [report(i) for i in range(n)]
    p = run_events([event("rw.data", r) for r in reports] + [ref_event("late")])
    got = [v for _, v in p.sent]
    assert got == [reports[0], *reports[-RECENT_MAX:]]
    stored = json.loads(p.dataset_reports[b"s3://d@v1"])  # JSON, never pickle
    assert set(stored) == {"first", "recent"}


@pytest.mark.parametrize(("stored", "declared", "answered"), [
    ([], "v1", 0), ([0], "v1", 1), ([0, 1, 2], "v1", 2), ([0, 1, 2], None, 3)])
def test_every_subscription_is_answered_after_its_reports(stored, declared, answered) -> None:
    reports = [report(0, "v1"), report(1, "v2"), report(2, "v1")]
    m = MemoryProcessor()
    m.feed([event("rw.data", reports[i]) for i in stored] + [ref_event("R", declared)])
    to_r = [v for topic, key, v, _p in m.internal if topic == DATA_BY_RUN and key == b"R"]
    assert DataAck.from_json(to_r[-1]) == DataAck("R", "s3://d", rekey.dataset_ref(
        "s3://d", declared), answered)  # last: after the reports it counts
    assert len(to_r) == answered + 1
    assert [d.reason for d in m.dead if d.topic != DATA_BY_RUN] == []


def test_a_removal_is_not_answered() -> None:
    p = run_events([ref_event("R"), event(MANIFEST_BY_DATASET, rekey.manifest_ref_json(
        "R", "s3://d", "s3://d@v1", "remove"), b"s3://d")])
    assert p.acks == [DataAck("R", "s3://d", "s3://d@v1", 0)]


@pytest.mark.parametrize("raw", [b"{nope", b'{"v":1,"ack":"other","run":"R","uri":"u","ref":"u"}',
                                 b'{"v":1,"ack":"subscribed","run":"R","uri":"u"}',
                                 b'{"v":1,"ack":"subscribed","run":"R","uri":"u","ref":"u",'
                                 b'"reports":-1}'])
def test_bad_acks_are_dead_lettered(raw: bytes) -> None:
    m = MemoryProcessor()
    m.feed([(DATA_BY_RUN, b"R", raw)])
    assert len(m.dead) == 1 and m.dead[0].reason.startswith("data ack")
    assert m.alerts == []


def test_an_answer_to_a_run_without_state_is_counted_not_folded() -> None:
    m = MemoryProcessor()
    m.feed([(DATA_BY_RUN, b"gone", DataAck("gone", "s3://d", "s3://d@v1", 0).to_json()),
            (DATA_BY_RUN, b"", DataAck("x", "s3://d", "s3://d@v1", 0).to_json())])
    assert m.p.out.counters["data_acks_without_state"] == 1
    assert b"gone" not in m.p.runs.runstate and b"gone" not in m.p.runs.dirty
    assert [d.reason for d in m.dead] == ["run-keyed record without run_id"]  # the keyless one


def test_index_is_keyed_by_uri_and_idempotent() -> None:
    p = run_events([ref_event("R", "v1"), ref_event("R", "v1"), ref_event("S", "v2")])
    assert json.loads(p.dataset_index[b"s3://d"]) == {"s3://d@v1": ["R"], "s3://d@v2": ["S"]}


@pytest.mark.parametrize("raw", [b"nope", b"[]", b'{"v":2,"run":"r","uri":"u","ref":"u"}',
                                 b'{"v":1,"run":"","uri":"u","ref":"u"}',
                                 b'{"v":1,"run":"r","ref":"u"}',
                                 b'{"v":1,"run":"r","uri":"u","ref":"u","op":"drop"}'])
def test_bad_manifest_refs_are_dead_lettered(raw: bytes) -> None:
    p = run_events([event(MANIFEST_BY_DATASET, raw)])
    assert len(p.dead) == 1 and p.dead[0].startswith("manifest ref")
    assert p.dataset_index == {}


@pytest.mark.parametrize(("refs", "expected"), [
    ([("s3://a", "v1"), ("s3://a", "v1"), ("s3://b", None)],
     [("s3://a", "s3://a@v1"), ("s3://b", "s3://b")]),
    ([("s3://a", "v2"), ("s3://a", "v1")], [("s3://a", "s3://a@v1"), ("s3://a", "s3://a@v2")]),
    ([], []),
])
def test_manifest_keys(refs, expected) -> None:
    assert rekey.manifest_keys([DatasetRef(uri=u, version=v) for u, v in refs]) == expected


@pytest.mark.parametrize(("run", "uri", "ref"), list(itertools.product(
    ["r1", "ü"], ["s3://a"], ["s3://a", "s3://a@v"])))
def test_manifest_ref_round_trip(run: str, uri: str, ref: str) -> None:
    added = rekey.parse_manifest_ref(rekey.manifest_ref_json(run, uri, ref))
    assert added == (run, uri, ref, "add")
    assert rekey.parse_manifest_ref(rekey.manifest_ref_json(run, uri, ref, "remove")) == (
        run, uri, ref, "remove")


@pytest.mark.parametrize(("counts", "ok"), [
    ({"rw.data": 8, "m": 8}, True),
    ({"rw.data": 8}, True),  # not created yet: nothing to compare
    ({"rw.data": 4, "m": 8}, False),
    ({"rw.data": 8, "m": 3}, False),
])
def test_copartitioning_is_checked(counts, ok: bool) -> None:
    if ok:
        check_copartitioned(counts, ["rw.data", "m"], 8)
    else:
        with pytest.raises(ValueError, match="co-partitioned"):
            check_copartitioned(counts, ["rw.data", "m"], 8)
