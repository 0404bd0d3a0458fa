import json

import pytest

from runwatch.core.records import Alert, DeadLetter, Source, StepTiming
from runwatch.core.signals.workload import (
    RunningStats,
    Watch,
    WatchSpec,
    merge_finished,
    seeded_watch,
)
from runwatch.core.stream import join, runstate
from runwatch.processor.memory import MemoryProcessor
from runwatch.processor.settings import ProcessorSettings
from runwatch.sim.replay import as_messages, replay_worker
from runwatch.testing import scenarios

SRC = Source(kind="processor", host="h", runwatch_version="0")
CFG = runstate.RunConfig(source=SRC)
T0 = 1_700_000_000_000


def play(events, settings=None, roundtrip=False):
    """Publish the scripted records and fold them through a worker in memory (the live path).

    Returns the run's state and the worker's alerts and dead letters, in order.
    ``roundtrip`` restores every run state from its saved JSON before each batch.
    """
    worker = replay_worker(as_messages(events), settings or ProcessorSettings(save_interval_s=0),
                           restore_each_batch=roundtrip)
    return worker.p.runs.load(events[0].run_id.encode()), list(worker.outputs)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("kind", sorted(scenarios.EXPECTED))
def test_scenario_raises_exactly_the_expected_alert(kind, seed) -> None:
    exp = scenarios.EXPECTED[kind]
    _, outs = play(scenarios.build(kind, f"run-{kind}", T0, seed=seed))
    got = [(a.detector, a.probable_cause, a.status) for a in outs if isinstance(a, Alert)]
    want = [] if exp.detector is None else [(exp.detector, exp.probable_cause, "firing")]
    assert got == want
    assert not [d for d in outs if isinstance(d, DeadLetter)]


@pytest.mark.parametrize("kind", ["label_shift", "restarts", "loader_slowdown"])
def test_json_roundtrip_every_event_gives_the_same_alerts(kind) -> None:
    events = scenarios.build(kind, "run-x", T0)
    _, plain = play(events)
    _, tripped = play(events, roundtrip=True)
    assert [a.to_dict() for a in plain] == [a.to_dict() for a in tripped]


def test_state_is_json_not_pickle() -> None:
    st, _ = play(scenarios.build("nan_loss", "run-x", T0))
    data = runstate.dumps(st)
    assert json.loads(data)["run_id"] == "run-x"
    with pytest.raises(ValueError, match="not a run state"):
        runstate.loads(b'{"nope": 1}')


def test_late_event_is_counted_and_dead_lettered() -> None:
    events = scenarios.build("healthy", "run-l", T0, steps=10)
    st, _ = play(events)
    late = [e for e in events if isinstance(e, StepTiming)][0]
    cfg = runstate.RunConfig(source=SRC, lateness_ms=1_000)
    st, outs = join.step(st, late, T0 + 10**6, cfg, raw=b"orig", topic="rw.exec.job")
    assert st.late_count == 1
    assert isinstance(outs[0], DeadLetter) and "late event" in outs[0].reason
    assert outs[0].original == b"orig" and outs[0].topic == "rw.exec.job"
    # within lateness: handled, not dead-lettered
    _, outs = join.step(st, late, T0 + 10**6, runstate.RunConfig(source=SRC, lateness_ms=10**7))
    assert not [o for o in outs if isinstance(o, DeadLetter)]


def test_unseen_run_events_are_held_then_replayed() -> None:
    events = scenarios.build("nan_loss", "run-h", T0)
    head, rest = events[:1], events[1:]  # the manifest arrives last
    body = [e for e in rest if type(e).__name__ in ("LearningStep", "StepTiming")]
    st = runstate.new_state("run-h")
    held_outs = []
    for e in body:
        st, o = join.step(st, e, T0, CFG)
        held_outs += o
    assert held_outs == [] and len(st.pending) == len(body)
    st = runstate.loads(runstate.dumps(st))  # held events survive the changelog
    outs = []
    for e in head:
        st, o = join.step(st, e, T0, CFG)
        outs += o
    assert st.pending == []
    assert [a.detector for a in outs] == ["rule:non_finite"]


def test_unseen_run_is_dead_lettered_with_a_summary_after_hold_time() -> None:
    body = [
        e for e in scenarios.build("healthy", "run-u", T0, steps=5) if isinstance(e, StepTiming)
    ]
    cfg = runstate.RunConfig(source=SRC, hold_ms=5_000)
    st = runstate.new_state("run-u")
    for e in body:
        st, _ = join.step(st, e, T0, cfg)
    st, outs = join.tick(st, T0 + 4_999, cfg)
    assert outs == []
    st, outs = join.tick(st, T0 + 5_000, cfg)
    assert len(outs) == 1 and "unseen run run-u" in outs[0].reason
    assert json.loads(outs[0].original)["events"] == {StepTiming.AVRO_NAME: len(body)}
    assert st.pending == []


@pytest.mark.parametrize(
    ("after_ms", "fires"),
    [(30_000, False), (61_000, True)],
)
def test_stall_is_evaluated_on_the_timer(after_ms, fires) -> None:
    events = scenarios.build("healthy", "run-s", T0, steps=30)[:-1]  # never finishes
    st, _ = play(events)
    last = max(e.emitted_at_ms for e in events if isinstance(e, StepTiming))
    cfg = runstate.RunConfig(source=SRC, stall_k=10, stall_min_ms=60_000)
    _, outs = join.tick(st, last + after_ms, cfg)
    assert [a.detector for a in outs] == (["rule:stalled"] if fires else [])
    if fires:
        assert outs[0].probable_cause == "execution"


def test_missing_data_report_after_bounded_wait() -> None:
    events = [  # a run still running (one that ended before the wait is not judged)
        e
        for e in scenarios.build("healthy", "run-d", T0, steps=5)
        if type(e).__name__ != "DataQualityReport" and getattr(e, "state", "") != "succeeded"
    ]
    st, _ = play(events)
    cfg = runstate.RunConfig(source=SRC, data_wait_ms=60_000)
    _, outs = join.tick(st, T0 + 59_000, cfg)
    assert outs == []
    _, outs = join.tick(st, T0 + 60_000, cfg)
    assert [(a.detector, a.probable_cause) for a in outs] == [("rule:missing_data_report", "data")]


def test_image_outside_allow_list() -> None:
    settings = ProcessorSettings(save_interval_s=0, image_allow_list=["registry.prod/"])
    _, outs = play(scenarios.build("healthy", "run-i", T0, steps=3), settings)
    assert [(a.detector, a.probable_cause) for a in outs] == [("rule:image_allow_list", "artifact")]


@pytest.mark.parametrize(
    ("values", "direction", "fires"),
    [
        ([1.0] * 20 + [1.5] * 10, "up", True),
        ([1.0] * 20 + [0.5] * 10, "up", False),
        ([1.0] * 20 + [0.5] * 10, "down", True),
        ([1.0] * 20 + [1.05] * 10, "up", False),  # below min_effect
        ([1.0] * 20 + [1.5] * 2, "up", False),  # not persistent yet
    ],
)
def test_watch_table(values, direction, fires) -> None:
    spec = WatchSpec(direction, warmup=20, alpha=0.5, k=3, min_effect=0.1, persist=3)
    w = Watch(RunningStats())
    got = [w.update(v, spec)[0] for v in values]
    assert got[-1] is fires


def test_finished_runs_seed_new_runs_of_the_same_workload() -> None:
    st, _ = play(scenarios.build("healthy", "run-b", T0))
    stats = join.finished_stats(st)
    assert stats is not None and stats["loader_share"][0] == 120
    merged = merge_finished({}, stats)
    w = seeded_watch(merged, "loader_share", min_n=100)
    assert w.seeded and w.base.n == 120
    assert not seeded_watch(merged, "loader_share", min_n=1000).seeded
    # a seeded watch judges the very first values against the workload
    spec = WatchSpec("up", warmup=20, alpha=1.0, k=4, min_effect=0.1, persist=1)
    assert w.update(0.9, spec)[0] is True


def test_running_stats_merge_equals_one_pass() -> None:
    a, b, ab = RunningStats(), RunningStats(), RunningStats()
    for i, x in enumerate([1.0, 4.0, 2.0, 8.0, 5.0, 7.0]):
        (a if i < 3 else b).add(x)
        ab.add(x)
    m = a.merge(b)
    assert (m.n, m.mean, m.m2) == (ab.n, pytest.approx(ab.mean), pytest.approx(ab.m2))


def _by_topic(events):
    """Reorder as independent topic consumers might: learning first, then the rest."""
    learning = [e for e in events if type(e).__name__ in ("LearningStep", "ValidationResult")]
    rest = [e for e in events if e not in learning]
    return rest[:3] + learning + rest[3:]


@pytest.mark.parametrize(
    ("kind", "delay", "cause"),
    [
        ("label_shift", 5_000, "data"),
        ("restarts", 5_000, "execution"),
        ("label_shift", 0, "learning"),  # no wait: the evidence is processed too late
        ("nan_loss", 5_000, "learning"),
    ],
)
def test_learning_symptoms_wait_for_evidence_from_other_topics(kind, delay, cause) -> None:
    worker = MemoryProcessor(ProcessorSettings(save_interval_s=0, correlation_delay_ms=delay,
                                               lateness_ms=10**9), clock=lambda: T0)
    for msg in as_messages(_by_topic(scenarios.build(kind, "run-w", T0))):
        worker.feed([msg])  # one message at a time, all processed within the same second
    worker.tick(T0 + delay)
    outs = worker.outputs
    assert [(a.detector, a.probable_cause) for a in outs] == [
        (scenarios.EXPECTED[kind].detector, cause)
    ]


STREAM = {
    "RunManifest": "lineage",
    "JobEvent": "job",
    "StepTiming": "job",
    "CheckpointEvent": "job",
    "LearningStep": "learning",
    "ValidationResult": "learning",
    "NodeSample": "node",
    "DataQualityReport": "data",
}


@pytest.mark.parametrize("kind", ["label_shift", "restarts", "nan_loss", "checksum"])
@pytest.mark.parametrize(
    "order",
    [
        ("lineage", "job", "learning", "data", "node"),
        ("learning", "data", "node", "job", "lineage"),
        ("job", "data", "lineage", "node", "learning"),
        ("data", "node", "learning", "lineage", "job"),
    ],
)
def test_cause_does_not_depend_on_which_topic_is_consumed_first(kind, order) -> None:
    worker = MemoryProcessor(ProcessorSettings(save_interval_s=0, correlation_delay_ms=15_000),
                             clock=lambda: T0)
    events = scenarios.build(kind, "run-o", T0)
    for stream in order:  # each topic drained before the next is read
        worker.feed(as_messages([e for e in events if STREAM[type(e).__name__] == stream]))
    worker.tick(T0 + 15_000)
    outs = worker.outputs
    exp = scenarios.EXPECTED[kind]
    assert [(a.detector, a.probable_cause) for a in outs] == [(exp.detector, exp.probable_cause)]


def test_a_preempted_run_is_not_stalled_and_its_resume_waits_for_its_first_step() -> None:
    import dataclasses

    from runwatch.core.records import JobEvent

    events = scenarios.build("healthy", "run-p", T0, steps=30)[:-1]  # never finishes
    last = max(e.emitted_at_ms for e in events if isinstance(e, StepTiming))
    running = next(e for e in events if isinstance(e, JobEvent) and e.state == "running")
    seq = max(e.seq for e in events)

    def job(state: str, at: int, n: int) -> JobEvent:
        return dataclasses.replace(running, state=state, emitted_at_ms=at, seq=seq + n,
                                   event_id=f"job-{n}", attempt=2 if state == "running" else 1)

    cfg = runstate.RunConfig(source=SRC, stall_k=10, stall_min_ms=60_000)
    st, _ = play([*events, job("preempted", last + 1_000, 1)])
    _, outs = join.tick(st, last + 20 * 60_000, cfg)  # 20 min preempted: no stall
    assert [a.detector for a in outs] == []
    # resumed at +20 min; it loads for 2 min before stepping: still no stall
    st, _ = play([*events, job("preempted", last + 1_000, 1),
                  job("running", last + 20 * 60_000, 2)])
    _, outs = join.tick(st, last + 22 * 60_000, cfg)
    assert [a.detector for a in outs] == []
    # its first step after the resume restarts the stall clock
    step = next(e for e in reversed(events) if isinstance(e, StepTiming))
    again = dataclasses.replace(step, emitted_at_ms=last + 23 * 60_000, seq=seq + 3,
                                event_id="step-again", step=step.step + 1)
    st, _ = play([*events, job("preempted", last + 1_000, 1),
                  job("running", last + 20 * 60_000, 2), again])
    _, outs = join.tick(st, last + 23 * 60_000 + 61_000, cfg)
    assert [a.detector for a in outs] == ["rule:stalled"]
    # the same run never preempted: stalled after the bound
    st, _ = play(events)
    _, outs = join.tick(st, last + 61_000, cfg)
    assert [a.detector for a in outs] == ["rule:stalled"]
