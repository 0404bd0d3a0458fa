"""A run's outcome from its job events, in ClickHouse SQL: one expression for every reader.

The run summary (``schemas/clickhouse/summary/run_summary.sql``) writes the same rule
in its own statement: the SDK's own end (``source_kind = 'sdk'``) wins when it came
after the run's latest ``running``, over a scheduler hook's later end (a Slurm epilog
that read exit 0 from a batch script whose last command succeeded publishes
``succeeded`` after the SDK's ``failed``); otherwise the latest terminal state; a run
with none has its latest state. A run whose latest ``running`` came after its latest end
(attempt 2 of a job whose attempt 1 failed) is ``running``: the training-window SLO counted
such a run failed while its retry ran inside its hour. Used by ``runwatch slo`` and
``runwatch investigate``.
"""

from __future__ import annotations

__all__ = ["LATEST_STATE_SQL", "OUTCOME_SQL", "TERMINAL_SQL"]

TERMINAL_SQL = "('succeeded', 'failed', 'cancelled')"
"""The terminal job states, as an SQL tuple."""

LATEST_STATE_SQL = "argMax(state, (ts, multiIf(state = 'queued', 0, state = 'running', 1, 2)))"
"""A run's latest job state (an aggregate): of events in one millisecond, queued before
running before the rest, as the run summary orders them, so a run that started and ended
in one millisecond ended (``argMax(state, ts)`` picked either)."""

_SDK_END = f"source_kind = 'sdk' AND state IN {TERMINAL_SQL}"

OUTCOME_SQL = (
    # running again after its latest end (a retry, a requeue): not ended, whatever it was
    f"if(countIf(state = 'running') > 0 AND maxIf(ts, state = 'running') > "
    f"maxIf(ts, state IN {TERMINAL_SQL}), 'running', "
    f"if(countIf({_SDK_END}) > 0 AND maxIf(ts, {_SDK_END}) >= maxIf(ts, state = 'running'), "
    f"argMaxIf(state, ts, {_SDK_END}), "
    f"if(countIf(state IN {TERMINAL_SQL}) > 0, argMaxIf(state, ts, state IN {TERMINAL_SQL}), "
    f"{LATEST_STATE_SQL})))")
"""An aggregate over one run's ``job_events`` rows (``GROUP BY run_id``): its outcome."""
