"""Fixtures shared by the integration tests (the stack fixtures live in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from runwatch.processor.harness import Harness


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
