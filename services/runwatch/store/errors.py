"""ClickHouse exception codes and the HTTP status the real server answers with.

The status mapping mirrors ClickHouse's
``src/Server/HTTP/exceptionCodeToHTTPStatus.cpp``; the code numbers are the
engine's own (chDB's ``errorCodeToName`` agrees, which the integration tests
check). Pure: no I/O.
"""

from __future__ import annotations

import re
from typing import Final

CODES: Final[dict[str, int]] = {
    "CANNOT_PARSE_TEXT": 6,
    "THERE_IS_NO_COLUMN": 8,
    "DUPLICATE_COLUMN": 15,
    "CANNOT_PARSE_ESCAPE_SEQUENCE": 25,
    "CANNOT_PARSE_QUOTED_STRING": 26,
    "CANNOT_PARSE_INPUT_ASSERTION_FAILED": 27,
    "CANNOT_READ_ALL_DATA": 33,
    "BAD_ARGUMENTS": 36,
    "UNKNOWN_ELEMENT_IN_AST": 37,
    "CANNOT_PARSE_DATE": 38,
    "CANNOT_PARSE_DATETIME": 41,
    "ILLEGAL_COLUMN": 44,
    "UNKNOWN_FUNCTION": 46,
    "UNKNOWN_IDENTIFIER": 47,
    "NOT_IMPLEMENTED": 48,
    "UNKNOWN_TYPE": 50,
    "TYPE_MISMATCH": 53,
    "UNKNOWN_STORAGE": 56,
    "UNKNOWN_TABLE": 60,
    "SYNTAX_ERROR": 62,
    "UNKNOWN_AGGREGATE_FUNCTION": 63,
    "CANNOT_PARSE_NUMBER": 72,
    "UNKNOWN_FORMAT": 73,
    "CANNOT_OPEN_FILE": 76,
    "UNKNOWN_TYPE_OF_QUERY": 78,
    "UNKNOWN_DATABASE": 81,
    "UNKNOWN_SETTING": 115,
    "INCORRECT_DATA": 117,
    "UNKNOWN_TYPE_OF_AST_NODE": 123,
    "UNKNOWN_DIRECTION_OF_SORTING": 152,
    "TIMEOUT_EXCEEDED": 159,
    "READONLY": 164,
    "TOO_DEEP_AST": 167,
    "TOO_BIG_AST": 168,
    "UNKNOWN_USER": 192,
    "WRONG_PASSWORD": 193,
    "REQUIRED_PASSWORD": 194,
    "TOO_MANY_SIMULTANEOUS_QUERIES": 202,
    "SOCKET_TIMEOUT": 209,
    "UNEXPECTED_AST_STRUCTURE": 223,
    "QUERY_IS_TOO_LARGE": 229,
    "CANNOT_DECOMPRESS": 271,
    "MEMORY_LIMIT_EXCEEDED": 241,
    "VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE": 321,
    "UNKNOWN_DATABASE_ENGINE": 336,
    "ZLIB_INFLATE_FAILED": 354,
    "SESSION_NOT_FOUND": 372,
    "SESSION_IS_LOCKED": 373,
    "CANNOT_PARSE_UUID": 376,
    "HTTP_LENGTH_REQUIRED": 381,
    "QUERY_WAS_CANCELLED": 394,
    "TOO_MANY_ROWS_OR_BYTES": 396,
    "CANNOT_COMPILE_REGEXP": 427,
    "CANNOT_SCHEDULE_TASK": 439,
    "CANNOT_PARSE_DOMAIN_VALUE_FROM_STRING": 441,
    "SETTING_CONSTRAINT_VIOLATION": 452,
    "UNKNOWN_QUERY_PARAMETER": 456,
    "VIOLATED_CONSTRAINT": 469,
    "ACCESS_DENIED": 497,
    "UNKNOWN_ROLE": 511,
    "SET_NON_GRANTED_ROLE": 512,
    "AUTHENTICATION_FAILED": 516,
    "ZSTD_DECODER_FAILED": 561,
    "LZ4_DECODER_FAILED": 618,
    "CANNOT_PARSE_IPV4": 675,
    "CANNOT_PARSE_IPV6": 676,
    "UNSUPPORTED_MEDIA_TYPE": 779,
    "STD_EXCEPTION": 1001,
}

_UNAUTHORIZED = frozenset({"REQUIRED_PASSWORD"})
_FORBIDDEN = frozenset(
    {
        "UNKNOWN_USER",
        "WRONG_PASSWORD",
        "AUTHENTICATION_FAILED",
        "SET_NON_GRANTED_ROLE",
        "ACCESS_DENIED",
    }
)
_BAD_REQUEST = frozenset(
    {
        "BAD_ARGUMENTS",
        "CANNOT_COMPILE_REGEXP",
        "CANNOT_PARSE_TEXT",
        "CANNOT_PARSE_ESCAPE_SEQUENCE",
        "CANNOT_PARSE_QUOTED_STRING",
        "CANNOT_PARSE_DATE",
        "CANNOT_PARSE_DATETIME",
        "CANNOT_PARSE_NUMBER",
        "CANNOT_PARSE_DOMAIN_VALUE_FROM_STRING",
        "CANNOT_PARSE_IPV4",
        "CANNOT_PARSE_IPV6",
        "CANNOT_PARSE_INPUT_ASSERTION_FAILED",
        "CANNOT_PARSE_UUID",
        "DUPLICATE_COLUMN",
        "ILLEGAL_COLUMN",
        "UNKNOWN_ELEMENT_IN_AST",
        "UNKNOWN_TYPE_OF_AST_NODE",
        "THERE_IS_NO_COLUMN",
        "TOO_DEEP_AST",
        "TOO_BIG_AST",
        "UNEXPECTED_AST_STRUCTURE",
        "SYNTAX_ERROR",
        "INCORRECT_DATA",
        "TYPE_MISMATCH",
        "VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE",
    }
)
_NOT_FOUND = frozenset(
    {
        "UNKNOWN_TABLE",
        "UNKNOWN_FUNCTION",
        "UNKNOWN_IDENTIFIER",
        "UNKNOWN_TYPE",
        "UNKNOWN_STORAGE",
        "UNKNOWN_DATABASE",
        "UNKNOWN_SETTING",
        "UNKNOWN_DIRECTION_OF_SORTING",
        "UNKNOWN_AGGREGATE_FUNCTION",
        "UNKNOWN_FORMAT",
        "UNKNOWN_DATABASE_ENGINE",
        "UNKNOWN_TYPE_OF_QUERY",
        "UNKNOWN_ROLE",
    }
)
_BY_STATUS: Final[tuple[tuple[frozenset[str], int], ...]] = (
    (_UNAUTHORIZED, 401),
    (_FORBIDDEN, 403),
    (_BAD_REQUEST, 400),
    (_NOT_FOUND, 404),
    (frozenset({"QUERY_IS_TOO_LARGE"}), 413),
    (frozenset({"NOT_IMPLEMENTED"}), 501),
    (frozenset({"SOCKET_TIMEOUT", "CANNOT_OPEN_FILE", "CANNOT_SCHEDULE_TASK"}), 503),
    (frozenset({"HTTP_LENGTH_REQUIRED"}), 411),
    (frozenset({"TIMEOUT_EXCEEDED"}), 408),
    (frozenset({"UNSUPPORTED_MEDIA_TYPE"}), 415),
    # The store's choice (ClickHouse answers these with 500): the client may retry later.
    (frozenset({"TOO_MANY_SIMULTANEOUS_QUERIES"}), 429),
)
_STATUS_BY_CODE: Final[dict[int, int]] = {
    CODES[name]: status for names, status in _BY_STATUS for name in names
}
_CODE_RE = re.compile(r"Code: (\d+)\. ")
_VERSION_RE = re.compile(r"\(version [^)]*\)\s*$")


def http_status(code: int) -> int:
    """Return the HTTP status ClickHouse answers an exception code with.

    Args:
        code: A ClickHouse exception code.

    Returns:
        The HTTP status (500 for codes ClickHouse does not map).

    """
    return _STATUS_BY_CODE.get(code, 500)


class StoreError(Exception):
    """A ClickHouse-style exception: a code and the engine's message text."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    @classmethod
    def named(cls, name: str, text: str) -> StoreError:
        """Build an error the store raises itself, worded like ClickHouse.

        Args:
            name: The ClickHouse error name, a key of :data:`CODES`.
            text: What went wrong.

        Returns:
            The error, its message ``Code: N. DB::Exception: text. (NAME)``.

        """
        code = CODES[name]
        return cls(code, f"Code: {code}. DB::Exception: {text}. ({name})")

    @property
    def status(self) -> int:
        """The HTTP status for this error."""
        return http_status(self.code)

    def body(self, version: str) -> bytes:
        """Return the response body ClickHouse would send for this error.

        Args:
            version: The engine version, appended as ``(version X)`` when missing.

        Returns:
            The UTF-8 body, newline-terminated.

        """
        text = self.message.strip()
        if not _VERSION_RE.search(text):
            text = f"{text} (version {version})"
        return (text + "\n").encode("utf-8", errors="replace")


def from_engine(message: str) -> StoreError:
    """Wrap an engine error message, keeping its code and text.

    Args:
        message: The text of the engine's exception (``Code: N. DB::Exception: ...``),
            possibly prefixed by a wrapper's own words.

    Returns:
        A :class:`StoreError`; messages without a code get ``STD_EXCEPTION``.

    """
    match = _CODE_RE.search(message)
    if match is None:
        return StoreError.named("STD_EXCEPTION", message.strip() or "unknown engine error")
    return StoreError(int(match.group(1)), message[match.start() :].strip())
