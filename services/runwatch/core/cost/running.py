"""A run's running intervals from its job events, drawn as the run summary draws them.

The run summary (``schemas/clickhouse/summary/run_summary.sql``, the ``iv`` step) bills a
run for each running interval × that interval's allocated GPUs: ``runwatch cost`` prices
those GPU-hours. The investigation's resume loss and the SLO kind ``fairness`` need the
intervals themselves (a loss from a checkpoint on, GPU-hours per bucket), so they draw
them here with the same rules:

* events in time order; in one millisecond ``queued`` before ``running`` before the rest
  (a ``queued`` event stamped with its ``running`` one never splits an interval);
* an interval starts at a ``running`` event that does not follow another ``running`` one
  and ends at the first later event in another state; one still open ends at ``open_end``
  (what the caller knows of the run's end: its last activity, the evaluation instant);
* its GPUs are those of the latest event naming an allocation before it ends (its running
  event's, or the scheduled event's before it), else of the run's latest event naming one,
  else ``default_gpus`` (the manifest's hardware).

So the wait between attempts of a preempted run (queued again) is no interval: it is
not GPU use.
"""

from __future__ import annotations

from collections.abc import Iterable

#: Job states of one millisecond in the run summary's order: queued, running, the rest.
_STATE_ORDER = {"queued": 0, "running": 1}

#: (ts_ms, state, gpu count of its allocation: 0 when it names none).
JobPoint = tuple[int, str, int]


def running_intervals(jobs: Iterable[JobPoint], open_end: int,
                      default_gpus: int = 0) -> list[tuple[int, int, int]]:
    """Return the run's running intervals as ``(start_ms, end_ms, gpus)``, oldest first.

    Args:
        jobs: The run's job events as (ts_ms, state, allocated GPUs), in any order.
        open_end: Where an interval still open ends (never before its start).
        default_gpus: GPUs of an interval when no job event names an allocation.

    Returns:
        The intervals (none without a ``running`` event).
    """
    ev = sorted(jobs, key=lambda j: (int(j[0]), _STATE_ORDER.get(str(j[1]), 2)))
    latest = next((int(g) for _t, _s, g in reversed(ev) if g), 0)
    out: list[tuple[int, int, int]] = []
    for i, (t0, state, _g) in enumerate(ev):
        if state != "running" or (i > 0 and ev[i - 1][1] == "running"):
            continue
        nxt = next((int(t) for t, s, _ in ev[i + 1:] if int(t) > t0 and s != "running"), None)
        end = max(int(open_end), int(t0)) if nxt is None else nxt
        gpus = next((int(g) for t, _s, g in reversed(ev) if g and (nxt is None or t < nxt)),
                    latest) or default_gpus
        out.append((int(t0), end, gpus))
    return out
