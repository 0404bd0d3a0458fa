"""What an HTTP request asks of the engine: pure parsing, no I/O.

ClickHouse's HTTP interface takes the query from the ``query`` URL parameter
and/or the body (the parameter first, then a newline, then the body), query
parameters as ``param_<name>``, per-query settings as any other URL
parameter, and a handful of transport parameters that are not settings. A
``multipart/form-data`` body (clickhouse-connect sends one when its bound
parameters would make the URL too long) carries the same names as form
fields (:func:`form_fields`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from email import policy
from email.parser import BytesParser

# URL parameters that steer the HTTP layer itself and never reach the engine as
# settings (ClickHouse's HTTPHandler consumes them the same way).
TRANSPORT_PARAMS = frozenset(
    {
        "query",
        "database",
        "default_format",
        "user",
        "password",
        "quota_key",
        "query_id",
        "session_id",
        "session_timeout",
        "session_check",
        "compress",
        "decompress",
        "buffer_size",
        "wait_end_of_query",
        "client_protocol_version",
        "role",
        "stacktrace",
        "enable_http_compression",
        "http_zlib_compression_level",
        "send_progress_in_http_headers",
        "http_headers_progress_interval_ms",
        "cancel_http_readonly_queries_on_client_close",
        "http_native_compression_disable_checksumming_on_decompress",
    }
)
PARAM_PREFIX = "param_"
DEFAULT_FORMAT = "TabSeparated"
# Formats the chDB Python binding turns into Python objects instead of bytes.
_PYTHON_ONLY_FORMATS = frozenset({"dataframe", "datastore", "arrowtable"})
_SETTING_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_INSERT_FORMAT_RE = re.compile(
    rb"^\s*(INSERT\s+INTO\s.*?)\s+FORMAT\s+([A-Za-z][A-Za-z0-9_]*)[ \t]*(?:\r?\n)?",
    re.IGNORECASE | re.DOTALL,
)
_TRAILING_FORMAT_RE = re.compile(rb"\bFORMAT\s+([A-Za-z][A-Za-z0-9_]*)\s*;?\s*$", re.IGNORECASE)
_CONTENT_TYPES = {
    "tabseparated": "text/tab-separated-values; charset=UTF-8",
    "tsv": "text/tab-separated-values; charset=UTF-8",
    "csv": "text/csv; charset=UTF-8; header=absent",
    "csvwithnames": "text/csv; charset=UTF-8; header=present",
    "json": "application/json; charset=UTF-8",
    "jsoncompact": "application/json; charset=UTF-8",
    "jsoneachrow": "application/x-ndjson; charset=UTF-8",
    "pretty": "text/plain; charset=UTF-8",
}
_SUPPORTED_ENCODINGS = ("gzip", "deflate", "zstd", "lz4")
#: The most a ``multipart/form-data`` body may hold (its fields are read into memory).
MAX_FORM_BYTES = 64 << 20
_SETTINGS_RE = re.compile(r"\s+SETTINGS\s+(?=[A-Za-z_])", re.IGNORECASE)


def split_settings(statement: str) -> tuple[str, str]:
    """Split ``INSERT INTO t [(cols)] [SETTINGS a=1, ...]`` at its SETTINGS clause.

    Args:
        statement: The INSERT head, without FORMAT.

    Returns:
        The head before SETTINGS and the settings list ('' when none).

    """
    depth = 0
    quote = ""
    for i, ch in enumerate(statement):
        if quote:
            if ch == quote:
                quote = ""
            continue
        if ch in "`'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif depth == 0:
            match = _SETTINGS_RE.match(statement, i)
            if match:
                return statement[:i], statement[match.end() :].strip()
    return statement, ""


@dataclass(frozen=True, slots=True)
class RequestOptions:
    """The engine-facing options of one request, split from its URL parameters."""

    query: str = ""
    database: str | None = None
    default_format: str = DEFAULT_FORMAT
    query_id: str | None = None
    session_id: str | None = None
    session_timeout_s: float = 60.0
    session_check: bool = False
    compress_response: bool = False
    settings: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)


def parse_options(url_params: Mapping[str, str]) -> RequestOptions:
    """Split URL parameters into query, transport options, settings and query parameters.

    Args:
        url_params: Decoded URL parameters (last value wins).

    Returns:
        The request options.

    Raises:
        ValueError: On a malformed setting name or session timeout.

    """
    settings: dict[str, str] = {}
    params: dict[str, str] = {}
    for name, value in url_params.items():
        if name.startswith(PARAM_PREFIX):
            params[name[len(PARAM_PREFIX) :]] = value
        elif name not in TRANSPORT_PARAMS:
            if not _SETTING_NAME_RE.match(name):
                msg = f"Invalid setting name {name!r}"
                raise ValueError(msg)
            settings[name] = value
    try:
        timeout = float(url_params.get("session_timeout", "60"))
    except ValueError as exc:
        msg = f"Invalid session timeout: {url_params['session_timeout']!r}"
        raise ValueError(msg) from exc
    return RequestOptions(
        query=url_params.get("query", ""),
        database=url_params.get("database") or None,
        default_format=url_params.get("default_format") or DEFAULT_FORMAT,
        query_id=url_params.get("query_id") or None,
        session_id=url_params.get("session_id") or None,
        session_timeout_s=timeout,
        session_check=url_params.get("session_check", "0") in ("1", "true"),
        compress_response=url_params.get("enable_http_compression", "0") in ("1", "true"),
        settings=settings,
        params=params,
    )


def join_query(query_param: str, body_head: bytes) -> bytes:
    """Join the ``query`` parameter and the body as ClickHouse does.

    Args:
        query_param: The ``query`` URL parameter (may be empty).
        body_head: The request body (may be empty).

    Returns:
        The full statement text (and inline data), as bytes.

    """
    if not query_param:
        return body_head
    if not body_head:
        return query_param.encode("utf-8")
    return query_param.encode("utf-8") + b"\n" + body_head


@dataclass(frozen=True, slots=True)
class InsertSplit:
    """An ``INSERT ... FORMAT X`` statement split from its inline data."""

    statement: str
    fmt: str
    data_offset: int


def split_insert(text: bytes) -> InsertSplit | None:
    """Find an ``INSERT INTO ... FORMAT X`` head and where its data starts.

    Args:
        text: The statement, possibly followed by data in that format.

    Returns:
        The split, or None when ``text`` is not an INSERT with a FORMAT clause.

    """
    match = _INSERT_FORMAT_RE.match(text[:65536])
    if match is None:
        return None
    head = match.group(1)
    if re.search(rb"\bSELECT\b", head, re.IGNORECASE):
        return None
    return InsertSplit(
        statement=head.decode("utf-8").strip(),
        fmt=match.group(2).decode("ascii"),
        data_offset=match.end(),
    )


def output_format(statement: bytes, default_format: str) -> str:
    """Return the output format a statement asks for.

    Args:
        statement: The statement text.
        default_format: The ``default_format`` parameter or ClickHouse's default.

    Returns:
        The trailing ``FORMAT`` clause's format, else the default.

    """
    match = _TRAILING_FORMAT_RE.search(statement[-256:])
    return match.group(1).decode("ascii") if match else default_format


def is_python_only_format(fmt: str) -> bool:
    """Return whether chDB's Python binding would hand back objects, not bytes.

    Args:
        fmt: A format name.

    Returns:
        True for formats the store cannot serve over HTTP.

    """
    return fmt.lower() in _PYTHON_ONLY_FORMATS


def content_type(fmt: str) -> str:
    """Return the Content-Type ClickHouse sends for an output format.

    Args:
        fmt: The output format.

    Returns:
        A MIME type.

    """
    return _CONTENT_TYPES.get(fmt.lower(), "application/octet-stream")


def choose_encoding(accept_encoding: str | None) -> str | None:
    """Pick the response encoding from an ``Accept-Encoding`` header.

    Args:
        accept_encoding: The header value, e.g. ``"lz4,zstd,gzip"``.

    Returns:
        The first encoding the client lists that the store supports, or None.

    """
    if not accept_encoding:
        return None
    for part in accept_encoding.split(","):
        name = part.split(";")[0].strip().lower()
        if name in _SUPPORTED_ENCODINGS:
            return name
    return None


def is_form(content_type: str | None) -> bool:
    """Return whether a request's Content-Type is ``multipart/form-data``."""
    return (content_type or "").split(";")[0].strip().lower() == "multipart/form-data"


def form_fields(content_type: str, body: bytes) -> dict[str, str]:
    """Read the fields of a ``multipart/form-data`` body, as ClickHouse's HTTP handler does.

    Each field is one more request parameter: ``query``, ``param_<name>``, a
    setting. A part with a file name is an external table, which the store
    does not serve.

    Args:
        content_type: The request's Content-Type header (with its boundary).
        body: The whole body, decoded from its Content-Encoding.

    Returns:
        Field name -> value (the last one wins).

    Raises:
        ValueError: A malformed form, a part without a name, a value that is
            not UTF-8, or an external table.

    """
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode("latin-1")
    msg = BytesParser(policy=policy.HTTP).parsebytes(head + body)
    if not msg.is_multipart() or not msg.get_boundary() or msg.defects:
        msg_text = "Malformed multipart/form-data body (no boundary, or parts do not parse)"
        raise ValueError(msg_text)
    out: dict[str, str] = {}
    for part in msg.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str) or not name:
            msg_text = "A multipart/form-data part has no name in its Content-Disposition"
            raise ValueError(msg_text)
        if part.get_filename() is not None:
            msg_text = (f"External data (the form's file part {name!r}) is not supported by "
                        "the local store; send the rows with an INSERT, or query a table")
            raise ValueError(msg_text)
        payload = part.get_payload(decode=True)
        try:
            out[name] = (payload if isinstance(payload, bytes) else b"").decode("utf-8")
        except UnicodeDecodeError as exc:
            msg_text = f"The form field {name!r} is not UTF-8 text"
            raise ValueError(msg_text) from exc
    return out
