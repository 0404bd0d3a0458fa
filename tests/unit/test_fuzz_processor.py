"""Fuzz: bad bytes on every topic the processor reads, through the in-memory worker.

A hostile producer (:mod:`runwatch.testing.hostile`) writes seeded bad values
on every telemetry and internal topic, interleaved with a good run published
through the SDK whose NaN loss must raise ``rule:non_finite``. Every bad value
is either folded or dead-lettered with a reason, the worker never raises, and
the good run still alerts: nothing accepted is lost.
"""

from __future__ import annotations

import random
import time

import pytest

from runwatch.core.codec import DecodeError, load_codec
from runwatch.processor.memory import MemoryProcessor
from runwatch.processor.settings import ProcessorSettings
from runwatch.testing.hostile import INTERNAL_TOPICS, KINDS, TELEMETRY_TOPICS, bad_values
from runwatch.testing.hostile import good_messages as published

RUN = "run-fuzz-nan"
ROUNDS = 24
PER_ROUND = 2 * len(KINDS) * len(TELEMETRY_TOPICS + INTERNAL_TOPICS) // ROUNDS + 1


@pytest.fixture(scope="module")
def goods(tmp_path_factory: pytest.TempPathFactory) -> list:
    t0 = int(time.time() * 1000) - 600_000
    return published(RUN, t0, tmp_path_factory.mktemp("baselines"))


def carries(dead, topic: str, value: bytes) -> bool:
    """Whether a dead letter is from ``topic`` and holds ``value`` (or a line of it)."""
    return dead.topic == topic and (dead.original == value or bool(dead.original)
                                    and dead.original in value)


def worker() -> MemoryProcessor:
    return MemoryProcessor(ProcessorSettings(save_interval_s=0))


def fired(m: MemoryProcessor, run_id: str = RUN) -> set[str]:
    m.tick(int(time.time() * 1000) + 60_000)
    return {a.detector for a in m.alerts if a.run_id == run_id and a.status == "firing"}


def test_the_good_run_alone_pages_non_finite(goods) -> None:
    m = worker()
    m.feed(goods)
    assert fired(m) == {"rule:non_finite"}
    assert m.dead == []


@pytest.mark.parametrize("seed", range(ROUNDS))
def test_bad_values_on_every_topic_are_dead_lettered_and_lose_nothing(goods, seed: int) -> None:
    rng = random.Random(seed)
    codec = load_codec()
    bad = bad_values(random.Random(seed), goods, PER_ROUND)
    feed = list(goods)
    for _kind, topic, key, value in bad:
        feed.insert(rng.randrange(len(feed) + 1), (topic, key, value))
    m = worker()
    m.feed(feed)  # never raises
    assert "rule:non_finite" in fired(m), "the good run's alert was lost"
    assert all(d.reason for d in m.dead), "a dead letter without a reason"
    for kind, topic, _key, value in bad:
        try:
            codec.decode(value)
            undecodable = topic in INTERNAL_TOPICS and topic != "rw.internal.data-by-run"
        except DecodeError:
            undecodable = True
        if undecodable:  # must be dead-lettered, from its topic, with (a part of) its bytes
            assert any(carries(d, topic, value) for d in m.dead), (
                f"{kind} on {topic} was dropped silently: {value[:40]!r}")


@pytest.mark.parametrize("at_ms", [2**62, 1_800_000_000_000_000, 1_800_000_000_000_000_000, -1,
                                   0, 1_800_000_000])
@pytest.mark.parametrize("record", ["LearningStep", "StepTiming", "JobEvent", "RunManifest"])
def test_an_absurd_timestamp_is_refused_and_does_not_poison_its_run(goods, record: str,
                                                                    at_ms: int) -> None:
    """One record of the run stamped in a wrong unit (s, µs, ns) or with garbage.

    Before the fix it was folded: the run's watermark jumped, every genuine record
    after it was dead-lettered as late and the NaN loss never paged (a far-future
    JobEvent made rule:stalled fire instead).
    """
    codec = load_codec()
    feed = list(goods)
    for i, (topic, key, value) in enumerate(goods):
        name, d = codec.decode_dict(value)
        if name.endswith("." + record):
            d["emitted_at_ms"], d["event_id"] = at_ms, d["event_id"] + "-absurd"
            feed.insert(i, (topic, key, codec.encode_dict(name, d)))
            break
    m = worker()
    m.feed(feed)
    assert fired(m) == {"rule:non_finite"}
    (dead,) = m.dead
    assert dead.reason.startswith(f"absurd timestamp: emitted_at_ms {at_ms} ")


def test_an_absurd_node_sample_does_not_spoil_the_runs_aggregate(goods) -> None:
    codec = load_codec()
    node = [(t, k, v) for t, k, v in goods if t == "rw.exec.node"][0]
    name, d = codec.decode_dict(node[2])
    d["emitted_at_ms"] = 2**62
    m = worker()
    m.feed([*goods, ("rw.exec.node", node[1], codec.encode_dict(name, d))])
    assert [x.reason.split(":")[0] for x in m.dead] == ["absurd timestamp"]
    assert m.dead[0].topic == "rw.exec.node"


@pytest.mark.parametrize(("topic_of", "key", "value", "reason"), [
    ("tick", b"tick", b"garbage", "tick value is not an integer (epoch ms)"),
    ("tick", b"tick", str(2**62).encode(), "absurd timestamp: emitted_at_ms"),
    ("data-by-run", b"\xff\xfe", None, "message key is not a UTF-8 run id"),
])
def test_internal_topics_refuse_what_would_crash_the_runs_agent(goods, topic_of: str,
                                                                key: bytes, value, reason) -> None:
    """A garbage tick (ValueError) or a non-UTF-8 run key (UnicodeDecodeError) crashed the agent;
    a far-future tick would have judged every run's stall rule at that time."""
    m = worker()
    m.feed(goods)
    if topic_of == "tick":
        topic = m.p.tick_topic
    else:
        topic = "rw.internal.data-by-run"
        value = [v for t, _k, v in goods if t == "rw.data"][0]
    before = len(m.alerts)
    m.feed([(topic, key, value)])
    assert [d.reason[:len(reason)] for d in m.dead] == [reason]
    assert len(m.alerts) == before
    assert fired(m) == {"rule:non_finite"}
