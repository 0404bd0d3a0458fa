"""The shipped Slurm hooks, run as Slurm runs them (on each node), through the real
``runwatch emit``: with the broker away, what they publish is read back from the spool."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runwatch.adapters.spool import Spool
from runwatch.client.hostlist import expand_hostlist
from runwatch.core.codec import load_codec
from runwatch.core.records import JobEvent

ROOT = Path(__file__).resolve().parents[2]
HOOKS = ROOT / "infra" / "slurm"


def _run_hook(hook: str, tmp_path: Path, node: str, unset: tuple[str, ...] = (),
              **env: str) -> None:
    """Run a hook as Slurm would on ``node`` (``hostname -s`` answers ``node``), without the
    variables ``unset`` names."""
    bin_dir = tmp_path / f"bin-{node}"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "hostname").write_text(f"#!/bin/sh\necho {node}\n")
    (bin_dir / "hostname").chmod(0o755)
    runwatch = Path(sys.executable).parent / "runwatch"
    full = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "RUNWATCH": str(runwatch),
            "RUNWATCH_ALLOC_DIR": str(tmp_path / f"alloc-{node}"),
            "RUNWATCH_PRODUCER_SPOOL_DIR": str(tmp_path / "spool"),
            "RUNWATCH_PRODUCER_MESSAGE_TIMEOUT_MS": "300", "RUNWATCH_EMIT_TIMEOUT": "1",
            "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9",  # nothing listens: the record spools
            "SLURM_JOB_ID": "4242", "SLURM_CLUSTER_NAME": "c1",
            "RUNWATCH_DEFAULTS_FILE": str(tmp_path / "no-defaults"), **env}
    for name in unset:
        full.pop(name, None)
    done = subprocess.run(["bash", str(HOOKS / hook)], env=full, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr


def _spooled(tmp_path: Path) -> list[JobEvent]:
    codec = load_codec()
    out = []
    for d in sorted((tmp_path / "spool").iterdir()):
        spool = Spool(d)
        while batch := spool.peek(100):  # one segment at a time (each emit wrote its own)
            out += [codec.decode(r.value) for r in batch]
            spool.ack(len(batch))
        spool.close()
    return out


def test_each_nodes_prolog_names_the_whole_allocation_and_a_one_based_attempt(
        tmp_path: Path) -> None:
    """A two-node job: each node's prolog named only its own node, so the second
    replaced the first (the processor watched one node's GPUs, cost billed one node),
    and sent Slurm's 0-based restart count as the 1-based attempt."""
    env = {"SLURM_JOB_NODELIST": "q[1-2]", "SLURM_JOB_GPUS": "0,1,2,3,4,5,6,7",
           "SLURM_RESTART_COUNT": "1", "SLURM_JOB_PARTITION": "gpu"}
    for node in ("q1", "q2"):
        _run_hook("prolog.sh", tmp_path, node, **env)
    events = _spooled(tmp_path)
    assert len(events) == 2
    for e in events:
        assert (e.run_id, e.state, e.attempt, e.queue) == ("slurm-c1-4242", "scheduled", 2, "gpu")
        assert e.allocation is not None
        assert (list(e.allocation.nodes), list(e.allocation.gpu_indices)) == (
            ["q1", "q2"], list(range(8)))
    assert len({e.event_id for e in events}) == 1  # one event downstream, sent by each node


def test_the_epilog_sends_one_end_per_job_with_a_one_based_attempt(tmp_path: Path) -> None:
    for node in ("q1", "q2"):
        _run_hook("epilog.sh", tmp_path, node, SLURM_JOB_EXIT_CODE2="0:9")
    events = _spooled(tmp_path)
    assert [(e.state, e.attempt) for e in events] == [("cancelled", 1)] * 2
    assert len({e.event_id for e in events}) == 1


@pytest.mark.parametrize(("expr", "names"), [
    ("gpu-[01-03,07],login1", ["gpu-01", "gpu-02", "gpu-03", "gpu-07", "login1"]),
    ("n1,n2,n1", ["n1", "n2"]),
    ("r[1-2]-n[01-02]", ["r1-n01", "r1-n02", "r2-n01", "r2-n02"]),
    ("x[9-11]", ["x9", "x10", "x11"]),
    ("", []),
])
def test_hostlists_expand_as_slurm_writes_them(expr: str, names: list[str]) -> None:
    assert expand_hostlist(expr) == names


@pytest.mark.parametrize(("expr", "why"), [
    ("n[1-", "unbalanced"), ("n]1[", "unbalanced"), ("n[3-1]", "backwards"),
    ("n[a]", "not a number"), ("n[[1]]", "nested"), ("n[1-999999999]", "more than"),
])
def test_a_bad_hostlist_is_refused_with_the_reason(expr: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        expand_hostlist(expr)


def test_emit_refuses_a_bad_hostlist_with_exit_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "runwatch", "emit", "job-state", "--run-id", "r",
         "--state", "scheduled", "--nodes", "q[2-1]", "--gpus", "0"],
        env={**os.environ, "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9",
             "RUNWATCH_PRODUCER_SPOOL_DIR": str(tmp_path)},
        capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "runs backwards" in done.stderr and "Traceback" not in done.stderr


def test_the_prolog_reads_the_prologs_own_restart_count_and_without_a_node_list_its_node(
        tmp_path: Path) -> None:
    """Slurm gives the prolog SLURM_JOB_RESTART_COUNT (SLURM_RESTART_COUNT is the job
    step's); a prolog without a node list names its own node under an id of its own."""
    env = {"SLURM_JOB_GPUS": "0,1", "SLURM_JOB_RESTART_COUNT": "2"}
    for node in ("q1", "q2"):
        _run_hook("prolog.sh", tmp_path, node, **env)
    events = _spooled(tmp_path)
    assert [(e.attempt, list(e.allocation.nodes)) for e in events] == [(3, ["q1"]), (3, ["q2"])]
    assert len({e.event_id for e in events}) == 2


@pytest.mark.parametrize(("env", "state"), [
    ({"SLURM_JOB_EXIT_CODE": "256"}, "failed"),      # exit 1, as a wait status
    ({"SLURM_JOB_EXIT_CODE": "9"}, "cancelled"),     # killed by SIGKILL
    ({"SLURM_JOB_EXIT_CODE": "0"}, "succeeded"),
    ({"SLURM_JOB_EXIT_CODE2": "1:0", "SLURM_JOB_EXIT_CODE": "0"}, "failed"),
])
def test_the_epilog_reads_an_older_slurms_wait_status(tmp_path: Path, env: dict[str, str],
                                                      state: str) -> None:
    """With only SLURM_JOB_EXIT_CODE (a wait status) a failed job was sent as succeeded."""
    _run_hook("epilog.sh", tmp_path, "q1", **env)
    (event,) = _spooled(tmp_path)
    assert event.state == state


@pytest.mark.parametrize(("env", "want"), [
    ({}, "gpu-201"),  # the short host name, as slurm.conf's NodeName and the prolog's list
    ({"RUNWATCH_AGENT_NODE": "node-a"}, "node-a"),  # a site whose NodeName differs
])
def test_the_agent_unit_names_the_node_as_slurm_does(tmp_path: Path, env: dict[str, str],
                                                     want: str) -> None:
    """The unit's ExecStart, run as systemd runs it ($$ is a literal $). Without SLURMD_NODENAME
    (a service has none) the agent named itself by the full host name, gpu-201.hpc.example.org,
    where the allocation said gpu-201: cost found none of the run's GPU samples."""
    unit = (HOOKS / "runwatch-agent.service").read_text()
    line = next(x for x in unit.splitlines() if x.startswith("ExecStart="))
    argv = line.removeprefix("ExecStart=").replace("$$", "$")
    assert argv.startswith("/bin/sh -c '") and argv.endswith("'")
    script = argv.removeprefix("/bin/sh -c '")[:-1]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    hostname = bin_dir / "hostname"  # `hostname -s` of gpu-201.hpc.example.org
    hostname.write_text('#!/bin/sh\n[ "$1" = -s ] && echo gpu-201 '
                        '|| echo gpu-201.hpc.example.org\n')
    hostname.chmod(0o755)
    agent = tmp_path / "runwatch"  # stands in for /opt/runwatch/bin/runwatch: prints its argv
    agent.write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    agent.chmod(0o755)
    script = script.replace("/opt/runwatch/bin/runwatch", str(agent))
    done = subprocess.run(["/bin/sh", "-c", script],
                          env={"PATH": f"{bin_dir}:{os.environ['PATH']}", **env},
                          capture_output=True, text=True, timeout=30, check=True)
    args = done.stdout.split("\n")
    assert args[:3] == ["agent", "--node", want]


def test_the_hooks_export_the_sites_defaults_file(tmp_path: Path) -> None:
    """The README puts the Kafka settings in /etc/default/runwatch (KEY=VALUE lines, the agent
    unit's EnvironmentFile=). The hooks read it with ``.`` and exported nothing, so `runwatch
    emit` never saw them: it sent to 127.0.0.1:9092 and spooled under root's home, and every
    job event was lost without a trace (found by an independent case, 2026-12-07)."""
    spool = tmp_path / "spool"  # where _spooled reads; named by the file alone
    defaults = tmp_path / "runwatch.defaults"
    defaults.write_text("KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9\n"
                        f"RUNWATCH_PRODUCER_SPOOL_DIR={spool}\n"
                        "RUNWATCH_PRODUCER_MESSAGE_TIMEOUT_MS=300\n")
    gone = ("KAFKA_BOOTSTRAP_SERVERS", "RUNWATCH_PRODUCER_SPOOL_DIR",
            "RUNWATCH_PRODUCER_MESSAGE_TIMEOUT_MS")
    _run_hook("prolog.sh", tmp_path, "q1", unset=gone, RUNWATCH_DEFAULTS_FILE=str(defaults),
              SLURM_JOB_GPUS="0,1")
    _run_hook("epilog.sh", tmp_path, "q1", unset=gone, RUNWATCH_DEFAULTS_FILE=str(defaults))
    assert [e.state for e in _spooled(tmp_path)] == ["scheduled", "succeeded"]


def test_an_unreadable_jobs_file_does_not_freeze_the_nodes_allocation(tmp_path: Path) -> None:
    """A job's file cut short (a prolog killed mid-write) made every later hook's merge fail:
    allocation.json kept the first job's GPUs for good, the next job was never attributed."""
    import json

    alloc = tmp_path / "alloc-q1"
    _run_hook("prolog.sh", tmp_path, "q1", SLURM_JOB_ID="100", SLURM_JOB_GPUS="0,1")
    (alloc / "slurm-101.json").write_text('[{"run_id": "slurm-c1-101", "gp')
    _run_hook("prolog.sh", tmp_path, "q1", SLURM_JOB_ID="102", SLURM_JOB_GPUS="2-3")
    runs = {e["run_id"]: e["gpus"] for e in json.loads((alloc / "allocation.json").read_text())}
    assert runs == {"slurm-c1-100": [0, 1], "slurm-c1-102": [2, 3]}
    _run_hook("epilog.sh", tmp_path, "q1", SLURM_JOB_ID="100")
    runs = {e["run_id"]: e["gpus"] for e in json.loads((alloc / "allocation.json").read_text())}
    assert runs == {"slurm-c1-102": [2, 3]}
    assert not list(alloc.glob("*.tmp"))


@pytest.mark.parametrize(("gpus", "want"), [
    ("GPU-6f1e2d3c-aaaa-bbbb-cccc-0123456789ab,GPU-7a", []),  # CUDA_VISIBLE_DEVICES by UUID
    ("MIG-1a2b3c", []),
    ("0-3,6", [0, 1, 2, 3, 6]),
])
def test_a_gpu_list_of_names_still_sends_the_event(tmp_path: Path, gpus: str,
                                                   want: list[int]) -> None:
    """GPUs named by UUID (or a MIG id) made emit exit 2 on the int() of the list: nothing
    was published or spooled, and the prolog exited 0 as if all was well."""
    _run_hook("prolog.sh", tmp_path, "q1", unset=("SLURM_JOB_GPUS",),
              CUDA_VISIBLE_DEVICES=gpus, SLURM_JOB_NODELIST="q1")
    (event,) = _spooled(tmp_path)
    assert event.allocation is not None and list(event.allocation.nodes) == ["q1"]
    assert list(event.allocation.gpu_indices) == want


@pytest.mark.parametrize("env", [
    {"SLURM_JOB_RESTART_COUNT": "n/a"},
    {"SLURM_JOB_EXIT_CODE": "x", "SLURM_JOB_RESTART_COUNT": "1"},
])
def test_the_hooks_exit_0_on_odd_variables(tmp_path: Path, env: dict[str, str]) -> None:
    """Under ``set -u`` a restart count or exit code that is no number (and a missing
    SLURM_JOB_ID) made the hooks exit 1; a failing epilog drains the node. The README
    says both always exit 0 (``_run_hook`` checks the exit status)."""
    for hook in ("prolog.sh", "epilog.sh"):
        _run_hook(hook, tmp_path, "q1", SLURM_JOB_GPUS="0", **env)
        _run_hook(hook, tmp_path, "q1", unset=("SLURM_JOB_ID",), **env)
    events = _spooled(tmp_path)
    # without a job id nothing is sent; with one, the odd count reads as no restart
    assert sorted((e.state, e.attempt) for e in events) == sorted(
        [("scheduled", 1 if "n/a" in env.values() else 2),
         ("succeeded", 1 if "n/a" in env.values() else 2)])  # an exit code read as none
