"""The processor's event-time horizon: how far its input has got, for absence rules.

Absence rules (a stalled job, a missing data report, a job still queued past
its deadline) and the quiet-time resolution of one-shot alerts ask "has
nothing come for so long?". Measured on the processor's wall clock, a
processor catching up after an outage (or a replay, or a backfill of spooled
telemetry) would page every run whose backlog it has not read yet. Measured
on one run's own event time, a run that goes silent never sees time pass.
The horizon is the event time the processor's input as a whole has reached,
Flink-style: each input (topic partition) has a watermark (the latest event
time read from it) and the horizon is the least watermark among the inputs
that are active, i.e. delivered something within the last ``idle_ms`` of wall
time. An input that went quiet (a topic with no traffic, a partition whose only
run hung) stops holding the horizon back once idle; when every input is idle
the horizon is the latest event time read and moves no further, since nothing
then tells a silent run from a silent pipeline.

Pure: the caller passes the wall clock in.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

IDLE_MS = 60_000
"""Wall time without a record after which an input no longer holds the horizon back
(a minute: well inside the stall rule's floor, ``STALL_MIN_MS``, 10 min, so a run's
silent partition does not delay its stall page by more than that)."""


@dataclass(slots=True)
class InputHorizon:
    """Per-input watermarks and the horizon they give (see the module docstring).

    Attributes:
        idle_ms: Wall time without a record after which an input is idle.
        marks: Input → ``[event-time watermark, wall time of its last record, wall time
            until which it counts as active after a gap of all inputs, its watermark when
            that gap began (what it holds the horizon at until then)]``.

    """

    idle_ms: int = IDLE_MS
    marks: dict[Hashable, list[int]] = field(default_factory=dict)
    last_wall_ms: int = 0

    def observe(self, source: Hashable, event_ms: int, wall_ms: int) -> None:
        """Count one record read from ``source`` (e.g. a topic partition).

        The first record after every input was idle (an outage of the broker or of
        the processor) makes every input active again: each gets ``idle_ms`` from now
        to deliver what its producers spooled meanwhile. Else the first producer to
        drain its spool moved the horizon over the whole outage while the others' had
        not arrived, and a timer round between them paged every run of theirs as
        stalled or missing its data report (critical), to resolve a second later.
        Meanwhile each holds the horizon at its watermark from before the gap: producers
        share an input (the runs hashed to one partition), and the first of them to drain
        moved the input's watermark over the whole outage while the others had delivered
        nothing, and a timer round paged their runs stalled (3 of 20 healthy runs after a
        20-minute outage, every spool starting within 10 s).
        Only the inputs that were active when the gap began: one idle before it held
        nothing back then (a run's manifest partition, read once), and refreshed at
        each record of a run that logs once a minute and nothing else it held the
        horizon at the manifest's time, so the run never missed its data report.

        Args:
            source: The input it came from.
            event_ms: Its event time.
            wall_ms: The wall clock when it was read.

        """
        last = self.last_wall_ms
        if self.marks and wall_ms - last >= self.idle_ms:
            for m in self.marks.values():
                if last - m[1] < self.idle_ms:  # active when the gap began: it may hold spool
                    m[2] = max(m[2], int(wall_ms) + self.idle_ms)
                    m[3] = m[0]  # and holds the horizon where it stood meanwhile
        self.last_wall_ms = max(self.last_wall_ms, int(wall_ms))
        mark = self.marks.get(source)
        if mark is None:
            self.marks[source] = [int(event_ms), int(wall_ms), 0, int(event_ms)]
        else:
            mark[0] = max(mark[0], int(event_ms))
            mark[1] = max(mark[1], int(wall_ms))

    def at(self, wall_ms: int) -> int:
        """Return the horizon at wall time ``wall_ms`` (0 before any record).

        Args:
            wall_ms: The wall clock now.

        Returns:
            The least watermark of the active inputs; the greatest of all when
            every input is idle; 0 when nothing was read yet.

        """
        active = [m[3] if wall_ms < m[2] else m[0] for m in self.marks.values()
                  if wall_ms - m[1] < self.idle_ms or wall_ms < m[2]]
        if active:
            return min(active)
        return max((m[0] for m in self.marks.values()), default=0)
