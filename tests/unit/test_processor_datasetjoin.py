"""The dataset → run join of the data agent: manifest refs and reports meet in local tables."""

import asyncio
import itertools
import json
from types import SimpleNamespace

import pytest

from runwatch.core import rekey
from runwatch.core.codec import load_codec
from runwatch.core.records import DataQualityReport, DatasetRef, Source
from runwatch.processor import forward
from runwatch.processor.provision import check_copartitioned

SRC = Source(kind="sdk", host="h", runwatch_version="0")
CODEC = load_codec()


class FakeProcessor:
    """What :mod:`runwatch.processor.forward` uses of the processor, with dict tables."""

    def __init__(self) -> None:
        self.dataset_index: dict[bytes, bytes] = {}
        self.dataset_reports: dict[bytes, bytes] = {}
        self.data_by_run = "data-by-run"
        self.sent: list[tuple[str, bytes]] = []
        self.dead: list[str] = []

    def _deployed(self, topic: str) -> str:
        return topic.removeprefix("p.")

    def _decode(self, topic: str, value: bytes) -> object:
        return CODEC.decode(value)

    async def _dead(self, topic, partition, offset, reason, value, key, run_id=None) -> None:
        self.dead.append(reason)

    async def _forward(self, topic: str, run_id: str, value: bytes) -> None:
        assert topic == self.data_by_run
        self.sent.append((run_id, value))


def event(topic: str, value: bytes, key: bytes = b"k") -> SimpleNamespace:
    return SimpleNamespace(value=value, key=key, message=SimpleNamespace(
        topic=topic, partition=0, offset=0))


def report(seq: int, version: str | None = "v1", uri: str = "s3://d") -> bytes:
    rec = DataQualityReport(event_id=f"e{seq}", emitted_at_ms=seq, source=SRC, seq=seq,
                            dataset_uri=uri, dataset_version=version, window_start_ms=0,
                            window_end_ms=1, row_count=10, schema_failures=0,
                            duplicate_rows=0, rejected_samples=seq)
    return CODEC.encode(rec)


def ref_event(run: str, version: str | None = "v1", uri: str = "s3://d") -> SimpleNamespace:
    ref = rekey.dataset_ref(uri, version)
    return event("p." + forward.MANIFEST_BY_DATASET, rekey.manifest_ref_json(run, uri, ref),
                 uri.encode())


def run_events(events: list[SimpleNamespace]) -> FakeProcessor:
    p = FakeProcessor()

    async def go() -> None:
        for ev in events:
            await forward.dataset_event(p, ev)  # type: ignore[arg-type]

    asyncio.run(go())
    return p


REPORTS = [report(i) for i in range(3)]


@pytest.mark.parametrize("position", range(len(REPORTS) + 1))
def test_a_run_gets_every_report_whatever_the_order(position: int) -> None:
    evs = [event("p.rw.data", r) for r in REPORTS]
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
           ref_event("X", "v1", uri="s3://other"), event("p.rw.data", report(7, version))]
    p = run_events(evs)
    assert {run for run, _ in p.sent} == runs


@pytest.mark.parametrize(("declared", "got"), [(None, [0, 1, 2]), ("v1", [0, 2]), ("v2", [1])])
def test_a_late_run_gets_the_stored_reports_it_declared(declared, got) -> None:
    reports = [report(0, "v1"), report(1, "v2"), report(2, "v1")]
    p = run_events([event("p.rw.data", r) for r in reports] + [ref_event("late", declared)])
    assert [v for _, v in p.sent] == [reports[i] for i in got]


def test_first_and_recent_reports_are_kept() -> None:
    n = forward.RECENT_MAX + 5
    reports = [report(i) for i in range(n)]
    p = run_events([event("p.rw.data", r) for r in reports] + [ref_event("late")])
    got = [v for _, v in p.sent]
    assert got == [reports[0], *reports[-forward.RECENT_MAX:]]
    stored = json.loads(p.dataset_reports[b"s3://d@v1"])  # JSON, never pickle
    assert set(stored) == {"first", "recent"}


def test_index_is_keyed_by_uri_and_idempotent() -> None:
    p = run_events([ref_event("R", "v1"), ref_event("R", "v1"), ref_event("S", "v2")])
    assert json.loads(p.dataset_index[b"s3://d"]) == {"s3://d@v1": ["R"], "s3://d@v2": ["S"]}


@pytest.mark.parametrize("raw", [b"nope", b"[]", b'{"v":2,"run":"r","uri":"u","ref":"u"}',
                                 b'{"v":1,"run":"","uri":"u","ref":"u"}',
                                 b'{"v":1,"run":"r","ref":"u"}'])
def test_bad_manifest_refs_are_dead_lettered(raw: bytes) -> None:
    p = run_events([event("p." + forward.MANIFEST_BY_DATASET, raw)])
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
    assert rekey.parse_manifest_ref(rekey.manifest_ref_json(run, uri, ref)) == (run, uri, ref)


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
