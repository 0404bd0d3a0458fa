"""One reader for runwatch's YAML config files: errors that name the file, line and key.

The config loaders (routing rules, ownership, gate policies, SLOs, prices)
compose their text into YAML nodes with :func:`compose` (or
:func:`compose_all` for a stream of documents) and read the nodes through a
:class:`Reader`, which knows the file's name and the exception class of its
loader. Every error reads ``file:line: key: message`` (``file:line: message``
where a loader words it without a key); invalid YAML reads
``file:line: invalid YAML: problem``. The loaders keep their own error
classes, so callers catch what they caught before.

Scalars are read from their text, not from YAML's implicit types: a number is
any finite float literal, a bool is ``true`` or ``false`` (any case), a
duration is ``<whole number><ms|s|m|h|d>``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

import yaml

from runwatch.core.slo.timewin import zone

E = TypeVar("E", bound=Exception)
T = TypeVar("T")
#: A mapping's entries: key text -> (key node, value node), in file order.
Items = dict[str, tuple[yaml.Node, yaml.Node]]

_DURATION = re.compile(r"^(\d+)(ms|s|m|h|d)$")
_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_WHOLE = re.compile(r"\d+")
_NULL = "tag:yaml.org,2002:null"


LONGEST_DURATION_MS = 10 * 366 * 86_400_000
"""The longest duration a window or a silence may last (about ten years, ``3660d``): a longer
one is a typo, and no date can show its far end."""


def parse_duration_ms(text: str) -> int:
    """Parse ``90s``, ``15m``, ``2h``, ``1d``, ``500ms`` into milliseconds.

    Args:
        text: The duration.

    Returns:
        Milliseconds.

    Raises:
        ValueError: When the text is not a duration.

    """
    m = _DURATION.match(text.strip())
    if not m:
        msg = f"bad duration {text!r} (use e.g. 30s, 15m, 2h, 1d)"
        raise ValueError(msg)
    return int(m.group(1)) * _UNITS_MS[m.group(2)]


def _invalid(exc: yaml.YAMLError, source: str, error: type[E]) -> E:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    if mark is None or not problem:
        return error(f"{source}: invalid YAML: {exc}")
    context = getattr(exc, "context", None)
    if context and problem.startswith("but "):
        problem = f"{context}, {problem}"
    return error(f"{source}:{mark.line + 1}: invalid YAML: {problem}")


def compose(text: str, source: str, error: type[E]) -> yaml.Node | None:
    """Compose one YAML document into nodes (None when the text holds none).

    Raises:
        E: ``source:line: invalid YAML: problem`` (also for a second document).

    """
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise _invalid(exc, source, error) from exc


def compose_all(text: str, source: str, error: type[E]) -> list[yaml.Node]:
    """Compose every document of a YAML stream.

    Raises:
        E: ``source:line: invalid YAML: problem``.

    """
    try:
        return [n for n in yaml.compose_all(text, Loader=yaml.SafeLoader) if n is not None]
    except yaml.YAMLError as exc:
        raise _invalid(exc, source, error) from exc


class Reader(Generic[E]):
    """Reads typed values out of one file's YAML nodes; raises ``error`` naming file and line.

    ``key`` arguments are what the error names: a key path
    (``policies[0].slices.max_spread``) or a loader's label (``receiver name``).
    """

    def __init__(self, source: str, error: type[E]) -> None:
        """Read nodes of ``source``, raising ``error`` on a bad one."""
        self.source = source
        self.error = error

    def line(self, node: yaml.Node) -> int:
        """Return the 1-based line a node starts on."""
        return int(node.start_mark.line) + 1

    def at(self, node: yaml.Node) -> str:
        """Return ``source:line`` of a node."""
        return f"{self.source}:{self.line(node)}"

    def err(self, node: yaml.Node, key: str, text: str) -> E:
        """Return the error ``source:line: key: text`` (``source:line: text`` without a key)."""
        return self.error(f"{self.at(node)}: {key}: {text}" if key else f"{self.at(node)}: {text}")

    def mapping(self, node: yaml.Node, key: str = "", allowed: set[str] | None = None, *,
                where: str = "") -> Items:
        """Return a mapping's entries; keys are plain strings, unique and (when given) allowed.

        Args:
            node: The node.
            key: Its key path; a child is named ``key.child``.
            allowed: The keys it may have (None: any).
            where: Word the errors in prose instead (``unknown key 'x' in a rule``).

        """
        if not isinstance(node, yaml.MappingNode):
            raise (self.err(node, "", f"{where} must be a mapping") if where
                   else self.err(node, key, "expected a mapping"))
        out: Items = {}
        for k, v in node.value:
            if not isinstance(k, yaml.ScalarNode) or k.value == "":
                raise (self.err(k, "", f"keys of {where} must be plain strings") if where
                       else self.err(k, key, "keys must be plain strings"))
            name = str(k.value)
            child = f"{key}.{name}" if key else name
            if name in out:
                raise (self.err(k, "", f"duplicate key {name!r} in {where}") if where
                       else self.err(k, child, "duplicate key"))
            if allowed is not None and name not in allowed:
                known = ", ".join(sorted(allowed))
                raise (self.err(k, "", f"unknown key {name!r} in {where} (known: {known})")
                       if where else self.err(k, child, f"unknown key (expected one of: {known})"))
            out[name] = (k, v)
        return out

    def need(self, items: Mapping[str, tuple[yaml.Node, yaml.Node]], name: str,
             parent: yaml.Node, key: str = "") -> yaml.Node:
        """Return the value of a required key; its absence is an error on ``parent``."""
        if name not in items:
            raise self.err(parent, f"{key}.{name}" if key else name, "missing (required)")
        return items[name][1]

    def sequence(self, node: yaml.Node, key: str, *, non_empty: bool = False) -> list[yaml.Node]:
        """Return a list's items (at least one when ``non_empty``)."""
        if not isinstance(node, yaml.SequenceNode) or (non_empty and not node.value):
            raise self.err(node, key, "must be a non-empty list" if non_empty else "must be a list")
        return list(node.value)

    def string(self, node: yaml.Node, key: str) -> str:
        """Return a scalar's text, which must not be blank or null (``~``, ``null``)."""
        if not isinstance(node, yaml.ScalarNode) or node.tag == _NULL \
                or not str(node.value).strip():
            raise self.err(node, key, "must be a non-empty string")
        return str(node.value)

    def strings(self, node: yaml.Node, key: str, *, non_empty: bool = True) -> tuple[str, ...]:
        """Return a list of non-empty strings (``key[i]`` names a bad item)."""
        if not isinstance(node, yaml.SequenceNode) or (non_empty and not node.value):
            raise self.err(node, key, "must be a non-empty list of strings" if non_empty
                           else "must be a list of strings")
        return tuple(self.string(v, f"{key}[{i}]") for i, v in enumerate(node.value))

    def number(self, node: yaml.Node, key: str, *, minimum: float | None = None) -> float:
        """Return a finite number (at least ``minimum`` when given)."""
        text = node.value if isinstance(node, yaml.ScalarNode) else None
        try:
            value = float(text) if text is not None and text.lower() not in ("true", "false") \
                else math.nan
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or (minimum is not None and value < minimum):
            bound = f" >= {minimum:g}" if minimum is not None else ""
            raise self.err(node, key, f"must be a finite number{bound}, got {text!r}")
        return value

    def share(self, node: yaml.Node, key: str) -> float:
        """Return a number between 0 and 1 (both included)."""
        value = self.number(node, key)
        if not 0.0 <= value <= 1.0:
            raise self.err(node, key, f"must be between 0 and 1, got {node.value!r}")
        return value

    def whole(self, node: yaml.Node, key: str) -> int:
        """Return a whole number >= 0."""
        text = node.value if isinstance(node, yaml.ScalarNode) else None
        if text is None or not _WHOLE.fullmatch(text):
            raise self.err(node, key, f"must be a whole number >= 0, got {text!r}")
        return int(text)

    def positive_int(self, node: yaml.Node, key: str) -> int:
        """Return a whole number >= 1."""
        text = node.value if isinstance(node, yaml.ScalarNode) else None
        if text is None or not _WHOLE.fullmatch(text) or int(text) < 1:
            raise self.err(node, key, f"must be a positive integer, got {text!r}")
        return int(text)

    def boolean(self, node: yaml.Node, key: str) -> bool:
        """Return ``true`` or ``false`` (any case)."""
        text = str(node.value).lower() if isinstance(node, yaml.ScalarNode) else ""
        if text not in ("true", "false"):
            got = node.value if isinstance(node, yaml.ScalarNode) else None
            raise self.err(node, key, f"must be true or false, got {got!r}")
        return text == "true"

    def duration(self, node: yaml.Node, key: str) -> int:
        """Return a positive duration (``30s``, ``15m``, ``2h``, ``1d``) in milliseconds."""
        ms = self.parsed(node, key, parse_duration_ms)
        if ms <= 0:
            raise self.err(node, key, f"must be a positive duration, got {node.value!r}")
        return ms

    def timezone(self, node: yaml.Node, key: str) -> str:
        """Return an IANA time zone name."""
        self.parsed(node, key, zone)
        return str(node.value)

    def parsed(self, node: yaml.Node, key: str, parse: Callable[[str], T]) -> T:
        """Return ``parse`` of a non-empty string; its ValueError becomes this file's error."""
        text = self.string(node, key)
        try:
            return parse(text)
        except ValueError as exc:
            raise self.err(node, key, str(exc)) from exc
