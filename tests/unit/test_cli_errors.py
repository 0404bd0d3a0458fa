"""The CLI reports a FatalError as one line and exit status 2."""

from __future__ import annotations

import pytest


def test_a_fatal_error_is_one_line_and_exit_2(monkeypatch, capsys) -> None:
    """A service refused at start (credentials, ACLs, topics) prints its reason, no traceback."""
    import argparse

    from runwatch import cli
    from runwatch.adapters.kafka_security import KafkaAuthError
    from runwatch.adapters.topics import TopicProvisionError
    from runwatch.errors import FatalError

    assert issubclass(KafkaAuthError, FatalError) and issubclass(TopicProvisionError, FatalError)

    def refuse(_args: argparse.Namespace) -> int:
        msg = "broker refused user 'sink': SASL authentication failed"
        raise KafkaAuthError(msg)

    parser = argparse.ArgumentParser()
    parser.add_argument("--log-level", default="INFO")
    parser.set_defaults(func=refuse, command="sink")
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    assert cli.main([]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "error: broker refused user 'sink': SASL authentication failed"



@pytest.mark.parametrize(
    ("argv", "env", "line"),
    [
        # no scheme: urlparse found no host and the client went to 127.0.0.1:8123 unasked
        (["sql", "SELECT 1"], {"CLICKHOUSE_URL": "ch-prod.internal:8123"},
         "error: bad setting: CLICKHOUSE_URL: not an http(s) URL with a host; write it as "
         "http://HOST:8123 (or https://HOST:8443 for TLS)"),
        (["sql", "SELECT 1"], {"CLICKHOUSE_URL": "analyst:hunter2@ch-prod:8123"},
         "error: bad setting: CLICKHOUSE_URL: not an http(s) URL with a host; write it as "
         "http://HOST:8123 (or https://HOST:8443 for TLS)"),
        (["sql", "SELECT 1"], {"CLICKHOUSE_VERIFY_TLS": "maybe"},
         "error: bad setting: CLICKHOUSE_VERIFY_TLS='maybe': Input should be a valid boolean, "
         "unable to interpret input"),
        (["pager", "--check"], {"RUNWATCH_PAGER_MAX_ATTEMPTS": "many"},
         "error: bad setting: RUNWATCH_PAGER_MAX_ATTEMPTS='many': Input should be a valid "
         "integer, unable to parse string as an integer"),
        # a port past 65535 was a traceback from bind() after the engine had started
        (["store"], {"RUNWATCH_STORE_PORT": "70000"},
         "error: bad setting: RUNWATCH_STORE_PORT='70000': Input should be less than or "
         "equal to 65535"),
    ],
)
def test_a_bad_environment_setting_is_one_line_naming_it(
    monkeypatch, capsys, argv: list[str], env: dict[str, str], line: str
) -> None:
    """Before the fix a bad value printed pydantic's ValidationError traceback, and a
    CLICKHOUSE_URL without its scheme was taken for the local store without a word."""
    from runwatch import cli

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.strip() == line
    assert "hunter2" not in err and "Traceback" not in err


@pytest.mark.parametrize("port", ["70000", "-1", "http"])
def test_a_store_port_that_is_no_port_is_refused(port: str, capsys) -> None:
    from runwatch.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["store", f"--port={port}"])
    assert f"argument --port: {port} is not a TCP port" in capsys.readouterr().err


def test_an_unreachable_broker_is_one_warning_naming_the_setting(tmp_path) -> None:
    """Before the fix ``runwatch alerts tail`` (and every consumer: pager, sink) against a
    broker that is not there printed librdkafka's FAIL line to stderr about 19 times a
    second, and nothing named KAFKA_BOOTSTRAP_SERVERS."""
    import os
    import signal
    import subprocess
    import sys
    import time

    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1"}  # refused at once
    proc = subprocess.Popen([sys.executable, "-m", "runwatch", "alerts", "tail"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path)
    time.sleep(5)
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=30)
    lines = [x for x in err.splitlines() if x.strip()]
    assert not [x for x in lines if x.startswith("%")], err[-2000:]
    warned = [x for x in lines if "does not answer" in x]
    assert len(warned) == 1, err[-2000:]
    assert "Kafka at 127.0.0.1:1" in warned[0] and "KAFKA_BOOTSTRAP_SERVERS" in warned[0]


@pytest.mark.parametrize("argv", [["cost"], ["slo", "status"], ["investigate", "r1"],
                                  ["sql", "SELECT 1"]])
def test_a_store_that_is_down_is_one_error_line(argv: list[str], tmp_path) -> None:
    """Every command printed urllib3's "Retrying ..." and clickhouse-connect's "Unexpected
    Http Driver Exception" WARNING lines before its one ``error:`` line; --log-level DEBUG
    still shows them."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "CLICKHOUSE_URL": "http://127.0.0.1:9"}  # refused at once
    quiet = subprocess.run([sys.executable, "-m", "runwatch", *argv], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
    lines = quiet.stderr.strip().splitlines()
    assert len(lines) == 1, quiet.stderr
    assert lines[0].startswith("error: ClickHouse at http://127.0.0.1:9 does not answer")
    debug = subprocess.run([sys.executable, "-m", "runwatch", "--log-level", "DEBUG", *argv],
                           env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert "WARNING urllib3.connectionpool: Retrying" in debug.stderr
    assert debug.stderr.strip().splitlines()[-1].startswith(
        "error: ClickHouse at http://127.0.0.1:9 does not answer")


@pytest.mark.parametrize(
    ("argv", "env", "start"),
    [
        # the name went unquoted into CREATE DATABASE: ClickHouse's syntax error, a traceback
        (["db", "migrate", "--database", "bad name"], {},
         "error: database name 'bad name' is not a plain identifier (letters, digits and _)"),
        (["db", "render", "--database", "x;DROP"], {},
         "error: database name 'x;DROP' is not a plain identifier (letters, digits and _)"),
        # the first step of docs/storage against a store that is not there: a traceback
        (["db", "migrate"], {"CLICKHOUSE_URL": "http://127.0.0.1:1"},
         "error: ClickHouse at http://127.0.0.1:1 does not answer"),
    ],
)
def test_db_errors_are_one_line(
    monkeypatch, capsys, argv: list[str], env: dict[str, str], start: str
) -> None:
    from runwatch import cli

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    last = captured.err.strip().splitlines()[-1]
    assert last.startswith(start) and "Traceback" not in captured.err
    assert "CREATE" not in captured.out


def test_a_closed_pipe_ends_quietly(tmp_path) -> None:
    """Before the fix ``runwatch db render | head`` ended in a BrokenPipeError traceback."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "runwatch", "db", "render"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the only reader is gone before the first line is written
    err = proc.stderr.read().decode()
    assert proc.wait(60) == 141
    assert "Traceback" not in err and "BrokenPipe" not in err, err[-2000:]


@pytest.mark.parametrize("duration", ["0s", "0m", "0ms"])
def test_a_silence_for_no_time_is_refused(duration: str, tmp_path, capsys) -> None:
    """``silence add --for 0s`` was accepted and printed an id: a silence that had ended as it
    was made, muting nothing, while the user believed the alerts muted."""
    from runwatch import cli

    state = tmp_path / "state"
    code = cli.main(["silence", "--state-dir", str(state), "add", "--match", "team=ml",
                     "--for", duration, "--reason", "maintenance"])
    err = capsys.readouterr().err
    assert code == 2 and "must be longer than 0" in err and duration in err
    assert cli.main(["silence", "--state-dir", str(state), "list", "--all"]) == 0
    assert capsys.readouterr().out.strip() == ""


@pytest.mark.parametrize(("argv", "code", "line"), [
    # gate: exit 1 means "fail" to a CI pipeline, so a config it cannot read exits 3
    (["gate", "check", "r1", "--policy", "{bad}"], 3,
     "error: [Errno 84] not UTF-8 text (byte 28: 0xeb); save the file as UTF-8: '{bad}'"),
    (["slo", "status", "--file", "{bad}"], 2,
     "error: cannot read {bad}: not UTF-8 text (byte 28: 0xeb); save the file as UTF-8"),
    (["cost", "--prices", "{bad}"], 2,
     "error: cannot read prices file {bad}: not UTF-8 text (byte 28: 0xeb); save the file as "
     "UTF-8"),
    (["capacity", "--prices", "{bad}"], 2,
     "error: cannot read prices file {bad}: not UTF-8 text (byte 28: 0xeb); save the file as "
     "UTF-8"),
    (["db", "retention", "--rules", "{bad}"], 2,
     "error: cannot read retention rules {bad}: not UTF-8 text (byte 28: 0xeb); save the file "
     "as UTF-8"),
])
def test_a_config_file_that_is_not_utf8_is_one_error_line(
        argv: list[str], code: int, line: str, tmp_path, capsys, monkeypatch) -> None:
    """A Latin-1 ``Zoë`` (or a binary file) used to end in a UnicodeDecodeError traceback."""
    from runwatch import cli

    monkeypatch.setenv("CLICKHOUSE_URL", "http://127.0.0.1:9")  # never reached
    bad = tmp_path / "conf.yaml"
    bad.write_bytes(b"# owner\nmetadata: {owner: Zo\xeb}\n")
    assert cli.main([a.replace("{bad}", str(bad)) for a in argv]) == code
    assert capsys.readouterr().err.strip() == line.replace("{bad}", str(bad))


@pytest.mark.parametrize(("argv", "code", "line"), [
    (["gate", "check", " ", "--no-publish"], 3, "error: the run id must not be empty"),
    (["gate", "approve", "", "--by", "ana", "--reason", "ok"], 3,
     "error: the run id must not be empty"),
    (["investigate", "--family", "f"], 2,
     "error: --family goes with --since (e.g. --since 6h --family F)"),
    (["investigate"], 2, "error: give a RUN_ID or --since DURATION (e.g. --since 6h)"),
    (["investigate", "r1", "--since", "6h"], 2,
     "error: give a RUN_ID or --since DURATION (e.g. --since 6h), not both"),
])
def test_arguments_that_name_nothing_are_refused_before_any_store(
        argv: list[str], code: int, line: str, capsys, monkeypatch) -> None:
    from runwatch import cli

    monkeypatch.setenv("CLICKHOUSE_URL", "http://127.0.0.1:9")  # never reached
    assert cli.main(argv) == code
    assert capsys.readouterr().err.strip() == line


@pytest.mark.parametrize(("argv", "line"), [
    (["db", "render", "--cluster", ""], "cluster name '' is not a plain identifier"),
    (["db", "retention", "--rules", "/dev/null"], "retention rules /dev/null: "),
    (["db", "render", "--rules", "/dev/null"], "retention rules /dev/null: "),
    (["db", "render", "--schema-dir", "/nonexistent"], "schema directory /nonexistent does not"),
    (["db", "render", "--schema-dir", "{empty}"], "holds no migration"),
    # refused before the database is made: it was created, then left half-built
    (["db", "migrate", "--schema-dir", "/nonexistent", "--database", "never_made"],
     "schema directory /nonexistent does not"),
])
def test_db_commands_name_bad_rules_and_schema_dirs(argv: list[str], line: str, tmp_path,
                                                    capsys) -> None:
    """They raised RetentionError / DdlError tracebacks, or rendered only the retention DDL
    for a schema directory that does not exist."""
    from runwatch import cli

    (tmp_path / "empty").mkdir()
    code = cli.main([a.format(empty=tmp_path / "empty") for a in argv])
    captured = capsys.readouterr()
    assert code == 2 and line in captured.err and "Traceback" not in captured.err
    assert captured.out == ""


@pytest.mark.parametrize(("argv", "code", "extra"), [
    (["gate", "check", "r1", "--polcy", "gates.yaml", "--no-publish"], 3,
     "--polcy gates.yaml"),  # 2 is "review"
    (["gate", "approve", "r1", "--by", "me", "--reason", "ok", "--bogus"], 3, "--bogus"),
    (["cost", "--bogus"], 2, "--bogus"),
])
def test_an_unrecognized_argument_exits_with_the_commands_usage_status(
        argv: list[str], code: int, extra: str, capsys) -> None:
    """``gate check RUN --polcy ...`` exited 2, which the documented CI case reads as
    ``review``: a typo opened a human review instead of failing the pipeline."""
    from runwatch import cli

    assert cli.main(argv) == code
    assert f"unrecognized arguments: {extra}" in capsys.readouterr().err


@pytest.mark.parametrize("action", ["check", "list"])
def test_schemas_pointed_at_a_folder_without_schemas_is_an_error(action: str, tmp_path,
                                                                  capsys) -> None:
    """``schemas check --schema-dir <the parent folder>`` printed "ok: 0 records", exit 0."""
    from runwatch import cli

    assert cli.main(["schemas", action, "--schema-dir", str(tmp_path)]) == 2
    assert "holds no schema" in capsys.readouterr().err


def test_sql_shows_a_zoned_column_in_its_zone_whether_or_not_the_client_gave_the_zone() -> None:
    """The store's engine names no zone (a naive UTC instant); a ClickHouse server's client
    may give the instant with its zone: both print the zone's wall clock."""
    import datetime
    import zoneinfo

    from runwatch.commands.sql import _cell

    ny = zoneinfo.ZoneInfo("America/New_York")
    naive_utc = datetime.datetime(2026, 6, 1, 12, 0)  # noqa: DTZ001 - as the client gives it
    aware = datetime.datetime(2026, 6, 1, 8, 0, tzinfo=ny)
    assert _cell(naive_utc, "America/New_York") == "2026-06-01 08:00:00"
    assert _cell(aware, "America/New_York") == "2026-06-01 08:00:00"
    assert _cell(naive_utc, None) == "2026-06-01 12:00:00"


def test_silence_takes_its_state_dir_after_the_action_too(tmp_path, capsys) -> None:
    """Every silence command prints "--state-dir to choose another"; written after the action
    (``silence list --state-dir DIR``) it was refused as an unrecognized argument."""
    from runwatch import cli

    state = tmp_path / "state"
    assert cli.main(["silence", "add", "--match", "team=ml", "--for", "1h", "--reason", "x",
                     "--state-dir", str(state)]) == 0
    made = capsys.readouterr().out.strip()
    assert cli.main(["silence", "list", "--state-dir", str(state)]) == 0
    assert made[:8] in capsys.readouterr().out
    assert cli.main(["silence", "--state-dir", str(state), "list"]) == 0  # before it, as before
    assert made[:8] in capsys.readouterr().out


def test_an_unknown_log_level_is_a_usage_error(capsys) -> None:
    """``runwatch --log-level LOUD ...`` ended in logging's ValueError traceback, exit 1."""
    from runwatch import cli

    with pytest.raises(SystemExit) as done:
        cli.main(["--log-level", "LOUD", "schemas", "list"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "argument --log-level: invalid choice: 'LOUD'" in err and "Traceback" not in err
    assert cli.main(["--log-level", "warning", "schemas", "list"]) == 0  # any case


@pytest.mark.parametrize(("argv", "line"), [
    # an empty --topics (an unset variable) consumed every default topic instead
    (["sink", "--topics", ""], "argument --topics: give comma-separated topic names"),
    (["sink", "--topics", "rw.learning,,rw.dlq"], "argument --topics: give comma-separated"),
    (["sink", "--group", ""], "argument --group: must not be empty"),
    (["sink", "--database", " "], "argument --database: must not be empty"),
    (["sink", "--bootstrap", ""], "argument --bootstrap: must not be empty"),
    # named the parser's helper: "invalid _positive value: 'nan'"
    (["sink", "--batch-ms", "nan"], "argument --batch-ms: give a whole number of at least 1"),
    (["sink", "--processes", "0"], "argument --processes: must be at least 1, got 0"),
])
def test_sink_arguments_that_name_nothing_are_refused(argv: list[str], line: str,
                                                      capsys) -> None:
    from runwatch import cli

    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2 and line in capsys.readouterr().err
