"""Silences: matchers on alert attributes, and which silence mutes an alert when.

Pure, as :mod:`runwatch.core.paging.delivery`: the caller passes ``now_ms``; the pager
stores the silences (:mod:`runwatch.pager.state`) and honours them live.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Literal

_MATCHER = re.compile(r"^([A-Za-z_][A-Za-z0-9_.]*)(=~|!=|=)(.*)$")


@dataclass(frozen=True, slots=True)
class Matcher:
    """One silence matcher: ``name=value``, ``name!=value`` or ``name=~regex``."""

    name: str
    op: Literal["=", "!=", "=~"]
    value: str

    def accepts(self, attrs: Mapping[str, str]) -> bool:
        """Say whether the attributes satisfy this matcher.

        Args:
            attrs: Alert attributes (see ``runwatch.core.paging.routes.alert_attributes``).

        Returns:
            True when satisfied.

        """
        got = attrs.get(self.name, attrs.get(f"labels.{self.name}", ""))
        if self.op == "=":
            return got == self.value
        if self.op == "!=":
            return got != self.value
        return re.fullmatch(self.value, got) is not None

    def __str__(self) -> str:
        return f"{self.name}{self.op}{self.value}"


def parse_matcher(text: str) -> Matcher:
    """Parse ``k=v``, ``k!=v`` or ``k=~regex``.

    Args:
        text: The matcher text.

    Returns:
        The matcher.

    Raises:
        ValueError: When the text is not a matcher or the regex is invalid.

    """
    m = _MATCHER.match(text.strip())
    if not m:
        msg = f"bad matcher {text!r}: use name=value, name!=value or name=~regex"
        raise ValueError(msg)
    name, op, value = m.groups()
    if op == "=~":
        try:
            re.compile(value)
        except re.error as exc:
            msg = f"bad matcher {text!r}: invalid regex: {exc}"
            raise ValueError(msg) from exc
    return Matcher(name, op, value)  # type: ignore[arg-type]


def matches_empty(matchers: Iterable[Matcher]) -> bool:
    """Say whether every matcher also accepts an alert without the attribute (an empty value).

    Such a silence mutes every alert that lacks those values, whatever else it is:
    ``team=`` (``--match team=$TEAM`` with ``TEAM`` unset) muted every alert of a run
    without a team, critical ones too, and ``run_id!=run-7`` or ``severity!=info`` muted
    nearly everything. Alertmanager refuses these ("at least one matcher must not match the
    empty string"), and so does ``runwatch silence add``.

    Args:
        matchers: The silence's matchers.

    Returns:
        True when there are matchers and each accepts the empty value.

    """
    given = tuple(matchers)
    return bool(given) and all(m.accepts({}) for m in given)


@dataclass(frozen=True, slots=True)
class Silence:
    """A silence: alerts matching every matcher are not sent while it is active."""

    silence_id: str
    matchers: tuple[Matcher, ...]
    starts_at_ms: int
    ends_at_ms: int
    reason: str
    created_by: str = ""

    def active(self, now_ms: int) -> bool:
        """Say whether the silence is in force.

        Args:
            now_ms: Current time.

        Returns:
            True between start (inclusive) and end (exclusive).

        """
        return self.starts_at_ms <= now_ms < self.ends_at_ms

    def silences(self, attrs: Mapping[str, str], now_ms: int) -> bool:
        """Say whether this silence mutes an alert now.

        Args:
            attrs: Alert attributes.
            now_ms: Current time.

        Returns:
            True when active and every matcher accepts.

        """
        return self.active(now_ms) and all(m.accepts(attrs) for m in self.matchers)


def find_silence(
    silences: Iterable[Silence], attrs: Mapping[str, str], now_ms: int
) -> Silence | None:
    """Return the first silence muting an alert now, if any.

    Args:
        silences: Known silences.
        attrs: Alert attributes.
        now_ms: Current time.

    Returns:
        The muting silence, or None.

    """
    for silence in silences:
        if silence.silences(attrs, now_ms):
            return silence
    return None


def expire_silence(silence: Silence, now_ms: int) -> Silence:
    """End a silence now (a no-op for one already over).

    Args:
        silence: The silence.
        now_ms: Current time.

    Returns:
        The silence ending at ``now_ms`` at the latest.

    """
    return replace(silence, ends_at_ms=min(silence.ends_at_ms, now_ms))
