"""The store refuses what reaches the host or network, keeps per-user limits, and cancels abandoned
queries: real clickhouse-connect (and raw HTTP) against a store process of this module's own."""

from __future__ import annotations

import base64
import http.client as httpclient
import os
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import clickhouse_connect
import pytest
import yaml
from clickhouse_connect.driver.exceptions import DatabaseError

from runwatch.store.process import StoreProcess, start_store

pytestmark = pytest.mark.integration
RW = ("runwatch", "runwatch")
RO = ("analyst", "analyst")
HEAVY = "SELECT count() FROM numbers(100000000000) WHERE sipHash64(number) % 7 = 3"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("granted")
    (root / "files").mkdir()
    (root / "files" / "a.csv").write_text("1\n2\n3\n")
    (root / "files" / "b.csv").write_text("4\n")
    (root / "outside.csv").write_text("secret\n")
    return root / "files"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, files: Path) -> Iterator[StoreProcess]:
    root = tmp_path_factory.mktemp("hardened")
    users = yaml.safe_load((Path(__file__).parents[2] / "infra/clickhouse/users.yaml").read_text())
    users["users"]["filer"] = {"password": "filer", "readonly": 2, "grants": [{"file": str(files)}]}
    users["users"]["tight"] = {"password": "tight", "readonly": 1, "profile": "tight"}
    users["users"]["hog"] = {"password": "hog", "readonly": 1, "profile": "hog"}
    users["profiles"]["tight"] = {
        "settings": {"max_execution_time": 2, "max_result_rows": 5000,
                     "result_overflow_mode": "throw", "max_threads": 1},
        "constraints": {"max_execution_time": {"max": 3}},
        "max_concurrent_queries": 1,
    }  # fmt: skip
    users["profiles"]["hog"] = {
        "settings": {"max_execution_time": 20, "max_memory_usage": 4 << 30, "max_threads": 1},
        "max_memory_usage_for_user": 200 << 20,
    }
    path = root / "users.yaml"
    path.write_text(yaml.safe_dump(users))
    proc = start_store(root / "data", root / "store.log", users=path)
    yield proc
    assert proc.stop() == 0


@pytest.fixture(scope="module")
def db(store: StoreProcess) -> str:
    name = f"h_{uuid.uuid4().hex[:10]}"
    admin = client(store)
    admin.command(f"CREATE DATABASE {name}")
    admin.command(f"CREATE TABLE {name}.t (x UInt64, s String) ENGINE = MergeTree ORDER BY x")
    return name


def client(store: StoreProcess, creds: tuple[str, str] = RW, **kwargs):
    return clickhouse_connect.get_client(
        host="127.0.0.1", port=store.port, username=creds[0], password=creds[1], **kwargs
    )


def http(store: StoreProcess, sql: str, params: dict[str, str] | None = None,
         creds: tuple[str, str] = RW, method: str = "POST") -> tuple[int, dict, str]:  # fmt: skip
    query = dict(params or {})
    if method == "GET":
        query["query"] = sql
    req = urllib.request.Request(
        f"{store.url}/?{urllib.parse.urlencode(query)}",
        data=sql.encode() if method == "POST" else None,
        method=method,
    )
    req.add_header("X-ClickHouse-User", creds[0])
    req.add_header("X-ClickHouse-Key", creds[1])
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, dict(resp.headers), resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read().decode()


REFUSED = [
    ("file", "SELECT * FROM file('/etc/passwd', 'LineAsString')"),
    ("file", "select * from /* hidden */ FiLe ( '/etc/passwd' ,\n 'LineAsString' ) -- c"),
    ("file", "SELECT * FROM `file`('/etc/passwd', 'LineAsString')"),
    ("file", "SELECT file('/etc/passwd')"),
    ("file", "DESCRIBE TABLE file('/etc/passwd', 'CSV')"),
    ("url", "SELECT * FROM url('http://127.0.0.1:9093/api/v2/status', 'LineAsString')"),
    ("url", "WITH x AS (SELECT * FROM (SELECT * FROM URL('http://127.0.0.1:1/', 'LineAsString')))"
            " SELECT * FROM x"),
    ("url", "SELECT 1 IN url('http://127.0.0.1:1/', 'CSV', 'x UInt8')"),
    ("url", "SELECT * FROM system.one WHERE dummy IN "
            "(SELECT * FROM url('http://127.0.0.1:1/', 'CSV', 'x UInt8'))"),
    ("url", "SELECT * FROM view(SELECT * FROM url('http://127.0.0.1:1/', 'LineAsString'))"),
    ("url", "EXPLAIN SELECT * FROM url('http://127.0.0.1:1/', 'LineAsString')"),
    ("url", "SELECT * FROM system.one AS a JOIN url('http://127.0.0.1:1/', 'CSV', 'x UInt8') AS b"
            " ON 1"),
    ("s3", "SELECT * FROM s3('http://127.0.0.1:1/b/k.csv')"),
    ("s3cluster", "SELECT * FROM s3Cluster('c', 'http://127.0.0.1:1/b/k.csv')"),
    ("gcs", "SELECT * FROM gcs('http://127.0.0.1:1/b/k.csv')"),
    ("hdfs", "SELECT * FROM hdfs('hdfs://127.0.0.1:1/x', 'CSV', 'x UInt8')"),
    ("remote", "SELECT * FROM remote('127.0.0.1:1', system.one)"),
    ("remotesecure", "SELECT * FROM remoteSecure('127.0.0.1:1', system.one)"),
    ("cluster", "SELECT * FROM cluster('default', system.one)"),
    ("mysql", "SELECT * FROM mysql('127.0.0.1:1', 'd', 't', 'u', 'p')"),
    ("postgresql", "SELECT * FROM postgresql('127.0.0.1:1', 'd', 't', 'u', 'p')"),
    ("mongodb", "SELECT * FROM mongodb('127.0.0.1:1', 'd', 'c', 'u', 'p', 'x UInt8')"),
    ("jdbc", "SELECT * FROM jdbc('jdbc:x://h', 't')"),
    ("odbc", "SELECT * FROM odbc('DSN=x', 't')"),
    ("sqlite", "SELECT * FROM sqlite('/etc/passwd', 't')"),
    ("executable", "SELECT * FROM executable('id', 'TSV', 'x String')"),
    ("azureblobstorage", "SELECT * FROM azureBlobStorage('http://127.0.0.1:1', 'c', 'b')"),
    ("filesystem", "SELECT * FROM filesystem('/etc')"),
    ("python", "SELECT * FROM python('x')"),
    ("input", "INSERT INTO {db}.t SELECT x, '' FROM input('x UInt64') FORMAT CSV"),
    ("file", "INSERT INTO FUNCTION file('/tmp/rw-evil.csv', 'CSV') SELECT 1"),
    ("file", "CREATE TABLE {db}.f (s String) ENGINE = File(LineAsString, '/etc/passwd')"),
    ("file", "CREATE TABLE {db}.f2 AS file('/etc/passwd', 'LineAsString')"),
    ("url", "CREATE TABLE {db}.u (s String) ENGINE = URL('http://127.0.0.1:1/', LineAsString)"),
    ("s3", "CREATE TABLE {db}.s (s String) ENGINE = S3('http://127.0.0.1:1/b/k', 'CSV')"),
    ("distributed", "CREATE TABLE {db}.d (x UInt8) ENGINE = Distributed('c', 'db', 't')"),
    ("url", "CREATE VIEW {db}.v AS SELECT * FROM url('http://127.0.0.1:1/', 'LineAsString')"),
    ("url", "CREATE MATERIALIZED VIEW {db}.mv ENGINE = Memory AS "
            "SELECT * FROM url('http://127.0.0.1:1/', 'LineAsString')"),
    ("filesystem", "CREATE DATABASE h_fs ENGINE = Filesystem('/etc')"),
    ("mysql", "CREATE DATABASE h_my ENGINE = MySQL('127.0.0.1:1', 'd', 'u', 'p')"),
    ("file", "CREATE DICTIONARY {db}.d1 (k UInt64, v String) PRIMARY KEY k "
             "SOURCE(FILE(path '/etc/passwd' format 'CSV')) LAYOUT(FLAT()) LIFETIME(0)"),
    ("http", "CREATE DICTIONARY {db}.d2 (k UInt64, v String) PRIMARY KEY k "
             "SOURCE(HTTP(url 'http://127.0.0.1:1/' format 'CSV')) LAYOUT(FLAT()) LIFETIME(0)"),
    ("executable", "CREATE DICTIONARY {db}.d3 (k UInt64, v String) PRIMARY KEY k "
                   "SOURCE(EXECUTABLE(command 'id' format 'TSV')) LAYOUT(FLAT()) LIFETIME(0)"),
    ("remote", "CREATE DICTIONARY {db}.d4 (k UInt64, v String) PRIMARY KEY k "
               "SOURCE(CLICKHOUSE(HOST '10.0.0.1' PORT 9000 QUERY 'SELECT 1, 2')) "
               "LAYOUT(FLAT()) LIFETIME(0)"),
    ("outfile", "SELECT 1 INTO OUTFILE '/tmp/rw-evil.txt'"),
    ("outfile", "SELECT * FROM (SELECT 1) INTO OUTFILE '/tmp/rw-evil.txt' TRUNCATE FORMAT CSV"),
    ("infile", "INSERT INTO {db}.t FROM INFILE '/etc/passwd' FORMAT LineAsString"),
    ("system", "SYSTEM SHUTDOWN"),
    ("system", "system   drop   dns cache"),
    ("kill", "KILL QUERY WHERE 1"),
    ("backup", "BACKUP TABLE {db}.t TO File('/tmp/rw-backup')"),
    ("attach", "ATTACH TABLE {db}.a FROM '/etc' (s String) ENGINE = MergeTree ORDER BY s"),
    ("disk", "CREATE TABLE {db}.dk (x UInt8) ENGINE = MergeTree ORDER BY x "
             "SETTINGS disk = disk(type = local, path = '/tmp/rw-disk/')"),
    ("disk", "CREATE TABLE {db}.dk2 (x UInt8) ENGINE = MergeTree ORDER BY x "
             "SETTINGS index_granularity = 8192, `disk` = disk(type = local, path = '/tmp/rw-d/')"),
    ("disk", "ALTER TABLE {db}.t MODIFY SETTING storage_policy = 'x'"),
    ("access", "EXECUTE AS other SELECT 1"),
    ("access", "CREATE USER evil IDENTIFIED WITH no_password"),
    ("access", "GRANT ALL ON *.* TO evil"),
]  # fmt: skip


@pytest.mark.parametrize(("what", "sql"), REFUSED, ids=[f"{w}-{i}" for i, (w, _) in
                                                       enumerate(REFUSED)])  # fmt: skip
def test_refused_for_the_read_write_user(store: StoreProcess, db: str, what: str, sql: str) -> None:
    with pytest.raises(DatabaseError) as info:
        client(store).command(sql.format(db=db))
    text = str(info.value)
    assert "code: 497" in text, text
    assert what in text.lower().replace("remotesecure", "remotesecure"), text
    assert "refused" in text and "grants" in text, text


@pytest.mark.parametrize("method", ["POST", "GET"])
@pytest.mark.parametrize("creds", [RW, RO])
def test_refusal_status_and_code_over_raw_http(store: StoreProcess, method: str, creds) -> None:
    status, headers, body = http(
        store, "SELECT * FROM file('/etc/passwd', 'LineAsString')", creds=creds, method=method
    )
    assert status == 403, body
    assert headers["X-ClickHouse-Exception-Code"] == "497"
    assert "table function file is refused" in body
    assert "root:" not in body


def test_refused_in_a_session_and_in_the_query_parameter(store: StoreProcess) -> None:
    session = {"session_id": uuid.uuid4().hex}
    status, _, body = http(store, "SET max_threads = 1", params=session)
    assert status == 200, body
    for params in (session, {"query": "SELECT * FROM url('http://127.0.0.1:1/', 'LineAsString')"}):
        status, _, body = http(store, "" if "query" in params else
                               "SELECT * FROM url('http://127.0.0.1:1/', 'LineAsString')",
                               params=params)  # fmt: skip
        assert status == 403, body
        assert "table function url is refused" in body


def test_several_statements_are_one_error(store: StoreProcess) -> None:
    status, _, body = http(store, "SELECT 1; SELECT * FROM file('/etc/passwd', 'LineAsString')")
    assert status == 400, body
    assert "Multi-statements are not allowed" in body
    assert "root:" not in body


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("dialect", "kusto"),
        ("format_template_row", "/etc/passwd"),
        ("allow_introspection_functions", "1"),
        ("log_comment", "rw-someone-else"),
        ("max_execution_time", "0"),
        ("max_execution_time", "100000"),
        ("max_memory_usage", "0"),
        ("priority", "0"),
    ],
)
def test_settings_in_url_parameters_are_constrained(store: StoreProcess, setting: str,
                                                    value: str) -> None:  # fmt: skip
    status, headers, body = http(store, "SELECT 1", params={setting: value})
    assert status == 500, body
    assert headers["X-ClickHouse-Exception-Code"] == "452", body
    assert setting in body
    with pytest.raises(DatabaseError, match="SETTING_CONSTRAINT_VIOLATION"):
        client(store).query(f"SELECT 1 SETTINGS {setting} = '{value}'")


def test_the_pipeline_still_works(store: StoreProcess, db: str) -> None:
    c = client(store)
    c.insert(f"{db}.t", [[1, "a"], [2, "b"]], column_names=["x", "s"])
    c.command(f"INSERT INTO {db}.t VALUES (3, 'c'), (4, 'd')")
    c.command(f"INSERT INTO {db}.t SELECT number + 10, 'n' FROM numbers(5)")
    c.command(f"CREATE TABLE {db}.mem (x UInt8) ENGINE = Memory")
    source = f"SOURCE(CLICKHOUSE(QUERY 'SELECT x, s FROM {db}.t'))"
    c.command(
        f"CREATE DICTIONARY {db}.dict (x UInt64, s String) PRIMARY KEY x {source} "
        "LAYOUT(FLAT()) LIFETIME(0)"
    )
    assert c.command(f"SELECT dictGet('{db}.dict', 's', toUInt64(3))") == "c"
    assert c.command(f"SELECT count() FROM {db}.t") == 9
    assert client(store, RO).command(f"SELECT count() FROM {db}.t WHERE s = 'n'") == 5


def test_file_grant_is_confined_to_its_directory(store: StoreProcess, files: Path) -> None:
    filer = client(store, ("filer", "filer"))
    assert filer.command(f"SELECT sum(x) FROM file('{files}/a.csv', 'CSV', 'x UInt8')") == 6
    assert filer.command(f"SELECT count() FROM file('{files}/*.csv', 'CSV', 'x UInt8')") == 4
    os.symlink(files.parent / "outside.csv", files / "link.csv")
    with pytest.raises(DatabaseError, match="code: 497"):  # the glob would follow the link out
        filer.command(f"SELECT count() FROM file('{files}/*.csv', 'CSV', 'x UInt8')")
    for path in ("/etc/passwd", f"{files}/../outside.csv", f"{files}/link.csv", "a.csv",
                 f"{files}/{{..,x}}/outside.csv"):  # fmt: skip
        with pytest.raises(DatabaseError, match="code: 497") as info:
            filer.command(f"SELECT * FROM file('{path}', 'LineAsString')")
        assert str(files) in str(info.value)
    with pytest.raises(DatabaseError, match="must be a string literal"):
        filer.command(f"SELECT * FROM file(concat('{files}', '/../outside.csv'), 'LineAsString')")
    with pytest.raises(DatabaseError, match="code: 497"):
        filer.command("SELECT * FROM url('http://127.0.0.1:1/', 'LineAsString')")  # only file
    with pytest.raises(DatabaseError, match="code: 497"):
        client(store, RO).command(f"SELECT * FROM file('{files}/a.csv', 'LineAsString')")


def test_execution_time_limit(store: StoreProcess) -> None:
    t0 = time.monotonic()
    with pytest.raises(DatabaseError, match="TIMEOUT_EXCEEDED"):
        client(store, ("tight", "tight")).query(HEAVY)
    assert time.monotonic() - t0 < 6


def test_readonly_user_may_set_constrained_settings_within_the_limit(store: StoreProcess) -> None:
    status, _, body = http(store, "SELECT getSetting('max_execution_time')", creds=RO,
                           params={"max_execution_time": "30"})  # fmt: skip
    assert (status, body.strip()) == (200, "30")
    status, headers, body = http(store, "SELECT 1", creds=RO, params={"max_execution_time": "301"})
    assert headers["X-ClickHouse-Exception-Code"] == "452", body
    assert "shouldn't be greater than 300" in body
    status, headers, body = http(store, "SELECT 1", creds=RO, params={"max_threads": "8"})
    assert headers["X-ClickHouse-Exception-Code"] == "164", body
    with pytest.raises(DatabaseError, match="READONLY"):
        client(store, RO).query("SELECT 1 SETTINGS max_execution_time = 10")


def test_result_rows_limit(store: StoreProcess) -> None:
    tight = client(store, ("tight", "tight"))
    assert len(tight.query("SELECT number FROM numbers(5000)").result_rows) == 5000  # noqa: PLR2004
    with pytest.raises(DatabaseError, match="TOO_MANY_ROWS_OR_BYTES") as info:
        tight.query("SELECT number FROM numbers(1000000)")
    assert "Limit for result exceeded, max rows: 5.00 thousand" in str(info.value)


def test_concurrent_queries_per_user(store: StoreProcess) -> None:
    slow = threading.Thread(
        target=lambda: http(store, "SELECT sleep(1.5)", creds=("tight", "tight"))
    )
    slow.start()
    time.sleep(0.5)
    status, headers, body = http(store, "SELECT 1", creds=("tight", "tight"))
    slow.join()
    assert (status, headers["X-ClickHouse-Exception-Code"]) == (429, "202"), body
    assert "Too many simultaneous queries for user tight: 1 running, maximum: 1" in body
    assert http(store, "SELECT 1", creds=RW)[0] == 200  # other users are not counted
    assert http(store, "SELECT 1", creds=("tight", "tight"))[0] == 200


def test_memory_limit_per_user(store: StoreProcess) -> None:
    t0 = time.monotonic()
    with pytest.raises(DatabaseError, match="MEMORY_LIMIT_EXCEEDED") as info:
        client(store, ("hog", "hog")).query("SELECT groupArray(number) FROM numbers(400000000)")
    assert "Memory limit (for user hog) exceeded" in str(info.value)
    assert time.monotonic() - t0 < 10


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cores_used(pid: int, seconds: float = 1.0) -> float:
    before = _cpu_s(pid)
    time.sleep(seconds)
    return (_cpu_s(pid) - before) / seconds


def test_disconnect_cancels_the_query(store: StoreProcess, db: str) -> None:
    conn = httpclient.HTTPConnection("127.0.0.1", store.port, timeout=30)
    auth = base64.b64encode(b"analyst:analyst").decode()
    conn.request("POST", "/", HEAVY.encode(), {"Authorization": f"Basic {auth}"})
    admin = client(store)
    running = (
        f"SELECT count() FROM system.processes WHERE query LIKE '%sipHash64%' AND {db!r} != ''"
    )
    deadline = time.monotonic() + 5
    while admin.command(running) < 2 and time.monotonic() < deadline:  # noqa: PLR2004 - itself too
        time.sleep(0.1)
    busy = _cores_used(store.proc.pid)
    assert busy > 0.5, busy
    assert conn.sock is not None
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    deadline = time.monotonic() + 3
    while admin.command(running) > 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert admin.command(running) == 1  # only this probe
    t0 = time.monotonic()
    assert admin.command("SELECT 1") == 1
    admin.insert(f"{db}.t", [[100, "after"]], column_names=["x", "s"])
    assert time.monotonic() - t0 < 1.0
    assert admin.command(f"SELECT count() FROM {db}.t WHERE s = 'after'") == 1
    idle = _cores_used(store.proc.pid)
    assert idle < 0.3, idle


def test_writer_not_starved_by_a_heavy_analyst(store: StoreProcess, db: str) -> None:
    heavy = threading.Thread(target=lambda: http(store, HEAVY, creds=RO,
                                                 params={"max_execution_time": "6"}))  # fmt: skip
    heavy.start()
    time.sleep(0.5)
    writer = client(store)
    latencies = []
    for i in range(10):
        t0 = time.monotonic()
        writer.insert(f"{db}.t", [[1000 + i * 100 + j, "w"] for j in range(100)],
                      column_names=["x", "s"])  # fmt: skip
        latencies.append(time.monotonic() - t0)
    assert heavy.is_alive()  # the analyst's query was running all along
    assert writer.command(f"SELECT count() FROM {db}.t WHERE s = 'w'") == 1000
    assert max(latencies) < 1.0, latencies
    heavy.join()


def test_an_insert_whose_client_disconnects_still_lands_whole(store: StoreProcess, db: str) -> None:
    """Only queries are cancelled on disconnect: an insert whose data is in runs to its end,
    its materialized view included (a half-cancelled insert leaves the two apart)."""
    admin = client(store)
    admin.command(f"CREATE TABLE {db}.src (x UInt64) ENGINE = MergeTree ORDER BY x")
    admin.command(f"CREATE TABLE {db}.dst (x UInt64) ENGINE = MergeTree ORDER BY x")
    admin.command(f"CREATE MATERIALIZED VIEW {db}.mv TO {db}.dst AS SELECT x FROM {db}.src")
    n = 3_000_000  # several insert blocks: a cancel midway would leave some of them in
    body = "\n".join(map(str, range(n))).encode() + b"\n"
    conn = httpclient.HTTPConnection("127.0.0.1", store.port, timeout=30)
    auth = base64.b64encode(b"runwatch:runwatch").decode()
    query = urllib.parse.urlencode({"query": f"INSERT INTO {db}.src FORMAT TabSeparated",
                                    "max_insert_block_size": "200000"})
    conn.request("POST", f"/?{query}", body, {"Authorization": f"Basic {auth}"})
    assert conn.sock is not None
    conn.sock.shutdown(socket.SHUT_RDWR)  # gone before the answer, as a killed sink would be
    conn.close()
    counts = (0, 0)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        counts = (admin.command(f"SELECT count() FROM {db}.src"),
                  admin.command(f"SELECT count() FROM {db}.dst"))
        if counts == (n, n) and not admin.command(
                f"SELECT count() FROM system.processes WHERE query LIKE '%{db}.src%FORMAT%' "
                "AND query NOT LIKE '%system.processes%'"):  # not this query itself
            break
        time.sleep(0.5)
    assert counts == (n, n)
