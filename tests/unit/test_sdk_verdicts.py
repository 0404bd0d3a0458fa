"""What a plain SDK script gets paged for: image policy, NaN cause, checkpoint integrity.

Runs are driven through the public SDK (``runwatch.init`` / ``run.*`` with
explicit times) into an in-memory transport; the published bytes are decoded
and folded through the processor's own join (:func:`runwatch.sim.replay.replay`,
the code live traffic runs), so nothing here builds processor records by hand.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import pytest
from sdk_kit import ListTransport

import runwatch
from runwatch.core.records import Alert
from runwatch.processor.settings import ProcessorSettings
from runwatch.sim.replay import replay

T0 = 1_760_000_000_000
ALLOW = ("registry.local/",)


class Clock:
    """The run's clock, advanced by the script (explicit event times)."""

    def __init__(self) -> None:
        self.ms = T0

    def __call__(self) -> int:
        return self.ms


@pytest.fixture
def no_image(monkeypatch) -> None:
    for var in ("RUNWATCH_IMAGE_DIGEST", "IMAGE_DIGEST", "CONTAINER_IMAGE_DIGEST"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("RUNWATCH_RUN_ID", raising=False)


def _run(clock: Clock) -> tuple[runwatch.Run, ListTransport]:
    t = ListTransport()
    run = runwatch.init("fam", team="ml", transport=t, install_hooks=False,
                        capture_lineage=False, clock=clock)
    return run, t


def nan_script() -> list[object]:
    """A plain script outside a container: 40 healthy steps, then a NaN loss."""
    clock = Clock()
    run, t = _run(clock)
    for i in range(41):
        clock.ms = T0 + 1_000 * (i + 1)
        run.step(i, loss=(math.nan if i == 40 else 2.0 - 0.01 * i), now_ms=clock.ms)
    run.finish()
    return t.out


def alerts_of(messages: list[tuple], **cfg) -> list[Alert]:
    """What a worker with these settings publishes for the SDK's messages."""
    return replay(messages, ProcessorSettings(save_interval_s=0, image_allow_list=list(ALLOW),
                                              **cfg))


def by_detector(alerts: list[Alert]) -> dict[str, Alert]:
    return {a.detector: a for a in alerts if a.status == "firing"}


@pytest.mark.usefixtures("no_image")
def test_nan_loss_outside_a_container_is_a_learning_page_and_no_image_page() -> None:
    fired = by_detector(alerts_of(nan_script()))
    assert set(fired) == {"rule:non_finite"}
    nan = fired["rule:non_finite"]
    assert nan.probable_cause == "learning" and nan.severity == "critical"


@pytest.mark.usefixtures("no_image")
@pytest.mark.parametrize(("policy", "severity"), [("warn", "warning"), ("deny", "critical")])
def test_image_missing_policy_is_its_own_alert_and_lends_no_cause(policy, severity) -> None:
    fired = by_detector(alerts_of(nan_script(), image_missing=policy))
    assert set(fired) == {"rule:non_finite", "rule:image_missing"}
    image = fired["rule:image_missing"]
    assert image.severity == severity and image.probable_cause == "artifact"
    assert "no container image" in image.title
    nan = fired["rule:non_finite"]
    assert nan.probable_cause == "learning"
    assert all(e.indicator != "image" for e in nan.evidence)


def test_unapproved_image_still_pages_but_does_not_explain_the_nan(monkeypatch) -> None:
    monkeypatch.setenv("RUNWATCH_IMAGE_DIGEST", "evil.io/train@sha256:1")
    fired = by_detector(alerts_of(nan_script()))
    assert fired["rule:image_allow_list"].severity == "critical"
    assert fired["rule:image_allow_list"].title == "Image evil.io/train@sha256:1 is not allowed"
    assert fired["rule:non_finite"].probable_cause == "learning"


def _checkpoint_alerts(tmp_path: Path, **kw) -> dict[str, Alert]:
    clock = Clock()
    run, t = _run(clock)
    ck = tmp_path / "step-10.ckpt"
    body = b"weights" * 100
    ck.write_bytes(body + kw.pop("tail", b""))
    clock.ms = T0 + 5_000
    run.step(1, loss=1.0, now_ms=clock.ms)
    run.checkpoint(ck, step=10, duration_ms=50.0, now_ms=clock.ms, **kw)
    run.finish()
    return by_detector(replay(t.out, ProcessorSettings(save_interval_s=0)))


def test_checksum_mismatch_through_the_sdk_raises_the_checksum_alert(tmp_path: Path) -> None:
    expected = hashlib.sha256(b"weights" * 100).hexdigest()
    fired = _checkpoint_alerts(tmp_path, expected_sha256=expected, tail=b"\0bitrot")
    assert set(fired) == {"rule:checkpoint_checksum"}
    alert = fired["rule:checkpoint_checksum"]
    assert alert.title == "Checkpoint checksum mismatch"
    assert alert.probable_cause == "artifact"


@pytest.mark.parametrize("spelling", [str.upper, lambda h: "sha256:" + h])
def test_expected_checksum_spellings_match(tmp_path: Path, spelling) -> None:
    expected = spelling(hashlib.sha256(b"weights" * 100).hexdigest())
    assert _checkpoint_alerts(tmp_path, expected_sha256=expected) == {}


def test_failed_serialization_raises_the_serialization_alert(tmp_path: Path) -> None:
    fired = _checkpoint_alerts(tmp_path, outcome="failed")
    assert set(fired) == {"rule:checkpoint_serialization"}
    assert fired["rule:checkpoint_serialization"].title == "Checkpoint serialization failed"
