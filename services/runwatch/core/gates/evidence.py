"""The evidence a gate decides on: evaluations, lineage, repeats, the incumbent.

Plain frozen records filled by the store adapter (``adapters.gates``) from
ClickHouse rows, or by tests. Nothing here reads anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field

WHOLE = ""
"""The slice name of an evaluation of the whole set."""


@dataclass(frozen=True, slots=True)
class Evaluation:
    """A run's latest release evaluation of one slice (``""``: the whole set).

    Attributes:
        slice: Slice name, ``""`` for the whole evaluation set.
        metrics: Metric name -> value (may hold NaN/Inf: the gate fails on them).
        dataset: Evaluation dataset as ``uri@version`` (``uri`` when unversioned).
        sample_count: Samples evaluated (0: not recorded).
        ci_low: Confidence-interval lower bounds per metric, where recorded.
        ci_high: Confidence-interval upper bounds per metric, where recorded.
        incumbent_run_id: The incumbent the run says it is compared against ('' : none).
        at_ms: Event time of the evaluation.

    """

    slice: str
    metrics: dict[str, float]
    dataset: str = ""
    sample_count: int = 0
    ci_low: dict[str, float] = field(default_factory=dict)
    ci_high: dict[str, float] = field(default_factory=dict)
    incumbent_run_id: str = ""
    at_ms: int = 0


@dataclass(frozen=True, slots=True)
class StoredArtifact:
    """An artifact row of a run (``run.artifact``), as stored.

    Attributes:
        uri: Artifact location.
        kind: Its kind as the producer wrote it (``model``, ``Model``, ``checkpoint``...).
        size_bytes: Its size (0: empty, or not known for a remote artifact).
        sha256: Its checksum as sent ('' : not known).
        serialization_ok: Whether it loaded back.
        at_ms: Event time of the row.

    """

    uri: str
    kind: str
    size_bytes: int = 0
    sha256: str = ""
    serialization_ok: bool = True
    at_ms: int = 0


@dataclass(frozen=True, slots=True)
class RunEvidence:
    """What is stored about one run: its lineage and its evaluations.

    Attributes:
        run_id: The run.
        family: Its experiment family.
        labels: Its manifest's labels.
        training: Datasets it trained on, ``uri@version`` (``uri`` when unversioned).
        code_revision: Source revision ('' : unknown).
        code_dirty: Uncommitted changes in the working tree at launch.
        repeat_group: Its lineage with the seed left out (repeats share it).
        lineage: Its full lineage, seed included (reruns share it).
        evaluations: Slice -> its latest evaluation.
        has_manifest: Whether a manifest was stored for it.
        artifacts: Its artifact rows, oldest first (read for the candidate only).

    """

    run_id: str
    family: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    training: tuple[str, ...] = ()
    code_revision: str = ""
    code_dirty: bool = False
    repeat_group: str = ""
    lineage: str = ""
    evaluations: dict[str, Evaluation] = field(default_factory=dict)
    has_manifest: bool = True
    artifacts: tuple[StoredArtifact, ...] = ()


@dataclass(frozen=True, slots=True)
class Evidence:
    """Everything a gate check weighs for one candidate.

    Attributes:
        candidate: The candidate run.
        incumbent: The incumbent run, when one is named and stored.
        incumbent_run_id: The incumbent named (by the policy or the candidate's evaluation).
        repeats: Other runs of the candidate's repeat group (other seeds and reruns).
        eval_data_as_of_ms: Newest data (latest ``window_end``) of the evaluation dataset
            version's data-quality reports; None when it has none.
        key_sketches: Dataset ref (``uri@version``) -> the merged row-key sketch of its
            data-quality reports, for the evaluation and training datasets that have one
            (:mod:`runwatch.core.gates.sketch`).

    """

    candidate: RunEvidence
    incumbent: RunEvidence | None = None
    incumbent_run_id: str = ""
    repeats: tuple[RunEvidence, ...] = ()
    eval_data_as_of_ms: int | None = None
    key_sketches: dict[str, tuple[int, ...]] = field(default_factory=dict)
