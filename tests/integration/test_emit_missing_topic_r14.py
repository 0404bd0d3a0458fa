"""``runwatch emit`` against a genuine broker: a topic the broker lacks is told from an
outage within the Slurm hooks' 5 s timeout.

It runs on a broker of its own (``private_kafka``: ephemeral ports), whose topic
auto-creation is off as the stack's is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from runwatch.stack.manager import Stack

pytestmark = pytest.mark.integration


def _emit(kafka: Stack, tmp_path: Path, *args: str,
          stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=kafka.settings.bootstrap_servers,
               RUNWATCH_PRODUCER_SPOOL_DIR=str(tmp_path / "spool"))
    env.pop("RUNWATCH_PRODUCER_MESSAGE_TIMEOUT_MS", None)  # the default 10 s: the case seen
    return subprocess.run([sys.executable, "-m", "runwatch", "emit", *args], input=stdin,
                          env=env, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("how", ["job-state", "stdin"])
def test_a_missing_topic_is_named_within_the_hooks_timeout(private_kafka: Stack,
                                                           tmp_path: Path, how: str) -> None:
    """With ``--timeout 5`` the record was "spooled locally; sent on the next emit" (exit 0),
    although its topic does not exist; ``--timeout 15`` did name the topic (exit 1)."""
    prefix = f"t{uuid.uuid4().hex[:10]}."
    if how == "job-state":
        args = ["--timeout", "5", "--topic-prefix", prefix, "job-state", "--run-id", "r1",
                "--state", "scheduled", "--event-id", "r1-scheduled-1"]
        stdin = None
    else:
        args = ["--stdin", "--timeout", "5", "--topic-prefix", prefix]
        stdin = json.dumps({"type": "JobEvent", "run_id": "r1", "state": "queued"}) + "\n"
    start = time.monotonic()
    p = _emit(private_kafka, tmp_path, *args, stdin=stdin)
    assert p.returncode == 1, p.stderr
    assert f"topic '{prefix}rw.exec.job' does not exist on the broker" in p.stderr, p.stderr
    assert "spooled locally" not in p.stderr and "left_in_spool=0" in p.stderr, p.stderr
    if how == "stdin":
        assert "refused by the broker 1: topic missing for 1" in p.stderr, p.stderr
    assert time.monotonic() - start < 5 + 15  # the timeout, and the interpreter's start
