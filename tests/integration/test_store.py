"""The store through clickhouse-connect over HTTP, and raw HTTP where the client hides details."""

from __future__ import annotations

import gzip
import multiprocessing
import signal
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import clickhouse_connect
import lz4.frame
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import zstandard
from clickhouse_connect.driver.exceptions import DatabaseError

from runwatch.store.errors import CODES, http_status
from runwatch.store.process import StoreProcess, start_store

pytestmark = pytest.mark.integration
RW = ("runwatch", "runwatch")
RO = ("analyst", "analyst")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StoreProcess]:
    root = tmp_path_factory.mktemp("store")
    proc = start_store(root / "data", root / "store.log")
    yield proc
    assert proc.stop() == 0


@pytest.fixture
def database(store: StoreProcess) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = client(store)
    admin.command(f"CREATE DATABASE {name}")
    yield name
    admin.command(f"DROP DATABASE {name}")


def client(store: StoreProcess, creds: tuple[str, str] = RW, **kwargs):
    return clickhouse_connect.get_client(
        host="127.0.0.1", port=store.port, username=creds[0], password=creds[1], **kwargs
    )


def http(
    store: StoreProcess,
    body: bytes = b"",
    params: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
    creds: tuple[str, str] | None = RW,
    method: str = "POST",
) -> tuple[int, dict[str, str], bytes]:
    query = urllib.parse.urlencode(params or {})
    req = urllib.request.Request(
        f"{store.url}/?{query}", data=body if method == "POST" else None, method=method
    )
    if creds is not None:
        req.add_header("X-ClickHouse-User", creds[0])
        req.add_header("X-ClickHouse-Key", creds[1])
    for name, value in (headers or {}).items():
        req.add_header(name, value)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def test_ping_version_and_headers(store: StoreProcess) -> None:
    c = client(store)
    assert c.ping()
    assert c.server_version == c.command("SELECT version()")
    with urllib.request.urlopen(f"{store.url}/ping") as resp:
        assert resp.read() == b"Ok.\n"
    status, headers, body = http(store, b"SELECT 1 FORMAT JSONEachRow", {"query_id": "q-1"})
    assert (status, body) == (200, b'{"1":1}\n')
    assert headers["X-ClickHouse-Query-Id"] == "q-1"
    assert headers["X-ClickHouse-Format"] == "JSONEachRow"
    assert headers["X-ClickHouse-Timezone"]
    assert headers["X-ClickHouse-Server-Display-Name"]
    assert '"read_rows":"1"' in headers["X-ClickHouse-Summary"]


def test_mergetree_ttl_drops_expired_rows(store: StoreProcess, database: str) -> None:
    c = client(store, database=database)
    c.command(
        "CREATE TABLE ev (ts DateTime, v UInt32) ENGINE = MergeTree ORDER BY ts "
        "TTL ts + INTERVAL 1 DAY"
    )
    c.command("INSERT INTO ev VALUES (now() - INTERVAL 3 DAY, 1), (now(), 2), (now(), 3)")
    c.command("OPTIMIZE TABLE ev FINAL")
    assert c.query("SELECT groupArray(v) FROM (SELECT v FROM ev ORDER BY v)").result_rows == [
        ([2, 3],)
    ]


def test_aggregating_materialized_view(store: StoreProcess, database: str) -> None:
    c = client(store, database=database)
    c.command("CREATE TABLE raw (run String, loss Float64) ENGINE = MergeTree ORDER BY run")
    c.command(
        "CREATE TABLE agg (run String, n AggregateFunction(count), s AggregateFunction(sum, "
        "Float64), u AggregateFunction(uniq, Float64)) ENGINE = AggregatingMergeTree ORDER BY run"
    )
    c.command(
        "CREATE MATERIALIZED VIEW mv TO agg AS SELECT run, countState() AS n, "
        "sumState(loss) AS s, uniqState(loss) AS u FROM raw GROUP BY run"
    )
    rows = [["a", 1.0], ["a", 2.0], ["b", 5.0]]
    c.insert("raw", rows, column_names=["run", "loss"])
    c.insert("raw", [["a", 2.0]], column_names=["run", "loss"])
    got = c.query(
        "SELECT run, countMerge(n), sumMerge(s), uniqMerge(u) FROM agg GROUP BY run ORDER BY run"
    ).result_rows
    assert got == [("a", 3, 5.0, 2), ("b", 1, 5.0, 1)]


N = 1_000_000


def frame(n: int) -> pd.DataFrame:
    idx = np.arange(n, dtype=np.uint64)
    return pd.DataFrame(
        {
            "id": idx,
            "step": (idx % 1000).astype(np.uint32),
            "loss": np.linspace(0.0, 1.0, n),
            "run": np.array(["r0", "r1", "r2", "r3"])[idx % 4],
        }
    )


@pytest.mark.parametrize("how", ["insert_df", "insert_arrow"])
def test_million_rows_and_aggregates(store: StoreProcess, database: str, how: str) -> None:
    c = client(store, database=database)
    c.command(
        "CREATE TABLE m (id UInt64, step UInt32, loss Float64, run LowCardinality(String)) "
        "ENGINE = MergeTree ORDER BY id"
    )
    df = frame(N)
    if how == "insert_df":
        summary = c.insert_df("m", df)
    else:
        summary = c.insert_arrow("m", pa.Table.from_pandas(df, preserve_index=False))
    assert summary.written_rows == N
    got = c.query("SELECT count(), sum(id), uniqExact(run), max(step) FROM m").result_rows
    assert got == [(N, int(df["id"].sum()), 4, 999)]
    by_run = c.query_df("SELECT run, count() AS n FROM m GROUP BY run ORDER BY run")
    assert by_run["n"].tolist() == [N // 4] * 4


@pytest.mark.parametrize("how", ["native", "arrow", "values"])
def test_rejected_rows_are_an_error_not_a_silent_drop(
    store: StoreProcess, database: str, how: str
) -> None:
    # chDB's streaming insert reports success when a CONSTRAINT or a
    # materialized view rejects rows at write time; the store must not.
    c = client(store, database=database)
    c.command("CREATE TABLE pos (x Int32, CONSTRAINT positive CHECK x > 0) "
              "ENGINE = MergeTree ORDER BY x")
    c.command("CREATE TABLE src (x Int32) ENGINE = MergeTree ORDER BY x")
    c.command("CREATE MATERIALIZED VIEW mv TO pos AS SELECT x FROM src")
    for table in ("pos", "src"):
        with pytest.raises(DatabaseError) as info:
            if how == "native":
                c.insert(table, [[1], [-5]], column_names=["x"])
            elif how == "arrow":
                c.insert_arrow(table, pa.table({"x": pa.array([1, -5], pa.int32())}))
            else:
                c.command(f"INSERT INTO {table} VALUES (1), (-5)")
        assert info.value.code == CODES["VIOLATED_CONSTRAINT"], str(info.value)
    assert c.query("SELECT count() FROM pos").result_rows == [(0,)]


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [
        ([None, None], 2),  # identical blocks: deduplicated by content
        (["a", "b"], 4),  # distinct tokens: both kept although the data is equal
        (["a", "a"], 2),  # same token: the retry is dropped
    ],
)
def test_insert_settings_reach_the_engine(
    store: StoreProcess, database: str, tokens: list[str | None], expected: int
) -> None:
    c = client(store, database=database)
    c.command("CREATE TABLE d (x Int32) ENGINE = MergeTree ORDER BY x "
              "SETTINGS non_replicated_deduplication_window = 10")
    for token in tokens:
        settings = {"insert_deduplication_token": token} if token else {}
        c.insert("d", [[1], [2]], column_names=["x"], settings=settings)
    assert c.query("SELECT count() FROM d").result_rows == [(expected,)]


def test_readonly_user_refused_by_engine(store: StoreProcess, database: str) -> None:
    client(store, database=database).command(f"CREATE TABLE {database}.r (a UInt8) ENGINE = Log")
    ro = client(store, RO, database=database)
    assert ro.query("SELECT count() FROM r").result_rows == [(0,)]
    with pytest.raises(DatabaseError) as info:
        ro.insert("r", [[1]], column_names=["a"])
    assert info.value.code == CODES["READONLY"]
    assert "READONLY" in str(info.value)
    for sql in (f"DROP TABLE {database}.r", "SET readonly = 0"):
        status, headers, body = http(store, sql.encode(), creds=RO)
        assert headers["X-ClickHouse-Exception-Code"] == "164", body


@pytest.mark.parametrize(
    ("sql", "params", "expected"),
    [
        ("SELECT {x:UInt32} + 1", {"x": 41}, 42),
        ("SELECT length({s:String})", {"s": "it's ü"}, len("it's ü".encode())),
        ("SELECT arraySum({a:Array(Int64)})", {"a": [1, -2, 30]}, 29),
    ],
)
def test_param_queries(store: StoreProcess, sql: str, params: dict, expected: int) -> None:
    assert client(store).query(sql, parameters=params).result_rows == [(expected,)]


def test_param_raw_http(store: StoreProcess) -> None:
    status, _, body = http(store, b"SELECT {n:UInt8} * 2", {"param_n": "21"})
    assert (status, body) == (200, b"42\n")


def test_long_parameters_sent_as_a_form(store: StoreProcess, database: str) -> None:
    """clickhouse-connect moves bound parameters past 4 KiB into a multipart form."""
    c = client(store, database=database)
    c.command("CREATE TABLE runs (run_id String, n UInt32) ENGINE = MergeTree ORDER BY run_id")
    ids = [f"run-{i:05d}-{uuid.uuid4().hex}" for i in range(3000)]  # ~130 KB of parameters
    c.insert("runs", [[r, i] for i, r in enumerate(ids)], column_names=["run_id", "n"])
    got = c.query("SELECT count(), sum(n) FROM runs WHERE run_id IN {r:Array(String)} "
                  "AND n >= {lo:UInt32}", parameters={"r": ids[:2500], "lo": 10}).result_rows
    assert got == [(2490, sum(range(10, 2500)))]
    b = "rwb"
    body = (f'--{b}\r\nContent-Disposition: form-data; name="query"\r\n\r\nSELECT 1\r\n'
            f'--{b}\r\nContent-Disposition: form-data; name="t"; filename="t.tsv"\r\n\r\n'
            f"1\r\n--{b}--\r\n").encode()
    status, _, text = http(store, body, headers={
        "Content-Type": f"multipart/form-data; boundary={b}"})
    assert status == 400 and b"External data" in text and b"BAD_ARGUMENTS" in text, text


def test_settings_do_not_leak(store: StoreProcess) -> None:
    c = client(store)
    default = c.command("SELECT getSetting('max_block_size')")
    assert c.command("SELECT getSetting('max_block_size')", settings={"max_block_size": 777}) == 777
    assert c.command("SELECT getSetting('max_block_size')") == default
    other = client(store)
    assert other.command("SELECT getSetting('max_block_size')") == default
    for _ in range(2):  # sessionless raw HTTP, settings in the URL
        _, _, body = http(store, b"SELECT getSetting('max_block_size')", {"max_block_size": "5"})
        assert body == b"5\n"
        _, _, body = http(store, b"SELECT getSetting('max_block_size')")
        assert body == f"{default}\n".encode()


def test_database_param_and_session_state(store: StoreProcess, database: str) -> None:
    c = client(store, database=database)
    assert c.command("SELECT currentDatabase()") == database
    assert client(store).command("SELECT currentDatabase()") == "default"
    c.command("SET max_block_size = 4321")  # SET persists within the session, like ClickHouse
    assert c.command("SELECT getSetting('max_block_size')") == 4321
    assert client(store).command("SELECT getSetting('max_block_size')") != 4321


def frames(encoding: str, parts: list[bytes]) -> bytes:
    if encoding == "lz4":
        return b"".join(lz4.frame.compress(p) for p in parts)
    if encoding == "zstd":
        return b"".join(zstandard.ZstdCompressor().compress(p) for p in parts)
    return b"".join(gzip.compress(p) for p in parts)


def decompress(encoding: str, data: bytes) -> bytes:
    if encoding == "lz4":
        return lz4.frame.decompress(data)
    if encoding == "zstd":
        return zstandard.ZstdDecompressor().decompress(data)
    return gzip.decompress(data)


@pytest.mark.parametrize("encoding", ["lz4", "zstd", "gzip"])
def test_compression_both_ways(store: StoreProcess, database: str, encoding: str) -> None:
    c = client(store, database=database, compress=encoding)
    c.command("CREATE TABLE z (a UInt64, s String) ENGINE = MergeTree ORDER BY a")
    c.insert_df("z", pd.DataFrame({"a": np.arange(300_000, dtype=np.uint64), "s": "x" * 20}))
    assert c.query("SELECT count(), sum(a) FROM z").result_rows == [(300_000, 44999850000)]
    # Three frames in one body: every frame must be decoded, not just the first.
    parts = [b"".join(f"{i},s{i}\n".encode() for i in range(k, k + 1000)) for k in (0, 1000, 2000)]
    status, _, body = http(
        store,
        frames(encoding, parts),
        {"query": f"INSERT INTO {database}.z FORMAT CSV"},
        {"Content-Encoding": encoding},
    )
    assert status == 200, body
    assert c.command("SELECT count() FROM z WHERE s LIKE 's%'") == 3000
    # Response compression only when asked for (Accept-Encoding + enable_http_compression=1).
    sql = b"SELECT number FROM numbers(5) FORMAT CSV"
    status, headers, body = http(
        store, sql, {"enable_http_compression": "1"}, {"Accept-Encoding": encoding}
    )
    assert headers.get("Content-Encoding") == encoding
    assert decompress(encoding, body) == b"0\n1\n2\n3\n4\n"
    _, headers, body = http(store, sql, headers={"Accept-Encoding": encoding})
    assert "Content-Encoding" not in headers and body == b"0\n1\n2\n3\n4\n"


@pytest.mark.parametrize(
    ("body", "params", "headers", "creds", "code", "status"),
    [
        (b"SELEC 1", {}, {}, RW, 62, 400),
        (b"SELECT * FROM no_such_table", {}, {}, RW, 60, 404),
        (b"SELECT no_such_fn(1)", {}, {}, RW, 46, 404),
        (b"SELECT 1", {"no_such_setting": "1"}, {}, RW, 115, 404),
        (b"SELECT 1", {"database": "no_such_db"}, {}, RW, 81, 404),
        (b"SELECT 1", {}, {}, ("nobody", "x"), 516, 403),
        (b"SELECT 1", {}, {}, ("runwatch", "wrong"), 516, 403),
        (b"SELECT 1", {}, {}, None, 516, 403),
        (b"\x04\x22\x4d\x18garbage", {}, {"Content-Encoding": "lz4"}, RW, 618, 500),
        (zstandard.ZstdCompressor().compress(b"SELECT 1")[:-3], {}, {"Content-Encoding": "zstd"},
         RW, 561, 500),
        (b"not gzip at all", {}, {"Content-Encoding": "gzip"}, RW, 354, 500),
        (b"SELECT 1", {}, {"Content-Encoding": "snappy-x"}, RW, 48, 501),
    ],
)  # fmt: skip
def test_bad_input_answered_like_clickhouse(
    store: StoreProcess, body, params, headers, creds, code: int, status: int
) -> None:
    got_status, got_headers, got_body = http(store, body, params, headers, creds)
    assert got_headers["X-ClickHouse-Exception-Code"] == str(code)
    assert got_status == status == http_status(code)
    assert got_body.startswith(f"Code: {code}. DB::Exception:".encode()), got_body
    assert client(store).command("SELECT 1") == 1  # still serving


def test_client_sees_error_codes(store: StoreProcess) -> None:
    with pytest.raises(DatabaseError) as info:
        client(store).query("SELECT * FROM nowhere_at_all")
    assert info.value.code == 60
    with pytest.raises(DatabaseError) as info:
        client(store, ("runwatch", "nope"))
    assert info.value.code == 516


def test_error_code_table_matches_engine(store: StoreProcess) -> None:
    pairs = ", ".join(f"({code}, '{name}')" for name, code in CODES.items())
    bad = client(store).query(
        f"SELECT c, n FROM (SELECT arrayJoin([{pairs}]) AS p, p.1 AS c, p.2 AS n) "
        "WHERE errorCodeToName(c) != n"
    )
    assert bad.result_rows == []


def _worker(port: int, database: str, worker: int, rows: int) -> int:
    c = clickhouse_connect.get_client(
        host="127.0.0.1", port=port, username="runwatch", password="runwatch", database=database
    )
    for part in range(4):
        start = worker * rows + part * (rows // 4)
        ids = np.arange(start, start + rows // 4, dtype=np.uint64)
        c.insert_df("p", pd.DataFrame({"id": ids, "w": np.full(len(ids), worker, np.uint8)}))
        c.query("SELECT count() FROM p")
    return int(c.command(f"SELECT count() FROM p WHERE w = {worker}"))


def test_several_client_processes(store: StoreProcess, database: str) -> None:
    client(store, database=database).command(
        "CREATE TABLE p (id UInt64, w UInt8) ENGINE = MergeTree ORDER BY id"
    )
    workers, rows = 4, 40_000
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(workers) as pool:
        counts = pool.starmap(_worker, [(store.port, database, w, rows) for w in range(workers)])
    assert counts == [rows] * workers
    got = client(store, database=database).query("SELECT count(), uniqExact(id) FROM p")
    assert got.result_rows == [(workers * rows, workers * rows)]


def test_sigterm_loses_no_acknowledged_insert(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = start_store(data, tmp_path / "a.log")
    c = client(first)
    c.command("CREATE TABLE d (id UInt64) ENGINE = MergeTree ORDER BY id")
    acked = 0
    for k in range(5):
        c.insert_df(
            "d", pd.DataFrame({"id": np.arange(k * 10_000, (k + 1) * 10_000, dtype=np.uint64)})
        )
        acked += 10_000
    assert first.stop(signal.SIGTERM) == 0
    second = start_store(data, tmp_path / "b.log")
    try:
        assert client(second).command("SELECT count() FROM d") == acked
    finally:
        assert second.stop(signal.SIGINT) == 0


def test_the_pagers_investigation_link_opens_a_play_page(store: StoreProcess) -> None:
    """Before the fix the link in every alert (Alertmanager's generatorURL, PagerDuty's and
    Slack's "Investigate the run", default ``http://127.0.0.1:8123/play?user=analyst#...``)
    answered 404 "There is no handle /play" from the store."""
    import base64
    import json

    from runwatch.core.paging.payloads import investigation_url
    from runwatch.pager.service import PagerSettings

    template = PagerSettings().investigate_url_template.replace("127.0.0.1:8123",
                                                                 f"127.0.0.1:{store.port}")
    link = investigation_url(template, "run-<42>")
    with urllib.request.urlopen(link.split("#", 1)[0], timeout=30) as resp:
        page = resp.read().decode()
        assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/html")
    assert '"X-ClickHouse-User"' in page and "default_format=JSONCompact" in page
    assert "textContent" in page and "innerHTML" not in page  # values are written as text
    sql = base64.b64decode(link.split("#", 1)[1]).decode()
    assert "run_id = 'run-<42>'" in sql
    # the request the page sends, as the readonly user of the link
    status, _headers, body = http(store, b"SELECT 1 AS x, 'a<b>' AS s",
                                  {"default_format": "JSONCompact"}, creds=RO)
    assert status == 200, body
    doc = json.loads(body)
    assert [m["name"] for m in doc["meta"]] == ["x", "s"] and doc["data"] == [[1, "a<b>"]]


@pytest.mark.parametrize(("argv", "code"), [
    (["cost", "--database", "rw_no_such_db"], 2),
    (["capacity", "--database", "rw_no_such_db"], 2),
    (["gate", "check", "r1", "--no-publish", "--database", "rw_no_such_db"], 3),
])
def test_a_database_that_does_not_exist_is_named_not_a_refused_connection(
        stack, argv: list[str], code: int, capsys, monkeypatch) -> None:
    # cost and capacity said "the store refused the connection", gate "cannot reach ClickHouse"
    from runwatch import cli

    monkeypatch.setenv("CLICKHOUSE_URL", stack.clickhouse_url)
    assert cli.main(argv) == code
    err = capsys.readouterr().err
    want = f"error: database 'rw_no_such_db' does not exist on ClickHouse at {stack.clickhouse_url}"
    assert want in err and "runwatch db migrate --database rw_no_such_db" in err, err


GOVERNANCE = [(["investigate", "r1"], 2), (["slo", "status"], 2), (["cost"], 2),
              (["capacity"], 2), (["gate", "check", "r1", "--no-publish"], 3)]


@pytest.mark.parametrize(("argv", "code"), GOVERNANCE, ids=[a[0] for a, _c in GOVERNANCE])
@pytest.mark.parametrize(("database", "line"), [
    ("rw_no_such_db", "error: database 'rw_no_such_db' does not exist on ClickHouse at {url} "
     "(create it with `runwatch db migrate --database rw_no_such_db`, or pass --database)"),
    ("default", "error: database 'default' holds no runwatch tables (run `runwatch db migrate "
     "--database default`, or pass --database)"),
    ("x;y", "error: database name 'x;y' is not a plain identifier (letters, digits and _)"),
], ids=["missing", "no-tables", "bad-name"])
def test_every_governance_command_refuses_a_bad_database_in_the_same_line(
        store: StoreProcess, argv: list[str], code: int, database: str, line: str, capsys,
        monkeypatch) -> None:
    """``slo status --database nosuch`` printed ClickHouse's code-81 exception, ``cost`` and
    ``capacity --database default`` its code-60 one, and ``cost --database 'x;y'`` advised
    ``runwatch db migrate --database x;y``: one shared check now, one line each."""
    from runwatch import cli

    monkeypatch.setenv("CLICKHOUSE_URL", store.url)
    assert cli.main([*argv, "--database", database]) == code
    assert capsys.readouterr().err.strip() == line.format(url=store.url)
