"""Arguments of a plausible wrong type cost the SDK only that argument, never the record.

An independent round of cases found calls a training script makes by mistake
(``lr=scheduler.get_last_lr()``, ``step=global_step / accum``, ``finish("success")``,
``run_id=<int job id>``, a gate's ``measured`` holding None) each losing whole
records: a NaN loss not paged, a finished run paged as stalled, a failed gate
never paging. Each case here goes through ``runwatch.init`` as a script does.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import time

import numpy as np
import pytest
from sdk_kit import Clock, ListTransport, deliver_live, timed

import runwatch
from runwatch.core.records import Alert
from runwatch.processor.memory import MemoryProcessor
from runwatch.processor.settings import ProcessorSettings

T0 = 1_800_000_000_000


def _run(t: ListTransport, **kw):
    kw.setdefault("run_id", "wt-1")
    return runwatch.init("wt-fam", team="ml", transport=t, install_hooks=False,
                         capture_lineage=False, **kw)


def test_a_step_keeps_its_loss_when_another_argument_has_the_wrong_type(caplog) -> None:
    t = ListTransport()
    run = _run(t)
    with caplog.at_level(logging.WARNING):
        run.step(0, loss=1.0, lr=[3e-4, 1e-4])  # scheduler.get_last_lr(): one per group
        run.step(1, loss=float("nan"), lr="3e-4", grad_norm="big")  # text from a config
        run.step(2, loss=0.9, samples=np.int64(256), tokens=4096.0, epoch=np.float32(1))
        run.step(3, loss=0.8, samples="256", epoch=None, step_ms="fast")
        c = run.finish()
    steps = {s.step: s for s in t.records("LearningStep")}
    timings = {s.step: s for s in t.records("StepTiming")}
    assert sorted(steps) == sorted(timings) == [0, 1, 2, 3]
    assert steps[0].lr == 3e-4
    assert math.isnan(steps[1].loss) and steps[1].lr is None and steps[1].grad_norm is None
    assert steps[1].nonfinite_count == 1  # the NaN loss still reaches rule:non_finite
    assert (timings[2].samples, timings[2].tokens, steps[2].epoch) == (256, 4096, 1)
    assert (timings[3].samples, steps[3].epoch, steps[3].loss) == (0, 0, 0.8)
    assert c["dropped_wrong_type"] == 4 and "build_errors" not in c  # epoch=None: not given
    assert "dropped lr '3e-4' of type str" in caplog.text
    assert "dropped step_ms 'fast' of type str" in caplog.text
    assert "test_sdk_wrong_types.py" in caplog.text  # the user's line, not the SDK's


def test_an_lr_list_does_not_hide_a_nan_loss_from_the_processor() -> None:
    t, clock = ListTransport(), Clock(T0)
    run = _run(t, run_id="wt-nan", clock=clock)
    for i in range(60):
        clock.t += 500
        run.step(i, loss=2.0 if i < 40 else float("nan"), lr=[3e-4], grad_norm=1.0)
    run.finish()
    wall = Clock(T0)
    m = MemoryProcessor(ProcessorSettings(save_interval_s=0), clock=wall)
    deliver_live(m, wall, timed(t.out))
    firing = {(a.detector, a.severity, a.probable_cause) for a in m.alerts
              if isinstance(a, Alert) and a.status == "firing"}
    assert firing == {("rule:non_finite", "critical", "learning")}


def test_a_step_number_that_is_a_float_is_published_as_a_whole_number(caplog) -> None:
    t = ListTransport()
    run = _run(t)
    with caplog.at_level(logging.WARNING):
        run.step(5.0, loss=1.0)  # global_step / grad_accum
        run.step(np.float64(6.0), loss=1.0)
        run.step(7.5, loss=1.0)
        run.step("8", loss=1.0)  # text: dropped, named as given
        c = run.finish()
    assert [s.step for s in t.records("LearningStep")] == [5, 6, 7]
    assert "step 7.5 is not a whole number; published as step 7" in caplog.text
    assert "dropped step '8' of type str" in caplog.text
    assert c["dropped_wrong_type"] == 1


@pytest.mark.parametrize("call", [
    lambda r: r.step(1, loss=1.0, metrics=0.93),
    lambda r: r.step(1, loss=1.0, metrics=[("acc", 0.93)]),
    lambda r: r.validation(100, None),
    lambda r: r.validation(100, [1.9]),
    lambda r: r.evaluation(None, dataset="s3://eval@v1"),
])
def test_metrics_that_are_no_mapping_raise_nothing_unless_strict(call) -> None:
    t = ListTransport()
    run = _run(t)
    call(run)  # the job goes on
    c = run.finish()
    assert "build_errors" not in c and "encode_errors" not in c
    strict = _run(ListTransport(), strict=True)
    with pytest.raises(TypeError, match="a mapping of name to number"):
        call(strict)
    strict.finish()


@pytest.mark.parametrize("bad", ["soon", float("nan"), float("inf"), [T0], {}])
def test_a_bad_timestamp_or_duration_on_a_cold_path_call_raises_nothing(bad, caplog) -> None:
    # int(now_ms) / float(duration_ms) raised ValueError, OverflowError or TypeError into
    # the job (found by calling each method with bad values, as a stranger would)
    t, clock = ListTransport(), Clock(T0)
    run = _run(t, clock=clock)
    with caplog.at_level(logging.WARNING):
        run.checkpoint("s3://b/ckpt-1", step=10, duration_ms=bad)
        run.checkpoint("s3://b/ckpt-2", step=20, now_ms=bad, started_at_ms=bad)
        run.artifact("s3://b/model", now_ms=bad, sha256="ab" * 32)
        run.gate("release", "pass", now_ms=bad)
        run.job_state("running", now_ms=bad)
        run.validation(30, {"val_loss": 1.9}, now_ms=bad)
        run.evaluation({"acc": 0.9}, dataset="s3://eval@v1", samples=bad, step=bad, now_ms=bad)
        c = run.finish()
    assert "build_errors" not in c and "encode_errors" not in c
    one, two = t.records("CheckpointEvent")
    assert (one.step, one.duration_ms, one.started_at_ms) == (10, 0.0, T0)
    assert (two.step, two.emitted_at_ms, two.started_at_ms) == (20, T0, T0)  # the run's clock
    assert [a.emitted_at_ms for a in t.records("ArtifactEvent")] == [T0]
    assert [g.emitted_at_ms for g in t.records("GateDecision")] == [T0]
    ev = [v for v in t.records("ValidationResult") if v.kind == "evaluation"]
    assert [(v.step, v.sample_count, v.emitted_at_ms) for v in ev] == [(0, 0, T0)]
    assert c["dropped_wrong_type"] == 10
    assert "dropped duration_ms" in caplog.text and "the run's clock stamps the call" in caplog.text
    with pytest.raises(TypeError, match="duration_ms has wrong type"):
        _run(ListTransport(), run_id="wt-strict", strict=True).checkpoint(
            "s3://b/c", duration_ms=bad)


def test_whole_numbers_of_another_type_on_a_cold_path_call_are_kept() -> None:
    t, clock = ListTransport(), Clock(T0)
    run = _run(t, clock=clock)
    run.checkpoint("s3://b/ckpt", step=np.int64(40), duration_ms=np.float32(250.0),
                   now_ms=float(T0 + 1000))
    run.validation(np.int64(40), {"val_loss": 1.9}, epoch=2.0, now_ms=np.int64(T0 + 2000))
    run.evaluation({"acc": 0.9}, dataset="s3://eval@v1", samples=np.int64(500), step=40.0)
    run.gate("release", "fail", reasons="val_loss above 2.0")  # one reason, given as text
    c = run.finish()
    assert "build_errors" not in c and "encode_errors" not in c and "dropped_wrong_type" not in c
    (ck,) = t.records("CheckpointEvent")
    assert (ck.step, ck.duration_ms, ck.ended_at_ms, ck.started_at_ms) == (
        40, 250.0, T0 + 1000, T0 + 750)
    val, ev = t.records("ValidationResult")
    assert (val.step, val.epoch, val.emitted_at_ms) == (40, 2, T0 + 2000)
    assert (ev.step, ev.sample_count) == (40, 500)
    assert t.records("GateDecision")[0].reasons == ("val_loss above 2.0",)


def test_a_field_of_another_type_costs_that_field_not_the_record(tmp_path) -> None:
    # each of these lost its whole record (counted in build_errors or encode_errors): a
    # failed gate named None never paged, a step stamped NaN lost its NaN loss
    t, clock = ListTransport(), Clock(T0)
    run = _run(t, clock=clock)
    ckpt = tmp_path / "step-10.pt"
    ckpt.write_bytes(b"weights")
    run.checkpoint(ckpt, step=10, expected_sha256=hashlib.sha256(b"other").digest())
    run.checkpoint("s3://b/ckpt", step=20, expected_sha256=1234)
    run.artifact("s3://b/model", kind=None, sha256=["ab"])
    run.gate(None, "fail", reasons=[ValueError("val_loss 2.5 > 2.0"), None])
    run.step(1, loss=float("nan"), now_ms=float("nan"))
    c = run.finish()
    assert "build_errors" not in c and "encode_errors" not in c
    one, two = t.records("CheckpointEvent")
    assert one.outcome == "corrupt" and one.expected_sha256 == hashlib.sha256(b"other").hexdigest()
    assert (two.outcome, two.expected_sha256) == ("ok", None)
    (art,) = t.records("ArtifactEvent")
    assert (art.kind, art.sha256) == ("None", None)
    (gate,) = t.records("GateDecision")
    assert (gate.gate, gate.decision) == ("None", "fail")
    assert gate.reasons == ("val_loss 2.5 > 2.0", "None")
    (step,) = t.records("LearningStep")
    assert math.isnan(step.loss) and step.emitted_at_ms == T0  # the run's clock
    assert c["dropped_wrong_type"] == 5


def test_an_unknown_status_is_taken_as_what_it_means_or_still_ends_the_run(caplog) -> None:
    t = ListTransport()
    run = _run(t)
    with caplog.at_level(logging.ERROR):
        run.job_state("requeued")  # a scheduler's word for retrying
        run.job_state("warming-up")  # no such state: dropped, said, counted
        run.checkpoint("s3://b/ckpt-1", outcome="error")
        run.checkpoint("s3://b/ckpt-2", outcome="bogus")
        run.gate("release", "rejected")
        run.gate("safety", "maybe")
        c = run.finish("success")
    states = [e.state for e in t.records("JobEvent")]
    assert states == ["running", "retrying", "succeeded"]
    assert [e.outcome for e in t.records("CheckpointEvent")] == ["failed", "unknown"]
    assert [g.decision for g in t.records("GateDecision")] == ["fail", "review"]
    assert c["dropped_wrong_type"] == 1
    assert "unknown job state 'warming-up'" in caplog.text and "succeeded" in caplog.text

    t2 = ListTransport()
    run2 = _run(t2, run_id="wt-2")
    run2.finish("exploded", reason="OOM")
    end = t2.records("JobEvent")[-1]
    assert (end.state, end.reason) == ("failed", "run.finish('exploded'): OOM")
    with pytest.raises(ValueError, match="unknown finish status 'exploded'"):
        _run(ListTransport(), run_id="wt-3", strict=True).finish("exploded")


def test_a_failed_gate_with_a_missing_measure_is_still_published(caplog) -> None:
    t = ListTransport()
    run = _run(t)
    with caplog.at_level(logging.WARNING):
        run.gate("release", "fail", thresholds={"val_loss": 2.0, "acc": "0.9"},
                 measured={"val_loss": 2.5, "acc": None})
        c = run.finish()
    (gate,) = t.records("GateDecision")
    assert (gate.decision, gate.thresholds, gate.measured) == (
        "fail", {"val_loss": 2.0}, {"val_loss": 2.5})
    assert c["dropped_wrong_type"] == 2 and "encode_errors" not in c
    assert "dropped measured value 'acc' None" in caplog.text


def test_init_arguments_of_another_type_are_read_as_what_they_mean(caplog) -> None:
    t = ListTransport()
    with caplog.at_level(logging.WARNING):
        run = _run(t, run_id=12345, seed_policy=1234, labels={"gpus": 8}, attempt="2")
        run.step(0, loss=1.0)
        c = run.finish()
    assert {r.run_id for r in t.records()} == {"12345"}
    (manifest,) = t.records("RunManifest")
    assert (manifest.seed_policy, manifest.labels) == ("1234", {"gpus": "8"})
    assert {e.attempt for e in t.records("JobEvent")} == {2}
    assert not c.get("dropped_wrong_type") and not c.get("encode_errors")

    t2 = ListTransport()
    with caplog.at_level(logging.WARNING):
        run2 = _run(t2, run_id="wt-labels", labels=["prod"], attempt="second")
        c2 = run2.finish()
    (manifest2,) = t2.records("RunManifest")
    assert manifest2.labels == {} and c2["dropped_wrong_type"] == 2
    assert {e.attempt for e in t2.records("JobEvent")} == {0}
    assert "dropped labels (a mapping of name to value) ['prod']" in caplog.text


@pytest.mark.parametrize("key", ["learning", "rw.learnig"])
def test_a_topics_key_that_names_no_topic_is_refused_not_ignored(key: str, caplog) -> None:
    """``topics={"learning": "staging.learning"}`` (or a misspelt ``rw.learnig``) was ignored
    without a word, even with strict=True: a staging job's steps went to production's
    rw.learning. strict raises, naming the key and the accepted ones; otherwise one error
    line, counted in topics_ignored, and the run goes on (the good keys still apply)."""
    with pytest.raises(ValueError, match=rf"unknown key '{key}'.*rw\.exec\.job.*rw\.learning"):
        _run(ListTransport(), topics={key: "staging.learning"}, strict=True)
    t = ListTransport()
    with caplog.at_level(logging.ERROR):
        run = _run(t, topics={key: "staging.learning", "rw.exec.job": "staging.job"})
        run.step(0, loss=1.0, step_ms=5.0)
        c = run.finish()
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and repr(key) in errors[0] and "rw.learning" in errors[0], errors
    assert c["topics_ignored"] == 1
    assert {topic for topic, _, _ in t.out} == {"rw.lineage", "staging.job", "rw.learning"}


def test_a_publisher_refuses_an_override_it_would_ignore() -> None:
    from runwatch.adapters.publisher import CaptureTransport, Publisher

    with pytest.raises(ValueError, match="unknown key 'exec.node'"):
        Publisher(CaptureTransport(), kind="agent", topics={"exec.node": "staging.node"})
    Publisher(CaptureTransport(), kind="agent", topics={"rw.exec.node": "staging.node"})


@pytest.mark.parametrize(("clock", "said"), [
    (lambda: T0 / 1000, "epoch seconds? give milliseconds"),  # clock=time.time
    (lambda: T0 * 1_000_000, "micro- or nanoseconds? give milliseconds"),  # clock=time.time_ns
    (lambda: "now", "not epoch milliseconds"),
    (lambda: 1 / 0, "clock() raised ZeroDivisionError"),
])
def test_a_clock_that_gives_no_epoch_milliseconds_is_not_used(clock, said, caplog) -> None:
    """``clock=time.time`` stamped every record in January 1970: the processor refused the
    whole run as absurd times, and the job was told nothing (a clock that raised turned
    telemetry off for the process)."""
    t = ListTransport()
    with caplog.at_level(logging.ERROR):
        run = _run(t, clock=clock)
        run.step(1, loss=1.0)
        c = run.finish()
    assert c["clock_ignored"] == 1 and said in caplog.text
    before = int(time.time() * 1000) - 60_000
    stamps = [r.emitted_at_ms for r in t.records()]
    assert len(stamps) == 5 and all(s > before for s in stamps), stamps  # the wall clock
    with pytest.raises(ValueError, match=re.escape(said)):
        runwatch.init("f", run_id="s", transport=ListTransport(), install_hooks=False,
                      capture_lineage=False, clock=clock, strict=True)


def test_a_topics_list_or_a_queue_bound_of_zero_do_not_silence_the_run(caplog) -> None:
    """``topics=["rw.learning"]`` made init fail (telemetry off for the process);
    ``queue_max=0`` dropped every step."""
    t = ListTransport()
    with caplog.at_level(logging.ERROR):
        run = _run(t, topics=["rw.learning"], queue_max=0)
        run.step(1, loss=1.0)
        c = run.finish()
    assert c["topics_ignored"] == 1 and c["dropped_wrong_type"] == 1
    assert "dropped_queue_full" not in c
    assert [type(r).__name__ for r in t.records()] == [
        "RunManifest", "JobEvent", "LearningStep", "StepTiming", "JobEvent"]
    assert {topic for topic, _, _ in t.out} >= {"rw.learning", "rw.exec.job"}
    assert "topics= must map a topic's name" in caplog.text
