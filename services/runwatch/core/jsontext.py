"""JSON text out: strict JSON for others to read, and compact JSON fast for the processor's own.

Python's ``json`` writes NaN and the infinities as the bare words ``NaN``,
``Infinity`` and ``-Infinity``, which are not JSON: PagerDuty, browsers' and Go's
parsers refuse the whole document. :func:`finite_json` spells them as the strings
``"NaN"``, ``"Infinity"`` and ``"-Infinity"``, as Protocol Buffers' JSON mapping
does, so a NaN loss stays visible as what it was.

:func:`compact` is ``json.dumps(value, separators=(",", ":"))`` for the
processor's internal JSON (run-state checkpoints, node aggregates, watch
snapshots; NaN kept as ``NaN``, as Python writes and reads it): written by
ujson when it is installed (the ``processor`` extra), about three times faster
on float-heavy data, and by the standard library otherwise or when ujson
refuses a value. Both read back as the same values with ``json.loads``; the
text differs only in how some exponents are spelt (``1e-5`` for ``1e-05``).
:func:`parse` is ``json.loads`` for the processor's own JSON, read by ujson
when it is installed (about 2.5 times faster): every valid document reads as
the same values (``NaN`` and integers past 64 bits included); ujson also takes
three malformed forms that ``json.loads`` refuses (a leading zero, a control
character inside a string, a number ending in a dot), and whatever ujson
refuses gets the standard library's answer or error.
"""

from __future__ import annotations

import json
import math
from typing import Any

try:
    import ujson as _ujson
except ImportError:  # pragma: no cover - the processor extra installs it; stdlib then
    _ujson = None  # type: ignore[assignment]

_STD_COMPACT = json.JSONEncoder(separators=(",", ":")).encode
_FAST_REFUSES = (OverflowError, TypeError, ValueError)
"""What ujson raises for a value it will not write (an unknown type, bytes, nesting past
its depth limit): the standard library then writes it, or raises its own error for it."""


def compact(value: Any) -> str:
    """Return ``json.dumps(value, separators=(",", ":"))`` as the same JSON, fast.

    NaN and the infinities are written as Python writes them (``NaN``,
    ``Infinity``): this is for runwatch's own state and internal topics, read back
    with ``json.loads``; what others read goes through :func:`json_text`. One
    difference in what is accepted: a dict key that is not a string, number,
    bool or None (a tuple, say) is written as its ``str()`` by ujson where
    ``json.dumps`` raises, and a NaN key is spelt ``nan``; runwatch's own
    documents have string keys only.

    Args:
        value: Dicts, lists, tuples and scalars (tuples are written as arrays).

    Returns:
        Compact JSON text, ASCII only (non-ASCII escaped, as ``json.dumps`` does).

    Raises:
        TypeError: A value JSON cannot hold (as ``json.dumps``).

    """
    if _ujson is not None:
        try:
            return _ujson.dumps(value, ensure_ascii=True, escape_forward_slashes=False,
                                allow_nan=True)  # type: ignore[no-any-return]
        except _FAST_REFUSES:
            pass
    return _STD_COMPACT(value)


def finite_json(value: object) -> object:
    """Return JSON-ready data with every non-finite float spelt as a string.

    Args:
        value: Data made of dicts, lists, tuples and scalars.

    Returns:
        A copy of the data (tuples become lists), NaN and infinities as strings.

    """
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite_json(v) for v in value]
    return value


def parse(data: bytes | str) -> Any:
    """Return ``json.loads(data)``, fast (for runwatch's own state and internal topics).

    Valid JSON reads as ``json.loads`` reads it; what ujson refuses gets the
    standard library's answer or error (see the module docstring for the three
    malformed forms ujson takes).

    Args:
        data: JSON text (UTF-8 bytes or str).

    Returns:
        The value.

    Raises:
        ValueError: Not JSON (``json.JSONDecodeError``, or ``UnicodeDecodeError``
            for bytes that are not UTF-8), as ``json.loads`` raises.

    """
    if _ujson is not None:
        try:
            return _ujson.loads(data)
        except ValueError:  # ujson.JSONDecodeError: json.loads gives the verdict
            pass
    return json.loads(data)


def json_text(data: object, **dumps: Any) -> str:
    """Serialise data as strict JSON (no NaN or Infinity literal).

    Args:
        data: JSON-ready data.
        **dumps: More ``json.dumps`` arguments (``separators``, ``default``, ``sort_keys``...).

    Returns:
        The JSON text.

    """
    return json.dumps(finite_json(data), allow_nan=False, **dumps)
