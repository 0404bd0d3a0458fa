"""Node signals beyond utilization: memory pressure, hardware slowdowns, NVLink, throughput.

Each case runs through the public path: the node agent on the NVML test double
(attributing GPUs to the run through a scheduler allocation file) and the SDK
(``runwatch.init`` / ``run.step`` with explicit times) publish to a capture
transport, and a real processor worker driven in memory
(:class:`~runwatch.processor.memory.MemoryProcessor`) reads it: the nodes
agent's re-keying, the compact per-run node aggregates and the run join.
"""

from __future__ import annotations

import json
import math
import random
import time
from pathlib import Path

import pytest
from sdk_kit import Clock, deliver_live, timed

import runwatch
from runwatch.adapters.nvml import Nvml
from runwatch.adapters.publisher import CaptureTransport, Publisher
from runwatch.agent.service import NodeAgent, RunAttributor
from runwatch.core.codec import load_codec
from runwatch.core.records import Alert
from runwatch.core.signals import rules
from runwatch.processor.memory import MemoryProcessor
from runwatch.testing.nvml_double import GIB, FakeNvml8

RUN = "run-node"
T0 = 1_800_000_000_000
GPUS = (0, 1, 2, 3)


class Cluster:
    """One run on four GPUs of one node: the SDK in the job, the agent on the node."""

    def __init__(self, tmp_path: Path, steps: bool = True) -> None:
        self.t = CaptureTransport()
        self.fake = FakeNvml8()
        alloc = tmp_path / "alloc.json"
        alloc.write_text(json.dumps({str(g): RUN for g in GPUS}))
        for g in GPUS:
            self.fake.attach_process(g, 999_999_000 + g)  # no such pid: the file attributes it
        self.agent = NodeAgent(Publisher(self.t, kind="agent"), node="n0",
                               nvml=Nvml.open(self.fake),
                               attributor=RunAttributor(allocation_file=alloc))
        self.run = runwatch.init("fam", run_id=RUN, transport=self.t, install_hooks=False,
                                 capture_lineage=False, clock=lambda: T0)
        self.steps = steps
        self.step_no = 0
        self.rng = random.Random(3)

    def second(self, at: int, step_ms: float = 1000.0, loader_ms: float = 50.0,
               sample: bool = True) -> None:
        """One second of the run: an agent sample (unless not ``sample``) and one step."""
        if sample:
            self.agent.tick(now_ms=at)
        if self.steps:
            self.step_no += 1
            jitter = self.rng.uniform(-10.0, 10.0)
            self.run.step(self.step_no, loss=1.0, samples=256, now_ms=at,
                          step_ms=step_ms + jitter, loader_wait_ms=loader_ms)

    def alerts(self, live: bool = False) -> list[tuple[str, str]]:
        """(detector, cause) of the firing alerts; ``live``: the records delivered each
        shortly after its event time, the timer ticking, and each alert by its last update."""
        self.run.finish(now_ms=T0 + 10**8)
        if live:
            wall = Clock(T0)
            m = MemoryProcessor(clock=wall)
            deliver_live(m, wall, timed(self.t.messages))
        else:
            m = MemoryProcessor()
            m.feed(self.t.messages)
        m.tick(int(time.time() * 1000) + 60_000)  # the timer: symptoms past the correlation wait
        assert [d.reason for d in m.dead] == []
        firing = [a for a in m.alerts if isinstance(a, Alert) and a.status == "firing"]
        if live:
            firing = list({a.alert_id: a for a in firing}.values())
        return sorted({(a.detector, a.probable_cause) for a in firing})


def used(frac: float) -> int:
    return int(frac * 80 * GIB)


MEMORY = {  # case: (minutes, the run's GPU memory used/total at a minute)
    "creep": (40, lambda m: 0.85 + 0.004 * m),
    "preallocated": (40, lambda m: 0.97),
    "step_at_eval": (40, lambda m: 0.95 if m < 12 else 0.97),
    "creep_far_from_full": (40, lambda m: 0.30 + 0.004 * m),
    "cache_fill": (40, lambda m: 0.95 - 0.35 * math.exp(-m / 2)),
    "staircase": (100, lambda m: 0.60 + 0.0375 * int(m // 10)),
    "refill": (100, lambda m: 0.95 - 0.35 * math.exp(-(m % 10) / 3)),
}


@pytest.mark.parametrize(("case", "fires"), [
    ("creep", True),  # 0.85 of the card, +0.4 % a minute: full within the horizon
    ("preallocated", False),  # 0.97 from the start and flat
    ("step_at_eval", False),  # 0.95, one step up to 0.97 at an evaluation, flat after
    ("creep_far_from_full", False),  # the same creep from 0.30: nowhere near the limit
    ("cache_fill", False),  # 0.6 -> 0.95 at start-up, ever slower (2 min time constant)
    # evaluation outputs kept on the GPU: 3 GiB every 10 minutes, flat between, to an OOM
    # (three 5-minute windows in a row must each grow: the flat one between its steps
    # never let it page)
    ("staircase", True),
    ("refill", False),  # the allocator's cache emptied at each evaluation, refilled to 0.95
])
def test_gpu_memory_creeping_toward_oom_pages(case: str, fires: bool, tmp_path: Path) -> None:
    c = Cluster(tmp_path, steps=False)
    minutes, frac_at = MEMORY[case]
    for k in range(minutes * 6):  # a sample every 10 s
        for g in GPUS:
            c.fake.set_memory_used(g, used(min(frac_at(k / 6), 0.999)))
        c.second(T0 + k * 10_000)
    got = c.alerts()
    assert (("rule:gpu_memory_pressure", "execution") in got) is fires
    assert all(d == "rule:gpu_memory_pressure" for d, _ in got)


@pytest.mark.parametrize(("reasons", "seconds", "fires"), [
    (0x40, 120, True),  # HW thermal slowdown for two minutes
    (0x80, 120, True),  # HW power brake
    (0x40, 20, False),  # a 20 s thermal blip
    (0x4, 300, False),  # SW power cap: a busy GPU's normal operating point
    (0x1, 300, False),  # idle
])
def test_sustained_hardware_slowdown_pages_once_per_node(reasons: int, seconds: int,
                                                         fires: bool, tmp_path: Path) -> None:
    c = Cluster(tmp_path)
    for k in range(400):
        on = 60 <= k < 60 + seconds
        for g in (1, 2):
            c.fake.set_throttle(g, reasons if on else 0, temp_c=91 if on else 60,
                                sm_clock_mhz=1100 if on else 1980)
        c.second(T0 + k * 1000)
    got = c.alerts()
    assert got == ([("rule:gpu_slowdown", "infrastructure")] if fires else [])


def test_slowdown_rule_table() -> None:
    held = [(1, 0x40, 61_000, 91.0, 1100), (2, 0x40, 59_000, 90.0, 1200), (3, 0x4, 99_000, 70.0,
                                                                          1900)]
    f = rules.gpu_slowdown("n0", held, 60_000, T0)
    assert f is not None and f.subject == "n0" and f.signal == "infrastructure"
    assert "GPUs [1]" in f.title and "91 C" in f.title and "1100 MHz" in f.title
    assert rules.gpu_slowdown("n0", held[1:], 60_000, T0) is None


@pytest.mark.parametrize(("case", "want"), [
    # NVLink falls to a twentieth and the run slows by a third: the interconnect explains it
    ("nvlink_down", [("watch:throughput", "infrastructure")]),
    # one GPU's links fall back (a twentieth) and the run slows by a third: its slowest
    # GPU explains it (the node's mean per GPU hid it: the fall was blamed on execution)
    ("one_link_down", [("watch:throughput", "infrastructure")]),
    # the run slows by a third and nothing outside it changed: it still pages
    ("slower", [("watch:throughput", "execution")]),
    # the loader explains the fall: its own watch pages, the throughput fall does not again
    ("loader", [("watch:loader_share", "execution")]),
    ("healthy", []),
    # its GPUs in a thermal slowdown explain it (it was execution: the throughput watch's own
    # earlier findings outweighed the throttling as evidence for its cause)
    ("thermal", [("rule:gpu_slowdown", "infrastructure"), ("watch:throughput", "infrastructure")]),
])
def test_falling_throughput_pages_with_its_cause(case: str, want: list, tmp_path: Path) -> None:
    c = Cluster(tmp_path)
    for k in range(600):
        late = k >= 300
        for g in GPUS:
            down = late and (case == "nvlink_down" or (case == "one_link_down" and g == 2))
            c.fake.set_nvlink(g, 20 if down else 400_000)
            if case == "thermal" and late:
                c.fake.set_throttle(g, 0x20, temp_c=91, sm_clock_mhz=1200)  # SW thermal
        step, loader = 1000.0, 50.0
        if late and case in ("nvlink_down", "one_link_down", "slower", "thermal"):
            step = 1500.0
        if late and case == "loader":
            loader = 50.0 + 2.0 * (k - 300)
            step = 950.0 + loader
        c.second(T0 + k * 1000, step_ms=step, loader_ms=loader)
    assert c.alerts() == want


@pytest.mark.parametrize("agent_every_s", [1, 15])
def test_node_evidence_confirmed_after_a_throughput_fall_paged_updates_its_cause(
        agent_every_s: int, tmp_path: Path) -> None:
    """One GPU's links fall back and the run slows by a third. At a 15 s agent interval the
    interconnect watch confirms it about a minute after the throughput fall paged (after
    the correlation delay): the page stayed execution. It is updated (same alert) now."""
    c = Cluster(tmp_path)
    for k in range(1_200):
        late = k >= 900  # the interconnect watch learns from 20 samples (5 min at 15 s)
        for g in GPUS:
            c.fake.set_nvlink(g, (20 if late and g == 2 else 400_000) * agent_every_s)
        c.second(T0 + k * 1000, step_ms=1500.0 if late else 1000.0,
                 sample=k % agent_every_s == 0)
    assert c.alerts(live=True) == [("watch:throughput", "infrastructure")]


@pytest.mark.parametrize(("idle_node", "slows", "want"), [
    (True, False, [("watch:gpu_occupancy", "infrastructure")]),
    # the run steps three times slower too: its throughput pages first, and neither that
    # nor the occupancy fall is the loader's doing (the throughput page made the idle
    # node's GPUs an execution problem)
    (True, True, [("watch:gpu_occupancy", "infrastructure"),
                  ("watch:throughput", "infrastructure")]),
    (False, False, []),
])
def test_one_node_of_a_multi_node_run_whose_gpus_fall_idle_pages(
        idle_node: bool, slows: bool, want: list, tmp_path: Path) -> None:
    """The run's two nodes' readings alternate; the GPU watches judged each reading against
    the run's level, so one node at 2 % between the other's 65 % never fell three readings
    in a row and nothing paged while the run kept stepping on one node's pace."""
    c = Cluster(tmp_path)
    fake1 = FakeNvml8()
    alloc = tmp_path / "alloc1.json"
    alloc.write_text(json.dumps({str(g): RUN for g in GPUS}))
    for g in GPUS:
        fake1.attach_process(g, 999_999_100 + g)
    agent1 = NodeAgent(Publisher(c.t, kind="agent"), node="n1", nvml=Nvml.open(fake1),
                       attributor=RunAttributor(allocation_file=alloc))
    for k in range(900):  # 15 minutes; n1's GPUs idle from minute 10 (a rank lost its work)
        if idle_node and k == 600:
            for g in GPUS:
                fake1.set_occupancy(g, 2.0)
        agent1.tick(now_ms=T0 + k * 1000 + 500)
        c.second(T0 + k * 1000, step_ms=3000.0 if slows and k >= 600 else 1000.0)
    assert c.alerts(live=True) == want


def test_a_few_seconds_of_low_occupancy_at_the_agents_1s_interval_do_not_page(
        tmp_path: Path) -> None:
    """A healthy run opens a new data shard every 10 minutes: two slower steps, the GPUs at
    18 % for 6 s. Three readings below the run's level were three seconds at the agent's
    default interval: it paged a fall of occupancy each time (at a 5 s interval it did not)."""
    c = Cluster(tmp_path)
    for k in range(60 * 35):
        dip = k >= 300 and k % 600 < 6
        for g in GPUS:
            c.fake.set_occupancy(g, 18.0 if dip else 65.0)
        c.second(T0 + k * 1000, step_ms=1500.0 if dip else 1000.0)
    assert c.alerts() == []


def test_a_job_killed_with_sigkill_is_not_paged_for_its_gpus_cleanup(tmp_path: Path) -> None:
    """A user's ``scancel --signal=KILL``: the driver logs XID 45 (preemptive cleanup) on every
    GPU of the job just before the epilog's cancelled event. It paged eight critical
    infrastructure alerts; another XID on the same node still pages."""
    c = Cluster(tmp_path)
    for k in range(300):
        if k == 250:
            for g in GPUS:
                c.fake.inject_xid(g, 45)
        c.second(T0 + k * 1000)
    c.run.job_state("cancelled", now_ms=T0 + 251_000)
    assert c.alerts() == []
    c2 = Cluster(tmp_path)
    for k in range(300):
        if k == 250:
            c2.fake.inject_xid(0, 45)
            c2.fake.inject_xid(1, 79)
        c2.second(T0 + k * 1000)
    assert c2.alerts() == [("rule:gpu_xid", "infrastructure")]


class IdlingNvml(FakeNvml8):
    """The NVML double whose GPUs' utilization the test sets (an input pipeline that hangs)."""

    def __init__(self) -> None:
        super().__init__()
        self.util: dict[int, int] = {}

    def nvmlDeviceGetUtilizationRates(self, h):  # noqa: ANN001, ANN201, N802 - pynvml's name
        r = super().nvmlDeviceGetUtilizationRates(h)
        i = self._h(h)
        if i in self.util:
            r.gpu = self.util[i]
        return r


@pytest.mark.parametrize(("xid", "cause", "slow_loader"), [
    (False, "execution", False), (True, "infrastructure", False),
    # a loader that slowed down earlier (its own findings: execution) does not outvote the
    # XID (the stall was called execution by the sum of the evidence's weights)
    (True, "infrastructure", True),
])
def test_a_stall_is_not_caused_by_its_gpus_idling_or_their_power_cap(
        xid: bool, cause: str, slow_loader: bool, tmp_path: Path) -> None:
    """A job whose data loader hangs stops stepping and its GPUs fall idle; they ran at their
    SW power cap (a busy GPU's operating point) all along. Neither stops a job: the stall is
    execution (it was paged as infrastructure, the idling and the cap outweighing the stall's
    own evidence). An XID on its GPUs does explain it."""
    t = CaptureTransport()
    fake = IdlingNvml()
    alloc = tmp_path / "alloc.json"
    alloc.write_text(json.dumps({str(g): RUN for g in GPUS}))
    for g in GPUS:
        fake.attach_process(g, 999_999_000 + g)
        fake.set_throttle(g, 0x4)  # SW power cap
    clock = {"t": T0}
    agent = NodeAgent(Publisher(t, kind="agent"), node="n0", nvml=Nvml.open(fake),
                      attributor=RunAttributor(allocation_file=alloc))
    run = runwatch.init("fam", run_id=RUN, transport=t, install_hooks=False,
                        capture_lineage=False, clock=lambda: clock["t"])
    for s in range(1, 1_800):
        at = T0 + s * 1_000
        if s == 900:  # the loader hangs: no more steps, the GPUs idle
            for g in GPUS:
                fake.util[g] = 3
        if xid and s == 899:
            fake.inject_xid(1, 79)
        agent.tick(now_ms=at)
        if s < 900:
            wait = 50.0 + (min(max(s - 300, 0), 400) * 2.5 if slow_loader else 0.0)
            run.step(s, loss=1.0, samples=256, now_ms=at, step_ms=950.0 + wait,
                     loader_wait_ms=wait)
    run.finish(now_ms=T0 + 10**8)
    codec = load_codec()
    msgs = [(at, m) for at, m in timed(t.messages)  # the job never ends
            if getattr(codec.decode(m[2]), "state", "") != "succeeded"]
    wall = Clock(T0)
    m = MemoryProcessor(clock=wall)
    deliver_live(m, wall, msgs)  # each shortly after its event time, the timer ticking
    wall.t += 60_000
    m.tick(wall.t)
    stalls = [a for a in m.alerts if isinstance(a, Alert) and a.detector == "rule:stalled"]
    assert stalls and stalls[0].status == "firing"
    assert {a.probable_cause for a in stalls} == {cause}


@pytest.mark.parametrize(("capped", "want"), [
    # one GPU at its SW power cap from the start: the cap is its level, not the fall's cause
    # (the starved GPUs were paged infrastructure: the standing cap counted as throttling)
    ("always", [("watch:gpu_occupancy", "execution"), ("watch:loader_share", "execution")]),
    # the cap appears as the occupancy falls: it does count
    ("at_fall", [("watch:gpu_occupancy", "infrastructure"), ("watch:loader_share", "execution")]),
])
def test_a_power_cap_held_from_the_start_explains_no_occupancy_fall(capped: str, want: list,
                                                                    tmp_path: Path) -> None:
    c = Cluster(tmp_path)
    if capped == "always":
        c.fake.set_throttle(3, 0x4)
    for k in range(900):
        late = k >= 400
        if late:  # the input pipeline slows: the GPUs wait, their occupancy falls
            for g in GPUS:
                c.fake.set_occupancy(g, 30.0)
            if capped == "at_fall":
                c.fake.set_throttle(3, 0x4)
        c.second(T0 + k * 1000, step_ms=2000.0 if late else 1000.0,
                 loader_ms=1100.0 if late else 50.0)
    assert c.alerts() == want


@pytest.mark.parametrize(("case", "want"), [
    # 40 s optimizer steps (gradient accumulation), a 7-minute evaluation pass every 30
    # minutes at a lower SM occupancy: the first two minutes of every pass (three step
    # intervals after the step before it) were read as training, a fall paged each time
    ("eval_passes", []),
    # the same run whose occupancy falls while it keeps stepping: a starved GPU is paged
    ("starved", [("watch:gpu_occupancy", "infrastructure")]),
])
def test_evaluation_passes_between_long_steps_are_no_occupancy_fall(
        case: str, want: list, tmp_path: Path) -> None:
    c = Cluster(tmp_path)
    c.steps = False  # steps are published below, every 40 s
    step = 0
    for s in range(0, 150 * 60, 10):  # 2.5 hours, an agent sample every 10 s
        at = T0 + s * 1000
        in_eval = case == "eval_passes" and s >= 1800 and s % 1800 < 420
        starved = case == "starved" and s >= 100 * 60
        for g in GPUS:
            c.fake.set_occupancy(g, 25.0 if in_eval or starved else 65.0)
        c.agent.tick(now_ms=at)
        if s % 40 == 0 and not in_eval:
            step += 1
            c.run.step(step, loss=1.0, samples=256, now_ms=at, step_ms=40_000.0,
                       loader_wait_ms=50.0)
    got = [a for a in c.alerts() if a[0].startswith("watch:gpu_")]
    assert got == want


def test_a_node_that_died_with_an_xid_explains_the_stall_also_in_a_replay(
        tmp_path: Path) -> None:
    """XID 79 (fallen off the bus), then the node and the run fall silent; the watchdog
    fails the job 45 minutes later. Read in one burst, the stall was judged at the end
    event's time, past the correlation window of the XID: cause execution, where live
    it is infrastructure."""
    from runwatch.client.emit import emit_records

    c = Cluster(tmp_path)
    for s in range(600):
        c.second(T0 + s * 1000)
    c.fake.inject_xid(0, 79)
    c.agent.tick(now_ms=T0 + 600_000)  # its last sample reports the XID
    end = T0 + 600_000 + 45 * 60_000  # past the 30-minute correlation window of the XID
    time.sleep(0.2)  # the SDK publishes from its thread
    assert emit_records(Publisher(c.t, kind="hook"), [
        {"type": "JobEvent", "run_id": RUN, "state": "failed", "attempt": 0,
         "reason": "NCCL watchdog timeout", "emitted_at_ms": end}]).errors == []
    m = MemoryProcessor()
    m.feed(c.t.messages)
    m.tick(int(time.time() * 1000) + 60_000)
    assert [d.reason for d in m.dead] == []
    # the latest word on each alert (a replay folds the run's records before its node
    # samples: the stall may go out first as execution and is updated when the XID is read)
    latest = {a.detector: a.probable_cause for a in m.alerts
              if isinstance(a, Alert) and a.status == "firing"}
    assert latest == {"rule:gpu_xid": "infrastructure", "rule:stalled": "infrastructure"}
