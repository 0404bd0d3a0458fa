"""Topic provisioning from schemas/topics.yaml on the real broker."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka.admin import AdminClient

from runwatch.adapters.topics import ensure_topics, topic_states
from runwatch.core.topics import load_topics

pytestmark = pytest.mark.integration


def test_ensure_creates_every_topic_once(stack) -> None:
    conf = stack.kafka_config()
    prefix = f"t{uuid.uuid4().hex[:8]}."
    specs = load_topics()
    try:
        created = ensure_topics(conf, prefix=prefix)
        assert sorted(created) == sorted(prefix + name for name in specs)
        assert ensure_topics(conf, prefix=prefix) == []
        # a broker's metadata lists a topic a moment after its creation returned (under a
        # loaded CI machine, one of twenty read as absent once): wait for it, bounded
        deadline = time.monotonic() + 30
        while True:
            states = {s.name: s for s in topic_states(conf, prefix=prefix)}
            if all(s.partitions is not None for s in states.values()):
                break
            assert time.monotonic() < deadline, [n for n, s in states.items()
                                                  if s.partitions is None]
            time.sleep(0.5)
        for name, spec in specs.items():
            assert states[prefix + name].partitions == spec.partitions
        compacted = [n for n, s in specs.items() if s.cleanup == "compact"]
        assert compacted, "the map has no compacted topic"
    finally:
        admin = AdminClient(conf)
        for fut in admin.delete_topics([prefix + n for n in specs]).values():
            fut.result(timeout=30)


def test_missing_topics_are_reported(stack) -> None:
    prefix = f"absent{uuid.uuid4().hex[:8]}."
    states = topic_states(stack.kafka_config(), prefix=prefix)
    assert states and all(s.partitions is None for s in states)
