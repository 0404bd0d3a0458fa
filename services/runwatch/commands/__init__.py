"""Command groups of the ``runwatch`` CLI, one module each (see :mod:`runwatch.cli`).

Each module defines ``register(subparsers)``; keep the modules thin: parse
arguments, build settings, call into the service or core code.
"""

from __future__ import annotations

import argparse
import math

DELIVERY_TIMEOUT_MAX_S = 3600.0


def delivery_timeout(text: str) -> float:
    """Parse ``--timeout`` (seconds to wait for delivery): finite, 0 to an hour.

    ``nan`` waited forever (a scheduler hook held its job while the broker was away),
    a negative value was taken as 0.

    Raises:
        argparse.ArgumentTypeError: The value is no number or out of range.
    """
    try:
        value = float(text)
    except ValueError:
        msg = f"{text!r} is not a number of seconds"
        raise argparse.ArgumentTypeError(msg) from None
    if not (math.isfinite(value) and 0.0 <= value <= DELIVERY_TIMEOUT_MAX_S):
        msg = f"{text} must be between 0 and {DELIVERY_TIMEOUT_MAX_S:g} seconds"
        raise argparse.ArgumentTypeError(msg)
    return value
