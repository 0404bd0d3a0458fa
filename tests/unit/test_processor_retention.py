"""Run states are retired once their runs are long over: the runs agent's table stays bounded.

Runs are published the way users publish them (``runwatch.init``/``run.*``,
``runwatch.client.data.report``) to a capture transport and handed to a real worker
driven in memory (:class:`~runwatch.processor.memory.MemoryProcessor`). Retention is
judged on the input's event time (the horizon): the processor's clock only moves on
far enough for every input to count as idle, so the horizon is the latest event time
read.
"""

from __future__ import annotations

import json
import math
import time

import pytest

import runwatch
from runwatch.adapters.nvml import Nvml
from runwatch.adapters.publisher import CaptureTransport, Publisher
from runwatch.agent.service import NodeAgent
from runwatch.client import data
from runwatch.client.emit import emit_records
from runwatch.core.records import Alert, DatasetRef
from runwatch.processor.memory import MemoryProcessor
from runwatch.processor.settings import ProcessorSettings
from runwatch.testing.nvml_double import FakeNvml8

HOUR = 3_600_000
DAY = 24 * HOUR
DS = ("s3://d", "v1")
SETTINGS = ProcessorSettings(save_interval_s=0)


class Cluster:
    """Runs published through the SDK into one capture transport, fed to one worker."""

    def __init__(self, t0: int) -> None:
        self.t = CaptureTransport()
        self.t0 = t0
        self.wall = [int(time.time() * 1000)]
        self.m = MemoryProcessor(SETTINGS, clock=lambda: self.wall[0])
        self.fed = 0

    def run(self, run_id: str, *, steps: list[int], finish_at: int | None,
            loss: float = 1.0) -> None:
        """A run reading ``s3://d@v1`` that steps at the given offsets (ms after t0)."""
        start = self.t0 + (steps[0] if steps else 0) - 1000
        run = runwatch.init("fam", run_id=run_id, transport=self.t, install_hooks=False,
                            capture_lineage=False, clock=lambda: start,
                            datasets=[DatasetRef(uri=DS[0], version=DS[1])])
        for i, off in enumerate(steps):
            run.step(i, loss=loss if i == len(steps) - 1 else 1.0, now_ms=self.t0 + off,
                     step_ms=1000.0, samples=32)
        if finish_at is not None:
            run.finish("succeeded", now_ms=self.t0 + finish_at)
        else:  # a job killed before its end event: publish what it sent, without an end
            run.publisher.transport.flush(5)
            deadline = time.monotonic() + 10
            while sum(1 for _, k, _ in self.t.messages if k == run_id) < len(steps) + 2:
                assert time.monotonic() < deadline, "the SDK never published the steps"
                time.sleep(0.005)

    def report(self, at: int, rows: int, tmp) -> None:
        data.report(*DS, f"p={at}", {"x": list(range(rows))},
                    publisher=Publisher(self.t, kind="sdk"), baseline_directory=tmp,
                    now_ms=self.t0 + at)

    def feed(self, *, later_ms: int = 120_000) -> None:
        """Feed what was published since the last feed; then tick, every input idle."""
        self.m.feed(self.t.messages[self.fed:])
        self.fed = len(self.t.messages)
        self.wall[0] += later_ms
        self.m.tick(self.wall[0])

    def states(self) -> set[str]:
        return {k.decode() for k in self.m.p.runs.runstate}

    def subscribed(self) -> list[str]:
        raw = self.m.p.datasets.dataset_index.get(DS[0].encode())
        return sorted(json.loads(raw).get("@".join(DS), [])) if raw else []

    def alerts(self, run_id: str) -> list[tuple[str, str]]:
        return [(a.detector, a.status) for a in self.m.alerts
                if isinstance(a, Alert) and a.run_id == run_id]


@pytest.mark.parametrize(("hours_after", "retired"), [(5, False), (7, True)])
def test_an_ended_run_is_retired_once_the_input_is_six_hours_past_it(tmp_path, hours_after,
                                                                   retired) -> None:
    c = Cluster(int(time.time() * 1000) - 8 * HOUR)
    c.run("A", steps=list(range(10_000, 600_000, 10_000)), finish_at=600_000)
    # B goes on (a step every 10 minutes) up to `hours_after` after A's end
    c.run("B", steps=list(range(10_000, (hours_after * 60 + 10) * 60_000, 600_000)),
          finish_at=None)
    c.feed()
    assert c.states() == ({"B"} if retired else {"A", "B"})
    assert c.subscribed() == (["B"] if retired else ["A", "B"])
    assert c.m.p.out.counters["runs_retired"] == int(retired)
    # the dataset's next partition is empty: the run still reading it pages, the other not
    c.report(hours_after * HOUR + 700_000, 0, tmp_path)
    c.feed()
    zero = ("rule:zero_rows", "firing")
    assert zero in c.alerts("B")
    assert (zero in c.alerts("A")) is not retired
    assert "A" not in c.states() if retired else "A" in c.states()  # no state for A again
    assert c.m.dead == []


def test_a_run_that_never_ended_is_retired_after_seven_silent_days_its_alerts_resolved(
        tmp_path) -> None:
    c = Cluster(int(time.time() * 1000) - 9 * DAY)
    # K: a NaN loss at its last step, then the job is killed without an end event
    c.run("K", steps=[10_000, 20_000, 30_000], finish_at=None, loss=math.nan)
    c.feed()
    assert ("rule:non_finite", "firing") in c.alerts("K")
    c.run("L", steps=[6 * DAY], finish_at=6 * DAY + 1000)  # 6 days later: K is kept
    c.feed()
    assert "K" in c.states()
    c.run("M", steps=[8 * DAY], finish_at=8 * DAY + 1000)  # 8 days later: K goes
    c.feed()
    assert c.states() == {"M"}  # L ended 2 days before the horizon: retired too
    assert c.subscribed() == ["M"]
    firing = {d for d, s in c.alerts("K") if s == "firing"}
    resolved = {d for d, s in c.alerts("K") if s == "resolved"}
    assert firing and firing <= resolved  # every alert it fired is resolved with it


def test_retention_zero_keeps_every_run(tmp_path) -> None:
    c = Cluster(int(time.time() * 1000) - 9 * DAY)
    c.m = MemoryProcessor(SETTINGS.model_copy(update={"ended_retention_ms": 0,
                                                      "silent_retention_ms": 0}),
                          clock=lambda: c.wall[0])
    c.run("A", steps=[10_000], finish_at=20_000)
    c.run("K", steps=[10_000], finish_at=None)
    c.run("B", steps=[8 * DAY], finish_at=8 * DAY + 1000)
    c.feed()
    assert c.states() == {"A", "B", "K"}


def test_a_run_never_seen_is_retired_once_its_held_events_are_dropped(tmp_path) -> None:
    """Each time its events are dropped there is a dead letter of its own (the sink keeps
    both), though the run's state started again in between."""
    c = Cluster(int(time.time() * 1000) - HOUR)
    hook = Publisher(c.t, kind="hook")
    ids = []
    for k in range(2):
        res = emit_records(hook, [{"type": "step-timing", "run_id": "U", "step": k,
                                   "step_ms": 1000.0, "loader_wait_ms": 1.0,
                                   "compute_ms": 999.0, "emitted_at_ms": c.t0 + k}])
        assert not res.errors, res.errors
        c.feed(later_ms=1000)  # held: no manifest or job event of U yet
        assert "U" in c.states() and not c.m.dead[len(ids):]
        c.feed(later_ms=SETTINGS.hold_ms + 1000)  # past the hold: dropped, and U retired
        assert "U" not in c.states()
        ids += [d.event_id for d in c.m.dead[len(ids):] if d.run_id == "U"]
        assert len(ids) == k + 1
    assert len(set(ids)) == 2


def test_a_silent_run_is_taken_off_its_nodes_when_retired(tmp_path) -> None:
    """A job killed without its end event still holds its node in the nodes agent's index;
    once retired, the node's next samples start no state of it and no dead letter."""
    c = Cluster(int(time.time() * 1000) - 9 * DAY)
    hook = Publisher(c.t, kind="hook")
    res = emit_records(hook, [{"type": "job-state", "run_id": "K", "state": "running",
                               "experiment_family": "fam", "emitted_at_ms": c.t0,
                               "allocation": {"nodes": ["n7"], "gpu_indices": [0, 1]}}])
    assert not res.errors, res.errors
    c.run("K", steps=[10_000, 20_000], finish_at=None)
    c.feed()
    assert c.m.p.nodes.node_runs.get(b"n7") is not None
    c.run("M", steps=[8 * DAY], finish_at=8 * DAY + 1000)  # 8 days later: K goes
    c.feed()  # (its stall page waits for the correlation delay: retired a round later)
    c.feed()
    assert "K" not in c.states()
    assert json.loads(c.m.p.nodes.node_runs[b"n7"]) == {}
    agent = NodeAgent(Publisher(c.t, kind="agent"), node="n7", nvml=Nvml.open(FakeNvml8(2)))
    for k in range(3):  # the node's agent goes on sampling its (idle) GPUs
        agent.tick(c.t0 + 8 * DAY + 2000 + k * 10_000)
    c.feed(later_ms=SETTINGS.hold_ms + 1000)
    assert "K" not in c.states() and c.m.dead == []


def test_a_run_with_release_evidence_is_kept_for_its_promotion_days_later(tmp_path) -> None:
    """A model is promoted a day after training; its gate is checked two days after."""
    c = Cluster(int(time.time() * 1000) - 4 * DAY)
    c.run("A", steps=list(range(10_000, 600_000, 10_000)), finish_at=600_000)  # a model
    c.run("G", steps=list(range(10_000, 600_000, 10_000)), finish_at=600_000)  # no evidence
    pub = Publisher(c.t, kind="hook")
    sent = emit_records(pub, [{"type": "ArtifactEvent", "run_id": "A",
                               "emitted_at_ms": c.t0 + 610_000,
                               "uri": "s3://m/A", "kind": "model", "size_bytes": 10,
                               "sha256": "ab" * 32}])
    assert sent.errors == []
    c.run("B", steps=[DAY], finish_at=DAY + 1000)  # moves the input a day on
    c.feed()
    assert "A" in c.states() and "G" not in c.states()  # G had nothing to release
    emit_records(pub, [{"type": "ArtifactEvent", "run_id": "A", "emitted_at_ms": c.t0 + DAY + 5_000,
                        "uri": "s3://m/A", "kind": "model", "size_bytes": 10,
                        "sha256": "ab" * 32, "registry_status": "production"}])
    # G's gate is checked from the store two days on (its state here long retired)
    emit_records(pub, [{"type": "GateDecision", "run_id": "G", "emitted_at_ms": c.t0 + 2 * DAY,
                        "gate": "eval", "decision": "fail", "evaluator": "ci",
                        "reasons": ["auc 0.71 < 0.75"]}])
    c.feed()
    c.feed()  # past the registration's wait for a gate decision
    assert ("rule:registry_without_gate", "firing") in c.alerts("A")
    assert ("rule:failed_gate", "firing") in c.alerts("G")
    assert c.m.dead == []


def test_a_model_registered_after_its_ungated_run_was_retired_pages(tmp_path) -> None:
    """A run that reported no gate and no model is retired 6 h after it ended; its model is
    registered 8 h after training. Held for a manifest that never came, the registration of
    the ungated model, the very one registry control is for, was dead-lettered."""
    c = Cluster(int(time.time() * 1000) - 2 * DAY)
    c.run("U", steps=list(range(10_000, 600_000, 10_000)), finish_at=600_000)
    c.run("B", steps=[9 * HOUR], finish_at=9 * HOUR + 1000)  # moves the input on
    c.feed()
    assert "U" not in c.states()
    sent = emit_records(Publisher(c.t, kind="hook"), [
        {"type": "ArtifactEvent", "run_id": "U", "emitted_at_ms": c.t0 + 8 * HOUR,
         "uri": "s3://m/U", "kind": "model", "size_bytes": 10, "sha256": "cd" * 32,
         "registry_status": "registered"}])
    assert sent.errors == []
    c.feed()
    c.feed()  # past the registration's wait for a gate decision
    assert ("rule:registry_without_gate", "firing") in c.alerts("U")
    assert c.m.dead == []
