"""Data-quality reports and stage boundary events for data pipelines.

Size: the data-pipeline SDK: reports and stages share baselines, statistics and publishing.

``report(dataset, version, partition, table, baseline="ref")`` computes schema
conformance, null rates, duplicates, ranges, label balance, freshness and drift
(PSI, KS) against a stored baseline and publishes a DataQualityReport.

``with stage(name=..., code_version=..., inputs=[...], output=...) as st:``
times an ingestion or transformation stage, takes its row counts and output
statistics (``st.rows_in``, ``st.rows_out``, ``st.compare(table)``: the same
statistics and comparison with a reference as ``report``) and publishes a
StageEvent when the block ends, also when it raises (outcome ``failed`` with
the exception; the exception still propagates). Nothing the SDK does in a
stage raises into the pipeline: its own failures are logged and counted.

Baselines live as JSON files under a directory (``RUNWATCH_BASELINE_DIR``,
default ``~/.cache/runwatch/baselines``): ``<dir>/<dataset>/<name>.json``. A
named baseline that does not exist yet is created from the batch at hand.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from runwatch.client.lineage import dataset_ref, optional_text
from runwatch.core.gates import sketch as keysketch
from runwatch.core.records import (
    DataQualityReport,
    DriftSummary,
    FeatureStats,
    StageEvent,
)
from runwatch.core.signals import dataquality as dq
from runwatch.core.stream.eventtime import unit_mixup

logger = logging.getLogger(__name__)


def baseline_dir(path: str | os.PathLike[str] | None = None) -> Path:
    """Return the baseline directory (argument, env, or the default)."""
    if path is not None:
        return Path(path)
    env = os.environ.get("RUNWATCH_BASELINE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "runwatch" / "baselines"


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "_"


def baseline_path(dataset: str, name: str, directory: str | os.PathLike[str] | None = None) -> Path:
    """Where a named baseline of a dataset is stored."""
    return baseline_dir(directory) / _safe(dataset) / f"{_safe(name)}.json"


def save_baseline(
    dataset: str, name: str, baseline: Mapping[str, Any], directory: Any = None
) -> Path:
    """Store a baseline atomically.

    Args:
        dataset: Dataset id.
        name: Baseline name.
        baseline: From :func:`runwatch.core.signals.dataquality.make_baseline`.
        directory: Baseline directory.

    Returns:
        The file written.

    """
    path = baseline_path(dataset, name, directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(baseline))
    tmp.replace(path)
    return path


def load_baseline(dataset: str, name: str, directory: Any = None) -> dict[str, Any] | None:
    """Load a named baseline, None when absent."""
    path = baseline_path(dataset, name, directory)
    try:
        return dict(json.loads(path.read_text()))
    except FileNotFoundError:
        return None


def to_columns(table: Any) -> dict[str, Sequence[Any]]:
    """Normalise a table to ``name -> values``.

    Accepts a mapping of columns, a list of row dicts, a pandas DataFrame or a
    pyarrow Table.

    Args:
        table: The batch.

    Returns:
        The columns.

    Raises:
        TypeError: Anything else.

    """
    if hasattr(table, "to_pydict"):
        return dict(table.to_pydict())
    if hasattr(table, "columns") and hasattr(table, "__getitem__") and hasattr(table, "to_dict"):
        labels = [str(c) for c in table.columns]
        dup = sorted({n for n in labels if labels.count(n) > 1})
        if dup:  # table[c] would be a frame, not a column
            msg = f"cannot read a table with duplicate column names: {', '.join(dup)}"
            raise TypeError(msg)
        return {str(c): table[c].tolist() for c in table.columns}
    if isinstance(table, Mapping):
        return {str(k): list(v) if not hasattr(v, "dtype") else v for k, v in table.items()}
    if isinstance(table, Sequence) and all(isinstance(r, Mapping) for r in table):
        names: dict[str, None] = {}
        for r in table:
            names.update(dict.fromkeys(r))
        return {n: [r.get(n) for r in table] for n in names}
    msg = f"cannot read a table from {type(table).__name__}"
    raise TypeError(msg)


def compute_stats(
    dataset: str,
    table_or_stats: Any,
    *,
    now_ms: int,
    baseline: str | Mapping[str, Any] | None = None,
    label: str | None = None,
    schema: Mapping[str, str] | None = None,
    timestamp: str | None = None,
    baseline_directory: str | os.PathLike[str] | None = None,
    psi_threshold: float = dq.PSI_THRESHOLD,
    key: str | None = None,
) -> tuple[dq.QualityStats, str | None]:
    """Compute a batch's statistics and its comparison with a baseline (see :func:`report`).

    Returns:
        (statistics, baseline name or None).

    Raises:
        TypeError: The batch is no table (:func:`to_columns`).

    """
    if isinstance(table_or_stats, dq.QualityStats):
        return table_or_stats, baseline if isinstance(baseline, str) else None
    base_name: str | None = None
    base: Mapping[str, Any] | None = None
    cols = to_columns(table_or_stats)
    for arg, column, left_out in ((label, "label", "label balance"),
                                  (timestamp, "timestamp", "freshness")):
        if arg is not None and arg not in cols:  # a typo, or a column renamed upstream
            logger.warning("data quality of %s: no %s column %r in the batch; no %s reported",
                           dataset, column, arg, left_out)
    if isinstance(baseline, str):
        base_name = baseline
        base = load_baseline(dataset, baseline, baseline_directory)
        if base is None:
            base = dq.make_baseline(cols, label, timestamp=timestamp, key=key)
            path = save_baseline(dataset, baseline, base, baseline_directory)
            logger.warning(
                "baseline %s of %s did not exist: stored this batch at %s",
                baseline,
                dataset,
                path,
            )
    elif baseline is not None:
        base, base_name = baseline, "inline"
    stats = dq.compute(
        cols,
        now_ms=now_ms,
        schema=schema,
        label=label,
        timestamp=timestamp,
        baseline=base,
        psi_threshold=psi_threshold,
        key=key,
    )
    return stats, base_name


def _short_lived(dataset: str, topics: Mapping[str, str] | None) -> Any:
    """A publisher on a transport of its own (closed by the caller)."""
    from runwatch.adapters.kafka import KafkaTransport
    from runwatch.adapters.publisher import Publisher

    return Publisher(KafkaTransport(name=f"data-{_safe(dataset)}"), kind="sdk", topics=topics)


def _features(stats: dq.QualityStats) -> tuple[FeatureStats, ...]:
    return tuple(
        FeatureStats(name=c.name, null_pct=c.null_pct, min=c.min, max=c.max, mean=c.mean,
                     psi=c.psi, ks=c.ks)
        for c in stats.columns
    )


def _drift(stats: dq.QualityStats, psi_threshold: float) -> DriftSummary | None:
    if stats.max_psi is None:
        return None
    return DriftSummary(drifted_features=stats.drifted, max_psi=stats.max_psi,
                        max_ks=stats.max_ks, psi_threshold=psi_threshold)


def build_report(
    meta: Mapping[str, Any],
    dataset: str,
    version: str | None,
    partition: str | None,
    stats: dq.QualityStats,
    *,
    now_ms: int,
    baseline: str | None,
    window_start_ms: int | None = None,
    window_end_ms: int | None = None,
    rejected_samples: int = 0,
    psi_threshold: float = dq.PSI_THRESHOLD,
    key_sketch: Sequence[int] = (),
) -> DataQualityReport:
    """Turn statistics into a DataQualityReport record."""
    return DataQualityReport(
        **meta,
        dataset_uri=dataset,
        dataset_version=version,
        partition=partition,
        window_start_ms=window_start_ms if window_start_ms is not None else now_ms,
        window_end_ms=window_end_ms if window_end_ms is not None else now_ms,
        row_count=stats.row_count,
        schema_failures=stats.schema_failures,
        features=_features(stats),
        duplicate_rows=stats.duplicate_rows,
        label_distribution=stats.label_distribution,
        freshness_lag_ms=stats.freshness_lag_ms,
        baseline=baseline,
        drift=_drift(stats, psi_threshold),
        rejected_samples=rejected_samples,
        key_sketch=tuple(key_sketch),
    )


def _dataset(dataset: Any) -> str:
    """The dataset argument of :func:`report`: text that is not blank."""
    if not isinstance(dataset, str):
        msg = ("data.report: dataset must be text (a dataset id or URI), "
               f"not {type(dataset).__name__}")
        raise TypeError(msg)
    if not dataset.strip():  # an unset environment variable, say: no dataset to report on
        msg = f"data.report: dataset is empty ({dataset!r}): name the dataset id or URI"
        raise ValueError(msg)
    return dataset


def _name_arg(name: str, value: Any, must: str = "be text or an integer") -> str | None:
    """A version, partition or run id of :func:`report`: text, None, or an integer as text.

    ``data.report(uri, 3, 7, df)`` could not be encoded: the report was lost at publish
    with one ERROR line, and the runs reading the dataset paged its report missing.
    A ``label``, ``timestamp`` or ``key`` column is named the same way (``must``: what the
    error says it must do): an integer names the column as :func:`to_columns` names it (a
    frame's column ``0`` is ``"0"``); a list raised ``unhashable type`` from deep inside.
    """
    if value is None or isinstance(value, str):
        return value
    if _integral(value):
        return str(int(value))
    msg = f"data.report: {name} must {must}, not {type(value).__name__}"
    raise TypeError(msg)


def _epoch_ms(value: Any) -> int | None:
    """Epoch ms given as an int, a finite float (floored) or a numpy integer; else None."""
    if isinstance(value, float) and math.isfinite(value):
        return math.floor(value)
    return int(value) if _integral(value) else None


def _integral(value: Any) -> bool:
    """An integer (Python's, or another library's: numpy's int64...), not a bool."""
    return hasattr(value, "__index__") and not isinstance(value, bool | float | str)


def _count(name: str, value: Any) -> int:
    """A count of :func:`report`: a whole number, given as int, integral float or numeric text."""
    n: Any = value
    if isinstance(value, str):
        try:
            n = float(value.strip()) if value.strip() else None
        except ValueError:
            n = None
    if isinstance(n, float) and math.isfinite(n) and n.is_integer():
        n = int(n)
    elif _integral(n):
        n = int(n)
    if not isinstance(n, int) or isinstance(n, bool):
        msg = f"data.report: {name} must be a whole number, not {value!r}"
        raise TypeError(msg)
    if n < 0:
        msg = f"data.report: {name} must not be negative, not {value!r}"
        raise ValueError(msg)
    return n


def report(
    dataset: str,
    version: str | None,
    partition: str | None,
    table_or_stats: Any,
    *,
    baseline: str | Mapping[str, Any] | None = None,
    label: str | None = None,
    schema: Mapping[str, str] | None = None,
    timestamp: str | None = None,
    rejected_samples: int = 0,
    run_id: str | None = None,
    key: str | None = None,
    baseline_directory: str | os.PathLike[str] | None = None,
    publisher: Any = None,
    topics: Mapping[str, str] | None = None,
    psi_threshold: float = dq.PSI_THRESHOLD,
    flush_timeout: float = 10.0,
    now_ms: int | None = None,
    clock: Callable[[], int] | None = None,
) -> DataQualityReport:
    """Compute and publish a data-quality report for one batch.

    Args:
        dataset: Dataset id or URI (the topic key).
        version: Dataset version.
        partition: Partition (e.g. ``date=2026-11-29``).
        table_or_stats: The batch (see :func:`to_columns`) or precomputed
            :class:`runwatch.core.signals.dataquality.QualityStats`.
        baseline: Baseline name (stored under the baseline directory; created
            from this batch when absent) or a baseline mapping.
        label: Label column for label balance.
        schema: Expected types per column (``float``, ``int``, ``str``, ``bool``, ``?`` = nullable).
        timestamp: Event-time column in epoch ms, for freshness. It is never
            compared with the baseline for drift (event times move forward
            with every batch by design).
        rejected_samples: Samples the pipeline rejected before this batch.
        run_id: Run this batch feeds, when known.
        key: Column of the batch's row keys: a bottom-k sketch of them is reported
            (``key_sketch``), so a release gate can check that evaluation data is
            disjoint from training data (:mod:`runwatch.core.gates.sketch`). A key
            column the batch lacks is logged and no sketch is sent. Keys are never
            compared with the baseline for drift (identifiers are no feature).
        baseline_directory: Baseline directory override.
        publisher: A Publisher; a short-lived transport is used when None.
        topics: Topic overrides when no publisher is given.
        psi_threshold: PSI drift threshold.
        flush_timeout: Seconds to wait for delivery with a short-lived transport.
        now_ms: The report's time (UTC epoch ms): stamps ``emitted_at_ms``, is
            the default window and the reference of the freshness lag.
            Default: ``clock``, else the publisher's clock, else the wall clock.
        clock: Callable returning UTC epoch ms, used when ``now_ms`` is None
            (replays and simulators, as for :func:`runwatch.init`).

    Returns:
        The published report.

    Raises:
        TypeError: A dataset that is no text, a version, partition or run id that is
            neither text nor an integer, a ``rejected_samples`` that is no whole
            number, a batch that is no table (:func:`to_columns`), a schema that is
            no mapping of column names to type names.
        ValueError: An empty dataset, a negative ``rejected_samples``, columns of
            different lengths, an unknown schema type.

    """
    dataset = _dataset(dataset)
    version = _name_arg("version", version)
    partition = _name_arg("partition", partition)
    run_id = _name_arg("run_id", run_id)
    rejected_samples = _count("rejected_samples", rejected_samples)
    column = "name a column (text)"
    label, timestamp = _name_arg("label", label, column), _name_arg("timestamp", timestamp, column)
    key = _name_arg("key", key, column)
    if now_ms is None:
        clock = clock or getattr(publisher, "clock", None)
        now_ms = clock() if clock is not None else int(time.time() * 1000)
    when = _epoch_ms(now_ms)
    if when is None:
        msg = f"data.report: now_ms must be epoch milliseconds (a number), not {now_ms!r:.80}"
        raise TypeError(msg)
    mixup = unit_mixup(when, time.time() * 1000)
    if mixup is not None:  # the processor refused the report as an absurd time, unheard
        msg = (f"data.report: the report's time {when} (now_ms=, clock= or the publisher's "
               f"clock) is not plausible epoch milliseconds ({mixup[1]})")
        raise ValueError(msg)
    now_ms = when
    stats, base_name = compute_stats(
        dataset, table_or_stats, now_ms=now_ms, baseline=baseline, label=label, schema=schema,
        timestamp=timestamp, baseline_directory=baseline_directory, psi_threshold=psi_threshold,
        key=key,
    )
    sketch: tuple[int, ...] = ()
    if key is not None and not isinstance(table_or_stats, dq.QualityStats):
        values = to_columns(table_or_stats).get(key)
        if values is None:
            logger.warning("data.report %s: no key column %r; no key sketch sent", dataset, key)
        else:
            sketch = keysketch.sketch(values)
    own = publisher is None
    if own:
        publisher = _short_lived(dataset, topics)
    meta = publisher.meta(now_ms)
    meta["run_id"] = run_id
    rec = build_report(
        meta,
        dataset,
        version,
        partition,
        stats,
        now_ms=now_ms,
        baseline=base_name,
        rejected_samples=rejected_samples,
        psi_threshold=psi_threshold,
        key_sketch=sketch,
    )
    publisher.publish([rec])
    if own:
        publisher.transport.close(flush_timeout)
    return rec




class Stage:
    """One run of an ingestion or transformation stage; see :func:`stage`.

    Set ``rows_in``, ``rows_out`` (and, when known only at the end, ``output``
    or ``duration_ms``) inside the block; :meth:`compare` adds the output's
    statistics and their comparison with a reference distribution. After the
    block, ``record`` is the published StageEvent (None if it could not be
    built) and ``counters`` says what went wrong, if anything.
    """

    def __init__(self, name: str, *, code_version: str | None, inputs: Sequence[Any],
                 output: Any, window: tuple[int, int] | None, run_id: str | None,
                 labels: Mapping[str, str] | None, publisher: Any,
                 topics: Mapping[str, str] | None, clock: Callable[[], int] | None,
                 now_ms: int | None, baseline_directory: str | os.PathLike[str] | None,
                 psi_threshold: float, flush_timeout: float) -> None:
        """Prepare a stage (use :func:`stage`)."""
        self.name = str(name)
        self.code_version = code_version
        self.inputs = list(inputs)
        self.output = output
        self.window = window
        self.run_id = run_id
        self.labels = {str(k): str(v) for k, v in (labels or {}).items()}
        self.publisher = publisher
        self.topics = topics
        self.clock = clock or getattr(publisher, "clock", None)
        self.counters: dict[str, int] = {"published": 0, "errors": 0}
        if now_ms is not None and _epoch_ms(now_ms) is None:
            # the stage event was lost at exit (int() of it raised, logged as an error)
            self.counters["errors"] += 1
            logger.warning("runwatch stage %s: now_ms %r is not epoch milliseconds: the clock "
                           "stamps the stage (counted in errors)", self.name, now_ms)
            now_ms = None
        self.started_at_ms = None if now_ms is None else _epoch_ms(now_ms)
        self._explicit = now_ms is not None and self.clock is None
        self.baseline_directory = baseline_directory
        self.psi_threshold = psi_threshold
        self.flush_timeout = flush_timeout
        self.rows_in: int | None = None
        self.rows_out: int | None = None
        self.duration_ms: float | None = None
        self.stats: dq.QualityStats | None = None
        self.baseline: str | None = None
        self.record: StageEvent | None = None
        self._t0 = 0.0

    def _now(self) -> int:
        return int(self.clock()) if self.clock is not None else int(time.time() * 1000)

    def __enter__(self) -> Stage:
        """Start the clock."""
        if self.started_at_ms is None:
            self.started_at_ms = self._now()
        self._t0 = time.perf_counter()
        return self

    def compare(self, table_or_stats: Any, *, baseline: str | Mapping[str, Any] | None = "ref",
                label: str | None = None, schema: Mapping[str, str] | None = None,
                timestamp: str | None = None) -> dq.QualityStats | None:
        """Compute the output's statistics and compare them with a reference distribution.

        The reference is a baseline of the output dataset as for :func:`report`
        (a name stored under the baseline directory, created from this batch
        when absent, or a mapping). Sets ``rows_out`` when it is not set.

        Returns:
            The statistics, or None when they cannot be computed (logged and
            counted in ``counters["errors"]``; the pipeline goes on).

        """
        try:
            uri = dataset_ref(self.output).uri
            self.stats, self.baseline = compute_stats(
                uri, table_or_stats, now_ms=self._now(), baseline=baseline, label=label,
                schema=schema, timestamp=timestamp, baseline_directory=self.baseline_directory,
                psi_threshold=self.psi_threshold,
            )
        except Exception:
            self.counters["errors"] += 1
            logger.exception("runwatch stage %s: cannot compute the output statistics", self.name)
            return None
        if self.rows_out is None:
            self.rows_out = self.stats.row_count
        return self.stats

    def _build(self, failure: BaseException | None, duration_ms: float) -> StageEvent:
        # stamped at the stage's end: an explicit start without a clock ends duration later
        end_ms = (int(self.started_at_ms or 0) + int(duration_ms) if self._explicit
                  else self._now())
        out = dataset_ref(self.output)
        inputs = []
        for ref in self.inputs:
            try:
                inputs.append(dataset_ref(ref))
            except ValueError as exc:
                self.counters["errors"] += 1
                logger.warning("runwatch stage %s: input left out: %s", self.name, exc)
        start, end = self.window if self.window is not None else (None, None)
        meta = self.publisher.meta(end_ms)
        meta["run_id"] = self.run_id
        stats = self.stats
        return StageEvent(
            **meta, stage=self.name, code_version=optional_text(self.code_version),
            inputs=tuple(inputs),
            dataset_uri=out.uri, dataset_version=out.version, content_hash=out.content_hash,
            window_start_ms=None if start is None else int(start),
            window_end_ms=None if end is None else int(end),
            started_at_ms=int(self.started_at_ms or 0), duration_ms=float(duration_ms),
            rows_in=None if self.rows_in is None else int(self.rows_in),
            rows_out=None if self.rows_out is None else int(self.rows_out),
            outcome="failed" if failure is not None else "succeeded",
            error=None if failure is None else f"{type(failure).__name__}: {failure}"[:2000],
            features=() if stats is None else _features(stats), baseline=self.baseline,
            drift=None if stats is None else _drift(stats, self.psi_threshold),
            labels=self.labels,
        )

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: object) -> None:
        """Publish the stage's event (outcome ``failed`` when the block raised); never raise.

        The block's own exception is not suppressed: it goes on to the pipeline.
        """
        if self.duration_ms is not None:
            duration = float(self.duration_ms)
        elif self.clock is not None:
            duration = float(self._now() - int(self.started_at_ms or 0))
        else:
            duration = (time.perf_counter() - self._t0) * 1000.0
        own = self.publisher is None
        try:
            if own:
                self.publisher = _short_lived(dataset_ref(self.output).uri, self.topics)
            self.record = self._build(ev if et is not None else None, duration)
            self.counters["published"] += self.publisher.publish([self.record])
            if own:
                self.publisher.transport.close(self.flush_timeout)
        except Exception:
            self.counters["errors"] += 1
            logger.exception("runwatch could not publish the stage event of %s", self.name)


def stage(
    name: str,
    *,
    code_version: str | None = None,
    inputs: Sequence[Any] = (),
    output: Any,
    window: tuple[int, int] | None = None,
    run_id: str | None = None,
    labels: Mapping[str, str] | None = None,
    publisher: Any = None,
    topics: Mapping[str, str] | None = None,
    clock: Callable[[], int] | None = None,
    now_ms: int | None = None,
    baseline_directory: str | os.PathLike[str] | None = None,
    psi_threshold: float = dq.PSI_THRESHOLD,
    flush_timeout: float = 10.0,
) -> Stage:
    """Time an ingestion or transformation stage and publish its StageEvent on exit.

    ``with stage(name="dedup", code_version="git:1a2b", inputs=["s3://raw@2026-11-30"],
    output="s3://clean@v7") as st: ...; st.rows_in = n; st.compare(out_table)``.

    Args:
        name: Stage name.
        code_version: Version of the stage's code.
        inputs: Datasets read (see :func:`dataset_ref`: ``uri@version`` strings,
            DatasetRef, mappings, ``(uri, version)``).
        output: The dataset version written (the event's key on ``rw.data``);
            may be replaced inside the block (``st.output = ...``).
        window: Extraction window (start, end) in UTC epoch ms.
        run_id: The training run this stage belongs to, when it runs inside one.
        labels: Free labels.
        publisher: A Publisher; a short-lived transport is used when None.
        topics: Topic overrides when no publisher is given.
        clock: Callable returning UTC epoch ms: stamps the event and, when
            given, times the stage (replays); default the publisher's clock,
            else the wall clock and a monotonic timer.
        now_ms: The stage's start (UTC epoch ms); default the clock. Without a
            clock, the event is then stamped at this start plus the duration.
        baseline_directory: Baseline directory override (for :meth:`Stage.compare`).
        psi_threshold: PSI drift threshold.
        flush_timeout: Seconds to wait for delivery with a short-lived transport.

    Returns:
        The :class:`Stage` context manager.

    """
    return Stage(name, code_version=code_version, inputs=inputs, output=output, window=window,
                 run_id=run_id, labels=labels, publisher=publisher, topics=topics, clock=clock,
                 now_ms=now_ms, baseline_directory=baseline_directory,
                 psi_threshold=psi_threshold, flush_timeout=flush_timeout)
