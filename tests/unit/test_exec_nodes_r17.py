"""Node reuse and scheduler events as a cluster operator meets them (round 17).

Each case is published as a cluster does: the scheduler hook through ``runwatch emit``'s
records (:func:`~runwatch.client.emit.emit_records`), the jobs through ``runwatch.init``
with explicit times, the node through the agent on the NVML double. Every message reaches
one worker (the in-memory driver) in the order of its delivery time: its event time and a
quarter of a second, or later where a producer spooled it.
"""

from __future__ import annotations

from typing import Any

import pytest
from sdk_kit import Clock

import runwatch
from runwatch.adapters.nvml import Nvml
from runwatch.adapters.publisher import CaptureTransport, Publisher
from runwatch.agent.service import NodeAgent
from runwatch.client.emit import emit_records
from runwatch.core.codec import load_codec
from runwatch.core.records import Alert
from runwatch.processor.memory import MemoryProcessor
from runwatch.testing.nvml_double import FakeNvml8

T0 = 1_800_000_000_000
SEC = 1_000
LAG = 250
WHOLE = {"nodes": ["n0"], "gpu_indices": list(range(8)), "gpu_model": "H100"}
WATCHED = ("rule:gpu_xid", "rule:gpu_ecc", "rule:stalled", "watch:gpu_occupancy")
"""The node and execution rules these cases are about (what else a run pages is not)."""
CODEC = load_codec()


class Cluster:
    """One node with its agent, a scheduler hook and SDK jobs; what they published, timed."""

    def __init__(self) -> None:
        self.plan: list[tuple[int, int, tuple[str, Any, bytes]]] = []
        self.hook_t = CaptureTransport()
        self.hook = Publisher(self.hook_t, kind="hook")
        self.nvml = FakeNvml8()
        self.agent_t = CaptureTransport()
        self.agent = NodeAgent(Publisher(self.agent_t, kind="agent"), node="n0",
                               nvml=Nvml.open(self.nvml))
        self.jobs: dict[str, tuple[Any, CaptureTransport]] = {}
        for g in range(8):
            self.nvml.set_occupancy(g, 70.0)

    def _take(self, messages: list[Any], delivered: int | None = None) -> None:
        for m in messages:
            at = int(CODEC.decode(m[2]).emitted_at_ms)
            self.plan.append((delivered or at + LAG, len(self.plan), m))

    def job_state(self, run: str, state: str, at: int, delivered: int | None = None,
                  **fields: Any) -> None:
        """The scheduler hook's ``runwatch emit job-state`` (spooled: ``delivered``)."""
        n = len(self.hook_t.messages)
        res = emit_records(self.hook, [{"type": "job-state", "run_id": run, "state": state,
                                        "experiment_family": "fam", "emitted_at_ms": at,
                                        **fields}])
        assert not res.errors, res.errors
        self._take(self.hook_t.messages[n:], delivered)

    def start(self, run: str, at: int) -> None:
        t = CaptureTransport()
        run_ = runwatch.init("fam", run_id=run, transport=t, install_hooks=False,
                             capture_lineage=False, clock=Clock(at))
        self.jobs[run] = (run_, t)

    def step(self, run: str, i: int, at: int) -> None:
        self.jobs[run][0].step(i, loss=1.0, samples=256, step_ms=5000.0, loader_wait_ms=50.0,
                               now_ms=at)

    def end(self, run: str, status: str | None, at: int) -> None:
        """The job's end (``None``: it hangs, its SDK never says so)."""
        run_, t = self.jobs.pop(run)
        run_.finish(status or "failed", now_ms=at)
        if status is None:
            t.messages.pop()  # the end a hung job never sends
        self._take(t.messages)

    def sample(self, at: int, delivered: int | None = None) -> None:
        """The node agent's sample (spooled: ``delivered``, in order)."""
        n = len(self.agent_t.messages)
        self.agent.tick(at)
        self._take(self.agent_t.messages[n:], delivered)

    def pages(self) -> set[tuple[str, str]]:
        """(run, detector) of every alert fired, the timer ticking every 5 s of delivery."""
        plan = sorted(self.plan, key=lambda p: (p[0], p[1]))
        wall = Clock(plan[0][0])
        m = MemoryProcessor(clock=wall)
        tick = plan[0][0]
        for at, _n, msg in plan:
            while tick <= at:
                wall.t = tick
                m.tick(tick)
                tick += 5 * SEC
            wall.t = max(wall.t, at)
            m.feed([msg])
        for k in range(1, 31):  # and the wall-clock rules for half an hour after
            wall.t = plan[-1][0] + k * 60 * SEC
            m.tick(wall.t)
        assert [d.reason for d in m.dead] == []
        return {(a.run_id or "", a.detector) for a in m.alerts if isinstance(a, Alert)
                and a.status == "firing" and a.detector in WATCHED}


def trains(c: Cluster, run: str, start: int, end: int, xid_at: int | None = None,
           spool: tuple[int, int] | None = None) -> None:
    """``run`` steps every 5 s from ``start`` to ``end`` while the agent samples its node
    (an XID on GPU 3 at ``xid_at``; samples stamped in ``spool`` delivered at its end)."""
    for i, at in enumerate(range(start + 5 * SEC, end, 5 * SEC)):
        c.step(run, i, at)
        if at == xid_at:
            c.nvml.inject_xid(3, 79)
        c.sample(at, spool[1] if spool and spool[0] <= at < spool[1] else None)


A_ENDS = T0 + 300 * SEC


def node_reused(spool: tuple[int, int] | None) -> set[tuple[str, str]]:
    """Job A fails at ``A_ENDS`` after an XID on its GPU 3 seconds before; the scheduler
    gives the node to job B two seconds later."""
    c = Cluster()
    c.job_state("A", "running", T0, allocation=WHOLE)
    c.start("A", T0 + SEC)
    trains(c, "A", T0, A_ENDS, xid_at=A_ENDS - 10 * SEC, spool=spool)
    c.end("A", "failed", A_ENDS)
    c.job_state("A", "failed", A_ENDS + 500)
    c.job_state("B", "running", A_ENDS + 2 * SEC, allocation=WHOLE)
    c.start("B", A_ENDS + 3 * SEC)
    trains(c, "B", A_ENDS, A_ENDS + 600 * SEC, spool=spool)
    c.end("B", "succeeded", A_ENDS + 600 * SEC)
    return c.pages()


@pytest.mark.parametrize("spool", [
    None,  # the control: every sample on time
    (A_ENDS - 30 * SEC, A_ENDS + 90 * SEC),  # the node's agent spooled two minutes
    (A_ENDS - 12 * SEC, A_ENDS + 5 * SEC),  # or only its sample with the XID, for 17 s
    (A_ENDS - 12 * SEC, A_ENDS + SEC),  # behind by seconds: after A's release, before B
], ids=["on-time", "spooled-2-min", "spooled-17-s", "behind-by-seconds"])
def test_the_last_xid_of_a_job_pages_it_and_not_the_next_job_on_the_node(spool) -> None:
    """A spooled sample stamped while A held the GPUs reached the nodes agent after A's
    release and B's allocation: it paged B (critical, the wrong run, for an XID from before
    B started) and never A, whose own readings must count however late they come; between
    the two, it paged no one."""
    assert node_reused(spool) == {("A", "rule:gpu_xid")}


@pytest.mark.parametrize("b_starts", [True, False], ids=["starts", "cancelled-while-queued"])
def test_a_job_queued_with_its_nodes_named_is_not_paged_for_their_current_job(
        b_starts: bool) -> None:
    """``runwatch emit job-state --state queued --nodes n0 --gpus ...`` (the README's
    example) put B on n0's index while A ran there: A's XID paged B, still queued."""
    c = Cluster()
    c.job_state("A", "running", T0, allocation=WHOLE)
    c.start("A", T0 + SEC)
    c.job_state("B", "queued", T0 + 60 * SEC, allocation=WHOLE, queue="gpu-h100")
    trains(c, "A", T0, A_ENDS, xid_at=T0 + 200 * SEC)
    c.end("A", "succeeded", A_ENDS)
    c.job_state("A", "succeeded", A_ENDS + 500)
    if b_starts:
        c.job_state("B", "running", A_ENDS + 2 * SEC, allocation=WHOLE)
        c.start("B", A_ENDS + 3 * SEC)
        trains(c, "B", A_ENDS, A_ENDS + 300 * SEC)
        c.end("B", "succeeded", A_ENDS + 300 * SEC)
    else:
        c.job_state("B", "cancelled", A_ENDS + 2 * SEC)
        for k in range(1, 60):  # the node idles
            c.sample(A_ENDS + k * 5 * SEC)
    assert c.pages() == {("A", "rule:gpu_xid")}


def test_jobs_sharing_a_node_on_other_gpus_keep_their_own_readings() -> None:
    """The control: A on GPUs 0-3, B on 4-7 of one node; an XID on GPU 5 is B's, and B's
    idle GPUs (it stopped stepping: hung) are not A's fall."""
    c = Cluster()
    c.job_state("A", "running", T0, allocation={**WHOLE, "gpu_indices": [0, 1, 2, 3]})
    c.job_state("B", "running", T0, allocation={**WHOLE, "gpu_indices": [4, 5, 6, 7]})
    c.start("A", T0 + SEC)
    c.start("B", T0 + SEC)
    for i, at in enumerate(range(T0 + 5 * SEC, T0 + 1500 * SEC, 5 * SEC)):
        c.step("A", i, at)
        if at < T0 + 600 * SEC:
            c.step("B", i, at)
        elif at == T0 + 600 * SEC:
            c.nvml.inject_xid(5, 79)
            for g in (4, 5, 6, 7):
                c.nvml.set_occupancy(g, 0.0)
        c.sample(at)
    c.end("A", "succeeded", T0 + 1500 * SEC)
    c.end("B", None, T0 + 600 * SEC)
    assert c.pages() == {("B", "rule:gpu_xid"), ("B", "rule:stalled")}


@pytest.mark.parametrize(("queued_delivered", "queued_on"), [
    (T0 - 29 * SEC, "n0"),
    (T0 + 50 * SEC, "n0"),
    (T0 + 50 * SEC, "n7"),  # a tentative node; the hook's start names n0
], ids=["on-time", "spooled-after-the-start", "spooled-naming-another-node"])
def test_a_submit_hooks_queued_that_arrives_after_the_start_leaves_the_job_running(
        queued_delivered: int, queued_on: str) -> None:
    """The submit host's ``runwatch emit job-state --state queued`` (stamped 30 s before
    the job started) spooled and arrived after the SDK's ``running``: the run stayed queued
    for the rest of its life, its hang never paged, and its node readings (the XID that hung
    it) were dropped as taken off its GPUs; naming another node, it moved the nodes agent's
    index off the job's node."""
    c = Cluster()
    c.job_state("A", "queued", T0 - 30 * SEC, delivered=queued_delivered,
                allocation={**WHOLE, "nodes": [queued_on]})
    if queued_on != "n0":
        c.job_state("A", "running", T0, allocation=WHOLE)
    c.start("A", T0 + SEC)
    trains(c, "A", T0, T0 + 600 * SEC)
    c.end("A", None, T0 + 600 * SEC)
    c.nvml.inject_xid(3, 79)
    for g in range(8):
        c.nvml.set_occupancy(g, 0.0)
    for k in range(1, 300):  # hung: the node idles with it
        c.sample(T0 + 600 * SEC + k * 5 * SEC)
    assert c.pages() == {("A", "rule:gpu_xid"), ("A", "rule:stalled")}


@pytest.mark.parametrize("sdk", [True, False], ids=["with-the-sdk", "hooks-only"])
def test_a_job_placed_by_the_slurm_prolog_owns_its_gpus_from_then(sdk: bool) -> None:
    """The control: the shipped prolog says ``scheduled`` with the GPUs Slurm gave the job;
    an XID while its container starts (before ``runwatch.init``, or in a job without the
    SDK, which never says ``running``) is the job's."""
    c = Cluster()
    c.job_state("P", "scheduled", T0, allocation=WHOLE, attempt=1)
    for k in range(1, 12):
        if k == 6:
            c.nvml.inject_xid(3, 79)
        c.sample(T0 + k * 5 * SEC)
    if sdk:
        c.start("P", T0 + 60 * SEC)
        trains(c, "P", T0 + 55 * SEC, T0 + 400 * SEC)
        c.end("P", "succeeded", T0 + 400 * SEC)
    else:
        for k in range(12, 80):
            c.sample(T0 + k * 5 * SEC)
    c.job_state("P", "succeeded", T0 + 401 * SEC, attempt=1)
    assert c.pages() == {("P", "rule:gpu_xid")}
