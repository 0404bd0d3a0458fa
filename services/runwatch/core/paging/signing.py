"""Webhook signatures: HMAC-SHA256 over ``<timestamp>.<body>``.

The sender puts the timestamp (UTC epoch milliseconds) in
``X-Runwatch-Timestamp`` and ``sha256=<hex>`` in ``X-Runwatch-Signature``.
A receiver recomputes the HMAC with the shared secret and rejects requests
whose timestamp is too far from its clock, which stops replays.
"""

from __future__ import annotations

import hashlib
import hmac

SIGNATURE_HEADER = "X-Runwatch-Signature"
TIMESTAMP_HEADER = "X-Runwatch-Timestamp"
DEFAULT_TOLERANCE_MS = 5 * 60_000


def sign(secret: bytes, timestamp_ms: int, body: bytes) -> str:
    """Sign a webhook body.

    Args:
        secret: The shared secret.
        timestamp_ms: The send time (UTC epoch ms), also sent in a header.
        body: The exact bytes sent.

    Returns:
        ``sha256=<hex digest>``.

    """
    mac = hmac.new(secret, f"{timestamp_ms}.".encode() + body, hashlib.sha256)
    return f"sha256={mac.hexdigest()}"


def verify(
    secret: bytes,
    timestamp: str,
    body: bytes,
    signature: str,
    now_ms: int,
    tolerance_ms: int = DEFAULT_TOLERANCE_MS,
) -> bool:
    """Check a webhook signature and its freshness.

    Args:
        secret: The shared secret.
        timestamp: The ``X-Runwatch-Timestamp`` header.
        body: The exact bytes received.
        signature: The ``X-Runwatch-Signature`` header.
        now_ms: The receiver's current time.
        tolerance_ms: Largest accepted clock distance.

    Returns:
        True when the signature matches and the timestamp is fresh.

    """
    try:
        ts = int(timestamp)
    except (TypeError, ValueError):
        return False
    if abs(now_ms - ts) > tolerance_ms:
        return False
    return hmac.compare_digest(sign(secret, ts, body), signature)
