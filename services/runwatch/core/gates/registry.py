"""Registry control: may a run's model be in the registry, given its gate decisions?

One pure function for the processor's ``rule:registry_without_gate`` and for
readers of stored rows (the registry-control SLI): a run's release is
allowed when the latest decision of one of its gates is ``pass``. A human
approval (``runwatch gate approve``) is a ``pass`` decision that names the
``review`` it approves, so an approved review allows the release; a later
automated ``fail`` of the same gate withdraws it again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from runwatch.core.signals.rules import REGISTERED, status_word


def latest_by_gate(decisions: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Return gate -> its latest decision, from ``(gate, decision)`` pairs in time order."""
    out: dict[str, str] = {}
    for gate, decision in decisions:
        out[gate] = decision
    return out


def release_allowed(latest: Mapping[str, str]) -> bool:
    """Return whether a run's gates allow its release (some gate's latest decision is pass).

    Args:
        latest: Gate -> its latest decision (see :func:`latest_by_gate`).

    Returns:
        True when a gate passed or a review was approved.

    """
    return any(d == "pass" for d in latest.values())


def violation(status: str, latest: Mapping[str, str]) -> str | None:
    """Return why a registry status breaks registry control, or None when it does not.

    Args:
        status: The artifact's registry status ('' : none).
        latest: The run's gate -> latest decision.

    Returns:
        A one-line reason naming the gates' state, or None.

    """
    if status_word(status) not in REGISTERED or release_allowed(latest):
        return None
    if not latest:
        return f"registry status {status} without any gate decision for the run"
    said = ", ".join(f"{g}: {d}" for g, d in sorted(latest.items()))
    return f"registry status {status} without a passing or approved gate ({said})"
