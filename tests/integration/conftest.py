"""Fixtures shared by the integration tests (the stack fixtures live in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sinkkit import Store, delete_topics, make_topics, own_broker

from runwatch.stack.manager import Stack
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
    """A broker of our own that we may stop and restart (the shared stack's serves others)."""
    with own_broker(tmp_path_factory.mktemp("kafka-restart")) as stack:
        yield stack


@pytest.fixture(scope="module")
def module_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """A store of the test module's own (its databases are dropped as the tests pass)."""
    store = Store(tmp_path_factory.mktemp("store") / "chdb")
    store.start()
    yield store
    store.stop()
