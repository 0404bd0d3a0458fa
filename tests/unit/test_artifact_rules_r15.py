"""Artifact and release rules as a stranger drives them, through the SDK, ``emit`` and a worker.

Each case was a false page, a missed fault or missing evidence found by a probe on the
public API (``runwatch.init`` and its run's ``checkpoint``/``artifact``/``gate``, and
``runwatch emit``'s records):

* a correct checksum written by ``openssl dgst``, BSD's ``sha256`` or ``sha256sum --tag``
  (``SHA256 (f) = <hex>``), ``openssl dgst -c`` (colon-separated bytes), older
  ``certutil`` (space-separated bytes, or its whole three-line output), PowerShell's
  ``Get-FileHash`` table, in quotes, or
  base64 URL-safe or unpadded, paged a healthy checkpoint as corrupt, critical;
* an empty checkpoint or model whose checksum was given as an OCI digest or as S3's
  base64 ``ChecksumSHA256`` of no bytes was never paged;
* a corrupt checkpoint's evidence did not name the checkpoint: a NaN after a resume from
  it, cause ``artifact``, carried "expected d9298a10d1b0 got 9bdd2b102a4a" and nothing
  about which file or step;
* an image on the allow list written another way (Docker Hub's implicit ``docker.io/``
  and ``library/``, no tag for ``:latest``, a tag beside a pinning digest, a bare digest
  for an entry pinned by it) paged critical;
* a review redelivered after its approval undid the approval (decisions were taken in
  arrival order, not event time) and paged registry control;
* with ``REQUIRED_GATES``, a required gate's pass processed two seconds after the
  registration it preceded paged ``rule:missing_gate`` (registry control waited for it),
  and a model registered with no gate at all paged twice (both rules).
"""

from __future__ import annotations

import base64
import hashlib
import math
from pathlib import Path
from typing import Any

import pytest
from sdk_kit import Clock

import runwatch
from runwatch.adapters.publisher import CaptureTransport, Publisher
from runwatch.client.emit import emit_records
from runwatch.core.codec import load_codec
from runwatch.core.records import Alert
from runwatch.processor.memory import MemoryProcessor
from runwatch.processor.settings import ProcessorSettings
from runwatch.sim import replay as offline

T0 = 1_700_000_000_000
BODY = b"weights" * 1000
GOOD = hashlib.sha256(BODY).hexdigest()
OTHER = hashlib.sha256(b"another file").hexdigest()
EMPTY = hashlib.sha256(b"").hexdigest()


def _run(t: CaptureTransport, clock: Clock, image: str | None = None, **kw: Any) -> Any:
    lineage = {"lineage": {"image_digest": image}} if image else {}
    return runwatch.init("fam", run_id="r1", team="ml", transport=t, install_hooks=False,
                         capture_lineage=False, clock=clock, **lineage, **kw)


def _steps(run: Any, clock: Clock, first: int, n: int, t0: int = T0) -> None:
    for i in range(first, first + n):
        clock.t = t0 + (i + 1) * 1000
        run.step(i, loss=2.0 - 0.001 * i, lr=1e-3, grad_norm=1.0, samples=64,
                 step_ms=1000.0, loader_wait_ms=10.0)


def _alerts(records: list[Any], **settings: Any) -> list[Alert]:
    worker = offline.replay_worker(offline.as_messages(records),
                                   ProcessorSettings(save_interval_s=0, **settings))
    last = max(int(r.emitted_at_ms) for r in records)
    for at in range(last + 5_000, last + 120_001, 5_000):
        worker.tick(at)
    assert [d.reason for d in worker.dead] == []
    return [a for a in worker.alerts if a.status == "firing"]


def _decoded(t: CaptureTransport) -> list[Any]:
    codec = load_codec()
    return [codec.decode(v) for _, _, v in t.messages]


def _checkpointed(expected: str, tmp_path: Path) -> list[str]:
    t, clock = CaptureTransport(), Clock(T0)
    run = _run(t, clock)
    _steps(run, clock, 0, 30)
    path = tmp_path / "step-30.pt"
    path.write_bytes(BODY)
    run.checkpoint(path, step=30, duration_ms=500.0, expected_sha256=expected)
    _steps(run, clock, 30, 10)
    run.finish()
    return sorted({a.detector for a in _alerts(_decoded(t))})


def _pairs(hexdigest: str, sep: str) -> str:
    return sep.join(hexdigest[i:i + 2] for i in range(0, 64, 2))


SPELLINGS = {
    "openssl dgst (3.x)": lambda h: f"SHA2-256(step-30.pt)= {h}",
    "openssl dgst (1.1)": lambda h: f"SHA256(step-30.pt)= {h}",
    "openssl dgst from stdin": lambda h: f"(stdin)= {h}",
    "BSD/macOS sha256, sha256sum --tag": lambda h: f"SHA256 (step-30.pt) = {h}",
    "openssl dgst -c": lambda h: _pairs(h, ":"),
    "certutil (older Windows)": lambda h: _pairs(h, " ").upper(),
    "certutil's whole output": lambda h: (f"SHA256 hash of step-30.pt:\n{h}\n"
                                          "CertUtil: -hashfile command completed successfully."),
    "Get-FileHash's table": lambda h: (
        "\nAlgorithm       Hash" + " " * 60 + "Path\n---------       ----" + " " * 60
        + f"----\nSHA256          {h.upper()}       C:\\ckpt\\step-30.pt\n"),
    "quoted": lambda h: f'"{h}"',
    "base64 URL-safe": lambda h: base64.urlsafe_b64encode(bytes.fromhex(h)).decode(),
    "base64 unpadded": lambda h: base64.b64encode(bytes.fromhex(h)).decode().rstrip("="),
}


@pytest.mark.parametrize("spelling", list(SPELLINGS))
def test_a_correct_checksum_as_tools_print_it_does_not_page(spelling: str,
                                                            tmp_path: Path) -> None:
    spell = SPELLINGS[spelling]
    assert _checkpointed(spell(GOOD), tmp_path) == []
    assert _checkpointed(spell(OTHER), tmp_path) == ["rule:checkpoint_checksum"]


def _emitted(record: dict[str, Any]) -> list[Alert]:
    t, clock = CaptureTransport(), Clock(T0)
    run = _run(t, clock)
    _steps(run, clock, 0, 30)
    emit_records(Publisher(t, kind="hook"), [{"run_id": "r1", "emitted_at_ms": T0 + 31_000,
                                              **record}])
    clock.t += 5_000
    run.finish()
    return _alerts(_decoded(t))


EMPTY_SPELLINGS = {
    "hex": EMPTY,
    "OCI digest": "sha256:" + EMPTY,
    "S3 ChecksumSHA256 (base64)": base64.b64encode(bytes.fromhex(EMPTY)).decode(),
}


@pytest.mark.parametrize("spelling", list(EMPTY_SPELLINGS))
@pytest.mark.parametrize("kind", ["CheckpointEvent", "ArtifactEvent"])
def test_an_empty_artifact_pages_whatever_its_digest_spelling(kind: str,
                                                              spelling: str) -> None:
    common = {"type": kind, "size_bytes": 0, "sha256": EMPTY_SPELLINGS[spelling]}
    if kind == "CheckpointEvent":
        record = {**common, "step": 30, "started_at_ms": T0 + 30_000,
                  "ended_at_ms": T0 + 31_000, "duration_ms": 1000.0,
                  "uri": "s3://ckpt/step-30", "outcome": "ok"}
    else:
        record = {**common, "uri": "s3://models/m1", "kind": "model"}
    fired = [(a.detector, a.probable_cause, a.severity) for a in _emitted(record)]
    assert fired == [("rule:artifact_empty", "artifact", "critical")]
    # a remote artifact of unknown size (0, no checksum) stays quiet
    assert _emitted({k: v for k, v in record.items() if k != "sha256"}) == []


def test_a_nan_after_a_resume_from_a_corrupt_checkpoint_names_the_checkpoint(
        tmp_path: Path) -> None:
    path = tmp_path / "step-40.pt"
    path.write_bytes(BODY)
    t, clock = CaptureTransport(), Clock(T0)
    run = _run(t, clock)
    _steps(run, clock, 0, 40)
    run.checkpoint(path, step=40, duration_ms=500.0, expected_sha256="sha256:" + OTHER,
                   now_ms=clock.t + 100)
    run.finish("preempted", now_ms=clock.t + 200)
    clock2 = Clock(T0 + 100_000)
    run = _run(t, clock2, resumed_from=str(path), attempt=2)
    _steps(run, clock2, 40, 10, t0=T0 + 60_000)
    clock2.t += 1_000
    run.step(50, loss=math.nan, lr=1e-3)
    run.finish("failed", now_ms=clock2.t + 100)
    fired = {a.detector: a for a in _alerts(_decoded(t))}
    assert set(fired) == {"rule:checkpoint_checksum", "rule:non_finite"}
    nan = fired["rule:non_finite"]
    assert (nan.probable_cause, nan.severity, nan.run_id, nan.team) == (
        "artifact", "critical", "r1", "ml")
    detail = f"{path} (step 40): expected {OTHER[:12]} got {GOOD[:12]}"
    assert [e.detail for e in nan.evidence if e.indicator == "checkpoint"] == [detail]
    assert [e.detail for e in fired["rule:checkpoint_checksum"].evidence] == [detail]


D = "ab" * 32


def _image_alerts(image: str, entry: str) -> list[Alert]:
    """The alerts of a run of ``image`` under the allow list ``[entry]``."""
    t, clock = CaptureTransport(), Clock(T0)
    run = _run(t, clock, image=image)
    _steps(run, clock, 0, 20)
    run.finish()
    return _alerts(_decoded(t), image_allow_list=[entry])


@pytest.mark.parametrize(("image", "entry"), [
    ("pytorch/pytorch:2.1-cuda12", "docker.io/pytorch/pytorch"),
    ("docker.io/pytorch/pytorch:2.1-cuda12", "pytorch/pytorch"),
    ("docker.io/library/python:3.11", "python"),
    ("python:3.11", "docker.io/library/python"),
    ("index.docker.io/library/python:3.11", "docker.io/library/python"),
    ("library/python:3.11", "python"),
    ("host:5000/team/img:tag@sha256:" + D, "host:5000/team/img@sha256:" + D),
    ("sha256:" + D, "registry.corp.com/ml/train@sha256:" + D),
    ("registry.corp.com/ml/train", "registry.corp.com/ml/train:latest"),
    ("redis:7.2", "redis:7"),  # name:digits: an image with a numeric tag (as docker reads it)
    ("docker.io/library/redis:7", "redis:7"),
    ("registry:5000/ml/train:1", "registry:5000"),  # and a registry on a port
])
def test_an_allowed_image_written_another_way_does_not_page(image: str, entry: str) -> None:
    assert _image_alerts(image, entry) == []


@pytest.mark.parametrize(("image", "entry"), [
    ("docker.io/evil/python:3.11", "python"),
    ("python-evil:3.11", "python"),
    ("evil.io/pytorch/pytorch:2.1", "pytorch/pytorch"),
    ("docker.io/registry.corp.com/ml/x:1", "registry.corp.com"),
    ("registry.corp.com/ml/train:evil@sha256:" + "cd" * 32,
     "registry.corp.com/ml/train@sha256:" + D),
    ("sha256:" + "cd" * 32, "registry.corp.com/ml/train@sha256:" + D),
    ("registry.corp.com/ml/train@sha256:" + D, "registry.corp.com/ml/train:1.0"),
    ("host:5001/team/img:tag", "host:5000/team"),
    ("redis:8", "redis:7"),
    ("docker.io/evil/redis:7", "redis:7"),
])
def test_an_image_off_the_allow_list_still_pages(image: str, entry: str) -> None:
    fired = [(a.detector, a.severity, a.title) for a in _image_alerts(image, entry)]
    assert fired == [("rule:image_allow_list", "critical", f"Image {image} is not allowed")]


def _release(fn: Any) -> list[tuple[str, Any, bytes]]:
    """What a producer of the run ``r1`` publishes to ``rw.artifact`` in ``fn(run)``."""
    t = CaptureTransport()
    run = runwatch.init("fam", run_id="r1", transport=t, install_hooks=False,
                        capture_lineage=False, clock=lambda: T0)
    fn(run)
    run.finish(now_ms=T0)
    return [m for m in t.messages if m[0] == "rw.artifact"]


def _live(batches: list[list[tuple[str, Any, bytes]]], **settings: Any) -> list[tuple[str, str]]:
    """The run's training, then each batch a second apart; every alert that fired."""
    t, clock = CaptureTransport(), Clock(T0)
    run = _run(t, clock)
    _steps(run, clock, 0, 20)
    run.finish(now_ms=T0 + 21_000)
    wall = [T0 + 22_000]
    m = MemoryProcessor(ProcessorSettings(save_interval_s=0, gate_wait_ms=60_000, **settings),
                        clock=lambda: wall[0])
    m.feed(t.messages)
    for batch in batches:
        wall[0] += 1_000
        m.tick(wall[0])
        m.feed(batch)
    for _ in range(30):  # past the registry's wait for a decision
        wall[0] += 5_000
        m.tick(wall[0])
    assert [d.reason for d in m.dead] == []
    return [(a.detector, a.title) for a in m.alerts
            if isinstance(a, Alert) and a.status == "firing"]


REVIEW = _release(lambda r: r.gate("release", "review", now_ms=T0 + 30_000))
APPROVAL = _release(lambda r: r.gate("release", "pass", evaluator="human:ana",
                                     now_ms=T0 + 50_000))
REGISTERED = _release(lambda r: r.artifact("s3://models/m1", "model", sha256=D,
                                           registry_status="registered", now_ms=T0 + 70_000))


def test_a_review_redelivered_after_its_approval_does_not_undo_it() -> None:
    assert _live([REVIEW, APPROVAL, REVIEW, REGISTERED]) == []
    # a later fail of the same gate still withdraws the approval
    failed = _release(lambda r: r.gate("release", "fail", now_ms=T0 + 60_000))
    assert [d for d, _ in _live([REVIEW, APPROVAL, failed, REGISTERED])] == [
        "rule:failed_gate", "rule:registry_without_gate"]


def test_a_required_gate_processed_after_the_registration_it_preceded_does_not_page() -> None:
    passed = _release(lambda r: r.gate("release", "pass", now_ms=T0 + 69_000))
    assert _live([REGISTERED, passed], required_gates=["release"]) == []
    # never passed: one page, naming the gate (not a second one from registry control)
    assert _live([REGISTERED], required_gates=["release"]) == [
        ("rule:missing_gate", "Model s3://models/m1 registered before gate(s) release passed")]
    # a pass 20 minutes after the registration does not settle it
    late = _release(lambda r: r.gate("release", "pass", now_ms=T0 + 70_000 + 20 * 60_000))
    assert [d for d, _ in _live([REGISTERED, late], required_gates=["release"])] == [
        "rule:missing_gate"]


def test_investigate_trusts_a_checkpoint_whose_restore_check_spells_its_digest_otherwise() -> None:
    """``runwatch investigate`` compared the stored digests verbatim: a restore check sent
    with ``runwatch emit`` as ``sha256:<hex>`` (the processor paged nothing) was a
    "checksum mismatch" there, and the resume point fell back a checkpoint."""
    from test_investigate import OWN, _ck, _evidence

    from runwatch.core.investigate.answers import investigate

    b64_other = base64.b64encode(bytes.fromhex(OTHER)).decode()
    cks = [_ck(100, T0 + 10 * 60_000, sha=GOOD, expected=GOOD),
           _ck(200, T0 + 20 * 60_000, sha=GOOD, expected="sha256:" + GOOD.upper()),
           _ck(300, T0 + 30 * 60_000, sha=GOOD, expected=b64_other)]
    got = investigate(_evidence(checkpoints=cks, quality=[], alerts=[]), OWN)
    verdicts = {c["step"]: (c["checksum_ok"], c["reasons"])
                for c in got["trustworthy"]["checkpoints"]}
    assert verdicts == {100: (True, []), 200: (True, []), 300: (False, ["checksum mismatch"])}
    assert got["resume_point"]["step"] == 200
