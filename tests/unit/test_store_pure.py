"""Pure parts of the store: error statuses, auth, request parsing, body codecs."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io

import lz4.frame
import pytest
import zstandard

from runwatch.store.auth import Credentials, authenticate, credentials_from_request, parse_users
from runwatch.store.errors import CODES, StoreError, from_engine, http_status
from runwatch.store.http_body import decode_body, encode_body, iter_chunked
from runwatch.store.request import (
    choose_encoding,
    form_fields,
    is_form,
    join_query,
    output_format,
    parse_options,
    split_insert,
)


@pytest.mark.parametrize(
    ("name", "status"),
    [
        ("SYNTAX_ERROR", 400),
        ("CANNOT_PARSE_TEXT", 400),
        ("TYPE_MISMATCH", 400),
        ("UNKNOWN_TABLE", 404),
        ("UNKNOWN_DATABASE", 404),
        ("UNKNOWN_SETTING", 404),
        ("AUTHENTICATION_FAILED", 403),
        ("ACCESS_DENIED", 403),
        ("REQUIRED_PASSWORD", 401),
        ("NOT_IMPLEMENTED", 501),
        ("TIMEOUT_EXCEEDED", 408),
        ("QUERY_IS_TOO_LARGE", 413),
        ("READONLY", 500),
        ("LZ4_DECODER_FAILED", 500),
    ],
)
def test_http_status(name: str, status: int) -> None:
    assert http_status(CODES[name]) == status
    assert StoreError.named(name, "x").status == status


def test_unmapped_code_is_500() -> None:
    assert http_status(999_999) == 500


@pytest.mark.parametrize(
    ("message", "code", "text"),
    [
        ("Code: 62. DB::Exception: Syntax error (SYNTAX_ERROR)", 62, "Code: 62."),
        ("Streaming insert failed: Code: 33. DB::Exception: short", 33, "Code: 33."),
        ("something odd", 1001, "Code: 1001. DB::Exception: something odd"),
    ],
)
def test_from_engine(message: str, code: int, text: str) -> None:
    err = from_engine(message)
    assert err.code == code
    assert err.message.startswith(text)
    body = err.body("26.9")
    assert body.endswith(b"(version 26.9)\n") and body.count(b"(version") == 1


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


USERS_DOC = {
    "users": {
        "rw": {"password_sha256_hex": sha("pw"), "readonly": 0},
        "ro": {"password": "ro-pw", "readonly": 1},
        "envy": {"password_env": "ENVY_PW", "password_sha256_hex": sha("fallback")},
    }
}


@pytest.mark.parametrize(
    ("env", "user", "password", "ok", "readonly"),
    [
        ({}, "rw", "pw", True, 0),
        ({}, "rw", "bad", False, None),
        ({}, "ro", "ro-pw", True, 1),
        ({}, "nobody", "pw", False, None),
        ({}, "default", "", False, None),
        ({}, "envy", "fallback", True, 0),
        ({"ENVY_PW": "from-env"}, "envy", "from-env", True, 0),
        ({"ENVY_PW": "from-env"}, "envy", "fallback", False, None),
    ],
)
def test_authenticate(env, user: str, password: str, ok: bool, readonly: int | None) -> None:
    users = parse_users(USERS_DOC, env)
    if ok:
        assert authenticate(users, Credentials(user, password)).readonly == readonly
    else:
        with pytest.raises(StoreError) as info:
            authenticate(users, Credentials(user, password))
        assert info.value.code == CODES["AUTHENTICATION_FAILED"]
        assert info.value.status == 403


@pytest.mark.parametrize(
    "doc",
    [
        {},
        {"users": {"x": "notamap"}},
        {"users": {"x": {"password_sha256_hex": "abc"}}},
        {"users": {"x": {}}},
        {"users": {"x": {"password": "p", "readonly": 7}}},
    ],
)
def test_parse_users_rejects_malformed(doc) -> None:
    with pytest.raises(ValueError):
        parse_users(doc, {})


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.mark.parametrize(
    ("headers", "params", "expected"),
    [
        ({"authorization": basic("a", "b:c")}, {}, Credentials("a", "b:c")),
        ({"x-clickhouse-user": "u", "x-clickhouse-key": "k"}, {}, Credentials("u", "k")),
        ({}, {"user": "p", "password": "q"}, Credentials("p", "q")),
        ({}, {}, Credentials("default", "")),
    ],
)
def test_credentials_from_request(headers, params, expected: Credentials) -> None:
    assert credentials_from_request(headers, params) == expected


@pytest.mark.parametrize(
    ("headers", "params"),
    [
        ({"authorization": basic("a", "b"), "x-clickhouse-user": "u"}, {}),
        ({"authorization": "Basic !!!notbase64"}, {}),
        ({"authorization": "Bearer tok"}, {}),
    ],
)
def test_credentials_refused(headers, params) -> None:
    with pytest.raises(StoreError):
        credentials_from_request(headers, params)


def test_parse_options_splits_params_settings_and_transport() -> None:
    opts = parse_options(
        {
            "query": "SELECT 1",
            "database": "db",
            "param_x": "5",
            "max_threads": "2",
            "session_id": "s",
            "session_timeout": "10",
            "query_id": "q",
            "enable_http_compression": "1",
            "wait_end_of_query": "1",
            "client_protocol_version": "54405",
        }
    )
    assert opts.params == {"x": "5"}
    assert opts.settings == {"max_threads": "2"}
    assert (opts.database, opts.session_id, opts.query_id) == ("db", "s", "q")
    assert opts.session_timeout_s == 10.0 and opts.compress_response


@pytest.mark.parametrize("params", [{"bad name": "1"}, {"session_timeout": "soon"}])
def test_parse_options_rejects(params) -> None:
    with pytest.raises(ValueError):
        parse_options(params)


@pytest.mark.parametrize(
    ("text", "statement", "fmt", "data"),
    [
        (b"INSERT INTO t FORMAT Native", "INSERT INTO t", "Native", b""),
        (b"INSERT INTO db.t (a, b) FORMAT CSV\n1,2\n", "INSERT INTO db.t (a, b)", "CSV", b"1,2\n"),
        (b"insert into t format TSV  \r\n\x00\x01", "insert into t", "TSV", b"\x00\x01"),
        (
            b"INSERT INTO t SETTINGS x=1 FORMAT Arrow\nAB",
            "INSERT INTO t SETTINGS x=1",
            "Arrow",
            b"AB",
        ),
        (b"INSERT INTO t VALUES (1)", None, None, None),
        (b"INSERT INTO t SELECT * FROM u FORMAT Native", None, None, None),
        (b"SELECT 1 FORMAT Native", None, None, None),
    ],
)
def test_split_insert(text: bytes, statement, fmt, data) -> None:
    split = split_insert(text)
    if statement is None:
        assert split is None
    else:
        assert split is not None
        assert (split.statement, split.fmt, text[split.data_offset :]) == (statement, fmt, data)


@pytest.mark.parametrize(
    ("text", "fmt"),
    [
        (b"SELECT 1\n FORMAT Native", "Native"),
        (b"SELECT 1 FORMAT RowBinaryWithNamesAndTypes;", "RowBinaryWithNamesAndTypes"),
        (b"SELECT 'FORMAT JSON' AS x", "TabSeparated"),
    ],
)
def test_output_format(text: bytes, fmt: str) -> None:
    assert output_format(text, "TabSeparated") == fmt


def test_join_query() -> None:
    assert join_query("INSERT INTO t FORMAT CSV", b"1\n") == b"INSERT INTO t FORMAT CSV\n1\n"
    assert join_query("", b"SELECT 1") == b"SELECT 1"
    assert join_query("SELECT 1", b"") == b"SELECT 1"


@pytest.mark.parametrize(
    ("header", "chosen"),
    [("lz4,zstd,br,gzip", "lz4"), ("br, gzip;q=0.5", "gzip"), ("br", None), (None, None)],
)
def test_choose_encoding(header, chosen) -> None:
    assert choose_encoding(header) == chosen


PARTS = [bytes(range(256)) * 40, b"second frame " * 100, b"x"]


def compress_frames(encoding: str) -> bytes:
    if encoding == "lz4":
        return b"".join(lz4.frame.compress(p) for p in PARTS)
    if encoding == "zstd":
        return b"".join(zstandard.ZstdCompressor().compress(p) for p in PARTS)
    return b"".join(gzip.compress(p) for p in PARTS)


@pytest.mark.parametrize("encoding", ["lz4", "zstd", "gzip"])
@pytest.mark.parametrize("split", [1, 7, 1 << 20])
def test_decode_every_frame(encoding: str, split: int) -> None:
    blob = compress_frames(encoding)
    chunks = iter([blob[i : i + split] for i in range(0, len(blob), split)])
    assert b"".join(decode_body(chunks, encoding)) == b"".join(PARTS)


@pytest.mark.parametrize(("encoding", "code"), [("lz4", 618), ("zstd", 561), ("gzip", 354)])
def test_truncated_or_corrupt_frames(encoding: str, code: int) -> None:
    blob = compress_frames(encoding)
    for bad in (blob[:-5], b"\x00garbage" + blob):
        with pytest.raises(StoreError) as info:
            b"".join(decode_body(iter([bad]), encoding))
        assert info.value.code == code


@pytest.mark.parametrize("encoding", ["lz4", "zstd", "gzip", "deflate"])
def test_encode_roundtrip(encoding: str) -> None:
    data = b"payload " * 1000
    encoded = encode_body(data, encoding)
    assert b"".join(decode_body(iter([encoded]), encoding)) == data


def test_iter_chunked() -> None:
    stream = io.BytesIO(b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nTrailer: x\r\n\r\n")
    assert b"".join(iter_chunked(stream)) == b"hello world"
    with pytest.raises(StoreError):
        b"".join(iter_chunked(io.BytesIO(b"zz\r\nhello\r\n")))
    with pytest.raises(StoreError):
        b"".join(iter_chunked(io.BytesIO(b"a\r\nshort")))


@pytest.mark.parametrize(
    ("statement", "head", "settings"),
    [
        ("INSERT INTO t (a, b)", "INSERT INTO t (a, b)", ""),
        ("INSERT INTO t SETTINGS x=1", "INSERT INTO t", "x=1"),
        (
            "insert into t (a) settings x=1, y='SETTINGS z'",
            "insert into t (a)",
            "x=1, y='SETTINGS z'",
        ),
        (
            "INSERT INTO `t SETTINGS` (a) SETTINGS async_insert=0",
            "INSERT INTO `t SETTINGS` (a)",
            "async_insert=0",
        ),
        ("INSERT INTO t (`SETTINGS x`)", "INSERT INTO t (`SETTINGS x`)", ""),
    ],
)
def test_split_settings(statement: str, head: str, settings: str) -> None:
    from runwatch.store.engine import split_settings

    assert split_settings(statement) == (head, settings)


def _form(*parts: tuple[str, str | None, bytes]) -> tuple[str, bytes]:
    b = "rwBoundary42"
    body = b""
    for name, filename, data in parts:
        disp = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        body += f"--{b}\r\nContent-Disposition: {disp}\r\n\r\n".encode() + data + b"\r\n"
    return f"multipart/form-data; boundary={b}", body + f"--{b}--\r\n".encode()


def test_form_fields_read_like_url_parameters() -> None:
    ids = ",".join(f"'run-{i:05d}'" for i in range(2000)).encode()  # far past a URL's length
    ctype, body = _form(("query", None, b"SELECT {r:Array(String)} FORMAT Native"),
                        ("param_r", None, b"[" + ids + b"]"), ("max_threads", None, b"2"),
                        ("param_t", None, "caf\u00e9\r\nline".encode()))
    assert is_form(ctype) and is_form("Multipart/Form-Data;boundary=x")
    assert not is_form("application/x-www-form-urlencoded") and not is_form(None)
    fields = form_fields(ctype, body)
    assert fields["query"] == "SELECT {r:Array(String)} FORMAT Native"
    assert fields["param_r"] == "[" + ids.decode() + "]"
    assert fields["param_t"] == "caf\u00e9\r\nline"  # a value's own line breaks are kept
    opts = parse_options(fields)
    assert opts.settings == {"max_threads": "2"} and set(opts.params) == {"r", "t"}


@pytest.mark.parametrize(("ctype", "body", "match"), [
    ("multipart/form-data", b"query=SELECT 1", "no boundary"),
    (*_form(("param_x", None, b"1"), ("tbl", "rows.tsv", b"1\n2\n")), "External data"),
    (*_form(("param_x", None, b"\xff\xfe")), "not UTF-8"),
])
def test_bad_forms_are_named(ctype: str, body: bytes, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        form_fields(ctype, body)
