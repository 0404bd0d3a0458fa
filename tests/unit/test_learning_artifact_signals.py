"""Learning and artifact signals through the SDK and a processor worker driven in memory.

Runs publish the way users do (``runwatch.init`` / ``run.step`` / ``run.artifact``
/ ``run.gate`` with explicit times) to a capture transport; a real processor
worker (:class:`~runwatch.processor.memory.MemoryProcessor`) reads it.
"""

from __future__ import annotations

import math
import random
import time
from pathlib import Path

import pytest
from sdk_kit import Clock, deliver_live, timed

import runwatch
from runwatch.adapters.publisher import CaptureTransport
from runwatch.core.records import Alert
from runwatch.core.signals import rules
from runwatch.processor.memory import MemoryProcessor
from runwatch.processor.settings import ProcessorSettings

T0 = 1_800_000_000_000


def start(t: CaptureTransport, run_id: str = "run-la"):
    return runwatch.init("fam", run_id=run_id, transport=t, install_hooks=False,
                         capture_lineage=False, clock=lambda: T0)


def firing(t: CaptureTransport, **settings) -> list[tuple[str, str]]:
    m = MemoryProcessor(ProcessorSettings(save_interval_s=0, **settings))
    m.feed(t.messages)
    m.tick(int(time.time() * 1000) + 60_000)  # the timer: symptoms past the correlation wait
    assert [d.reason for d in m.dead] == []
    return sorted({(a.detector, a.probable_cause) for a in m.alerts
                   if isinstance(a, Alert) and a.status == "firing"})


# ------------------------------------------------------------------ artifacts


@pytest.mark.parametrize(("content", "uri", "want"), [
    (b"", None, [("rule:artifact_empty", "artifact")]),  # written, read back: no bytes
    (b"weights", None, []),
    (None, "s3://bucket/model.safetensors", []),  # remote: size unknown, not a fact
])
def test_an_empty_artifact_pages(content, uri, want, tmp_path: Path) -> None:
    t = CaptureTransport()
    run = start(t)
    if content is not None:
        path = tmp_path / "model.safetensors"
        path.write_bytes(content)
        uri = str(path)
    run.artifact(uri, "model", now_ms=T0 + 1_000)
    run.finish(now_ms=T0 + 2_000)
    assert firing(t) == want


@pytest.mark.parametrize(("status", "want"), [
    ("FAILED_REGISTRATION", [("rule:registry_status", "artifact")]),
    ("rejected", [("rule:registry_status", "artifact")]),
    ("registered", [("rule:registry_without_gate", "artifact")]),  # and no gate decision
    (None, []),
])
def test_a_failed_registry_status_pages(status, want) -> None:
    t = CaptureTransport()
    run = start(t)
    run.artifact("s3://bucket/model", "model", sha256="ab" * 32, registry_status=status,
                 now_ms=T0 + 1_000)
    run.finish(now_ms=T0 + 2_000)
    assert firing(t) == want


@pytest.mark.parametrize(("kind", "want"), [
    ("model", [("rule:registry_without_gate", "artifact")]),
    ("dataset", []),  # a dataset or tokenizer in a catalog is not a release
    ("tokenizer", []),
])
def test_registry_control_is_for_models(kind, want) -> None:
    t = CaptureTransport()
    run = start(t)
    run.artifact(f"s3://bucket/{kind}@v1", kind, sha256="ab" * 32,
                 registry_status="registered", now_ms=T0 + 1_000)
    run.finish(now_ms=T0 + 2_000)
    assert firing(t) == want


DIGEST = "3f7a" * 16


@pytest.mark.parametrize(("expected", "want"), [
    (DIGEST, []),
    (DIGEST.upper(), []),  # PowerShell's Get-FileHash, Java's printHexBinary
    ("sha256:" + DIGEST, []),  # an OCI digest
    ("0" * 64, [("rule:checkpoint_checksum", "artifact")]),
])
def test_a_restore_check_through_emit_compares_digests_not_their_spelling(expected,
                                                                          want) -> None:
    from runwatch.adapters.publisher import Publisher
    from runwatch.client.emit import emit_records

    t = CaptureTransport()
    run = start(t)
    emit_records(Publisher(t, kind="hook"), [{
        "type": "CheckpointEvent", "run_id": "run-la", "emitted_at_ms": T0 + 30_000,
        "step": 2000, "started_at_ms": T0, "ended_at_ms": T0 + 30_000, "duration_ms": 30_000.0,
        "size_bytes": 10**9, "sha256": DIGEST, "expected_sha256": expected,
        "uri": "s3://bucket/step-2000", "outcome": "ok"}])
    run.finish(now_ms=T0 + 60_000)
    assert firing(t) == want


@pytest.mark.parametrize(("content", "outcome", "want"), [
    (b"", "ok", [("rule:artifact_empty", "artifact")]),  # a full disk the writer ignored
    (b"state", "timeout", [("rule:checkpoint_serialization", "artifact")]),
    (b"state", "failed", [("rule:checkpoint_serialization", "artifact")]),
    (b"state", "ok", []),
])
def test_a_checkpoint_that_holds_nothing_or_timed_out_pages(content, outcome, want,
                                                             tmp_path: Path) -> None:
    t = CaptureTransport()
    run = start(t)
    path = tmp_path / "step-100.pt"
    path.write_bytes(content)
    run.checkpoint(path, step=100, duration_ms=5_000.0, outcome=outcome, now_ms=T0 + 10_000)
    run.finish(now_ms=T0 + 20_000)
    assert firing(t) == want


def test_a_model_artifact_that_failed_to_serialize_is_not_called_a_checkpoint() -> None:
    t = CaptureTransport()
    run = start(t)
    run.artifact("s3://bucket/model", "model", serialization_ok=False, now_ms=T0 + 1_000)
    run.finish(now_ms=T0 + 2_000)
    m = MemoryProcessor(ProcessorSettings(save_interval_s=0))
    m.feed(t.messages)
    titles = [a.title for a in m.alerts if isinstance(a, Alert)
              and a.detector == "rule:checkpoint_serialization"]
    assert titles == ["Artifact model serialization failed"]


@pytest.mark.parametrize(("gates", "required", "want"), [
    ([("eval", "pass")], ["safety"], [("rule:missing_gate", "artifact")]),  # never ran
    ([("safety", "review")], ["safety"], [("rule:missing_gate", "artifact")]),  # not passed
    ([("safety", "pass"), ("eval", "pass")], ["safety", "eval"], []),
    ([], [], []),  # no required gates configured: the rule is off
])
def test_a_model_registered_before_its_safety_gate_passed_pages(gates, required, want) -> None:
    t = CaptureTransport()
    run = start(t)
    for i, (gate, decision) in enumerate(gates):
        run.gate(gate, decision, now_ms=T0 + 1_000 + i)
    run.artifact("s3://bucket/model", "model", sha256="ab" * 32, registry_status="registered",
                 now_ms=T0 + 5_000)
    run.finish(now_ms=T0 + 6_000)
    # registry control (rule:registry_without_gate) is tested in test_registry_control.py
    assert firing(t, required_gates=required, registry_control=False) == want


# ------------------------------------------------------------------ learning


def test_a_non_finite_learning_rate_pages() -> None:
    t = CaptureTransport()
    run = start(t)
    for i in range(5):
        run.step(i, loss=1.0, lr=1e-3 if i < 3 else math.inf, now_ms=T0 + i * 1000)
    run.finish(now_ms=T0 + 10_000)
    assert firing(t) == [("rule:non_finite", "learning")]


def losses(case: str, n: int = 300) -> list[tuple[float, float]]:
    """(loss, lr) per step of a run."""
    rng = random.Random(7)
    out = []
    for i in range(n):
        lr, loss = 1e-3, 2.0 * 0.99 ** i + 0.5
        if case == "diverging" and i >= 150:
            loss = (2.0 * 0.99 ** 150 + 0.5) * (1.0 + 0.02 * (i - 150))
        if case == "lr_restart" and i >= 150:  # a warm restart: lr back up, loss jumps, recovers
            lr = 1e-2 * 0.98 ** (i - 150)
            loss = 0.5 + 1.2 * 0.97 ** (i - 150)
        if case == "noisy":
            loss = 1.0
        out.append((loss * (1.0 + rng.uniform(-0.2, 0.2)), lr))
    return out


@pytest.mark.parametrize(("case", "want"), [
    ("diverging", [("rule:loss_divergence", "learning")]),
    ("lr_restart", []),
    ("noisy", []),
    ("converging", []),
])
def test_a_diverging_loss_pages_unless_the_learning_rate_was_raised(case, want) -> None:
    t = CaptureTransport()
    run = start(t)
    for i, (loss, lr) in enumerate(losses(case)):
        run.step(i, loss=loss, lr=lr, now_ms=T0 + i * 1000)
    run.finish(now_ms=T0 + 10**6)
    assert firing(t) == want


def sgdr(case: str, seed: int) -> list[tuple[float, float]]:
    """(loss, lr) of an SGDR run: a 2,000-step cosine cycle (0.1 down to 5e-4, the loss 2.3
    down to 0.12), then the rate back at 0.1; 15 % noise a step."""
    rng = random.Random(seed)
    out = []
    for i in range(5_000):
        k = i % 2_000 if i < 2_000 else i - 2_000
        cycle = 2_000 if i < 2_000 else 3_000
        lr = 5e-4 + 0.5 * 0.0995 * (1 + math.cos(math.pi * k / cycle))
        if i < 2_000:
            level = 0.12 + 2.18 * (1 - k / 2_000) ** 2
        elif case == "restart":  # the loss rises with a lag (35 steps) to 0.35, then falls
            level = 0.06 + 0.29 * (1 - k / 3_000) ** 2
            level = 0.12 + (level - 0.12) * (1 - math.exp(-k / 35))
        elif case == "slow":  # it first dips to 0.10, then rises slowly to a peak ~490 in
            level = 0.10 * (1 + 3.0 * (1 - math.exp(-k / 250)) * math.exp(-k / 1_500))
        else:  # the restart sends the loss up for good: 0.5 % a step
            level = 0.12 * 1.005 ** min(k, 600)
        out.append((level * math.exp(rng.gauss(0.0, 0.15)), lr))
    return out


@pytest.mark.parametrize(("case", "seed", "want"), [
    ("restart", 0, []),
    ("restart", 1, []),
    # the dip read as the raised loss having turned: judged from there, the slow rise paged
    ("slow", 0, []),
    ("diverges", 0, [("rule:loss_divergence", "learning")]),
])
def test_a_warm_restart_raises_the_loss_with_a_lag_and_does_not_page(case, seed, want) -> None:
    """SGDR: the rate back at its first value raises the loss over tens of steps and keeps
    it 2-3 x up for much of the next cycle. Judged from the first steps after the restart
    (still at the last cycle's level), it paged a divergence 100 steps in, every time."""
    t = CaptureTransport()
    run = start(t)
    for i, (loss, lr) in enumerate(sgdr(case, seed)):
        run.step(i, loss=loss, lr=lr, now_ms=T0 + i * 120)
    run.finish(now_ms=T0 + 10**6)
    assert firing(t) == want


@pytest.mark.parametrize(("jump", "spike_only", "paged_within_min"), [
    (5.0 / 2.4, False, 15),  # the loss jumps and stays: paged 66 minutes late before
    (3.0, True, None),  # one logged step caught a spike that recovered: no page
])
def test_a_run_logging_every_50th_step_is_judged_in_training_steps(
        jump: float, spike_only: bool, paged_within_min: int | None) -> None:
    """Lightning's default ``log_every_n_steps=50``, 1.5 s steps: the divergence had to hold
    for 50 logged steps, 2,500 training steps (an hour)."""
    t = CaptureTransport()
    run = start(t)
    rng = random.Random(11)
    for i in range(0, 6_000, 50):
        level = 2.4 * (jump if i >= 3_000 and (not spike_only or i == 3_000) else 1.0)
        run.step(i, loss=level * math.exp(rng.gauss(0.0, 0.02)), lr=3e-4,
                 now_ms=T0 + i * 1_500)
    run.finish(now_ms=T0 + 6_000 * 1_500)
    m = MemoryProcessor(ProcessorSettings(save_interval_s=0))
    m.feed(t.messages)
    m.tick(int(time.time() * 1000) + 60_000)
    paged = [a for a in m.alerts if isinstance(a, Alert) and a.status == "firing"]
    if paged_within_min is None:
        assert paged == []
    else:
        assert [a.detector for a in paged] == ["rule:loss_divergence"]
        assert paged[0].first_seen_ms - (T0 + 3_000 * 1_500) <= paged_within_min * 60_000


@pytest.mark.parametrize(("cv", "rise", "want"), [
    (0.25, 1.0, []),  # a GAN's or an RL policy's loss: steady, 25 % from step to step
    (0.40, 1.0, []),
    (0.25, 3.0, [("rule:loss_divergence", "learning")]),  # the same, then tripling
])
def test_a_noisy_loss_pages_only_when_it_rises_beyond_its_own_noise(cv, rise, want) -> None:
    t = CaptureTransport()
    run = start(t)
    rng = random.Random(5)
    for i in range(3_000):
        level = 2.0 * (1.0 + (rise - 1.0) * min(max(i - 2_500, 0) / 200, 1.0))
        run.step(i, loss=max(0.05, level * (1.0 + cv * rng.gauss(0.0, 1.0))), lr=2e-4,
                 now_ms=T0 + i * 1_000)
    run.finish(now_ms=T0 + 3_100_000)
    assert firing(t) == want


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_loss_spike_that_recovers_on_its_own_does_not_page(seed: int) -> None:
    """An LLM's loss spike: 1.5 x its curve for 30 steps (the norm 10 x for 3), then back."""
    t = CaptureTransport()
    run = start(t)
    rng = random.Random(seed)
    for i in range(4_000):
        curve = 2.2 + 7.8 * math.exp(-i / 600)
        spike = 1.5 if 3_000 <= i < 3_030 else 1.0
        run.step(i, loss=curve * spike * (1.0 + 0.02 * rng.gauss(0.0, 1.0)), lr=3e-4,
                 grad_norm=(10.0 if 3_000 <= i < 3_003 else 1.0) * math.exp(rng.gauss(0, 0.1)),
                 now_ms=T0 + i * 1_000)
    run.finish(now_ms=T0 + 4_100_000)
    assert firing(t) == []


def test_a_divergence_that_never_recovers_stays_firing() -> None:
    """The loss doubles at step 1,000 and stays there for 1,500 steps (past the 500 it
    keeps lows of): the page is not resolved while the loss is still up."""
    t = CaptureTransport()
    run = start(t)
    rng = random.Random(3)
    for i in range(2_500):
        level = 5.0 if i < 1_000 else 10.5
        run.step(i, loss=level * (1.0 + 0.01 * rng.gauss(0.0, 1.0)), lr=1e-4,
                 now_ms=T0 + i * 1_000)
    run.finish(now_ms=T0 + 2_500_000)  # publishes what the SDK still holds
    m = MemoryProcessor(ProcessorSettings(save_interval_s=0))
    for k in range(0, len(t.messages), 100):  # as they come, the timer between
        m.feed(t.messages[k:k + 100])
        m.tick(int(time.time() * 1000) + 60_000 * (k + 1))
    assert [a.status for a in m.alerts if isinstance(a, Alert)
            and a.detector == "rule:loss_divergence"] == ["firing"]


@pytest.mark.parametrize(("points", "raised", "fires"), [
    ([(i, 1.0) for i in range(20)] + [(20 + i, 2.0) for i in range(10)], None, True),
    ([(i, 1.0) for i in range(20)] + [(20 + i, 2.0) for i in range(10)], 5, False),
    ([(i, 1.0) for i in range(20)] + [(20 + i, 1.4) for i in range(10)], None, False),
    ([(i, 2.0) for i in range(10)] + [(10 + i, 1.0) for i in range(20)], None, False),
    # a loss below zero (a negative log-likelihood of densities): no ratio to judge
    ([(i, -5.0 + 0.1 * i) for i in range(30)], None, False),
])
def test_loss_divergence_rule_table(points, raised, fires) -> None:
    f = rules.loss_divergence(points, raised, T0)
    assert (f is not None) is fires
    if f is not None:
        assert (f.detector, f.signal, f.hard) == ("rule:loss_divergence", "learning", False)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(("drop_at", "want"), [
    (None, []),  # noisy but stationary: the best evaluation is the luckiest draw, not a level
    (40, [("rule:validation_decline", "learning")]),  # the same noise, then a real fall
])
def test_noisy_validation_pages_only_on_a_real_decline(seed, drop_at, want) -> None:
    rng = random.Random(seed)
    t = CaptureTransport()
    run = start(t)
    for i in range(60):
        acc = 0.85 + rng.gauss(0.0, 0.015)
        if drop_at is not None and i >= drop_at:
            acc -= 0.15
        run.validation(100 * (i + 1), {"val_acc": acc}, now_ms=T0 + i * 60_000)
    run.finish(now_ms=T0 + 10**8)
    assert firing(t) == want


def test_overfitting_pages_within_four_evaluations_of_clearing_the_bound() -> None:
    """Validation loss improves, then rises 0.1 an evaluation (noise 0.003) while the train
    loss falls: the rise is the decline, not noise (it was paged five evaluations late,
    first differences reading the rise as noise). The noise is the upper end of what the
    run's few evaluations allow (95 %: ``rules.noise_upper``), and the still-curving
    convergence before the best reads as noise too, so the page may come up to four
    evaluations after the rise clears the true noise's bound."""
    t = CaptureTransport()
    run = start(t)
    rng = random.Random(9)
    vals = {}
    for e in range(1, 20):
        vals[e] = 0.9 + 1.5 * math.exp(-e / 2) + max(0, e - 6) * 0.1 + rng.gauss(0.0, 0.003)
        run.validation(200 * e, {"val_loss": vals[e]}, now_ms=T0 + e * 200_000)
    run.finish(now_ms=T0 + 5_000_000)
    m = MemoryProcessor(ProcessorSettings(save_interval_s=0))
    m.feed(t.messages)
    m.tick(int(time.time() * 1000) + 60_000)  # past the correlation wait
    paged = [a for a in m.alerts if isinstance(a, Alert) and a.status == "firing"
             and a.detector == "rule:validation_decline"]
    best_e = min(vals, key=vals.__getitem__)
    best = vals[best_e]
    # documented bound: 0.02, 5 % of the best and 5 noise sigmas, two evaluations in a row
    cleared = [e for e in sorted(vals)
               if e > best_e and vals[e] - best > max(0.02, 0.05 * best, 5 * 0.003)]
    assert paged and paged[0].probable_cause == "learning"
    assert (paged[0].first_seen_ms - T0) // 200_000 <= cleared[1] + 4


def test_a_lasting_decline_between_hourly_evaluations_pages_once() -> None:
    """Hourly evaluations, the accuracy down 0.15 and falling from the 10th for 15 hours,
    then back:
    one page, resolved by the evaluations back near the best (it fired and resolved at
    every evaluation: 15 minutes without a repeat)."""
    t = CaptureTransport()
    run = start(t)
    rng = random.Random(4)
    hour = 3_600_000
    for e in range(40):
        acc = 0.85 + rng.gauss(0.0, 0.003) - (0.15 + 0.01 * (e - 10) if 10 <= e < 25 else 0.0)
        run.validation(60 * e, {"val_acc": acc}, now_ms=T0 + e * hour)
        for k in range(60):  # a step a minute between evaluations
            run.step(60 * e + k, loss=1.0, now_ms=T0 + e * hour + (k + 1) * 60_000)
    run.finish(now_ms=T0 + 40 * hour)
    wall = Clock(T0)
    m = MemoryProcessor(ProcessorSettings(save_interval_s=0), clock=wall)
    deliver_live(m, wall, timed(t.messages), tick_ms=300_000)  # the timer every 5 minutes
    assert [a.status for a in m.alerts if isinstance(a, Alert)
            and a.detector == "rule:validation_decline"] == ["firing", "resolved"]


@pytest.mark.parametrize("redelivered", [False, True])
def test_one_low_evaluation_delivered_twice_is_still_one_evaluation(redelivered: bool) -> None:
    """At-least-once delivery: the same ValidationResult (same bytes, same event id) read a
    second time counted as a second low evaluation in a row and paged a decline."""
    t = CaptureTransport()
    run = start(t)
    rng = random.Random(2)
    for e in range(20):  # every 10 minutes, rising 0.70 -> 0.78; one evaluation reads low
        acc = 0.70 + 0.004 * e + rng.gauss(0.0, 0.004) - (0.06 if e == 10 else 0.0)
        run.validation(100 * e, {"val_accuracy": acc}, now_ms=T0 + e * 600_000)
        for k in range(10):
            run.step(100 * e + k, loss=1.0, now_ms=T0 + e * 600_000 + (k + 1) * 60_000)
    run.finish(now_ms=T0 + 20 * 600_000)
    msgs = timed(t.messages)
    if redelivered:
        low = next(i for i, (at, m) in enumerate(msgs)
                   if at == T0 + 10 * 600_000 and b"val_accuracy" in m[2])
        msgs.insert(low + 1, (msgs[low][0] + 3_000, msgs[low][1]))
    wall = Clock(T0)
    m = MemoryProcessor(ProcessorSettings(save_interval_s=0), clock=wall)
    deliver_live(m, wall, msgs)
    assert [a for a in m.alerts if isinstance(a, Alert)
            and a.detector == "rule:validation_decline"] == []


@pytest.mark.parametrize("seed", range(12))
def test_small_noisy_evaluation_sets_do_not_page_before_their_noise_is_known(seed: int) -> None:
    """An accuracy of 0.78 measured on 256 images (binomial noise 0.026), every 200 steps:
    with no noise estimate yet, only the 0.02 and 5 % bounds applied, and a third of such
    healthy runs paged at their 3rd to 6th evaluation."""
    t = CaptureTransport()
    run = start(t)
    rng = random.Random(seed)
    for e in range(8):
        acc = sum(rng.random() < 0.78 for _ in range(256)) / 256
        run.validation(200 * e, {"val_acc": acc}, now_ms=T0 + e * 300_000)
    run.finish(now_ms=T0 + 8 * 300_000)
    assert firing(t) == []


@pytest.mark.parametrize(("calls", "want"), [
    # a camelCase loss was read as higher-is-better from its second evaluation on
    ([lambda i: {"valLoss": 3.6 - 0.05 * i}], []),
    ([lambda i: {"VAL_LOSS": 3.6 - 0.05 * i}], []),
    # val_loss every evaluation, val_accuracy in a call of its own every third: the loss
    # was compared with the accuracy's best (a decline from 0.62 to 2.86)
    ([lambda i: {"val_loss": 3.0 - 0.02 * i},
      lambda i: {"val_accuracy": 0.5 + 0.005 * i} if i % 3 == 0 else None], []),
    ([lambda i: {"valLoss": 1.0 + (0.5 if i >= 30 else 0.0)}],  # a real rise of the loss
     [("rule:validation_decline", "learning")]),
])
def test_validation_metrics_are_judged_by_their_own_name_and_direction(calls, want) -> None:
    t = CaptureTransport()
    run = start(t)
    for i in range(40):
        for call in calls:
            metrics = call(i)
            if metrics is not None:
                run.validation(100 * (i + 1), metrics, now_ms=T0 + i * 60_000)
    run.finish(now_ms=T0 + 10**8)
    assert firing(t) == want


def healthy_norms(case: str, i: int, rng: random.Random) -> tuple[float, float]:
    """(grad norm, lr) of healthy runs whose norms are noisy, large, restarted or clipped."""
    # 15 % from step to step, independent; a PPO or GAN run's norms: 70 %
    noise = math.exp(rng.gauss(0.0, 0.7 if case == "ppo" else 0.15))
    if case == "sgdr":  # a warm restart every 1,000 steps: norms 2.5x, settling over 200
        bump = math.exp(-(i % 1_000) / 200) if i >= 1_000 else 0.0
        return 5.0 * (1 + 1.5 * bump) * noise, 1e-5 + 3e-4 * (1 + math.cos(math.pi * (i % 1_000)
                                                                             / 1_000)) / 2
    if case == "clipped":  # clipped at 1.0 until the raw norm falls under the clip
        return min(1.0, 2.0 * math.exp(-i / 1_500) * noise), 1e-4
    return (250.0 if case == "large" else 1.0) * noise, 1e-4


@pytest.mark.parametrize("case", ["noisy", "large", "sgdr", "clipped", "ppo"])
def test_healthy_gradient_norms_do_not_page_their_variance(case) -> None:
    t = CaptureTransport()
    run = start(t)
    rng = random.Random(7)
    for i in range(1, 3_000):
        g, lr = healthy_norms(case, i, rng)
        run.step(i, loss=2.0 + 3.0 / math.sqrt(i), grad_norm=g, samples=32,
                 now_ms=T0 + i * 1_000, step_ms=1_000.0, loader_wait_ms=10.0, lr=lr)
    run.finish(now_ms=T0 + 3_100_000)
    assert firing(t) == []


@pytest.mark.parametrize(("case", "want"), [
    # one large norm (a hard batch) is evidence, not a page (it paged: it stayed in the
    # 10-norm variance window for 10 steps, twice the watch's persistence)
    ("one_spike", []),
    ("two_spikes_apart", []),
    # growing a fiftieth a step, no NaN: each step alike, so the norm's own level pages
    ("exploding", [("watch:grad_norm", "learning")]),
    ("unstable", [("watch:grad_norm_variance", "learning")]),  # norms swing step to step
    # an intentional warm restart of the learning rate (1e-5 -> 1e-3): the norms jump 8x
    # and settle over 15 steps, by design (it paged; loss divergence already waits for it)
    ("lr_restart", []),
    ("unstable_long_after_restart", [("watch:grad_norm_variance", "learning")]),
])
def test_gradient_norm_variance_pages_on_instability_not_on_one_large_norm(case, want) -> None:
    t = CaptureTransport()
    run = start(t)
    rng = random.Random(12)
    for i in range(1, 1_200):
        lr = 1e-3 if "restart" in case and i >= 700 else 1e-5
        g = 1.0 + 0.1 * rng.random()
        if "restart" in case and 700 <= i < 715:
            g *= 8.0 * (715 - i) / 15 + 1.0
        if case == "unstable_long_after_restart" and i >= 900:
            g = rng.choice([0.2, 1.0, 6.0])
        if case == "one_spike" and i == 700:
            g = 25.0
        if case == "two_spikes_apart" and i in (600, 900):
            g = 25.0
        if case == "exploding" and i >= 700:
            g *= math.exp(0.02 * (i - 700)) * (1 + rng.random())
        if case == "unstable" and i >= 700:
            g = rng.choice([0.2, 1.0, 6.0])
        run.step(i, loss=1.0, grad_norm=g, samples=32, now_ms=T0 + i * 1_000, step_ms=1_000.0,
                 loader_wait_ms=10.0, lr=lr)
    run.finish(now_ms=T0 + 1_300_000)
    assert firing(t) == want
