"""The SDK where training jobs take it: forked workers, a finish that times out, a full queue.

Each case drives the public API (``runwatch.init``, ``run.*``) the way a user's
script does; the processes that fork or exit run as subprocesses.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from sdk_kit import Clock, ListTransport, child_script, deliver_live, read_records, timed

import runwatch
from runwatch.core.records import Alert
from runwatch.processor.memory import MemoryProcessor
from runwatch.processor.settings import ProcessorSettings

# A job on a real KafkaTransport (its broker unreachable: records wait unacknowledged and
# spooled) that forks a worker; the worker logs a step and ends the way argv[1] says.
FORKING_JOB = textwrap.dedent(
    """
    import os, signal, sys, time
    import runwatch
    from runwatch.adapters.kafka import KafkaTransport, ProducerSettings
    from runwatch.adapters.settings import KafkaSettings
    mode, spool = sys.argv[1], sys.argv[2]
    t = KafkaTransport(KafkaSettings(bootstrap_servers="127.0.0.1:9"),
                       ProducerSettings(spool_dir=spool, message_timeout_ms=500), name="fork")
    run = runwatch.init("x", transport=t, capture_lineage=False)
    for s in range(20):
        run.step(s, loss=1.0)
    time.sleep(0.3)
    pid = os.fork()
    if pid == 0:  # a DataLoader / Pool worker
        run.step(99, loss=1.0)
        run.validation(99, {"v": 1.0})
        print("child", run.counters["dropped_forked"], flush=True)
        if mode == "exit":
            sys.exit(0)  # atexit runs in the child
        if mode == "sigterm":  # the scheduler signals every process of the job
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)
        raise ValueError("worker failed")  # the excepthook runs in the child
    _, status = os.waitpid(pid, 0)
    print("status", os.waitstatus_to_exitcode(status), flush=True)
    c = run.finish(timeout=0.5)
    print("parent", c.get("dropped_forked", 0), c["transport_in_spool"], flush=True)
    """
)


@pytest.mark.parametrize(("mode", "rc"), [("exit", 0), ("sigterm", -15), ("raise", 1)])
def test_a_forked_worker_ends_at_once_and_its_calls_are_counted(
    tmp_path: Path, mode: str, rc: int
) -> None:
    """A forked child touched the parent's librdkafka client at exit and hung for ever."""
    script = tmp_path / "job.py"
    script.write_text(FORKING_JOB)
    p = subprocess.Popen([sys.executable, str(script), mode, str(tmp_path / "spool")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # the parent and its hung child
        out, err = p.communicate()
        pytest.fail(f"the forked worker hung at its end ({mode}): {out!r}")
    lines = out.split("\n")
    assert "child 2" in lines, out + err  # both calls counted in the child
    assert f"status {rc}" in lines, out + err
    assert "dropped_forked" in err  # and said
    # the parent's run is untouched: nothing of the child's, its records still in its spool
    parent = [ln for ln in lines if ln.startswith("parent ")]
    assert parent and parent[0].split()[1] == "0", out + err
    assert int(parent[0].split()[2]) >= 20, out + err


class SlowTransport(ListTransport):
    """A transport that takes 1 ms a record: the publishing thread falls behind the job."""

    def produce(self, topic, key, value):
        time.sleep(0.001)
        super().produce(topic, key, value)


def test_a_finish_that_runs_out_counts_what_it_left_and_still_ends_the_run(caplog) -> None:
    """finish(timeout) returned with steps queued: they, and the final JobEvent, were lost
    without a count, and the publishing thread went on writing into the closed transport."""
    t = SlowTransport()
    run = runwatch.init("fam", team="ml", transport=t, install_hooks=False,
                        capture_lineage=False)
    for s in range(5000):
        run.step(s, loss=1.0)
    with caplog.at_level(logging.WARNING, logger="runwatch.client.run"):
        c = run.finish("succeeded", timeout=1.0)
    steps = t.records("LearningStep")
    assert 0 < c["dropped_unsent"] < 5000
    assert len(steps) + c["dropped_unsent"] == 5000  # every step published or counted
    assert [j.state for j in t.records("JobEvent")] == ["running", "succeeded"]
    assert "dropped_unsent" in caplog.text
    n = len(t.out)
    run.step(5001, loss=1.0)  # after finish: counted, never queued
    run.validation(5001, {"v": 1.0})
    time.sleep(0.1)
    assert len(t.out) == n and run.counters["dropped_after_finish"] == 2


def test_a_full_queue_is_said_when_it_drops_not_only_counted(caplog) -> None:
    """Steps dropped by a full queue were counted but logged nowhere (finish's line was INFO)."""
    t = ListTransport()
    run = runwatch.init("fam", team="ml", transport=t, install_hooks=False,
                        capture_lineage=False, queue_max=10)
    run._abandon.set()  # a publishing thread that takes nothing: the queue fills up
    time.sleep(0.1)
    with caplog.at_level(logging.WARNING, logger="runwatch.client.run"):
        for s in range(100):
            run.step(s, loss=1.0)
        assert run.counters["dropped_queue_full"] == 90
        assert "queue is full" in caplog.text and "dropped_queue_full" in caplog.text
        caplog.clear()
        run.finish(timeout=1.0)
    finished = [r for r in caplog.records if "finished" in r.getMessage()]
    assert finished and finished[0].levelno == logging.WARNING
    assert "not published: dropped_queue_full" in finished[0].getMessage()


def test_a_metric_name_that_is_no_text_costs_only_that_metric(caplog) -> None:
    """``metrics={0: acc}`` made the whole LearningStep (its loss too) or ValidationResult fail
    to encode, with an error line at every step."""
    t = ListTransport()
    run = runwatch.init("fam", team="ml", transport=t, install_hooks=False,
                        capture_lineage=False)
    with caplog.at_level(logging.WARNING):
        for s in range(3):
            run.step(s, loss=0.5, metrics={0: 0.9, None: 1.0, "acc": 0.8, b"b\xffx": 1.0})
        run.validation(3, {5: 1.0, "val_loss": 2.0})
        c = run.finish()
    steps = t.records("LearningStep")
    assert [(s.step, s.loss, s.metrics) for s in steps] == [
        (s, 0.5, {"acc": 0.8, "b\ufffdx": 1.0}) for s in range(3)]
    assert [v.metrics for v in t.records("ValidationResult")] == [{"val_loss": 2.0}]
    assert c["dropped_wrong_type"] == 7 and "encode_errors" not in c
    names = [r for r in caplog.records if "metric name" in r.getMessage()]
    assert len(names) == 3  # once per type on the steps (int, None), once for the validation


def test_data_report_on_pandas_frames_with_infinities_nullable_columns_and_datetimes(
    tmp_path: Path,
) -> None:
    """Three things pipelines hand over every day: a float column with +inf and -inf (or
    huge values) raised ValueError/OverflowError from math.fsum into the pipeline; pd.NA in a
    nullable Int64 column was no null (0 % nulls, no min/max/mean); a datetime event-time
    column gave no freshness, without a word."""
    pd = pytest.importorskip("pandas")
    np = pytest.importorskip("numpy")
    from runwatch.adapters.publisher import Publisher
    from runwatch.client import data

    t = ListTransport()
    pub = Publisher(t, kind="sdk")
    now = 1_764_633_600_000  # 2025-12-02T00:00:00Z
    df = pd.DataFrame({
        "x": [1.0, np.inf, -np.inf, np.nan, 2.0],
        "big": [1e308, 1e308, 1e308, 1e308, 1e308],
        "i": pd.array([1, None, 3, 4, 5], dtype="Int64"),
        "t": pd.to_datetime([now - 5000, now - 4000, now - 3000, now - 2000, now - 1000],
                            unit="ms", utc=True),
    })
    for _ in range(2):  # the first creates the baseline, the second compares with it
        rep = data.report("s3://clicks", "v1", "p", df, baseline="ref", timestamp="t",
                          publisher=pub, now_ms=now, baseline_directory=tmp_path)
    feats = {f.name: f for f in rep.features}
    assert (feats["x"].min, feats["x"].max, feats["x"].null_pct) == (-np.inf, np.inf, 20.0)
    assert np.isnan(feats["x"].mean)  # +inf and -inf
    assert feats["big"].mean == pytest.approx(1e308)
    assert (feats["i"].null_pct, feats["i"].min, feats["i"].max) == (20.0, 1.0, 5.0)
    assert feats["i"].mean == pytest.approx(3.25)
    assert rep.freshness_lag_ms == 1000
    naive = df.assign(t=df["t"].dt.tz_localize(None))  # naive datetimes are UTC
    rep = data.report("s3://clicks", "v1", "p", naive, timestamp="t", publisher=pub, now_ms=now)
    assert rep.freshness_lag_ms == 1000
    assert len(t.records("DataQualityReport")) == 3


def test_emit_refuses_values_it_would_publish_changed() -> None:
    """A scheduler hook's ``"nodes": "gpu-017"`` was published as the nodes g, p, u, -, 0,
    1, 7; ``"attempt": 1.5`` or ``true`` as 1; ``"event_id": ""`` made every such record
    a duplicate of the others downstream. Each is refused with its line and field now."""
    from runwatch.adapters.publisher import Publisher
    from runwatch.client.emit import emit_lines

    t = ListTransport()
    base = '{"type": "job-state", "run_id": "r1", "state": "queued"'
    res = emit_lines(Publisher(t, kind="hook"), [
        base + ', "allocation": {"nodes": "gpu-017"}}',
        base + ', "attempt": 1.5}',
        base + ', "attempt": true}',
        base + ', "event_id": ""}',
        base + ', "allocation": {"nodes": ["gpu-017"], "gpu_indices": [0, 1]}, "attempt": 2}',
        '{"type": "learning-step", "run_id": "r1", "step": 3, "loss": 2, "metrics": {"a": 1}}',
        base.replace("queued", "requeued") + "}",
    ])
    assert res.errors == [
        'line 1: bad value for JobEvent: field allocation.nodes is "gpu-017", not an array',
        "line 2: bad value for JobEvent: field attempt is 1.5, not an integer",
        "line 3: bad value for JobEvent: field attempt is true, not an integer",
        "line 4: bad value for JobEvent: an empty event_id (consumers deduplicate by it)",
        # an unknown state named with the known ones (it was "ValueError("'requeued' is not
        # in list")" from the encoder)
        'line 7: unknown state "requeued" for JobEvent (known: queued, scheduled, running, '
        "preempted, retrying, failed, succeeded, cancelled)",
    ]
    assert res.published == 2  # integers widen to floats (loss, metrics)
    (job,) = t.records("JobEvent")
    assert job.allocation.nodes == ("gpu-017",) and job.attempt == 2
    (step,) = t.records("LearningStep")
    assert step.loss == 2.0 and step.metrics == {"a": 1.0}


def test_a_second_producer_of_one_name_spools_to_disk_and_a_later_one_replays_it(
    tmp_path: Path, caplog
) -> None:
    """Two ``runwatch emit`` at once on a node (prolog hooks of two jobs) share the spool
    name ``emit``: the second degraded to a memory spool and, with the broker away, lost
    its records at exit."""
    from runwatch.adapters.kafka import KafkaTransport, ProducerSettings, adopt_orphans
    from runwatch.adapters.settings import KafkaSettings
    from runwatch.adapters.spool import orphaned

    s = ProducerSettings(spool_dir=tmp_path, message_timeout_ms=300)
    k = KafkaSettings(bootstrap_servers="127.0.0.1:9")  # nothing listens: an outage
    first, second = KafkaTransport(k, s, name="emit"), KafkaTransport(k, s, name="emit")
    for t in (first, second):
        for i in range(3):
            t.produce("rw.exec.job", "r1", b"v%d" % i)
    with caplog.at_level(logging.WARNING):
        c1, c2 = first.close(0.5), second.close(0.5)
    assert (c1.in_spool, c2.in_spool, c1.failed, c2.failed) == (3, 3, 0, 0)
    assert "DEGRADED" not in caplog.text
    dirs, _ = orphaned(tmp_path, "emit-", "emit")
    assert [d.name for d in dirs] == [f"emit-{os.getpid()}"]
    again = adopt_orphans(k, s, prefix="emit-", exclude="emit")  # the next emit replays it
    assert [len(t._spool) for t in again] == [3]
    for t in again:
        t.close(0)


def test_the_agent_says_once_that_a_gpu_is_lost_and_keeps_publishing_the_node(caplog) -> None:
    """A GPU fallen off the bus was a warning every tick (86,400 a day at 1 s), and NVML
    failing as a whole made the tick raise: not even the host figures went out."""
    from runwatch.adapters.nvml import Nvml
    from runwatch.adapters.publisher import Publisher
    from runwatch.agent.service import NodeAgent
    from runwatch.testing.nvml_double import FakeNvml8, NVMLError

    fake = FakeNvml8()
    t = ListTransport()
    agent = NodeAgent(Publisher(t, kind="agent"), node="n1", nvml=Nvml.open(fake))
    lost = {"gpu": True, "nvml": False}
    name = fake.nvmlDeviceGetName
    wait = fake.nvmlEventSetWait_v2

    def get_name(h):
        if lost["gpu"] and fake._h(h) == 3:
            raise NVMLError(15)  # NVML_ERROR_GPU_IS_LOST
        return name(h)

    def wait_v2(es, ms):
        if lost["nvml"]:
            raise RuntimeError("driver unloaded")
        return wait(es, ms)

    fake.nvmlDeviceGetName, fake.nvmlEventSetWait_v2 = get_name, wait_v2
    with caplog.at_level(logging.WARNING, logger="runwatch.agent.service"):
        for i in range(5):
            agent.tick(1000 * (i + 1))
        lost["gpu"] = False
        agent.tick(6000)
        lost["nvml"] = True
        for i in range(3):
            agent.tick(7000 + 1000 * i)
    samples = t.records("NodeSample")
    assert [len(s.gpus) for s in samples] == [7] * 5 + [8] + [0] * 3
    assert all(s.mem_total_bytes > 0 for s in samples)  # host figures every tick
    lines = [r.getMessage() for r in caplog.records]
    assert sum("GPU 3 unreadable" in m for m in lines) == 1
    assert sum("GPU 3 readable again" in m for m in lines) == 1
    assert sum("NVML unreadable" in m for m in lines) == 1
    assert agent.errors == 5 + 3


THREADED_JOB = child_script(
    """
    import os, signal, sys, threading, time
    import runwatch
    OUT = sys.argv[1]
    # <file transport>
    box = {}
    def start(rid):
        box[rid] = runwatch.init("x", transport=T(), capture_lineage=False, run_id=rid)
    th = threading.Thread(target=start, args=("in-thread",))  # e.g. a trainer's worker thread
    th.start(); th.join()
    start("in-main")
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(10)
    """
)


def test_sigterm_ends_a_run_started_outside_the_main_thread_too(tmp_path: Path) -> None:
    """A run started in a thread has no SIGTERM handler (only the main thread can set one):
    a preemption left it 'running' for ever, with no word about it."""
    out = tmp_path / "out.bin"
    script = tmp_path / "job.py"
    script.write_text(THREADED_JOB)
    p = subprocess.run([sys.executable, str(script), str(out)], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == -15, p.stderr
    assert "outside the main thread" in p.stderr  # said when it started
    ends = {rec.run_id: rec.state for rec in read_records(out)
            if type(rec).__name__ == "JobEvent" and rec.state != "running"}
    assert ends == {"in-thread": "preempted", "in-main": "preempted"}


def test_a_checkpoint_whose_local_file_cannot_be_read_is_not_reported_ok(
    tmp_path: Path, caplog
) -> None:
    """``run.checkpoint("/ckpt/step-9000.pt")`` before (or instead of) writing it was
    published ``ok`` with size 0: a resume point that does not exist looked trustworthy."""
    t = ListTransport()
    run = runwatch.init("fam", team="ml", transport=t, install_hooks=False,
                        capture_lineage=False)
    there = tmp_path / "step-1.pt"
    there.write_bytes(b"weights")
    with caplog.at_level(logging.WARNING, logger="runwatch.client.run"):
        run.checkpoint(there, step=1)
        run.checkpoint(tmp_path / "step-2.pt", step=2)  # never written
        run.checkpoint(f"file://{tmp_path}/step-3.pt", step=3)
        run.checkpoint("s3://bucket/run/step-4.pt", step=4)  # remote: not read, stays ok
        c = run.finish()
    got = [(ck.step, ck.outcome) for ck in t.records("CheckpointEvent")]
    assert got == [(1, "ok"), (2, "unknown"), (3, "unknown"), (4, "ok")]
    assert c["checkpoint_unreadable"] == 2
    assert sum("cannot be read" in r.getMessage() for r in caplog.records) == 1


def test_data_report_misuse_is_a_clear_error() -> None:
    """A frame with two columns of one name raised AttributeError: 'DataFrame' object has no
    attribute 'tolist'."""
    pd = pytest.importorskip("pandas")
    from runwatch.adapters.publisher import Publisher
    from runwatch.client import data

    pub = Publisher(ListTransport(), kind="sdk")
    frame = pd.DataFrame([[1, 2, 3]], columns=["a", "a", "b"])
    with pytest.raises(TypeError, match="duplicate column names: a"):
        data.report("s3://x", "v1", "p", frame, publisher=pub)
    with pytest.raises(TypeError, match="cannot read a table from Series"):
        data.report("s3://x", "v1", "p", frame["b"], publisher=pub)


def test_a_record_refused_at_every_step_is_not_an_error_line_at_every_step(caplog) -> None:
    """100,000 metrics per step make every LearningStep over the 1 MB record limit: each was
    refused (counted in oversize, as documented) with an error line of its own. (Since
    2026-12-07 the step goes out without those metrics, counted in metrics_oversize.)"""
    t = ListTransport()
    run = runwatch.init("fam", team="ml", transport=t, install_hooks=False,
                        capture_lineage=False)
    metrics = {f"layer{i:06d}.grad_norm": 1.0 for i in range(100_000)}
    with caplog.at_level(logging.WARNING):
        for s in range(20):
            run.step(s, loss=1.0, metrics=metrics)
        c = run.finish()
    assert c["metrics_oversize"] == 20 and not c.get("oversize")
    assert [(r.loss, r.metrics) for r in t.records("LearningStep")] == [(1.0, {})] * 20
    assert len(t.records("StepTiming")) == 20  # the step's timing still goes out
    refused = [r for r in caplog.records if "record limit" in r.getMessage()]
    assert len(refused) == 1 and "metrics_oversize" in refused[0].getMessage()


@pytest.mark.parametrize("run_id", ["team/exp/run-7", "../../escape", "x" * 165, "Zoë run"])
def test_a_run_id_of_any_shape_spools_in_one_folder_of_the_spool_directory(
        tmp_path: Path, run_id: str) -> None:
    """The SDK names its spool after the run id: a ``/`` nested folders (``../`` left the
    spool directory) and a 165-character id passed the file-name limit (memory spool)."""
    import runwatch
    from runwatch.adapters.kafka import ProducerSettings, adopt_orphans, spool_folder_name
    from runwatch.adapters.settings import KafkaSettings

    spool = tmp_path / "spool"
    s = ProducerSettings(spool_dir=spool, message_timeout_ms=300)
    k = KafkaSettings(bootstrap_servers="127.0.0.1:9")  # nothing listens: records spool
    run = runwatch.init("fam", run_id=run_id, kafka=k, producer=s, install_hooks=False,
                        capture_lineage=False)
    run.step(1, loss=0.5)
    counts = run.finish(timeout=0.5)
    assert counts.get("transport_failed", 0) == 0, counts  # kept on disk, not lost
    made = [p for p in tmp_path.rglob("*") if p.is_dir()]
    assert [p.parent for p in made if p != spool] == [spool]  # one folder, inside the spool
    (folder,) = [p for p in made if p != spool]
    assert folder.name == spool_folder_name(f"sdk-{run_id}-r0") and len(folder.name) <= 100
    assert any(folder.glob("*.seg"))
    again = adopt_orphans(k, s, prefix="sdk-", exclude="sdk-other-r0")  # the next job sends it
    assert [t._spool.directory.name for t in again] == [folder.name]
    for t in again:
        t.close(0)


def test_spool_folder_names_stay_plain_and_distinct() -> None:
    from runwatch.adapters.kafka import spool_folder_name

    assert spool_folder_name("sdk-run-1-r0") == "sdk-run-1-r0"  # plain names are kept
    names = {spool_folder_name(n) for n in ("sdk-a/b-r0", "sdk-a_b-r0", "sdk-a?b-r0", "..")}
    assert len(names) == 4 and ".." not in names and not any("/" in n for n in names)


@pytest.mark.parametrize("saved_again", [False, True])
def test_a_checkpoint_saved_again_before_the_sdk_read_it_is_not_called_corrupt(
        saved_again: bool, tmp_path, monkeypatch) -> None:
    """``last.ckpt`` saved every few minutes: the SDK hashes the file on its thread, later.
    When the next save to the same path had begun by then, the half-written file's digest
    was compared with the expected one: a critical checksum page on a healthy job."""
    import hashlib

    import runwatch.client.run as sdk_run

    path = tmp_path / "last.ckpt"
    path.write_bytes(b"a" * 4096)
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    real = sdk_run.file_digest

    def next_save_begins(uri: str, *stop):  # the next save truncates and streams into the path
        if saved_again:
            path.write_bytes(b"b" * 1000)
        return real(uri, *stop)

    monkeypatch.setattr(sdk_run, "file_digest", next_save_begins)
    t, clock = ListTransport(), Clock(1_800_000_000_000)
    run = runwatch.init("fam", run_id="ckpt-race", team="ml", transport=t, install_hooks=False,
                        capture_lineage=False, clock=clock)
    for i in range(30):
        clock.t += 1_000
        run.step(i, loss=1.0)
    run.checkpoint(path, step=30, expected_sha256=sha, duration_ms=500.0)
    c = run.finish()
    (ckpt,) = t.records("CheckpointEvent")
    assert (ckpt.size_bytes, ckpt.outcome) == (4096, "ok")
    assert ckpt.sha256 == (None if saved_again else sha)
    assert c.get("checkpoint_changed", 0) == (1 if saved_again else 0)
    wall = Clock(1_800_000_000_000)
    m = MemoryProcessor(ProcessorSettings(save_interval_s=0), clock=wall)
    deliver_live(m, wall, timed(t.out))
    assert [a.detector for a in m.alerts if isinstance(a, Alert)] == []



def test_the_sdk_sends_what_an_emit_left_in_its_spool(tmp_path: Path) -> None:
    """The k8s example's init container runs `runwatch emit` (its scheduled event) before
    the job's container: with the broker away the event spooled in the init container's
    own file system and was lost with it, and in a shared volume no later emit would send
    it (the SDK replayed only ``sdk-`` spools). Found by an independent case, 2026-12-07."""
    import runwatch
    from runwatch.adapters.kafka import ProducerSettings
    from runwatch.adapters.settings import KafkaSettings

    spool = tmp_path / "spool"
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9",
           "RUNWATCH_PRODUCER_SPOOL_DIR": str(spool),
           "RUNWATCH_PRODUCER_MESSAGE_TIMEOUT_MS": "300"}
    done = subprocess.run([sys.executable, "-m", "runwatch", "emit", "job-state", "--run-id",
                           "pod-1", "--state", "scheduled", "--nodes", "n1", "--timeout", "1"],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert any((spool / "emit").glob("*.seg"))
    s = ProducerSettings(spool_dir=spool, message_timeout_ms=300)
    run = runwatch.init("fam", run_id="pod-1", kafka=KafkaSettings(bootstrap_servers="127.0.0.1:9"),
                        producer=s, install_hooks=False, capture_lineage=False)
    try:
        assert [t._spool.directory.name for t in run._orphans] == ["emit"]
    finally:
        run.finish(timeout=0.5)
