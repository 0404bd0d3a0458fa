"""Comparing what was published with what was stored and paged; the chaos table.

Pure functions over plain data: the ledger's entries, per-event-id row counts
read from ClickHouse's raw tables (before dedup, no ``FINAL``), the alerts'
dedup keys, and the receivers' accepted deliveries.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from runwatch.chaos.ledger import Entry


@dataclass(frozen=True, slots=True)
class Counts:
    """Published against stored, for one phase.

    Attributes:
        published: Event ids the producers handed to their transports (ledger).
        stored: Of those, the ones in ClickHouse (at least one row).
        lost: Published and not stored.
        duplicated: Stored more than once before dedup (raw rows, no ``FINAL``).
        missing: Up to five lost event ids (for the report).
    """

    published: int
    stored: int
    lost: int
    duplicated: int
    missing: tuple[str, ...] = ()


def compare(entries: Iterable[Entry], rows: Mapping[str, int]) -> dict[str, Counts]:
    """Count, per phase, what was published, stored, lost and duplicated.

    Args:
        entries: The ledger.
        rows: Event id → raw rows in ClickHouse (before dedup).

    Returns:
        Counts by phase, in the ledger's phase order.

    """
    by_phase: dict[str, list[str]] = {}
    for e in entries:
        by_phase.setdefault(e.phase, []).append(e.event_id)
    out = {}
    for phase, ids in by_phase.items():
        lost = [i for i in ids if rows.get(i, 0) == 0]
        dup = sum(1 for i in ids if rows.get(i, 0) > 1)
        out[phase] = Counts(len(ids), len(ids) - len(lost), len(lost), dup, tuple(lost[:5]))
    return out


def condition(run_id: str, detector: str, indicator: str, run_ids: Mapping[str, str]) -> str:
    """Return an alert's condition with the run named by its role: ``<nan> rule:x/loss``.

    A dedup key is ``<run id>:<hash of run id, detector, indicator, subject>``, so
    two phases, which publish the same load under other run ids, never share one.
    Their alerts compare by what the key is derived from, with the run id
    replaced by the run's role (``nan``, ``healthy-1``, ...).

    Args:
        run_id: The alert's run.
        detector: Its detector or rule.
        indicator: Its indicator.
        run_ids: The phase's run id → role.

    Returns:
        The condition.

    """
    return f"<{run_ids.get(run_id, run_id)}> {detector}/{indicator}"


@dataclass(frozen=True, slots=True)
class AlertCheck:
    """A phase's alerts against the fault-free phase's.

    Attributes:
        expected: Normalised dedup keys of the fault-free phase.
        raised: Normalised dedup keys this phase raised (ClickHouse ``alerts``).
        paged_twice: Dedup keys a receiver accepted more than once for one status.
        in_alertmanager: Of the raised keys, how many Alertmanager holds.
    """

    expected: frozenset[str]
    raised: frozenset[str]
    paged_twice: tuple[str, ...] = ()
    in_alertmanager: int = 0

    @property
    def equal(self) -> bool:
        """Whether the phase raised exactly the fault-free alerts."""
        return self.expected == self.raised


def paged_twice(deliveries: Iterable[tuple[str, str, str]]) -> list[str]:
    """Return the dedup keys a receiver accepted more than once for the same status.

    Args:
        deliveries: Accepted deliveries as (receiver, dedup key, status).

    Returns:
        ``receiver:dedup_key:status`` of each double page, sorted.

    """
    counts = Counter(deliveries)
    return sorted(f"{r}:{k}:{s}" for (r, k, s), n in counts.items() if n > 1)


@dataclass(slots=True)
class Row:
    """One line of the chaos table."""

    fault: str
    counts: Counts
    alerts: AlertCheck
    recovery_s: float | None
    evicted: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def unaccounted(self) -> int:
        """Lost events the producers did not count as evicted by a full spool."""
        return max(0, self.counts.lost - self.evicted)

    @property
    def ok(self) -> bool:
        """Nothing lost unaccounted, the fault-free alerts, nobody paged twice."""
        return self.unaccounted == 0 and self.alerts.equal and not self.alerts.paged_twice


HEADER = ("fault", "published", "stored", "lost", "evicted (counted)", "dup before dedup",
          "alerts expected/raised", "paged twice", "recovery", "ok")


def cells(row: Row) -> tuple[str, ...]:
    """Return a row's table cells."""
    c, a = row.counts, row.alerts
    rec = "-" if row.recovery_s is None else f"{row.recovery_s:.1f} s"
    alerts = f"{len(a.expected)}/{len(a.raised)}" + ("" if a.equal else " (differ)")
    return (row.fault, str(c.published), str(c.stored), str(c.lost), str(row.evicted),
            str(c.duplicated), alerts, str(len(a.paged_twice)), rec, "yes" if row.ok else "NO")


def render_table(rows: Iterable[Row]) -> str:
    """Render the chaos table as Markdown (a header, a rule, one line per fault).

    Args:
        rows: The rows, in fault order.

    Returns:
        The table, lines joined with newlines.

    """
    body = [HEADER, *(cells(r) for r in rows)]
    widths = [max(len(line[i]) for line in body) for i in range(len(HEADER))]

    def line(values: tuple[str, ...]) -> str:
        return "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(body[0]), rule, *(line(v) for v in body[1:])])
