"""Fault-injection scenarios: one small declarative object per failure mode.

A :class:`Scenario` says what goes wrong (``name``, the model's effect), when
(``at_s`` virtual seconds after the run starts training), how strongly
(``strength``), how soon runwatch must notice (``budget_s`` virtual seconds
from the injection) and what it must say (an accepted alert ``detectors`` and
the probable ``cause``). Where :mod:`runwatch.core.scenarios` already names the
expected alert of a failure mode, that definition is reused.

Adding a failure mode: add a :class:`Scenario` here and its effect in
:mod:`runwatch.sim.model` (``RunModel`` checks ``fault.name``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from runwatch.core.scenarios import EXPECTED

Target = Literal["run", "node"]


def _core(name: str) -> tuple[str, str]:
    """Return (detector, cause) of a failure mode the processor's scenarios define."""
    exp = EXPECTED[name]
    if exp.detector is None or exp.probable_cause is None:  # pragma: no cover - static table
        msg = f"core scenario {name} expects no alert"
        raise ValueError(msg)
    return exp.detector, exp.probable_cause


@dataclass(frozen=True, slots=True)
class Scenario:
    """One injectable failure mode.

    Attributes:
        name: Identifier (also the model effect).
        title: The failure mode in words.
        at_s: Injection time, virtual seconds after the run starts training.
        strength: How strong (meaning per effect; 1.0 = the default strength).
        budget_s: Detection budget, virtual seconds after the injection.
        detectors: Alert detectors that count as detection (first = the primary one).
        cause: Expected probable cause.
        target: What the fault hits: the run's own telemetry or its node.

    """

    name: str
    title: str
    at_s: float
    strength: float
    budget_s: float
    detectors: tuple[str, ...]
    cause: str
    target: Target = "run"

    def with_(self, **changes: float) -> Scenario:
        """Return a copy with ``at_s``, ``strength`` or ``budget_s`` changed."""
        return replace(self, **changes)  # type: ignore[arg-type]


_LOADER = _core("loader_slowdown")
_LABEL = _core("label_shift")
_RESTART = _core("restarts")
_NAN = _core("nan_loss")
_CKSUM = _core("checksum")

#: Every failure mode, in the order of the issue.
SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("partition_missing", "a data partition disappears", 200, 1.0, 300,
             ("rule:zero_rows",), "data"),
    Scenario("feature_shift", "a feature distribution shifts", 200, 1.0, 400,
             (_LABEL[0],), "data"),
    Scenario("label_shift", "the label balance shifts", 200, 1.0, 400, (_LABEL[0],), _LABEL[1]),
    Scenario("checkpoint_corrupt", "a checkpoint silently corrupts", 200, 1.0, 300,
             (_CKSUM[0], "rule:checkpoint_serialization"), _CKSUM[1]),
    Scenario("queue_deadline", "scheduler queue delay breaks a deadline", 0, 1.5, 600,
             ("rule:queue_deadline",), "execution"),
    Scenario("loader_slowdown", "data-loader time lengthens slowly", 200, 1.0, 400,
             (_LOADER[0],), _LOADER[1]),
    Scenario("checkpoint_share", "checkpoints take a growing share of wall clock", 300, 2.0,
             800, ("watch:checkpoint_share",), "execution"),
    Scenario("gpu_occupancy", "GPU occupancy declines", 320, 1.0, 600,
             ("watch:gpu_occupancy", "watch:gpu_utilization"), "infrastructure", "node"),
    Scenario("grad_variance", "gradient variance rises", 200, 1.0, 400,
             ("watch:grad_norm_variance", "watch:grad_norm"), "learning"),
    Scenario("rejected_samples", "the rejected-sample rate grows", 200, 1.0, 400,
             ("watch:rejected_sample_rate",), "data"),
    Scenario("restarts", "worker restarts shrink the effective batch size", 200, 1.0, 500,
             (_RESTART[0], "indicator:restarts"), _RESTART[1]),
    Scenario("nan_loss", "the loss becomes NaN", 200, 1.0, 120, (_NAN[0],), _NAN[1]),
    Scenario("unauthorized_image", "a run starts from an image outside the allow-list", 0, 1.0,
             120, ("rule:image_allow_list",), "artifact"),
    Scenario("failed_gate", "an evaluation gate fails", 200, 1.0, 120, ("rule:failed_gate",),
             "artifact"),
)}

#: A handful shown by ``runwatch demo``.
DEMO_SCENARIOS: tuple[str, ...] = (
    "nan_loss", "checkpoint_corrupt", "label_shift", "loader_slowdown", "failed_gate",
    "partition_missing",
)

#: Images the simulated registry serves; the processor's allow-list for the simulator.
ALLOWED_IMAGE_PREFIX = "registry.sim.local/"


def get(name: str) -> Scenario:
    """Return a scenario by name.

    Raises:
        ValueError: For an unknown name (the message lists the known ones).

    """
    try:
        return SCENARIOS[name]
    except KeyError:
        msg = f"unknown scenario {name!r}; choose from {', '.join(SCENARIOS)}"
        raise ValueError(msg) from None
