"""Fixtures shared by the integration tests (the stack fixtures live in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sinkkit import Store, delete_topics, free_port, make_topics

from runwatch.stack.manager import Stack
from runwatch.stack.settings import StackSettings
from runwatch.testing.harness import Harness


@pytest.fixture
def harness(stack) -> Iterator[Harness]:
    """A processor harness: topics under a fresh prefix, removed with its workers afterwards."""
    h = Harness(stack.bootstrap_servers, partitions=4)
    h.create_topics()
    try:
        yield h
    finally:
        h.stop_all()
        h.delete_topics()


@pytest.fixture
def own_store(tmp_path: Path) -> Iterator[Store]:
    """A `runwatch store` process of the test's own (it may stop and restart it)."""
    store = Store(tmp_path / "chdb")
    store.start()
    yield store
    store.stop()


@pytest.fixture
def sink_topics(stack) -> Iterator[dict[str, str]]:
    """The sink's topics from schemas/topics.yaml, created under a fresh prefix."""
    topics = make_topics(stack.bootstrap_servers)
    yield topics
    delete_topics(stack.bootstrap_servers, list(topics.values()))


@pytest.fixture(scope="module")
def private_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A broker of our own (ephemeral ports, temp state) that we may stop and restart.

    The shared stack serves other test sessions at the same time; restarting
    its broker would pull the rug from under them.
    """
    settings = StackSettings(state_dir=tmp_path_factory.mktemp("kafka-restart"),
                             kafka_port=free_port(), controller_port=free_port())
    stack = Stack(settings)
    result = stack.up(services=["kafka"])
    if not result.ok:
        stack.down()
        pytest.fail(f"private broker did not start: {result.failed['kafka']}", pytrace=False)
    try:
        yield stack
    finally:
        stack.down()
