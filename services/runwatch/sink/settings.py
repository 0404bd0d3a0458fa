"""Settings of ``runwatch sink`` (env prefix ``RUNWATCH_SINK_``)."""

from __future__ import annotations

from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict

from runwatch.core.topics import load_topics


def default_topics() -> tuple[str, ...]:
    """Return the topics the sink stores: every non-internal topic of the map.

    Returns:
        Topic names from ``schemas/topics.yaml``.
    """
    return tuple(spec.name for spec in load_topics().values() if not spec.internal)


class SinkSettings(BaseSettings):
    """How the sink consumes and batches.

    ``summary_sweep_s`` (0: off): how often the sink rewrites the summaries of
    every run whose terminal job event is at most ``summary_window_s`` old, so
    rows that reach the store after a run's end (other topics and partitions lag
    behind it, or another sink process stored them) are counted.

    ``dedup_seed_s`` (0: off): at start the memory of event ids (``dedup_window``
    of them at most) is read from the ids stored with an event time in the last
    this many seconds, so a producer's copy of a record stored before the
    restart is dropped as a duplicate.
    """

    model_config = SettingsConfigDict(env_prefix="RUNWATCH_SINK_", extra="ignore")

    group_id: str = "runwatch-sink"
    topics: tuple[str, ...] = ()
    batch_rows: int = 50_000
    batch_ms: int = 1_000
    poll_records: int = 5_000
    inflight_batches: int = 2
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 15.0
    dedup_window: int = 1_000_000
    dedup_seed_s: float = 3_600.0
    idle_util_pct: float = 5.0
    schema_dir: Path | None = None
    summary_sql: Path | None = None
    summary_sweep_s: float = 60.0
    summary_window_s: float = 900.0

    def topic_list(self) -> tuple[str, ...]:
        """Return the topics to consume (configured, else the rw.* defaults)."""
        return self.topics or default_topics()
