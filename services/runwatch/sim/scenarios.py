"""Fault-injection scenarios and healthy controls: one small declarative object each.

A :class:`Scenario` says what goes wrong (``name``, the model's effect), when
(``at_s`` virtual seconds after the run starts training), how strongly
(``strength``), how soon runwatch must notice (``budget_s`` virtual seconds
from the injection) and what it must say (an accepted alert ``detectors`` and
the probable ``cause``). Its :class:`Workload` says how the run is set up the
way real jobs are: inside a container or not, a dataset shared with other
runs, an input-bound loader, a learning-rate restart, noisy validation, a
weekly snapshot dataset. A scenario with no ``detectors`` is a *control*: a
healthy run that may look alarming and must raise no alert at all.

Adding a failure mode: add a :class:`Scenario` here and its effect in
:mod:`runwatch.sim.model` (``RunModel`` checks ``fault.name``).

SLO scenarios (:data:`SLO_FAULTS`, :data:`SLO_CONTROLS`) break, or keep, one
objective of ``infra/slo/sim-slos.yaml`` each (``slo``): a fault is detected by
that objective's alert (detector ``slo:<objective>``, which names no run), a
control's objective must raise nothing. They are scored only where the
simulation drives the SLO evaluator (online: the store holds what the sink
wrote; see ``docs/simulator.md``), so they are not in :data:`SCENARIOS`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

Target = Literal["run", "node"]
ImageKind = Literal["allowed", "foreign", "none"]

#: Virtual seconds every run spends loading its model before the first step
#: (GPUs allocated, utilization low), as real jobs do.
LOADING_S = 90.0


@dataclass(frozen=True, slots=True)
class Workload:
    """How the runs of a scenario are set up (the defaults: a plain healthy job).

    Attributes:
        image: ``allowed`` (from the simulated registry), ``foreign`` (outside
            the allow-list) or ``none`` (a plain script outside a container:
            no image digest).
        runs: Runs of the scenario; more than one share its datasets.
        datasets: Datasets each run trains on (each has its own pipeline).
        loading_s: Model-loading phase before the first step (low GPU utilization).
        loader_ms: Usual data-loader wait per step (an input-bound family waits long).
        lr_restart_s: A warm learning-rate restart this many seconds into
            training (lr back to its peak, the loss jumps and declines again).
        val_noise: Standard deviation of validation accuracy around its plateau.
        snapshot_lag_s: The dataset is a weekly snapshot: its rows' event
            times lag this far behind (large and constant).
        queue_s: Extra queueing before the run is scheduled (its datasets'
            pipelines keep reporting meanwhile).
        eval_every_s: An evaluation phase every this many seconds of training
            (no training steps, GPUs at about a third of their utilization),
            ``eval_s`` long, then a validation result.
        eval_s: Length of an evaluation phase.
        report_run_id: The pipeline passes ``run_id=`` (of the first run) to
            ``data.report``; by default it knows no run, as the SDK's default.
        family: ``(experiment family, team)`` of the runs (default: drawn from
            the simulator's families); an SLO scenario's objective watches its own.
        train_s: The run finishes this long after training starts (default:
            at the end of the simulation).
        register_s: The run pushes its model to the registry (``registered``)
            this long into training, a passing gate decision a second before.
        preempt_s: The scheduler preempts the run this long into training; it
            resumes :data:`RESUME_S` later.

    """

    image: ImageKind = "allowed"
    runs: int = 1
    datasets: int = 1
    loading_s: float = LOADING_S
    loader_ms: float = 150.0
    lr_restart_s: float | None = None
    val_noise: float = 0.0
    snapshot_lag_s: float | None = None
    queue_s: float = 0.0
    report_run_id: bool = False
    eval_every_s: float | None = None
    eval_s: float = 45.0
    family: tuple[str, str] | None = None
    train_s: float | None = None
    register_s: float | None = None
    preempt_s: float | None = None


PLAIN = Workload()


@dataclass(frozen=True, slots=True)
class Scenario:
    """One injectable failure mode, or a healthy control (no ``detectors``).

    Attributes:
        name: Identifier (also the model effect).
        title: The failure mode (or the control's workload) in words.
        at_s: Injection time, virtual seconds after the run starts training.
        strength: How strong (meaning per effect; 1.0 = the default strength).
        budget_s: Detection budget, virtual seconds after the injection.
        detectors: Alert detectors that count as detection (first = the
            primary one); empty for a control.
        cause: Expected probable cause ("" for a control).
        target: What the fault hits: the run's own telemetry or its node.
        workload: How the runs are set up.
        forbidden: Detectors that must not fire on the scenario's runs at all
            (a fault run paged for an unrelated reason is not a right answer).
        effect: The model effect (default: ``name``); variants of one failure
            mode under another workload share it.
        persistent: The fault lasts (and worsens) until the run ends, so its
            alert must not resolve while the run goes on.
        slo: The objective (``infra/slo/sim-slos.yaml``) an SLO scenario breaks
            (a fault) or must keep (a control); "" for the processor's scenarios.

    """

    name: str
    title: str
    at_s: float
    strength: float
    budget_s: float
    detectors: tuple[str, ...]
    cause: str
    target: Target = "run"
    workload: Workload = PLAIN
    forbidden: tuple[str, ...] = ()
    effect: str = field(default="")
    persistent: bool = False
    slo: str = ""

    @property
    def control(self) -> bool:
        """Whether this is a healthy control (no alert expected)."""
        return not self.detectors

    @property
    def kind(self) -> str:
        """The model effect this scenario injects ("" for a control)."""
        if self.control:
            return ""
        return self.effect or self.name

    def with_(self, **changes: float) -> Scenario:
        """Return a copy with ``at_s``, ``strength`` or ``budget_s`` changed."""
        return replace(self, **changes)  # type: ignore[arg-type]


def _control(name: str, title: str, workload: Workload) -> Scenario:
    return Scenario(name, title, 0, 1.0, 0, (), "", workload=workload)


_VAL = "rule:validation_decline"
_IMAGE = "rule:image_allow_list"

#: Every failure mode, in the order of the issue, then the cases users met.
FAULTS: tuple[Scenario, ...] = (
    Scenario("partition_missing", "a data partition disappears", 200, 1.0, 300,
             ("rule:zero_rows",), "data"),
    Scenario("feature_shift", "a feature distribution shifts", 200, 1.0, 400, (_VAL,), "data"),
    Scenario("label_shift", "the label balance shifts", 200, 1.0, 400, (_VAL,), "data"),
    Scenario("checkpoint_corrupt", "a checkpoint's checksum mismatches (SDK expected_sha256)",
             200, 1.0, 300, ("rule:checkpoint_checksum",), "artifact"),
    Scenario("queue_deadline", "scheduler queue delay breaks a deadline", 0, 1.5, 600,
             ("rule:queue_deadline",), "execution"),
    Scenario("loader_slowdown", "data-loader time lengthens steadily", 200, 1.0, 400,
             ("watch:loader_share",), "execution", persistent=True),
    Scenario("checkpoint_share", "checkpoints grow longer (per-interval share 3 % -> 35 %)",
             240, 1.0, 600, ("watch:checkpoint_share",), "execution", persistent=True),
    Scenario("gpu_occupancy", "GPU occupancy declines (after a low-utilization model load)",
             320, 1.0, 600, ("watch:gpu_occupancy", "watch:gpu_utilization"),
             "infrastructure", "node", persistent=True),
    Scenario("grad_variance", "gradient variance rises", 200, 1.0, 400,
             ("watch:grad_norm_variance", "watch:grad_norm"), "learning", persistent=True),
    Scenario("rejected_samples", "the rejected-sample rate grows", 200, 1.0, 400,
             ("watch:rejected_sample_rate",), "data", persistent=True),
    Scenario("restarts", "worker restarts shrink the effective batch size", 200, 1.0, 500,
             (_VAL, "indicator:restarts"), "execution"),
    Scenario("nan_loss", "the loss becomes NaN", 200, 1.0, 120, ("rule:non_finite",),
             "learning"),
    Scenario("unauthorized_image", "a run starts from an image outside the allow-list", 0, 1.0,
             120, (_IMAGE,), "artifact", workload=Workload(image="foreign")),
    Scenario("failed_gate", "an evaluation gate fails", 200, 1.0, 120, ("rule:failed_gate",),
             "artifact"),
    Scenario("schema_failures", "rows stop conforming to the dataset's schema", 200, 1.0, 300,
             ("rule:schema_failures", "watch:schema_failure_rate"), "data"),
    Scenario("shared_label_shift", "the label balance of a dataset two runs share shifts",
             200, 1.0, 400, (_VAL,), "data", workload=Workload(runs=2), effect="label_shift"),
    Scenario("nan_loss_no_image", "the loss of a plain script outside a container becomes NaN",
             200, 1.0, 120, ("rule:non_finite",), "learning", workload=Workload(image="none"),
             forbidden=(_IMAGE,), effect="nan_loss"),
)

#: Healthy runs that look alarming: each must raise no alert, late ones included.
CONTROLS: tuple[Scenario, ...] = (
    _control("shared_dataset", "two runs train on one dataset; its pipeline reports "
             "without a run id", Workload(runs=2)),
    _control("shared_dataset_run_id", "two runs share a dataset whose pipeline names the "
             "first run in its reports", Workload(runs=2, report_run_id=True)),
    _control("two_datasets_late_start", "a run on two datasets scheduled after their "
             "pipelines reported for 10 minutes", Workload(datasets=2, queue_s=600.0)),
    _control("slow_model_load", "a long model-loading phase (low GPU utilization at start)",
             Workload(loading_s=300.0)),
    _control("no_container", "a plain script outside a container (no image digest) with an "
             "allow-list configured", Workload(image="none")),
    _control("lr_restart", "an intentional warm learning-rate restart",
             Workload(lr_restart_s=400.0)),
    _control("input_bound", "an input-bound family at its usual loader share (~40 %)",
             Workload(loader_ms=1200.0)),
    _control("noisy_validation", "noisy but stationary validation accuracy",
             Workload(val_noise=0.015)),
    _control("eval_phases", "45 s evaluation phases every 5 minutes (utilization drops to "
             "about a third)", Workload(eval_every_s=300.0)),
    _control("weekly_snapshot", "a weekly-snapshot dataset (freshness lag ~4 days, constant)",
             Workload(snapshot_lag_s=4 * 86_400.0)),
)

#: Every scenario of the processor's detectors by name: the faults, then the controls.
SCENARIOS: dict[str, Scenario] = {s.name: s for s in (*FAULTS, *CONTROLS)}

#: Virtual seconds a preempted run waits before it resumes (``Workload.preempt_s``).
RESUME_S = 30.0
#: Virtual seconds a ``data_late`` pipeline stalls: longer than two of its objective's
#: 2-minute cutoff intervals, so one interval passes without a report.
DATA_STALL_S = 300.0
_DATA = Workload(report_run_id=True)  # its reports name its run: the session's own


def _slo(name: str, title: str, at_s: float, budget_s: float, cause: str, objective: str,
         workload: Workload, effect: str = "") -> Scenario:
    return Scenario(name, title, at_s, 1.0, budget_s, (f"slo:{objective}",), cause,
                    workload=workload, effect=effect, slo=objective)


def _slo_control(name: str, title: str, objective: str, workload: Workload) -> Scenario:
    return Scenario(name, title, 0, 1.0, 0, (), "", workload=workload, slo=objective)


#: Scenarios that break an objective of ``infra/slo/sim-slos.yaml``, one kind each.
SLO_FAULTS: tuple[Scenario, ...] = (
    _slo("data_late", "a dataset's passing data-quality report arrives after its cutoff "
         "(the pipeline stalls 5 min)", 60, 360, "data", "sim-data-late", _DATA),
    _slo("data_missing", "a dataset's data-quality report never arrives (the pipeline stops)",
         60, 360, "data", "sim-data-missing", _DATA),
    _slo("window_overrun", "a forecast-nightly run overruns its 5-minute training window",
         300 - LOADING_S, 120, "execution", "sim-forecast-nightly-window",
         Workload(family=("forecast-nightly", "forecasting"))),
    _slo("ungated_push", "a model reaches the registry without any gate decision", 120, 120,
         "artifact", "sim-ranker-release-registry",
         Workload(family=("ranker-release", "ads"), register_s=120.0)),
    _slo("preemption_far", "a run that never checkpoints is preempted 5.5 min into its work "
         "(at most 3 min may be lost)", 240, 120, "execution", "sim-asr-finetune-resumability",
         Workload(family=("asr-finetune", "audio"), preempt_s=240.0)),
)

#: Healthy runs for each SLO kind: their objective must raise no alert.
SLO_CONTROLS: tuple[Scenario, ...] = (
    _slo_control("data_on_time", "a pipeline whose passing reports come every minute, "
                 "before each 2-minute cutoff", "sim-data-on-time", _DATA),
    _slo_control("window_on_time", "a forecast-hourly run that finishes after 4.5 of its 5 "
                 "minutes", "sim-forecast-hourly-window",
                 Workload(family=("forecast-hourly", "forecasting"), train_s=180.0)),
    _slo_control("gated_push", "a model registered a second after its passing gate",
                 "sim-ranker-canary-registry",
                 Workload(family=("ranker-canary", "ads"), register_s=120.0)),
    _slo_control("preemption_near", "a run checkpointing every minute is preempted 5.5 min "
                 "into its work", "sim-asr-distill-resumability",
                 Workload(family=("asr-distill", "audio"), preempt_s=240.0)),
)

#: Every SLO scenario by name: the faults, then the controls.
SLO_SCENARIOS: dict[str, Scenario] = {s.name: s for s in (*SLO_FAULTS, *SLO_CONTROLS)}

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
        return SCENARIOS.get(name) or SLO_SCENARIOS[name]
    except KeyError:
        msg = (f"unknown scenario {name!r}; choose from {', '.join(SCENARIOS)}, or the SLO "
               f"scenarios {', '.join(SLO_SCENARIOS)}")
        raise ValueError(msg) from None
