from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runwatch.adapters.publisher import Publisher
from runwatch.client.emit import emit_lines, emit_records
from runwatch.core.codec import load_codec


class ListTransport:
    def __init__(self):
        self.out = []

    def produce(self, topic, key, value):
        self.out.append((topic, key, value))


def pub():
    return Publisher(ListTransport(), kind="hook")


@pytest.mark.parametrize(
    "line,error",
    [
        ('{"type":"JobEvent","run_id":"r","state":"queued","queue":"gpu"}', None),
        (
            '{"type":"job-state","run_id":"r","state":"running","allocation":{"nodes":["n1"],"gpu_indices":[0]}}',
            None,
        ),
        (
            '{"type":"runwatch.v1.StepTiming","run_id":"r","step":1,"loader_wait_ms":1,"compute_ms":2,"step_ms":3}',
            None,
        ),
        ("not json", "invalid JSON"),
        ("[1, 2]", "JSON object"),
        ('{"run_id":"r"}', "missing 'type'"),
        ('{"type":"Alert"}', "unknown record type"),
        ('{"type":"JobEvent","run_id":"r"}', "missing field 'state'"),
        ('{"type":"JobEvent","run_id":"r","state":"exploded"}', "exploded"),
        (
            '{"type":"JobEvent","run_id":"r","state":"queued","colour":"red"}',
            "unknown field(s) for JobEvent: colour",
        ),
        ('{"type":"JobEvent","run_id":"r","state":"queued","attempt":"two"}', "JobEvent"),
        # a run-keyed record that names no run would only be dead-lettered downstream
        ('{"type":"JobEvent","state":"queued"}', "JobEvent needs a run_id"),
        ('{"type":"JobEvent","run_id":null,"state":"queued"}', "JobEvent needs a run_id"),
        ('{"type":"JobEvent","run_id":" ","state":"queued"}', "JobEvent needs a run_id"),
        (
            '{"type":"StepTiming","step":1,"loader_wait_ms":1,"compute_ms":2,"step_ms":3}',
            "StepTiming needs a run_id",
        ),
    ],
)
def test_each_line(line, error) -> None:
    p = pub()
    res = emit_lines(p, ["# comment", "", line])
    if error is None:
        assert res.published == 1 and res.errors == []
        assert load_codec().decode(p.transport.out[0][2]).run_id == "r"
    else:
        assert res.published == 0 and len(res.errors) == 1
        assert res.errors[0].startswith("line 3: ") and error in res.errors[0]


def test_bad_lines_do_not_stop_the_batch() -> None:
    p = pub()
    lines = [
        json.dumps({"type": "JobEvent", "run_id": f"r{i}", "state": "queued"}) for i in range(5)
    ]
    lines.insert(2, "{broken")
    res = emit_lines(p, lines)
    assert res.published == 5 and res.errors[0].startswith("line 3:")
    recs = [load_codec().decode(v) for _, _, v in p.transport.out]
    assert [r.run_id for r in recs] == [f"r{i}" for i in range(5)]
    assert [r.seq for r in recs] == [1, 2, 3, 4, 5]  # rejected lines take no sequence number
    assert all(k == r.run_id for (_, k, _), r in zip(p.transport.out, recs, strict=True))


def test_given_event_id_is_kept() -> None:
    p = pub()
    emit_records(p, [{"type": "JobEvent", "run_id": "r", "state": "queued", "event_id": "fixed-1"}])
    assert load_codec().decode(p.transport.out[0][2]).event_id == "fixed-1"


def _cli(args, tmp_path: Path, stdin: str = ""):
    env = dict(
        os.environ,
        KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:1",
        RUNWATCH_PRODUCER_SPOOL_DIR=str(tmp_path),
        RUNWATCH_PRODUCER_MESSAGE_TIMEOUT_MS="1000",
    )
    return subprocess.run(
        [sys.executable, "-m", "runwatch", "emit", *args, "--timeout", "1"]
        if args and args[0] == "--stdin"
        else [sys.executable, "-m", "runwatch", "emit", "--timeout", "1", *args],
        input=stdin,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_job_state_spools_without_broker(tmp_path: Path) -> None:
    p = _cli(
        [
            "job-state",
            "--run-id",
            "r9",
            "--state",
            "queued",
            "--queue",
            "gpu-a100",
            "--nodes",
            "n1,n2",
            "--gpus",
            "0,1",
        ],
        tmp_path,
    )
    assert p.returncode == 0, p.stderr
    assert "1 record(s) spooled locally" in p.stderr
    assert list((tmp_path / "emit").glob("*.seg"))


def test_cli_stdin_reports_line_numbers(tmp_path: Path) -> None:
    data = "\n".join(
        [
            json.dumps({"type": "JobEvent", "run_id": "a", "state": "queued"}),
            "oops",
            json.dumps({"type": "JobEvent", "run_id": "a", "state": "running"}),
        ]
    )
    p = _cli(["--stdin"], tmp_path, stdin=data)
    assert p.returncode == 1
    assert "published 2, rejected 1" in p.stderr and "line 2: invalid JSON" in p.stderr
