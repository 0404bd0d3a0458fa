"""The sink's process pool: exit descriptions and argument checks (no services)."""

from __future__ import annotations

import signal

import pytest

from runwatch.sink.pool import SinkPool, describe_exit


@pytest.mark.parametrize(
    ("code", "text"),
    [
        (0, "exit code 0"),
        (1, "exit code 1"),
        (-signal.SIGKILL, "signal SIGKILL"),
        (-signal.SIGTERM, "signal SIGTERM"),
        (None, "still running"),
        (-200, "signal 200"),
    ],
)
def test_describe_exit(code: int | None, text: str) -> None:
    assert describe_exit(code) == text


@pytest.mark.parametrize("n", [0, -1])
def test_pool_needs_a_process(n: int) -> None:
    from runwatch.adapters.settings import ClickHouseSettings, KafkaSettings
    from runwatch.sink.settings import SinkSettings

    with pytest.raises(ValueError, match="at least 1"):
        SinkPool(n, SinkSettings(), KafkaSettings(), ClickHouseSettings())
