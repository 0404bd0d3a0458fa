"""Data-quality reports for data pipelines.

``report(dataset, version, partition, table, baseline="ref")`` computes schema
conformance, null rates, duplicates, ranges, label balance, freshness and drift
(PSI, KS) against a stored baseline and publishes a DataQualityReport.

Baselines live as JSON files under a directory (``RUNWATCH_BASELINE_DIR``,
default ``~/.cache/runwatch/baselines``): ``<dir>/<dataset>/<name>.json``. A
named baseline that does not exist yet is created from the batch at hand.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from runwatch.core.records import DataQualityReport, DriftSummary, FeatureStats
from runwatch.core.signals import dataquality as dq

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
        features=tuple(
            FeatureStats(
                name=c.name,
                null_pct=c.null_pct,
                min=c.min,
                max=c.max,
                mean=c.mean,
                psi=c.psi,
                ks=c.ks,
            )
            for c in stats.columns
        ),
        duplicate_rows=stats.duplicate_rows,
        label_distribution=stats.label_distribution,
        freshness_lag_ms=stats.freshness_lag_ms,
        baseline=baseline,
        drift=DriftSummary(
            drifted_features=stats.drifted,
            max_psi=stats.max_psi,
            max_ks=stats.max_ks,
            psi_threshold=psi_threshold,
        )
        if stats.max_psi is not None
        else None,
        rejected_samples=rejected_samples,
    )


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

    """
    if now_ms is None:
        clock = clock or getattr(publisher, "clock", None)
        now_ms = clock() if clock is not None else int(time.time() * 1000)
    now_ms = int(now_ms)
    base_name: str | None = None
    base: Mapping[str, Any] | None = None
    if isinstance(table_or_stats, dq.QualityStats):
        stats = table_or_stats
    else:
        cols = to_columns(table_or_stats)
        if isinstance(baseline, str):
            base_name = baseline
            base = load_baseline(dataset, baseline, baseline_directory)
            if base is None:
                base = dq.make_baseline(cols, label, timestamp=timestamp)
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
        )
    own = publisher is None
    if own:
        from runwatch.adapters.kafka import KafkaTransport
        from runwatch.adapters.publisher import Publisher

        publisher = Publisher(
            KafkaTransport(name=f"data-{_safe(dataset)}"), kind="sdk", topics=topics
        )
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
    )
    publisher.publish([rec])
    if own:
        publisher.transport.close(flush_timeout)
    return rec
