"""Validation streams, metric names, digests, image references and verdict spellings as
users give them, through the SDK and the offline replay.

Each case was a false page or a missed fault found by a stranger probe on the public
API: a healthy per-slice validation paged (every slice in one history), a cosine
schedule's warm restarts paged a validation decline, an error rate ending in ``top1``
was an accuracy, perplexities, word error rates and Lightning's
``val_loss/dataloader_idx_0`` were never judged, a Keras epoch's training ``accuracy``
hid its ``val_accuracy``, a NaN validation loss paged nothing, a correct checksum
written by ``sha256sum`` or S3 paged critical, an allow-list entry admitted
look-alike registries, and ``failure``/``corrupted``/``Approved``/``Model`` were not read.
"""

from __future__ import annotations

import base64
import hashlib
import math
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sdk_kit import Clock

import runwatch
from runwatch.adapters.publisher import CaptureTransport
from runwatch.core.codec import load_codec
from runwatch.processor.settings import ProcessorSettings
from runwatch.sim import replay as offline

T0 = 1_700_000_000_000


def fired(script: Callable[[Any, Clock], None], *, allow: list[str] | None = None,
          image: str | None = None) -> dict[str, list[str]]:
    """Run ``script(run, clock)`` through the SDK and the replay; detector -> titles fired."""
    t = CaptureTransport()
    clock = Clock(T0)
    kw: dict[str, Any] = {"lineage": {"image_digest": image}} if image else {}
    run = runwatch.init("fam", run_id="r1", team="ml", transport=t, install_hooks=False,
                        capture_lineage=False, strict=False, clock=clock, **kw)
    script(run, clock)
    run.finish()
    codec = load_codec()
    records = [codec.decode(v) for _, _, v in t.messages]
    settings = ProcessorSettings(save_interval_s=0, image_allow_list=allow or [])
    worker = offline.replay_worker(offline.as_messages(records), settings)
    last = max(int(r.emitted_at_ms) for r in records)
    for at in range(last + 5_000, last + 300_001, 5_000):  # the timer's rules, minutes later
        worker.tick(at)
    out: dict[str, list[str]] = {}
    for a in worker.alerts:
        if a.status == "firing":
            out.setdefault(a.detector, []).append(a.title)
    return out


def steps(run: Any, clock: Clock, first: int, n: int, lr: Callable[[int], float] = lambda i: 1e-3,
          loss: Callable[[int, random.Random], float] = lambda i, r: 2.0 * (1 + r.gauss(0, .02)),
          rng: random.Random | None = None) -> None:
    r = rng or random.Random(7)
    for i in range(first, first + n):
        clock.t = T0 + (i + 1) * 1000
        run.step(i, loss=loss(i, r), lr=lr(i), grad_norm=1.0, samples=64, step_ms=1000.0,
                 loader_wait_ms=10.0)


def sliced(decline: str | None) -> Callable[[Any, Clock], None]:
    """Four language slices at 0.90 to 0.55, steady; ``decline``: that slice falls to 0.3."""
    def script(run: Any, clock: Clock) -> None:
        rng = random.Random(1)
        levels = {"en": 0.90, "de": 0.85, "sw": 0.60, "yo": 0.55}
        for k in range(20):
            steps(run, clock, k * 100, 100, rng=rng)
            for name, level in levels.items():
                clock.t += 1
                acc = 0.3 if name == decline and k >= 14 else level + rng.gauss(0, .005)
                run.validation(k * 100 + 99, {"val_acc": acc}, slice=name)
    return script


def test_slices_of_one_validation_are_judged_each_against_its_own_best() -> None:
    assert "rule:validation_decline" not in fired(sliced(None))
    titles = fired(sliced("de"))["rule:validation_decline"]
    assert len(titles) == 1 and titles[0].startswith("Validation val_acc [de] declined"), titles


def test_two_validation_datasets_are_two_streams() -> None:
    def script(run: Any, clock: Clock) -> None:
        rng = random.Random(4)
        for k in range(20):
            steps(run, clock, k * 100, 100, rng=rng)
            for ds, level in (("s3://val/in-domain", 0.92), ("s3://val/ood", 0.70)):
                clock.t += 1
                run.validation(k * 100 + 99, {"val_acc": level + rng.gauss(0, .004)},
                               dataset=ds)
            if k == 10:  # one evaluation reported in the other order
                clock.t += 1
                run.validation(k * 100 + 99, {"val_acc": 0.705}, dataset="s3://val/ood")
    assert "rule:validation_decline" not in fired(script)


def sgdr(fault: bool) -> Callable[[Any, Clock], None]:
    """Cosine warm restarts every 1,000 steps; the validation accuracy dips after each and
    recovers higher. ``fault``: in the fourth cycle it falls from 0.95 to 0.6 and stays."""
    def script(run: Any, clock: Clock) -> None:
        rng = random.Random(2)
        for i in range(4000):
            clock.t = T0 + (i + 1) * 1000
            c = i % 1000
            run.step(i, loss=(0.6 - 0.3 * (1 - math.exp(-c / 250))) * (1 + rng.gauss(0, .03)),
                     lr=0.1 * 0.5 * (1 + math.cos(math.pi * c / 1000)) + 1e-4, grad_norm=1.0,
                     samples=64, step_ms=1000.0, loader_wait_ms=10.0)
            if (i + 1) % 100 == 0:
                acc = 0.80 + 0.15 * (1 - math.exp(-c / 250)) + 0.005 * (i // 1000)
                if fault and i >= 3600:
                    acc = 0.6
                clock.t += 1
                run.validation(i, {"val_acc": acc + rng.gauss(0, .003)})
    return script


def test_a_warm_restarts_validation_dip_does_not_page_and_a_decline_in_a_cycle_does() -> None:
    assert "rule:validation_decline" not in fired(sgdr(fault=False))
    assert "rule:validation_decline" in fired(sgdr(fault=True))


@pytest.mark.parametrize("period", [200, 300])
def test_a_lasting_decline_under_a_cyclic_rate_pages_and_stays_firing(period: int) -> None:
    # the rate back up every ``period`` steps (triangular from 1e-5, or alternating
    # 1e-3 / 3e-3): starting the best again at each rise hid the decline, or resolved it
    def script(run: Any, clock: Clock) -> None:
        rng = random.Random(6)
        for k in range(60):
            lr = ((lambda i: 1e-5 + 1e-4 * (i % period)) if period == 200
                  else (lambda i: 1e-3 if (i // 150) % 2 == 0 else 3e-3))
            steps(run, clock, k * 100, 100, lr=lr, rng=rng)
            clock.t += 1
            acc = 0.85 if k < 30 else 0.55
            run.validation(k * 100 + 99, {"val_acc": acc + rng.gauss(0, .003)})
    t = CaptureTransport()
    clock = Clock(T0)
    run = runwatch.init("fam", run_id="r1", transport=t, install_hooks=False,
                        capture_lineage=False, clock=clock)
    script(run, clock)
    run.finish()
    codec = load_codec()
    alerts = offline.replay(offline.as_messages([codec.decode(v) for _, _, v in t.messages]))
    decline = [a.status for a in alerts if a.detector == "rule:validation_decline"]
    assert decline and decline[-1] == "firing", decline


def collapse(metric: str, higher: bool, extra: dict[str, float] | None = None,
             collapses: bool = True) -> Callable[[Any, Clock], None]:
    """Evaluations every 100 steps of ``metric`` improving; from the 12th, three times worse."""
    def script(run: Any, clock: Clock) -> None:
        rng = random.Random(3)
        for k in range(16):
            steps(run, clock, k * 100, 100, rng=rng)
            good = 0.9 - 0.3 * math.exp(-k / 3) if higher else 0.1 + 0.4 * math.exp(-k / 3)
            bad = good / 3 if higher else good * 3
            value = bad if collapses and k >= 12 else good
            clock.t += 1
            run.validation(k * 100 + 99, {metric: value + rng.gauss(0, .002), **(extra or {})})
    return script


@pytest.mark.parametrize(("metric", "higher"), [
    ("val_ppl", False), ("eval_wer", False), ("val_acc_epoch", True), ("val/acc@1", True),
    ("val_loss/dataloader_idx_0", False), ("valAccuracy", True), ("val_loss", False),
])
def test_a_collapse_of_a_metric_named_as_frameworks_name_it_pages(metric: str,
                                                                  higher: bool) -> None:
    assert "rule:validation_decline" in fired(collapse(metric, higher))
    assert "rule:validation_decline" not in fired(collapse(metric, higher, collapses=False))


def test_an_error_rate_named_top1_improving_does_not_page() -> None:
    # falling from 0.5 to 0.1: read as an accuracy, each improvement was a decline
    assert fired(collapse("val/err_top1", higher=False, collapses=False)) == {}
    assert "rule:validation_decline" in fired(collapse("val/err_top1", higher=False))


def test_a_keras_epochs_validation_accuracy_is_judged_beside_its_training_accuracy() -> None:
    def script(run: Any, clock: Clock) -> None:
        for k in range(12):
            steps(run, clock, k * 100, 100)
            val = 0.7 if k < 8 else 0.1
            clock.t += 1
            run.validation(k * 100 + 99, {"loss": 0.5, "accuracy": 0.8 + k * 0.01,
                                          "val_loss": 0.6 if k < 8 else 3.0,
                                          "val_accuracy": val})
    assert "rule:validation_decline" in fired(script)


@pytest.mark.parametrize(("metric", "part", "pages"), [
    ("val_loss", None, True), ("val_acc", None, False), ("val_loss", "rare", False)])
def test_a_nan_validation_loss_pages_and_a_metric_of_nothing_does_not(
        metric: str, part: str | None, pages: bool) -> None:
    # an accuracy of no samples, or a loss over a slice with no samples, is 0/0: no fault
    def script(run: Any, clock: Clock) -> None:
        for k in range(8):
            steps(run, clock, k * 100, 100)
            clock.t += 1
            run.validation(k * 100 + 99, {metric: 0.5 if k < 5 else float("nan")},
                           slice=part)
    titles = fired(script).get("rule:non_finite", [])
    assert titles == (["Non-finite validation val_loss (nan)"] if pages else [])


def checkpoint_with(expected: Callable[[str], str], tmp_path: Path) -> Callable[[Any, Clock], None]:
    path = tmp_path / "ck.pt"
    path.write_bytes(b"weights" * 1000)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()

    def script(run: Any, clock: Clock) -> None:
        steps(run, clock, 0, 50)
        clock.t += 1000
        run.checkpoint(str(path), step=49, duration_ms=500.0, expected_sha256=expected(digest))
        steps(run, clock, 50, 50)
    return script


SPELLINGS: dict[str, Callable[[str], str]] = {
    "sha256sum line": lambda h: f"{h}  ck.pt\n",
    "base64 (S3 ChecksumSHA256)": lambda h: base64.b64encode(bytes.fromhex(h)).decode(),
    "SRI sha256-base64": lambda h: "sha256-" + base64.b64encode(bytes.fromhex(h)).decode(),
    "sha256=hex": lambda h: "sha256=" + h,
    "upper case, OCI prefix": lambda h: "SHA256:" + h.upper(),
    "12-digit short digest": lambda h: h[:12],
}


@pytest.mark.parametrize("spelling", list(SPELLINGS))
def test_a_correct_checksum_in_a_common_spelling_is_the_same_digest(spelling: str,
                                                                    tmp_path: Path) -> None:
    spell = SPELLINGS[spelling]
    assert fired(checkpoint_with(spell, tmp_path)) == {}
    other = hashlib.sha256(b"another file").hexdigest()
    assert "rule:checkpoint_checksum" in fired(checkpoint_with(lambda h: spell(other), tmp_path))


@pytest.mark.parametrize(("image", "entry", "allowed"), [
    ("registry.corp.com.evil.io/ml/x:latest", "registry.corp.com", False),
    ("docker.io/pytorchx/evil:1", "docker.io/pytorch", False),
    ("registry.corp.com/ml-sandbox/x:latest", "registry.corp.com/ml", False),
    ("registry.corp.com/ml/train:1", "registry.corp.com", True),
    ("registry.corp.com/ml/train@sha256:" + "ab" * 32, "registry.corp.com/ml", True),
    ("docker.io/pytorch:2.1", "docker.io/pytorch", True),
    ("Registry.Prod/team/train:1", "registry.prod/", True),
    ("sha256:" + "ab" * 32, "registry.prod/", False),
    ("sha256:" + "ab" * 32, "sha256:" + "ab" * 32, True),
    ("docker.io/pytorch/pytorch:2.1", "docker.io/pytorch/pytorch:2", True),  # a tag prefix
    ("host:50000/repo:1", "host:5000", False),
])
def test_an_allow_list_entry_admits_what_is_under_it_and_no_look_alike(image: str, entry: str,
                                                                     allowed: bool) -> None:
    got = fired(lambda run, clock: steps(run, clock, 0, 30), allow=[entry], image=image)
    assert ("rule:image_allow_list" not in got) is allowed, got


@pytest.mark.parametrize("decision", ["failure", "reject", "denied", "FAILED "])
def test_a_gate_decision_spelled_as_people_spell_it_pages(decision: str) -> None:
    def script(run: Any, clock: Clock) -> None:
        steps(run, clock, 0, 30)
        clock.t += 1000
        run.gate("release", decision, reasons=["auc below bound"])
    assert "rule:failed_gate" in fired(script)


@pytest.mark.parametrize(("outcome", "rule"), [
    ("corrupted", "rule:checkpoint_checksum"), ("failure", "rule:checkpoint_serialization"),
    ("timed out", "rule:checkpoint_serialization"), ("Timed-Out", "rule:checkpoint_serialization"),
])
def test_a_checkpoint_outcome_spelled_as_people_spell_it_pages(outcome: str, rule: str) -> None:
    def script(run: Any, clock: Clock) -> None:
        steps(run, clock, 0, 30)
        clock.t += 1000
        run.checkpoint("s3://ck/30.pt", step=29, duration_ms=500.0, outcome=outcome)
    assert rule in fired(script)


@pytest.mark.parametrize(("kind", "status"), [
    ("model", "Approved"), ("model", "deployed "), ("Model", "registered"),
    ("model", "Production"),
])
def test_a_model_registered_without_a_gate_pages_however_kind_and_status_are_spelled(
        kind: str, status: str) -> None:
    def script(run: Any, clock: Clock) -> None:
        steps(run, clock, 0, 30)
        clock.t += 1000
        run.artifact("s3://models/m1", kind, sha256="ab" * 32, registry_status=status)
    assert "rule:registry_without_gate" in fired(script)
