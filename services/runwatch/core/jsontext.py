"""Strict JSON out (RFC 8259) for whatever runwatch writes as JSON for others to read.

Python's ``json`` writes NaN and the infinities as the bare words ``NaN``,
``Infinity`` and ``-Infinity``, which are not JSON: PagerDuty, browsers' and Go's
parsers refuse the whole document. :func:`finite_json` spells them as the strings
``"NaN"``, ``"Infinity"`` and ``"-Infinity"``, as Protocol Buffers' JSON mapping
does, so a NaN loss stays visible as what it was.
"""

from __future__ import annotations

import json
import math
from typing import Any


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


def json_text(data: object, **dumps: Any) -> str:
    """Serialise data as strict JSON (no NaN or Infinity literal).

    Args:
        data: JSON-ready data.
        **dumps: More ``json.dumps`` arguments (``separators``, ``default``, ``sort_keys``...).

    Returns:
        The JSON text.

    """
    return json.dumps(finite_json(data), allow_nan=False, **dumps)
