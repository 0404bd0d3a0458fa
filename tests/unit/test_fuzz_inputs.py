"""Fuzz: hostile input at the producers' edges (SDK, Publisher, ``runwatch emit``) and the pager.

Unit tier, in memory: the SDK and emit hand records to a capturing transport,
the pager's Alertmanager payload is built from decoded alerts.
"""

from __future__ import annotations

import io
import json
import math
import os
import random
import re
import subprocess
import sys
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import runwatch
from runwatch.adapters.publisher import MAX_RECORD_BYTES, CaptureTransport, Publisher
from runwatch.client import data
from runwatch.client.emit import MAX_LINE_BYTES, emit_lines, read_lines
from runwatch.core.codec import load_codec
from runwatch.core.codec.text import clean_text
from runwatch.core.paging.labels import LABEL_MAX, label_name, label_value
from runwatch.core.paging.payloads import alertmanager_alert
from runwatch.processor.memory import MemoryProcessor
from runwatch.processor.settings import ProcessorSettings

HOSTILE: dict[str, Any] = {
    "surrogate": "t\udcffx",  # os.fsdecode of the bytes b"t\xffx"
    "bytes": b"t\xffx",
    "control": "a\x00\n\r\t\x1b[31m\"'",
    "sql": "x'); DROP TABLE runwatch.runs; --",
    "huge": "h" * 200_000,
}
REPAIRED = {"surrogate": "t\ufffdx", "bytes": "t\ufffdx"}
NAME_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
init: Any = runwatch.init  # the public entry point


def sdk_run(where: str, value, t: CaptureTransport, run_id: str = "run-h"):
    kw: dict = {"team": "ml", "run_id": run_id, "datasets": ["s3://d"], "labels": {"k": "v"}}
    family = "fam"
    if where == "family":
        family = value
    elif where == "dataset":
        kw["datasets"] = [value]
    elif where == "label":
        kw["labels"] = {"k": value}
    elif where != "metric":
        kw[where] = value
    run = init(family, transport=t, install_hooks=False, capture_lineage=False, **kw)
    t0 = int(time.time() * 1000) - 60_000
    for i in range(5):
        run.step(i, loss=1.0 if i < 3 else math.nan, now_ms=t0 + i * 1000,
                 metrics={value if where == "metric" else "m": 1.0})
    return run, run.finish(now_ms=t0 + 10_000)


@pytest.mark.parametrize("where", ["team", "family", "run_id", "dataset", "label", "metric"])
@pytest.mark.parametrize("kind", list(HOSTILE))
def test_hostile_text_through_the_sdk_loses_no_record(where: str, kind: str) -> None:
    """Before the fix, text that is not UTF-8 dropped the record whole (``encode_errors``):
    in the run id every record of the run, in team or family the manifest and job events."""
    t = CaptureTransport()
    run, counters = sdk_run(where, HOSTILE[kind], t)
    codec = load_codec()
    recs = [codec.decode(v) for _t, _k, v in t.messages]
    assert [type(r).__name__ for r in recs].count("LearningStep") == 5
    assert {type(r).__name__ for r in recs} >= {"RunManifest", "JobEvent", "StepTiming"}
    assert "encode_errors" not in counters and "oversize" not in counters
    want = REPAIRED.get(kind, HOSTILE[kind])
    man = next(r for r in recs if type(r).__name__ == "RunManifest")
    got = {"team": man.team, "family": man.experiment_family, "run_id": man.run_id,
           "dataset": man.datasets[0].uri, "label": man.labels.get("k"),
           "metric": next(iter(next(r for r in recs if type(r).__name__ == "LearningStep")
                               .metrics))}
    if where == "dataset" and kind == "bytes":
        want = str(HOSTILE[kind])  # a DatasetRef from str(): the SDK's documented coercion
    assert got[where] == want
    if kind in REPAIRED and where != "dataset":
        assert counters["sanitised"] >= 1
    m = MemoryProcessor(ProcessorSettings(save_interval_s=0))
    m.feed(t.messages)
    m.tick(int(time.time() * 1000) + 60_000)
    assert "rule:non_finite" in {a.detector for a in m.alerts}, "the run's alert was lost"
    if kind != "huge" or where != "run_id":
        assert not [d.reason for d in m.dead if "late" in d.reason]


def test_an_oversize_record_is_refused_alone_and_counted() -> None:
    """A 2 MB metric name: the producer refused it (MSG_SIZE_TOO_LARGE), the transport took
    that for an outage and spooled everything behind it (the rest of the job never arrived)."""
    t = CaptureTransport()
    run = init("fam", run_id="run-big", transport=t, install_hooks=False, capture_lineage=False)
    run.step(0, loss=1.0)
    run.step(1, loss=1.0, metrics={"m" * 2_000_000: 1.0})
    run.step(2, loss=1.0)
    counters = run.finish()
    # metrics alone over the limit: the step goes out without them (its loss may page)
    assert counters["metrics_oversize"] == 1 and not counters.get("oversize")
    assert all(len(v) <= MAX_RECORD_BYTES for _t, _k, v in t.messages)
    steps = [load_codec().decode(v) for t_, _k, v in t.messages if t_ == "rw.learning"]
    assert [(s.step, s.metrics) for s in steps] == [(0, {}), (1, {}), (2, {})]


def test_data_report_with_hostile_dataset_uri_and_feature_names(tmp_path) -> None:
    t = CaptureTransport()
    pub = Publisher(t, kind="sdk")
    cols = {"x\udcff": [1.0, 2.0], "q'\n\"": [0.0, 1.0]}
    rec = data.report("s3://d\udcff/\x00", "v'1", None, cols, publisher=pub,
                      baseline_directory=tmp_path, now_ms=int(time.time() * 1000))
    assert rec is not None and pub.sanitised == 1 and pub.encode_errors == 0
    (sent,) = [load_codec().decode(v) for _t, _k, v in t.messages]
    assert sent.dataset_uri == "s3://d\ufffd/\x00"
    assert {f.name for f in sent.features} == {"x\ufffd", "q'\n\""}


# ------------------------------------------------------------------ runwatch emit
EMIT_PUB = Publisher(CaptureTransport(), kind="hook")
GOOD = b'{"type":"JobEvent","run_id":"r","state":"queued"}'


@pytest.mark.parametrize(("line", "reason"), [
    (b"not json", "invalid JSON: Expecting value at column 1"),
    (b'{"type":"JobEvent","run_id":"r\xff","state":"queued"}', "not UTF-8: byte 0xff at column 31"),
    (b"\xfe\xff{}", "not UTF-8: byte 0xfe at column 1"),
    (b'{"type":"JobEvent","run_id":"r","state":"queued"', "invalid JSON"),
    (b"[" * 100_000 + b"]" * 100_000, "invalid JSON: nested too deeply"),
    (b'{"type":"Martian"}', "unknown record type 'Martian'"),
    (b'{"type":"JobEvent","run_id":"r","state":"queued","attempt":"two"}',
     'bad value for JobEvent: field attempt is "two", not an integer'),
    (b'{"type":"JobEvent","run_id":"r","state":"queued","attempt":1e400}',
     "int field attempt out of 32-bit range (inf)"),
    (b'{"type":"JobEvent","run_id":"r","state":"queued","attempt":99999999999}', "attempt"),
    (b'{"type":"JobEvent","run_id":"' + b"r" * 1_200_000 + b'","state":"queued"}',
     "JobEvent is 1200"),
    (b'"just a string"', "a line must hold a JSON object"),
    (b'{"type":"StepTiming","run_id":"r","step":1,"step_ms":NaN,"loader_wait_ms":1,'
     b'"compute_ms":1}', None),
])
def test_emit_names_each_bad_line_and_publishes_the_good_ones(line: bytes, reason) -> None:
    t = CaptureTransport()
    res = emit_lines(Publisher(t, kind="hook"),
                     read_lines(io.BytesIO(GOOD + b"\n\n" + line + b"\n   \n" + GOOD + b"\n")))
    if reason is None:
        assert res.errors == [] and res.published == 3
        return
    assert res.published == 2 and len(t.messages) == 2
    (err,) = res.errors
    assert err.startswith("line 3: ") and reason in err, err


def test_emit_refuses_a_line_over_the_bound_without_holding_it() -> None:
    big = b'{"type":"JobEvent","run_id":"' + b"r" * (MAX_LINE_BYTES + 10) + b'"}'
    t = CaptureTransport()
    res = emit_lines(Publisher(t, kind="hook"), read_lines(io.BytesIO(big + b"\n" + GOOD)))
    assert res.errors == [f"line 1: line over {MAX_LINE_BYTES} bytes, not parsed"]
    assert res.published == 1


def test_emit_stdin_text_read_with_surrogateescape_is_refused_as_not_utf8() -> None:
    res = emit_lines(Publisher(CaptureTransport(), kind="hook"),
                     [GOOD.decode(), b"\xff{}".decode("utf-8", "surrogateescape")])
    assert res.errors == ["line 2: not UTF-8: byte 0xff at column 1"] and res.published == 1


@pytest.mark.parametrize("io_env", [{}, {"PYTHONIOENCODING": "utf-8:strict"}])
def test_emit_cli_stdin_with_bytes_that_are_not_utf8(tmp_path, io_env: dict) -> None:
    """Every line named on stderr with its number, the good ones published, exit status 1.

    With strict text decoding of stdin (``PYTHONIOENCODING=utf-8:strict``) the command
    crashed with a UnicodeDecodeError traceback before it read stdin as bytes.
    """
    env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:1", **io_env,
               RUNWATCH_PRODUCER_SPOOL_DIR=str(tmp_path),
               RUNWATCH_PRODUCER_MESSAGE_TIMEOUT_MS="1000")
    blob = b"\n".join([GOOD, b"\xff\xfe garbage", b"", b'{"type":"Nope"}', GOOD, b"\x00"])
    p = subprocess.run([sys.executable, "-m", "runwatch", "emit", "--stdin", "--timeout", "1"],
                       input=blob, env=env, capture_output=True, timeout=60, check=False)
    err = p.stderr.decode()
    assert p.returncode == 1, err
    assert "handed 2 to the producer, delivered 0, rejected 3" in err
    assert "line 2: not UTF-8: byte 0xff at column 1" in err
    assert "line 4: unknown record type 'Nope'" in err
    assert "line 6: invalid JSON" in err
    assert "Traceback" not in err


def test_a_comment_that_is_not_utf8_is_skipped_not_an_error() -> None:
    res = emit_lines(EMIT_PUB, [b"# caf\xe9 (latin-1)", b"  #\x80", GOOD])
    assert (res.published, res.errors) == (1, [])  # hypothesis found b"#\x80" counted once


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=80) | st.sampled_from([GOOD, b"", b"# c", b"{}"]),
                max_size=8))
def test_emit_random_lines_never_raise_and_account_for_every_line(lines: list[bytes]) -> None:
    blob = b"\n".join(x.replace(b"\n", b" ") for x in lines)
    res = emit_lines(EMIT_PUB, read_lines(io.BytesIO(blob)))
    texts = [x.decode("utf-8", "replace").strip() for x in blob.split(b"\n")]
    counted = [x for x in texts if x and not x.startswith("#")]
    assert res.published + len(res.errors) == len(counted)
    assert all(re.match(r"line \d+: \S", e) for e in res.errors)


# ------------------------------------------------------------------ pager labels
@settings(max_examples=300, deadline=None)
@given(st.text(max_size=600))
def test_label_values_are_bounded_clean_and_deterministic(value: str) -> None:
    out = label_value(value)
    assert len(out) <= LABEL_MAX and out == label_value(value)
    assert not re.search("[\x00-\x1f\x7f-\x9f\ud800-\udfff]", out)
    out.encode("utf-8")
    if len(value) <= LABEL_MAX and not re.search("[\x00-\x1f\x7f-\x9f\ud800-\udfff]", value):
        assert out == value


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_label_names_are_valid(name: str) -> None:
    assert NAME_RE.fullmatch(label_name(name))


def test_long_distinct_values_stay_distinct() -> None:
    a, b = "r" * 300 + "a", "r" * 300 + "b"
    assert label_value(a) != label_value(b) and len(label_value(a)) == 255


@pytest.mark.parametrize("kind", list(HOSTILE))
def test_alertmanager_payload_from_a_hostile_run(kind: str) -> None:
    t = CaptureTransport()
    value = HOSTILE[kind]
    sdk_run("team", value, t, run_id=f"run-{clean_text(value)[:40000]}")
    m = MemoryProcessor(ProcessorSettings(save_interval_s=0))
    m.feed(t.messages)
    (alert,) = [a for a in m.alerts if a.detector == "rule:non_finite"]
    body = alertmanager_alert(alert, int(time.time() * 1000), "http://x", 300_000)
    json.dumps(body).encode("utf-8")
    for k, v in body["labels"].items():
        assert NAME_RE.fullmatch(k) and len(v) <= LABEL_MAX
        assert not re.search("[\x00-\x1f\x7f-\x9f]", v)


def test_clean_text_is_the_documented_rule() -> None:
    rng = random.Random(3)
    for _ in range(200):
        raw = rng.randbytes(rng.randint(0, 30))
        assert clean_text(raw) == raw.decode("utf-8", "replace")
    assert clean_text("a\udcffb\ud800") == "a\ufffdb\ufffd"
    assert clean_text("\x00\n'\"") == "\x00\n'\""
