"""The runwatch SDK for training jobs and data pipelines.

``run = runwatch.init(...)`` starts a :class:`~runwatch.client.run.Run`; see
``runwatch.client.data`` for data-quality reports and
``runwatch.client.callbacks`` for framework callbacks.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["DatasetRef", "NullRun", "init", "new_run_id"]


def __getattr__(name: str) -> object:
    """Load ``DatasetRef`` (a dataset version for ``init`` and ``run.evaluation``) lazily."""
    if name == "DatasetRef":
        from runwatch.core.records import DatasetRef

        return DatasetRef
    msg = f"module 'runwatch.client' has no attribute {name!r}"
    raise AttributeError(msg)


def new_run_id() -> str:
    """Generate a run id: ``run-<UTC yyyymmdd-HHMMSS>-<8 hex>``."""
    return "run-" + time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(4)


class NullRun:
    """Stand-in returned when the SDK cannot start (``strict`` off): every call is a no-op.

    Nothing is lost silently: ``init`` logged why (``reason``), and every call
    made on this stand-in is counted in ``counters["dropped_init_failed"]``
    (``finish()`` returns the counters, as a real run's does).
    """

    run_id = ""

    def __init__(self, reason: str = "") -> None:
        self.reason = reason
        self.counters: dict[str, int] = {"dropped_init_failed": 0}

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        self.counters["dropped_init_failed"] += 1
        if name == "data_wait":
            return contextlib.nullcontext
        if name == "finish":
            return lambda *a, **k: dict(self.counters)
        return lambda *a, **k: {}


def _check_schemas(codec: Any) -> None:
    """Refuse a schema set or topic map the SDK cannot publish with.

    Catches a wrong ``RUNWATCH_SCHEMA_DIR`` or ``RUNWATCH_TOPICS_FILE`` at init
    instead of at the first record.

    Raises:
        SchemaLoadError: The schemas lack records the SDK publishes (naming the
            folder and the records).
        TopicMapError: The topic map cannot be read.

    """
    from runwatch.adapters.publisher import default_topics
    from runwatch.core.codec import SchemaLoadError
    from runwatch.core.records import RECORD_TYPES

    default_topics()

    absent = sorted(set(RECORD_TYPES) - set(codec.schemas.current))
    if absent:
        from runwatch.resources import avro_schema_dir

        msg = (f"schema directory {avro_schema_dir()} lacks the schemas of {', '.join(absent)} "
               "(check RUNWATCH_SCHEMA_DIR)")
        raise SchemaLoadError(msg)


def _count(env: Mapping[str, str], *names: str) -> int:
    for name in names:
        raw = (env.get(name) or "").strip()
        if raw.isdigit():
            return int(raw)
    return 1


def shared_run_id(env: Mapping[str, str]) -> str:
    """Return the run id every rank of a distributed job derives alike, else a new one.

    Each rank of a distributed job calls :func:`init`; without a run id given
    (``run_id=``, ``RUNWATCH_RUN_ID``) each would start a run of its own (N
    manifests, N alerts for one NaN, N times the GPU-hours). So a rank takes:

    - under torchrun, ``torch-<TORCHELASTIC_RUN_ID>`` (the rendezvous id, the
      same on every rank and kept across torchrun's restarts; not torchrun's
      placeholder ``none``);
    - in a Slurm job of several tasks, ``slurm-<SLURM_CLUSTER_NAME>-<SLURM_JOB_ID>``,
      the id the Slurm hooks in ``infra/slurm`` use (kept across a requeue);
    - otherwise a new id (:func:`new_run_id`), with a warning when
      ``WORLD_SIZE`` says the process is one of several ranks.
    """
    torch_id = (env.get("TORCHELASTIC_RUN_ID") or "").strip()
    if torch_id and torch_id != "none":
        return f"torch-{torch_id}"
    job = (env.get("SLURM_JOB_ID") or "").strip()
    if job and _count(env, "SLURM_NTASKS", "SLURM_NPROCS") > 1:
        return f"slurm-{(env.get('SLURM_CLUSTER_NAME') or '').strip() or 'cluster'}-{job}"
    rid = new_run_id()
    if _count(env, "WORLD_SIZE") > 1:
        logger.warning("runwatch: this process is one of %s ranks (WORLD_SIZE) and no run id "
                       "is shared by them: it starts run %s of its own; pass run_id= or set "
                       "RUNWATCH_RUN_ID alike on every rank", env.get("WORLD_SIZE"), rid)
    return rid


def attempt_from_env(env: Mapping[str, str]) -> int:
    """Return the run's 1-based attempt from the environment (0: unknown).

    ``RUNWATCH_ATTEMPT`` is the attempt itself (1-based, as ``JobEvent.attempt``);
    ``SLURM_RESTART_COUNT`` and torchrun's ``TORCHELASTIC_RESTART_COUNT`` count
    restarts from 0, so they are one less than the attempt: a job Slurm requeued
    once runs its second attempt. A value that is not a whole number ≥ 0 is ignored
    (logged): the training job goes on, the attempt unknown.
    """
    for name, offset in (("RUNWATCH_ATTEMPT", 0), ("SLURM_RESTART_COUNT", 1),
                         ("TORCHELASTIC_RESTART_COUNT", 1)):
        raw = (env.get(name) or "").strip()
        if not raw:
            continue
        try:
            value = int(raw)
        except ValueError:
            value = -1
        if value < 0:
            logger.warning("runwatch ignores %s=%r: not a whole number >= 0", name, raw)
            continue
        return value + offset
    return 0


_TOPICS_IGNORED = ("Ignored (counted in run.counters['topics_ignored']): the records go to "
                   "their default topics")


def _refused(problem: str, strict: bool, error: type[Exception], instead: str) -> None:
    """Raise ``error`` naming ``problem`` (``strict``), else log it with what is done instead."""
    if strict:
        msg = f"runwatch.init: {problem}"
        raise error(msg)
    logger.error("runwatch.init: %s. %s", problem, instead)


def _topic_overrides(topics: Mapping[str, str] | None,
                     strict: bool) -> tuple[Mapping[str, str] | None, int]:
    """Return ``topics=`` without the keys that name no topic of the map, and their count.

    Raises:
        ValueError: With ``strict``, when a key names no such topic.

    """
    if not topics:
        return topics, 0
    if not isinstance(topics, Mapping):  # a list of names: the whole run failed to start
        problem = (f"topics= must map a topic's name to the topic to write instead (e.g. "
                   f"{{'rw.learning': 'staging.learning'}}), not {type(topics).__name__}")
        _refused(problem, strict, TypeError, _TOPICS_IGNORED)
        return None, 1
    from runwatch.adapters.publisher import topic_names
    from runwatch.core.topics import unknown_overrides

    written = topic_names()
    problem = unknown_overrides(topics, written)
    if problem is None:
        return topics, 0
    _refused(problem, strict, ValueError, _TOPICS_IGNORED)
    kept = {k: v for k, v in topics.items() if k in written}
    return kept, len(topics) - len(kept)


def _checked_clock(clock: Callable[[], Any] | None,
                   strict: bool) -> tuple[Callable[[], Any] | None, int]:
    """Return ``clock=`` when it gives plausible epoch milliseconds, else None and 1.

    ``clock=time.time`` (seconds) stamped every record in January 1970: the processor
    refused them all as absurd times, and nothing told the job. A clock that gives no
    number, raises, or is far off (seconds, micro- or nanoseconds) is not used: the
    wall clock stamps the run's records, and an error says why (``strict``: ValueError).
    """
    if clock is None:
        return None, 0
    from runwatch.core.stream.eventtime import unit_mixup

    problem: str | None
    try:
        value = clock()
        ms = float(value) if not isinstance(value, bool | str | bytes) else math.nan
    except Exception as exc:  # the job's own function
        problem = f"clock() raised {type(exc).__name__}: {exc}"
    else:
        mixup = unit_mixup(ms, time.time() * 1000) if math.isfinite(ms) else None
        if not math.isfinite(ms):
            problem = f"clock() returned {value!r:.60}, not epoch milliseconds"
        elif mixup is not None:
            problem = (f"clock() returned {value!r}, {mixup[0]} read as epoch milliseconds "
                       f"({mixup[1]})")
        else:
            problem = None
    if problem is None:
        return clock, 0
    _refused(problem, strict, ValueError, "The clock is not used: the wall clock stamps the "
             "run's records (counted in run.counters['clock_ignored'])")
    return None, 1


def init(
    project: str | None = None,
    *,
    experiment_family: str | None = None,
    team: str | None = None,
    config: Mapping[str, Any] | str | os.PathLike[str] | None = None,
    datasets: Sequence[Any] = (),
    run_id: str | None = None,
    strict: bool = False,
    seed_policy: str | None = None,
    resumed_from: str | None = None,
    parent_run_id: str | None = None,
    labels: Mapping[str, str] | None = None,
    topics: Mapping[str, str] | None = None,
    transport: Any = None,
    kafka: Any = None,
    producer: Any = None,
    capture_lineage: bool = True,
    install_hooks: bool = True,
    queue_max: int = 100_000,
    clock: Callable[[], int] | None = None,
    lineage: Mapping[str, Any] | None = None,
    attempt: int | None = None,
) -> Any:
    """Start a run and publish its RunManifest and JobEvent(running).

    ``RUNWATCH_RUN_ID`` (set by the scheduler hook) wins over ``run_id``.

    Args:
        project: Experiment family (alias of ``experiment_family``).
        experiment_family: Experiment family.
        team: Owning team.
        config: Config mapping or config file path (hashed and recorded).
        datasets: Datasets the run reads: DatasetRef objects, ``uri@version`` or plain uri
            strings, ``{"uri", "version"}`` mappings or ``(uri, version)`` pairs.
        run_id: Run id when the environment gives none (``RUNWATCH_RUN_ID``);
            otherwise the id every rank of a distributed job derives alike
            (:func:`shared_run_id`: torchrun's rendezvous id, a multi-task
            Slurm job's id), else a new one.
        strict: Raise on misuse instead of counting and logging.
        seed_policy: How seeds are chosen (e.g. ``fixed:42``).
        resumed_from: Checkpoint this run resumes from.
        parent_run_id: Run this one derives from.
        labels: Free labels.
        topics: Topic overrides: a topic's name in ``schemas/topics.yaml``
            (``rw.learning``) -> the topic to write instead. A key that is not one
            (``learning``, ``rw.learnig``) is refused: logged as an error naming the
            accepted keys, counted in ``topics_ignored`` and ignored (its records
            would go to their default topics; ``strict``: ``ValueError``).
        transport: A ready transport (tests); built from settings otherwise.
        kafka: KafkaSettings (env ``KAFKA_*`` by default).
        producer: ProducerSettings (env ``RUNWATCH_PRODUCER_*`` by default).
        capture_lineage: Run git/NVML/version probes.
        install_hooks: Chain sys.excepthook, sys.exit, SIGTERM and atexit.
        queue_max: Bound of the in-memory event queue.
        clock: Callable returning UTC epoch milliseconds; stamps every record
            whose call gives no ``now_ms`` (default: the wall clock). Replays
            and simulators pass a virtual clock; see ``Run.step`` for explicit
            step and loader timings.
        lineage: RunManifest fields that replace what the probes find
            (e.g. ``image_digest``, ``code_revision``, ``hardware``,
            ``framework_versions``). Plain mappings are accepted for records
            (``hardware={"gpu_count": 8, ...}``, datasets as strings or
            mappings); a field that cannot be published is left out of the
            manifest, counted in ``lineage_dropped`` and logged (``strict``:
            ``ValueError``), the rest of the manifest is kept.
        attempt: The run's attempt, 1-based as ``JobEvent.attempt`` (1 = the
            first; 0 = unknown); default ``RUNWATCH_ATTEMPT`` (1-based), else
            ``SLURM_RESTART_COUNT`` + 1, else ``TORCHELASTIC_RESTART_COUNT`` + 1
            (both count restarts from 0), else 0.
            An explicit value wins over the environment; an environment value
            that is not a whole number is ignored with a warning.

    Returns:
        The :class:`~runwatch.client.run.Run` (a :class:`NullRun` if it cannot start).

    """
    own_transport = None
    orphans: list[Any] = []
    try:
        from runwatch.adapters.kafka import KafkaTransport, ProducerSettings, adopt_orphans
        from runwatch.adapters.publisher import Publisher
        from runwatch.adapters.settings import KafkaSettings
        from runwatch.client.run import Run

        rid = os.environ.get("RUNWATCH_RUN_ID") or run_id or shared_run_id(os.environ)
        rank = os.environ.get("RANK") or os.environ.get("SLURM_PROCID") or "0"
        if transport is None:
            kafka, producer = kafka or KafkaSettings(), producer or ProducerSettings()
            name = f"sdk-{rid}-r{rank}"
            transport = own_transport = KafkaTransport(kafka, producer, name=name)
            try:  # what earlier jobs left in their spools when they exited during an outage,
                # and what `runwatch emit` left (a pod's init container spools its scheduled
                # event in the volume the job's container mounts, and no emit runs again)
                orphans = [*adopt_orphans(kafka, producer, prefix="sdk-", exclude=name),
                           *adopt_orphans(kafka, producer, prefix="emit", exclude=name)]
            except Exception:
                logger.exception("runwatch could not open the spools earlier jobs left")
        if attempt is None:
            attempt = attempt_from_env(os.environ)
        topics, ignored = _topic_overrides(topics, strict)
        clock, clock_ignored = _checked_clock(clock, strict)
        publisher = Publisher(transport, kind="sdk", topics=topics, clock=clock)
        _check_schemas(publisher.codec)
        run = Run(
            publisher,
            run_id=rid,
            experiment_family=experiment_family or project,
            team=team,
            config=config,
            datasets=datasets,
            seed_policy=seed_policy,
            resumed_from=resumed_from,
            parent_run_id=parent_run_id,
            labels=labels,
            attempt=attempt,
            strict=strict,
            queue_max=queue_max,
            capture_lineage=capture_lineage,
            install_hooks=install_hooks,
            clock=clock,
            lineage=lineage,
            orphans=orphans,
        )
        if ignored:
            run.counters["topics_ignored"] += ignored
        if clock_ignored:
            run.counters["clock_ignored"] += clock_ignored
        return run
    except Exception as exc:
        if own_transport is not None:  # nothing was published: stop its thread
            with contextlib.suppress(Exception):
                own_transport.close(0)
            for t in orphans:
                with contextlib.suppress(Exception):
                    t.close(0)
        if strict:
            raise
        from runwatch.core.codec import SchemaLoadError
        from runwatch.core.topics import TopicMapError
        from runwatch.resources import ResourceError

        reason = f"{type(exc).__name__}: {exc}"
        # A configuration error: its one line says it all; anything else gets its traceback.
        if isinstance(exc, SchemaLoadError | TopicMapError | ResourceError):
            logger.error("runwatch.init failed, telemetry is OFF for this process (every call "
                         "is dropped and counted in run.counters['dropped_init_failed']): %s",
                         reason)
        else:
            logger.exception("runwatch.init failed, telemetry is OFF for this process (every "
                             "call is dropped and counted in run.counters['dropped_init_failed'])")
        return NullRun(reason)
