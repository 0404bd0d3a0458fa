"""Codec errors: both carry a short ``reason`` (used in dead letters)."""

from __future__ import annotations


class DecodeError(Exception):
    """Bytes that cannot be decoded into a record.

    Attributes:
        reason: Short human-readable reason (goes into dead letters).

    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class EncodeError(Exception):
    """A record (or dict) that cannot be encoded with its schema.

    Attributes:
        reason: Short human-readable reason.

    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
