"""The node → run join of the nodes agent: allocation changes and samples meet in a local table."""

import json
import time

import pytest

import runwatch
from runwatch.adapters.nvml import Nvml
from runwatch.adapters.publisher import CaptureTransport, Publisher
from runwatch.agent.service import NodeAgent
from runwatch.client.emit import emit_records
from runwatch.core.codec import load_codec
from runwatch.core.records import (
    Alert,
    Allocation,
    GpuProcess,
    GpuSample,
    JobEvent,
    NodeSample,
    Source,
)
from runwatch.core.stream import rekey
from runwatch.core.stream.join_node import AllocChange, NodeAgg
from runwatch.processor.memory import MemoryProcessor
from runwatch.processor.outbox import JOB_BY_NODE, NODE_BY_RUN
from runwatch.processor.provision import COPARTITIONED, check_copartitioned
from runwatch.testing.nvml_double import FakeNvml8

SRC = Source(kind="agent", host="h", runwatch_version="0")
CODEC = load_codec()
T0 = 1_700_000_000_000
TICK = 2_000  # samples further apart than nodes.AGG_MS: none collapse


def _bundle_runs(raw: bytes) -> list:
    out = []
    for agg, _line in NodeAgg.unbundle(raw):
        assert not isinstance(agg, str), agg
        out.append(agg)
    return out


class Driven:
    """A real worker's nodes agent fed through the in-memory driver; what it forwarded."""

    def __init__(self, m: MemoryProcessor) -> None:
        self.m = m
        self.node_runs = m.p.nodes.node_runs
        self.dead = [d.reason for d in m.dead if d.topic != NODE_BY_RUN]
        self.sent = [(part, value) for topic, _key, value, part in m.internal
                     if topic == NODE_BY_RUN]

    def got(self, run: str) -> list[tuple[str, int, list[int]]]:
        """(node, at, gpu indices) of every entry forwarded to ``run``."""
        out = []
        for part, raw in self.sent:
            for agg in _bundle_runs(raw):
                assert self.m.p.out.partition(agg.run_id.encode()) == part  # each in its partition
                if agg.run_id == run:
                    out += [(e.node, e.at_ms, [g[0] for g in e.gpus]) for e in agg.nodes]
        return sorted(out, key=lambda x: x[1])


def gpu(i: int, run: str | None = None) -> GpuSample:
    procs = (GpuProcess(pid=1, run_id=run, used_mem_bytes=1),) if run else ()
    return GpuSample(index=i, uuid=f"g{i}", util_pct=90.0, sm_active_pct=70.0, mem_used_bytes=1,
                     mem_total_bytes=2, power_w=1.0, temp_c=1.0, sm_clock_mhz=1,
                     mem_clock_mhz=1, throttle_reasons=0, ecc_corrected=0, ecc_uncorrected=0,
                     xid=None, processes=procs)


def sample_event(at: int, node: str = "n0", attributed: dict[int, str] | None = None):
    attributed = attributed or {}
    rec = NodeSample(event_id=f"s{at}", run_id=None, emitted_at_ms=at, source=SRC, seq=0,
                     node=node, cpu_pct=1.0, mem_used_bytes=1, mem_total_bytes=2,
                     disk_read_bps=0.0, disk_write_bps=0.0, net_rx_bps=0.0, net_tx_bps=0.0,
                     gpus=tuple(gpu(i, attributed.get(i)) for i in range(4)))
    return event("rw.exec.node", CODEC.encode(rec), node.encode())


def event(topic: str, value: bytes, key: bytes = b"n0") -> tuple[str, bytes, bytes]:
    return (topic, key, value)


def change_event(run: str, op: str, gpus=(), at: int = T0, node: str = "n0"):
    return event(JOB_BY_NODE, AllocChange(run, node, op, tuple(gpus), at).to_json(),
                 node.encode())


def run_batches(batches) -> Driven:
    """Each batch handed to a real worker's nodes agent (one agent batch each)."""
    m = MemoryProcessor()
    for batch in batches:
        m.feed(batch)
    return Driven(m)


SAMPLES = [T0 + i * TICK for i in range(4)]


@pytest.mark.parametrize("batch", [1, 2, 5])
@pytest.mark.parametrize("position", range(len(SAMPLES) + 1))
def test_a_run_gets_the_nodes_samples_wherever_its_allocation_falls(position, batch) -> None:
    evs = [sample_event(at) for at in SAMPLES]
    evs.insert(position, change_event("R", "add", [0, 1], at=T0))
    p = run_batches([evs[i:i + batch] for i in range(0, len(evs), batch)])
    assert p.got("R") == [("n0", at, [0, 1]) for at in SAMPLES]  # each once, own GPUs only
    assert p.dead == []


@pytest.mark.parametrize(("alloc_at", "expected"), [
    (T0, SAMPLES), (T0 + TICK, SAMPLES[1:]), (T0 + 10 * TICK, []),
    # samples far ahead of the allocation (a clock ahead, a simulation's virtual clock on the
    # same node names) are not replayed: they would push the run's watermark into the future
    (T0 - rekey.REPLAY_SPAN_MS - 1, []),
    (T0 + 2 * TICK - rekey.REPLAY_SPAN_MS, SAMPLES[:3]),
])
def test_late_allocation_replays_only_samples_after_it(alloc_at, expected) -> None:
    p = run_batches([[sample_event(at) for at in SAMPLES],
                     [change_event("R", "add", [], at=alloc_at)]])
    assert [at for _, at, _ in p.got("R")] == expected


def test_replay_skips_samples_the_run_got_by_attribution() -> None:
    p = run_batches([[sample_event(T0, attributed={2: "R"})],
                     [change_event("R", "add", [0], at=T0)]])
    assert p.got("R") == [("n0", T0, [2])]


@pytest.mark.parametrize(("changes", "routed"), [
    ([("add", [0]), ("remove", [])], False),
    ([("add", [0]), ("remove", []), ("add", [1])], True),
    ([("remove", [])], False),
    ([("add", [0]), ("add", [0])], True),
])
def test_removes_stop_routing(changes, routed) -> None:
    before = [change_event("R", op, gpus, at=T0 - 10) for op, gpus in changes]
    p = run_batches([before, [sample_event(T0 + 5 * TICK)]])
    assert bool(p.got("R")) is routed
    index = json.loads(p.node_runs[b"n0"]) if b"n0" in p.node_runs else {}
    assert ("R" in index) is routed


def test_index_is_a_local_json_table_keyed_by_node() -> None:
    p = run_batches([[change_event("A", "add", [0, 1]), change_event("B", "add", [2], node="n1"),
                      change_event("C", "add", [3])]])
    assert json.loads(p.node_runs[b"n0"]) == {"A": [0, 1], "C": [3]}
    assert json.loads(p.node_runs[b"n1"]) == {"B": [2]}


@pytest.mark.parametrize("raw", [
    b"nope", b"[]", b'{"v":2,"run":"r","node":"n","op":"add","gpus":[]}',
    b'{"v":1,"run":"","node":"n","op":"add","gpus":[]}',
    b'{"v":1,"run":"r","op":"add","gpus":[]}',
    b'{"v":1,"run":"r","node":"n","op":"move","gpus":[]}',
    b'{"v":1,"run":"r","node":"n","op":"add","gpus":["0"]}',
    b'{"v":1,"run":"r","node":"n","op":"add","gpus":[-1]}',
])
def test_bad_allocation_changes_are_dead_lettered(raw: bytes) -> None:
    p = run_batches([[event(JOB_BY_NODE, raw), sample_event(T0)]])
    assert len(p.dead) == 1 and p.dead[0].startswith("allocation change")
    assert p.node_runs == {} and p.sent == []


def job(state: str, nodes=None, gpus=(0, 1), run: str | None = "R") -> JobEvent:
    alloc = Allocation(nodes=tuple(nodes), gpu_indices=tuple(gpus), gpu_model=None) \
        if nodes is not None else None
    return JobEvent(event_id="j", run_id=run, emitted_at_ms=T0, source=SRC, seq=0, state=state,
                    attempt=1, reason=None, allocation=alloc)


@pytest.mark.parametrize(("ev", "held", "changes", "after"), [
    (job("running", ["a", "b"]), [], {("a", "add"), ("b", "add")}, ["a", "b"]),
    (job("running", ["b", "c"]), ["a", "b"], {("b", "add"), ("c", "add"), ("a", "remove")},
     ["b", "c"]),
    (job("running"), ["a"], set(), ["a"]),
    (job("succeeded"), ["a", "b"], {("a", "remove"), ("b", "remove")}, []),
    (job("failed", ["c"]), ["a"], {("a", "remove"), ("c", "remove")}, []),
    (job("cancelled"), [], set(), []),
    (job("running", ["a"], run=None), [], set(), []),
])
def test_allocation_changes(ev, held, changes, after) -> None:
    out, now_held = rekey.allocation_changes(ev, held)
    assert {(c.node, c.op) for c in out} == changes
    assert now_held == after
    assert all(c.run_id == "R" and c.at_ms == T0 for c in out)
    assert all(c.gpus == ((0, 1) if c.op == "add" else ()) for c in out)
    for c in out:
        assert AllocChange.from_json(c.to_json()) == c


@pytest.mark.parametrize(("index", "change", "changed", "after"), [
    ({}, AllocChange("R", "n", "add", (1,)), True, {"R": [1]}),
    ({"R": [1]}, AllocChange("R", "n", "add", (1,)), False, {"R": [1]}),
    ({"R": [1]}, AllocChange("R", "n", "add", ()), True, {"R": []}),
    ({"R": [1], "S": []}, AllocChange("R", "n", "remove"), True, {"S": []}),
    ({"S": []}, AllocChange("R", "n", "remove"), False, {"S": []}),
])
def test_apply_alloc_change(index, change, changed, after) -> None:
    assert rekey.apply_alloc_change(index, change) is changed
    assert index == after


@pytest.mark.parametrize(("counts", "ok"), [
    ({"rw.exec.node": 8, "rw.internal.job-by-node": 8}, True),
    ({"rw.exec.node": 8}, True),
    ({"rw.exec.node": 8, "rw.internal.job-by-node": 4}, False),
    ({"rw.exec.node": 6, "rw.internal.job-by-node": 8}, False),
])
def test_node_pair_is_checked_for_copartitioning(counts, ok: bool) -> None:
    names = [t for pair in COPARTITIONED for t in pair]
    assert {"rw.exec.node", "rw.internal.job-by-node"} <= set(names)
    if ok:
        check_copartitioned(counts, names, 8)
    else:
        with pytest.raises(ValueError, match="co-partitioned"):
            check_copartitioned(counts, names, 8)


def test_a_run_ending_on_a_node_that_showed_processes_gets_no_idle_samples() -> None:
    running = sample_event(T0, attributed={0: "R", 1: "R"})
    after_exit = sample_event(T0 + TICK)  # its processes exited; the end event is not in yet
    p = run_batches([[change_event("R", "add", [0, 1], at=T0), running], [after_exit]])
    assert p.got("R") == [("n0", T0, [0, 1])]


@pytest.mark.parametrize("runtime", ["faust", "plain"])
def test_only_the_faust_runtime_gets_a_tick_topic(runtime: str) -> None:
    from runwatch.processor.provision import TABLES, wanted_topics
    from runwatch.processor.settings import ProcessorSettings

    s = ProcessorSettings(runtime=runtime, app_id="rw-t", partitions=4)
    wanted = wanted_topics(s)
    assert ("rw-t-tick" in wanted) is (runtime == "faust")
    assert {f"rw-t-{t}-changelog" for t in TABLES} <= set(wanted)
    assert wanted["rw-t-runstate-changelog"] == (4, {"cleanup.policy": "compact"})
    assert s.topic("rw.internal.job-by-node") in wanted


STEP_MS = 10_000
ALLOC = {"nodes": ["n0"], "gpu_indices": list(range(8)), "gpu_model": "H100"}


def _published_run(*phases: tuple[str, int, float]) -> tuple[MemoryProcessor, list[Alert]]:
    """A placed run with its node agent, as a user's scheduler hook, SDK and agent publish it.

    Phases, each ``(what, samples, GPU occupancy %)``, 10 s apart: ``steps`` (the run steps,
    the agent samples), ``idle`` (the agent samples only), ``xid`` (one sample with an
    XID on GPU 3), ``preempted``/``running``/``succeeded`` (the scheduler hook's job state;
    ``running`` with the allocation again; ``succeeded`` is ``run.finish``).

    Everything after the opening is fed at once, so a release of the run's GPUs reaches
    the nodes agent after the node samples published behind it (it goes through the runs
    agent and ``rw.internal.job-by-node``; the in-memory driver delivers it after what was
    queued), as a lagging release does live.
    """
    t = CaptureTransport()
    hook = Publisher(t, kind="hook")

    def job_state(state: str, at: int) -> None:
        rec = {"type": "job-state", "run_id": "A", "state": state, "experiment_family": "fam",
               "emitted_at_ms": at}
        if state == "running":
            rec["allocation"] = ALLOC
        res = emit_records(hook, [rec])
        assert not res.errors, res.errors

    job_state("running", T0)
    run = runwatch.init("fam", run_id="A", transport=t, install_hooks=False,
                        capture_lineage=False, clock=lambda: T0)
    nv = FakeNvml8()
    agent = NodeAgent(Publisher(t, kind="agent"), node="n0", nvml=Nvml.open(nv))
    m = MemoryProcessor()
    while len(t.messages) < 3:  # the hook's job state, the SDK's manifest and running
        time.sleep(0.005)
    m.feed(t.messages)  # the allocation reaches the nodes agent
    fed, at, step, last = len(t.messages), T0, 0, "running"
    for what, samples, occupancy in phases:
        last = what if what in ("preempted", "running") else last
        for g in range(8):
            nv.set_occupancy(g, occupancy)
        if what in ("preempted", "running"):
            job_state(what, at + 1)
        elif what == "succeeded":
            run.finish("succeeded", now_ms=at + 1)
        for _ in range(samples):
            at += STEP_MS
            if what == "steps":
                run.step(step, loss=2.0 * 0.99 ** step, now_ms=at, step_ms=float(STEP_MS),
                         samples=256)
                step += 1
            if what == "xid":
                nv.inject_xid(3, 79)
            agent.tick(at)
    if not run.finished:  # the SDK publishes from a thread: finish drains it
        run.finish("preempted" if last == "preempted" else "succeeded", now_ms=at + 1)
    m.feed(t.messages[fed:])
    m.tick(at + 600_000)  # and the wall-clock rules, ten minutes later
    return m, [a for a in m.alerts if isinstance(a, Alert) and a.run_id == "A"]


TRAINS = ("steps", 60, 70.0)


@pytest.mark.parametrize("after", [
    [("succeeded", 0, 0.0), ("idle", 30, 0.0)],  # its processes exited: the node idles
    [("succeeded", 0, 0.0), ("xid", 1, 0.0), ("idle", 5, 0.0)],  # the next job's XID
    [("preempted", 0, 0.0), ("idle", 60, 0.0)],  # the scheduler took the node back
    [("preempted", 0, 0.0), ("idle", 10, 30.0), ("xid", 1, 30.0)],  # and gave it to another
    [("preempted", 0, 0.0), ("idle", 30, 0.0), ("running", 0, 70.0), TRAINS,
     ("succeeded", 0, 0.0), ("idle", 30, 0.0)],  # preempted, resumed, finished
], ids=["ended-idle", "ended-xid", "preempted-idle", "preempted-other-job", "resumed"])
def test_a_run_gets_no_alerts_from_its_nodes_samples_while_off_its_gpus(after) -> None:
    m, alerts = _published_run(TRAINS, *after)
    assert Driven(m).got("A")  # the node's samples reached the run
    assert [(a.detector, a.summary) for a in alerts] == []


@pytest.mark.parametrize("phases", [
    [("steps", 50, 70.0), ("xid", 1, 70.0), ("steps", 9, 70.0)],
    [TRAINS, ("preempted", 0, 0.0), ("idle", 30, 0.0), ("running", 0, 70.0), TRAINS,
     ("xid", 1, 70.0), ("steps", 5, 70.0)],
], ids=["running", "resumed"])
def test_a_runs_own_xid_still_pages_it(phases) -> None:
    """The control: the same XID while the run holds the GPU is the run's."""
    _m, alerts = _published_run(*phases)
    assert [(a.detector, a.status) for a in alerts] == [("rule:gpu_xid", "firing")]


@pytest.mark.parametrize("late_s", [25, 60])
def test_an_allocation_later_than_the_recent_samples_still_gets_its_xid(late_s: int) -> None:
    # the agent samples every second; the run's allocation (stamped at its start) reaches
    # the processor `late_s` seconds of samples later, with an XID on its GPU at +20 s
    t = CaptureTransport()
    nv = FakeNvml8()
    agent = NodeAgent(Publisher(t, kind="agent"), node="n0", nvml=Nvml.open(nv))
    for k in range(late_s):
        if k == 20:
            nv.inject_xid(3, 48)
        agent.tick(T0 + 1_000 + k * 1_000)
    hook = Publisher(t, kind="hook")
    res = emit_records(hook, [{"type": "job-state", "run_id": "D", "state": "running",
                               "emitted_at_ms": T0, "allocation": ALLOC}])
    assert not res.errors, res.errors
    m = MemoryProcessor()
    m.feed(t.messages)
    fired = {(a.run_id, a.detector) for a in m.alerts if isinstance(a, Alert)}
    assert ("D", "rule:gpu_xid") in fired
