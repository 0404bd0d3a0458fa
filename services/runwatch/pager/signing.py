"""Webhook signatures at the pager's public path (:mod:`runwatch.core.paging.signing`).

A receiver behind a runwatch webhook verifies a delivery with
``verify(secret, timestamp_header, body, signature_header, now_ms=...)``.
"""

from runwatch.core.paging.signing import (
    DEFAULT_TOLERANCE_MS,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    sign,
    verify,
)

__all__ = ["DEFAULT_TOLERANCE_MS", "SIGNATURE_HEADER", "TIMESTAMP_HEADER", "sign", "verify"]
