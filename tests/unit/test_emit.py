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
        # a value of the wrong kind is named by its field (the reasons were "'<' not supported
        # between instances of 'str' and 'int'", "'int' object has no attribute 'get'"...)
        ('{"type":"JobEvent","run_id":"r","state":"queued","emitted_at_ms":"now"}',
         'bad value for JobEvent: field emitted_at_ms is "now", not an integer'),
        ('{"type":"JobEvent","run_id":"r","state":"queued","source":"slurm"}',
         'bad value for JobEvent: field source is "slurm", not an object'),
        ('{"type":"JobEvent","run_id":"r","state":"queued","allocation":5}',
         "bad value for JobEvent: field allocation is 5, not an object"),
        ('{"type":"LearningStep","run_id":"r","step":1,"loss":1.0,"metrics":[1,2]}',
         "bad value for LearningStep: field metrics is [1, 2], not an object"),
        ('{"type":"ValidationResult","run_id":"r","step":10,"metrics":{"val_loss":"1.9"}}',
         'bad value for ValidationResult: field metrics.val_loss is "1.9", not a number'),
        # an unknown key of a nested record was dropped without a word
        ('{"type":"JobEvent","run_id":"r","state":"queued",'
         '"allocation":{"nodes":["n1"],"gpu_indices":[0],"gpus_typo":8}}',
         "bad value for JobEvent: unknown field(s) in allocation: gpus_typo"),
        # a deadline in epoch seconds was published, and the queue rule paged a job that
        # started two minutes after it was queued (its deadline 1970-01-21)
        ('{"type":"JobEvent","run_id":"r","state":"queued","deadline_ms":1800003600}',
         "deadline_ms 1800003600 is before 2000 (epoch seconds? give milliseconds)"),
        ('{"type":"JobEvent","run_id":"r","state":"queued","deadline_ms":1800003600000}', None),
        ('{"type":"JobEvent","run_id":"r","state":"queued","deadline_ms":0}', None),  # none
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


def test_objects_that_are_no_lines_and_keys_that_are_no_text_are_named() -> None:
    """``emit_lines`` given objects raised a bare AssertionError; ``emit_records`` given a
    key that is no text said "sequence item 0: expected str instance, int found"."""
    p = pub()
    res = emit_records(p, [{"type": "JobEvent", 1: 2, "run_id": "r", "state": "queued"},
                           {"type": "JobEvent", "run_id": "r", "state": "queued",
                            "allocation": {"nodes": ["n1"], 0: 1}}])
    assert res.errors == [
        "record 1: bad value for JobEvent: a field name is 1, not a string",
        "record 2: bad value for JobEvent: a field name in allocation is 0, not a string",
    ]
    res = emit_lines(p, [{"type": "JobEvent", "run_id": "r", "state": "queued"},
                         '{"type":"JobEvent","run_id":"r","state":"queued"}'])
    assert res.errors == ["line 1: a line must be text or bytes, not dict (emit_records "
                          "takes objects)"]
    assert res.published == 1 and len(p.transport.out) == 1


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
    assert "handed 2 to the producer, delivered 0, rejected 1" in p.stderr
    assert "line 2: invalid JSON" in p.stderr


@pytest.mark.parametrize("argv", [
    ["emit", "--timeout", "1", "--topic-prefix", "t.", "job-state", "--run-id", "r", "--state",
     "queued"],
    ["emit", "job-state", "--run-id", "r", "--state", "queued", "--timeout", "1",
     "--topic-prefix", "t."],
])
def test_emit_options_count_before_and_after_the_job_state_command(argv: list[str]) -> None:
    """``emit --timeout 1 job-state ...`` waited the sub-command's default 15 s: its own
    default replaced the value given before it (a prolog blocked 15 s with the broker away)."""
    from runwatch.cli import build_parser

    args = build_parser().parse_args(argv)
    assert (args.timeout, args.topic_prefix) == (1.0, "t.")


def test_emit_options_default_when_given_nowhere() -> None:
    from runwatch.cli import build_parser

    args = build_parser().parse_args(["emit", "job-state", "--run-id", "r", "--state", "queued"])
    assert (args.timeout, args.topic_prefix) == (15.0, "")


@pytest.mark.parametrize("value", ["nan", "inf", "-5", "3601", "abc"])
@pytest.mark.parametrize("where", ["emit", "job-state", "gate"])
def test_a_delivery_timeout_that_cannot_be_waited_is_refused(value: str, where: str,
                                                             capsys) -> None:
    """``--timeout nan`` waited forever with the broker away (a Slurm prolog held its job);
    a negative one was taken as 0."""
    from runwatch.cli import build_parser

    argv = {"emit": ["emit", f"--timeout={value}", "job-state", "--run-id", "r", "--state",
                     "queued"],
            "job-state": ["emit", "job-state", "--run-id", "r", "--state", "queued",
                          f"--timeout={value}"],
            "gate": ["gate", "approve", "r", f"--timeout={value}"]}[where]
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(argv)
    assert exc.value.code != 0
    assert "argument --timeout" in capsys.readouterr().err
