"""Downsampling and retention rules (``schemas/retention.yaml``) and their DDL.

How the TTL sees retention: materialized views fill ``retention_marks`` (one
row per run: last activity, any alert, any gate decision / registered model).
The ``retained_runs`` dictionary selects the runs that satisfy a rule, and the
raw tables' TTL deletes expired rows only where
``dictGetOrDefault(retained_runs, 'retained', run_id, 0) = 0``; a second TTL
caps retained rows at ``raw.retained_max``. Data-quality reports are published
for a dataset version, mostly without a run id: the ``retained_datasets``
dictionary holds the dataset versions that the manifests of retained runs name,
and a report expires only when neither its run nor its dataset version (nor the
unversioned dataset) is retained. Rollups are materialized views into
AggregatingMergeTree tables holding ``-State`` aggregates, of the rows a
source's ``where`` column admits (``learning_steps``: ``has_loss``, so the
SDK's "no loss" placeholder of a metrics-only step is no sample).

Size: one module because the rules' parser and the DDL it renders change together (a
rule's field is read and written in the same few lines).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

__all__ = [
    "Resolution",
    "RetentionError",
    "RetentionRules",
    "RollupSource",
    "describe_rules",
    "parse_duration",
    "parse_rules",
    "render_retention",
    "rollup_table",
]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
KEY_TYPES = {
    "run_id": "LowCardinality(String)",
    "node": "LowCardinality(String)",
    "gpu_index": "UInt8",
    "dataset_uri": "LowCardinality(String)",
    "team": "LowCardinality(String)",
}


class RetentionError(ValueError):
    """The retention file is malformed."""


@dataclass(frozen=True, slots=True)
class Resolution:
    """One rollup resolution: bucket width and how long rollups are kept."""

    name: str
    interval_s: int
    ttl_s: int


DATASET_TABLES = frozenset({"data_quality_reports"})
"""Raw tables keyed by dataset version: also kept while a retained run reads the version."""


@dataclass(frozen=True, slots=True)
class RollupSource:
    """A raw table that is rolled up.

    Group keys, (non-null) metric columns and the UInt8 column that admits a row into
    the rollup (None: every row).
    """

    table: str
    keys: tuple[str, ...]
    metrics: tuple[str, ...]
    where: str | None = None


@dataclass(frozen=True, slots=True)
class RetentionRules:
    """The effective retention rules (durations in seconds; None = forever)."""

    raw_ttl_s: int
    retained_max_s: int
    raw_tables: tuple[str, ...]
    active_within_s: int
    anomalous: bool
    material: bool
    refresh_s: int
    resolutions: tuple[Resolution, ...]
    quantiles: tuple[float, ...]
    sources: tuple[RollupSource, ...]
    table_ttls: tuple[tuple[str, int | None], ...]

    @property
    def checksum(self) -> str:
        """A stable digest of the rules and their DDL (what ``db migrate`` records).

        A release that renders them otherwise (a new dictionary, a rollup filter) applies
        them again.
        """
        text = repr(self) + "\n" + "\n".join(render_retention(self))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()


def parse_duration(value: object) -> int:
    """Parse ``90d``/``12h``/``30m``/``5s`` (or a bare number of seconds).

    Args:
        value: The duration.

    Returns:
        Seconds (> 0).

    Raises:
        RetentionError: The value is not a positive duration.
    """
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    match = re.fullmatch(r"\s*(\d+)\s*([smhd])\s*", str(value))
    if match is None or int(match.group(1)) <= 0:
        msg = f"bad duration {value!r}: use a positive number with s, m, h or d"
        raise RetentionError(msg)
    return int(match.group(1)) * _UNITS[match.group(2)]


def _ident(value: object, what: str) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[a-z_][a-z0-9_]*", value):
        msg = f"{what} {value!r} is not a lower-case identifier"
        raise RetentionError(msg)
    return value


def _resolution_name(value: object) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[a-z0-9_]+", value):
        msg = f"resolution name {value!r} must be lower-case letters, digits or _"
        raise RetentionError(msg)
    return value


def _section(doc: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = doc.get(key)
    if not isinstance(value, Mapping):
        msg = f"retention rules need a {key!r} mapping"
        raise RetentionError(msg)
    return value


def parse_rules(text: str) -> RetentionRules:
    """Parse the retention YAML.

    Args:
        text: Content of ``schemas/retention.yaml``.

    Returns:
        The validated rules.

    Raises:
        RetentionError: A section, duration, name or key is missing or invalid.
    """
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        msg = f"retention rules are not valid YAML: {exc}"
        raise RetentionError(msg) from exc
    if not isinstance(doc, Mapping):
        msg = "retention rules must be a YAML mapping"
        raise RetentionError(msg)
    raw, keep, roll = _section(doc, "raw"), _section(doc, "retained_runs"), _section(doc, "rollups")
    resolutions = tuple(
        Resolution(
            name=_resolution_name(r["name"]),
            interval_s=parse_duration(r["interval"]),
            ttl_s=parse_duration(r["ttl"]),
        )
        for r in roll.get("resolutions", [])
    )
    sources: list[RollupSource] = []
    for table, spec in _section(roll, "sources").items():
        keys = tuple(_ident(k, "rollup key") for k in spec.get("keys", []))
        unknown = [k for k in keys if k not in KEY_TYPES]
        if unknown:
            msg = f"rollup keys {unknown} of {table!r} are unknown; known: {sorted(KEY_TYPES)}"
            raise RetentionError(msg)
        metrics = tuple(_ident(m, "rollup metric") for m in spec.get("metrics", []))
        if not metrics:
            msg = f"rollup source {table!r} names no metric"
            raise RetentionError(msg)
        where = spec.get("where")
        sources.append(RollupSource(_ident(table, "table"), keys, metrics,
                                    None if where is None else _ident(where, "rollup where")))
    quantiles = tuple(float(q) for q in roll.get("quantiles", [0.5, 0.9, 0.99]))
    if any(not 0.0 < q < 1.0 for q in quantiles):
        msg = f"quantiles {quantiles} must lie strictly between 0 and 1"
        raise RetentionError(msg)
    table_ttls = tuple(
        (_ident(t, "table"), None if str(v) == "forever" else parse_duration(v))
        for t, v in (doc.get("tables") or {}).items()
    )
    return RetentionRules(
        raw_ttl_s=parse_duration(raw.get("ttl", "7d")),
        retained_max_s=parse_duration(raw.get("retained_max", "365d")),
        raw_tables=tuple(_ident(t, "table") for t in raw.get("tables", [])),
        active_within_s=parse_duration(keep.get("active_within", "3d")),
        anomalous=bool(keep.get("anomalous", True)),
        material=bool(keep.get("material", True)),
        refresh_s=parse_duration(keep.get("refresh", "60s")),
        resolutions=resolutions,
        quantiles=quantiles,
        sources=tuple(sources),
        table_ttls=table_ttls,
    )


def rollup_table(source: str, resolution: str) -> str:
    """Return the name of a rollup table, e.g. ``gpu_samples_1m``."""
    return f"{source}_{resolution}"


def _retained_query(rules: RetentionRules, columns: str = "run_id") -> str:
    """The query of the retained runs' ids (and ``columns``, each a fixed expression)."""
    conds = [f"max(last_active) >= now64(3) - INTERVAL {rules.active_within_s} SECOND"]
    if rules.anomalous:
        conds.append("max(anomalous) = 1")
    if rules.material:
        conds.append("max(material) = 1")
    having = " OR ".join(conds)  # fixed identifiers and numbers only
    return (f"SELECT {columns} FROM ${{db}}.retention_marks "  # noqa: S608
            f"GROUP BY run_id HAVING {having}")


def _dictionary(rules: RetentionRules) -> str:
    query = _retained_query(rules, "run_id, toUInt8(1) AS retained")
    return (
        "CREATE OR REPLACE DICTIONARY ${db}.retained_runs\n"
        "(run_id String, retained UInt8 DEFAULT 0)\nPRIMARY KEY run_id\n"
        f"SOURCE(CLICKHOUSE(QUERY '{query}'))\n"
        f"LIFETIME(MIN 0 MAX {rules.refresh_s})\nLAYOUT(COMPLEX_KEY_HASHED())"
    )


def _dataset_dictionary(rules: RetentionRules) -> str:
    """The dataset versions that the manifests (any version) of retained runs name.

    ``manifest_datasets`` (migration 0060) is a view of ``run_manifests``, one row per
    dataset version a manifest names (an unversioned dataset: version ``''``).

    Data-quality reports are published per dataset version, mostly without a run id
    (``data.report`` of a pipeline): the raw TTL of ``DATASET_TABLES`` asks this
    dictionary too, so the reports behind a retained run stay with its other rows.
    """
    runs = _retained_query(rules)  # fixed identifiers and numbers only
    query = (
        "SELECT dataset_uri, dataset_version, toUInt8(1) AS retained "  # noqa: S608
        "FROM ${db}.manifest_datasets WHERE run_id IN (" + runs + ") "
        "GROUP BY dataset_uri, dataset_version"
    )
    return (
        "CREATE OR REPLACE DICTIONARY ${db}.retained_datasets\n"
        "(dataset_uri String, dataset_version String, retained UInt8 DEFAULT 0)\n"
        "PRIMARY KEY dataset_uri, dataset_version\n"
        f"SOURCE(CLICKHOUSE(QUERY '{query}'))\n"
        f"LIFETIME(MIN 0 MAX {rules.refresh_s})\nLAYOUT(COMPLEX_KEY_HASHED())"
    )


def raw_ttl_expression(rules: RetentionRules, table: str = "") -> str:
    """Return the TTL clause of a raw table (routine rows expire, retained rows stay).

    A table of ``DATASET_TABLES`` keeps a row also while a retained run's manifest
    names its dataset version, or its dataset without a version.
    """
    retained = (
        "dictGetOrDefault('${db}.retained_runs', 'retained', tuple(toString(run_id)), toUInt8(0))"
        " = 0"
    )
    if table in DATASET_TABLES:
        for version in ("toString(dataset_version)", "''"):
            retained += (
                " AND dictGetOrDefault('${db}.retained_datasets', 'retained', "
                f"tuple(toString(dataset_uri), {version}), toUInt8(0)) = 0"
            )
    return (
        f"toDateTime(ts) + INTERVAL {rules.raw_ttl_s} SECOND DELETE WHERE {retained}, "
        f"toDateTime(ts) + INTERVAL {rules.retained_max_s} SECOND DELETE"
    )


def _rollup(src: RollupSource, res: Resolution, quantiles: tuple[float, ...]) -> list[str]:
    table = rollup_table(src.table, res.name)
    qs = ", ".join(repr(q) for q in quantiles)
    cols = [f"    {k} {KEY_TYPES[k]}" for k in src.keys]
    cols += [
        "    bucket DateTime('UTC') CODEC(DoubleDelta, ZSTD(1))",
        "    samples AggregateFunction(count)",
    ]
    sel = [
        *src.keys,
        f"toDateTime(toStartOfInterval(ts, INTERVAL {res.interval_s} SECOND), 'UTC') AS bucket",
        "countState() AS samples",
    ]
    for m in src.metrics:
        for fn in ("min", "max", "avg"):
            cols.append(f"    {m}_{fn} AggregateFunction({fn}, Float64)")
            sel.append(f"{fn}State(toFloat64({m})) AS {m}_{fn}")
        cols.append(f"    {m}_q AggregateFunction(quantiles({qs}), Float64)")
        sel.append(f"quantilesState({qs})(toFloat64({m})) AS {m}_q")
    order = ", ".join([*src.keys, "bucket"])
    ttl = f"bucket + INTERVAL {res.ttl_s} SECOND"
    where = f"\nWHERE {src.where}" if src.where else ""
    select = (f"SELECT {', '.join(sel)}\nFROM ${{db}}.{src.table}{where}\n"
              f"GROUP BY {', '.join([*src.keys, 'bucket'])}")
    create = (
        f"CREATE TABLE IF NOT EXISTS ${{db}}.{table}\n(\n" + ",\n".join(cols) + "\n)\n"
        f"ENGINE = AggregatingMergeTree\nPARTITION BY toYYYYMM(bucket)\nORDER BY ({order})\n"
        f"TTL {ttl}\nSETTINGS non_replicated_deduplication_window = 1000"
    )
    view = (f"CREATE MATERIALIZED VIEW IF NOT EXISTS ${{db}}.{table}_mv TO ${{db}}.{table} "
            f"AS\n{select}")
    # a view made by an older release keeps its first query (IF NOT EXISTS): MODIFY QUERY
    # gives it the current one (the filter of `where`) without a gap in ingestion
    modify = f"ALTER TABLE ${{db}}.{table}_mv MODIFY QUERY\n{select}"
    return [create, f"ALTER TABLE ${{db}}.{table} MODIFY TTL {ttl}", view, modify]


def rollup_signatures(rules: RetentionRules) -> dict[str, tuple[str, ...]]:
    """Return what each rollup view's stored definition must contain, by view name.

    ClickHouse keeps a view's query as first created (``CREATE ... IF NOT EXISTS``
    changes nothing): these are the fragments, as the server normalizes them, that
    say whether an existing rollup has the rules' bucket width and quantiles.
    """
    qs = ", ".join(repr(q) for q in rules.quantiles)
    return {f"{rollup_table(src.table, res.name)}_mv": (
                f"toIntervalSecond({res.interval_s})",
                *([f"quantilesState({qs})"] if src.metrics else []))
            for src in rules.sources for res in rules.resolutions}


def render_retention(rules: RetentionRules) -> list[str]:
    """Render the rules as template DDL (``${db}``), run after the migrations.

    Args:
        rules: Parsed rules.

    Returns:
        Idempotent statements: dictionary, raw TTLs, rollup tables and views,
        other tables' TTLs.
    """
    out = [_dictionary(rules)]
    if DATASET_TABLES.intersection(rules.raw_tables):
        out.append(_dataset_dictionary(rules))
    out += [f"ALTER TABLE ${{db}}.{t} MODIFY TTL {raw_ttl_expression(rules, t)}"
            for t in rules.raw_tables]
    for src in rules.sources:
        for res in rules.resolutions:
            out += _rollup(src, res, rules.quantiles)
    out += [
        f"ALTER TABLE ${{db}}.{t} MODIFY TTL toDateTime(ts) + INTERVAL {s} SECOND"
        for t, s in rules.table_ttls
        if s is not None
    ]
    return out


def _human(seconds: int | None) -> str:
    if seconds is None:
        return "forever"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def describe_rules(rules: RetentionRules) -> str:
    """Return the effective rules as readable text (``runwatch db retention``).

    Args:
        rules: Parsed rules.

    Returns:
        Multi-line text.
    """
    why = [f"active within {_human(rules.active_within_s)}"]
    if rules.anomalous:
        why.append("anomalous (any alert)")
    if rules.material:
        why.append("material (gate decision or registered model)")
    lines = [
        f"raw tables ({', '.join(rules.raw_tables)}):",
        f"  routine runs: raw rows expire after {_human(rules.raw_ttl_s)}",
        f"  retained runs ({' or '.join(why)}): raw rows kept up to {_human(rules.retained_max_s)}",
        *[f"  {t}: also kept while a retained run's manifest names the dataset version "
          "(or the dataset unversioned)" for t in rules.raw_tables if t in DATASET_TABLES],
        f"  retained-runs dictionary refresh: {_human(rules.refresh_s)}",
        "rollups (min/max/avg/quantiles " + ",".join(str(q) for q in rules.quantiles) + "):",
    ]
    for src in rules.sources:
        for res in rules.resolutions:
            lines.append(
                f"  {rollup_table(src.table, res.name)}: {_human(res.interval_s)} buckets by "
                f"{', '.join(src.keys)} of {', '.join(src.metrics)}"
                f"{f' (rows where {src.where})' if src.where else ''}; kept {_human(res.ttl_s)}"
            )
    lines.append("other tables:")
    lines += [f"  {t}: {_human(s)}" for t, s in rules.table_ttls]
    return "\n".join(lines)
