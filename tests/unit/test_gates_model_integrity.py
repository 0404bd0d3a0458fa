"""A gate check fails a candidate whose model artifact is unusable (its latest row).

``gate check`` passed a candidate whose model did not load back or held no bytes: the
processor paged the artifact, the release gate read evaluations only.
"""

from __future__ import annotations

import dataclasses
import hashlib

import pytest
from test_gates_decide import POLICY, good

from runwatch.core.gates.evaluate import decide
from runwatch.core.gates.evidence import StoredArtifact

EMPTY = hashlib.sha256(b"").hexdigest()
OK = StoredArtifact("s3://m/model.pt", "model", 1 << 20, "ab" * 32, True, 1)


def check(*artifacts: StoredArtifact) -> tuple[str, list[str]]:
    ev = good()
    ev = dataclasses.replace(ev, candidate=dataclasses.replace(ev.candidate,
                                                               artifacts=artifacts))
    d = decide(POLICY, ev)
    return d.decision, d.reasons


@pytest.mark.parametrize(("bad", "why"), [
    (dataclasses.replace(OK, serialization_ok=False), "did not load back"),
    (dataclasses.replace(OK, size_bytes=0, sha256=EMPTY), "is empty (0 bytes)"),
    (dataclasses.replace(OK, size_bytes=0, sha256="sha256:" + EMPTY, kind="Model"),
     "is empty (0 bytes)"),
])
def test_an_unusable_model_fails_the_gate(bad: StoredArtifact, why: str) -> None:
    decision, reasons = check(bad)
    assert decision == "fail"
    assert any(why in r and "s3://m/model.pt" in r for r in reasons), reasons


@pytest.mark.parametrize("artifacts", [
    (),  # no model recorded yet: a gate checked before the upload
    (OK,),
    (dataclasses.replace(OK, serialization_ok=False, at_ms=1), dataclasses.replace(OK, at_ms=2)),
    (dataclasses.replace(OK, kind="checkpoint", serialization_ok=False),),  # not the model
    (dataclasses.replace(OK, size_bytes=0, sha256=""),),  # a remote model of unknown size
])
def test_a_usable_or_absent_model_leaves_the_decision(
        artifacts: tuple[StoredArtifact, ...]) -> None:
    assert check(*artifacts) == ("pass", [])
