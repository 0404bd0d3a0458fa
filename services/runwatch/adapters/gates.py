"""Read a gate's evidence from ClickHouse (``runwatch gate check`` / ``gate approve``).

Every query names its runs (the candidate, its incumbent, its repeat group) or
the evaluation dataset, so each reads a small slice of the ordered tables.
Repeats and reruns come from the stored manifests' ``repeat_group`` and
``lineage_hash`` (the sink fills them when a producer did not). Times come
back as epoch milliseconds.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import ClickHouseError

from runwatch.core.gates import sketch
from runwatch.core.gates.evidence import Evaluation, Evidence, RunEvidence, StoredArtifact

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MANIFEST = (
    "toString(run_id) AS run_id, toUnixTimestamp64Milli(ts) AS ts_ms, "
    "toString(experiment_family) AS family, labels, dataset_uris, dataset_versions, "
    "code_revision, code_dirty, lineage_hash, repeat_group"
)
_EVAL = (
    "toString(run_id) AS run_id, toUnixTimestamp64Milli(ts) AS ts_ms, toString(slice) AS slice, "
    "metrics, toString(dataset_uri) AS dataset_uri, toString(dataset_version) AS dataset_version, "
    "sample_count, ci_low, ci_high, incumbent_run_id"
)


class GateStoreError(ValueError):
    """The database cannot answer (it does not exist, lacks the gate columns, or failed)."""


def _ref(uri: str, version: str) -> str:
    return f"{uri}@{version}" if version else uri


class GateStore:
    """The gate's queries over one runwatch database."""

    def __init__(self, client: Client, database: str) -> None:
        """Bind a client and a database (a plain identifier)."""
        if not _IDENT.match(database):
            msg = f"bad database name {database!r}"
            raise GateStoreError(msg)
        self.client, self.db = client, database
        cols = {str(r["name"]) for r in self._rows(
            "SELECT name FROM system.columns WHERE database = {db:String} "
            "AND table = 'validation_results'", db=database)}
        if "kind" not in cols:
            msg = (f"database {database!r} has no gate evidence columns (run `runwatch db "
                   "migrate`, or pass --database)")
            raise GateStoreError(msg)

    def _rows(self, sql: str, **params: Any) -> list[dict[str, Any]]:
        try:
            result = self.client.query(sql, parameters=params)
        except (ClickHouseError, OSError) as exc:
            msg = f"ClickHouse refused or failed a query on {self.db!r}: {exc}"
            raise GateStoreError(msg) from exc
        names = list(result.column_names)
        return [dict(zip(names, row, strict=True)) for row in result.result_rows]

    def manifest(self, run_id: str) -> dict[str, Any] | None:
        """Return a run's latest stored manifest row, or None."""
        rows = self._rows(f"SELECT {_MANIFEST} FROM {self.db}.run_manifests FINAL "  # noqa: S608
                          "WHERE run_id = {r:String} ORDER BY ts DESC LIMIT 1", r=run_id)
        return rows[0] if rows else None

    def _evaluations(self, run_ids: Sequence[str]) -> dict[str, dict[str, Evaluation]]:
        out: dict[str, dict[str, Evaluation]] = {r: {} for r in run_ids}
        if not run_ids:
            return out
        rows = self._rows(
            f"SELECT {_EVAL} FROM {self.db}.validation_results FINAL "  # noqa: S608
            "WHERE run_id IN {runs:Array(String)} AND kind = 'evaluation' "
            "ORDER BY ts, seq", runs=list(run_ids))
        for r in rows:  # time order: the latest evaluation of each slice wins
            out[r["run_id"]][r["slice"]] = Evaluation(
                slice=r["slice"], metrics={str(k): float(v) for k, v in r["metrics"].items()},
                dataset=_ref(r["dataset_uri"], r["dataset_version"]),
                sample_count=int(r["sample_count"]),
                ci_low={str(k): float(v) for k, v in r["ci_low"].items()},
                ci_high={str(k): float(v) for k, v in r["ci_high"].items()},
                incumbent_run_id=str(r["incumbent_run_id"]), at_ms=int(r["ts_ms"]))
        return out

    def _run(self, run_id: str, m: dict[str, Any] | None,
             evals: dict[str, Evaluation]) -> RunEvidence:
        if m is None:
            return RunEvidence(run_id=run_id, evaluations=evals, has_manifest=False)
        return RunEvidence(
            run_id=run_id, family=str(m["family"]), labels=dict(m["labels"]),
            training=tuple(_ref(u, v) for u, v in zip(m["dataset_uris"], m["dataset_versions"],
                                                      strict=False)),
            code_revision=str(m["code_revision"]), code_dirty=bool(m["code_dirty"]),
            repeat_group=str(m["repeat_group"]), lineage=str(m["lineage_hash"]),
            evaluations=evals)

    def evidence(self, run_id: str, incumbent_run: str = "") -> Evidence:
        """Read a candidate's evidence.

        Args:
            run_id: The candidate run.
            incumbent_run: The policy's fixed incumbent ('' : the one the candidate recorded).

        Returns:
            The evidence (missing parts left empty: the decision names them).

        """
        m = self.manifest(run_id)
        evals = self._evaluations([run_id])[run_id]
        cand = replace(self._run(run_id, m, evals), artifacts=self.artifacts(run_id))
        whole = evals.get("")
        named = incumbent_run or (whole.incumbent_run_id if whole is not None else "")
        inc = None
        if named:
            inc = self._run(named, self.manifest(named), self._evaluations([named])[named])
        repeats: list[RunEvidence] = []
        if cand.repeat_group:
            rows = self._rows(
                f"SELECT {_MANIFEST} FROM {self.db}.run_manifests FINAL "  # noqa: S608
                "WHERE repeat_group = {g:String} AND run_id != {r:String} ORDER BY ts",
                g=cand.repeat_group, r=run_id)
            latest = {str(r["run_id"]): r for r in rows}
            ev = self._evaluations(sorted(latest))
            repeats = [self._run(rid, row, ev[rid]) for rid, row in sorted(latest.items())]
        as_of = self.eval_data_as_of(whole.dataset) if whole is not None and whole.dataset \
            else None
        refs = [*cand.training, *([whole.dataset] if whole is not None and whole.dataset else [])]
        return Evidence(candidate=cand, incumbent=inc, incumbent_run_id=named,
                        repeats=tuple(repeats), eval_data_as_of_ms=as_of,
                        key_sketches=self.key_sketches(refs))

    def artifacts(self, run_id: str) -> tuple[StoredArtifact, ...]:
        """Read a run's artifact rows, oldest first."""
        rows = self._rows(
            "SELECT uri, toString(kind) AS kind, size_bytes, sha256, serialization_ok, "  # noqa: S608
            f"toUnixTimestamp64Milli(ts) AS ts_ms FROM {self.db}.artifacts FINAL "
            "WHERE run_id = {r:String} ORDER BY ts", r=run_id)
        return tuple(StoredArtifact(str(r["uri"]), str(r["kind"]), int(r["size_bytes"]),
                                    str(r["sha256"]), bool(r["serialization_ok"]),
                                    int(r["ts_ms"])) for r in rows)

    def key_sketches(self, refs: Sequence[str]) -> dict[str, tuple[int, ...]]:
        """Return ref -> the merged row-key sketch of its reports (refs without one left out)."""
        uris = sorted({r.partition("@")[0] for r in refs})
        if not uris:
            return {}
        rows = self._rows(
            "SELECT toString(dataset_uri) AS uri, toString(dataset_version) AS version, "  # noqa: S608
            f"key_sketch FROM {self.db}.data_quality_reports FINAL "
            "WHERE dataset_uri IN {u:Array(String)} AND notEmpty(key_sketch)", u=uris)
        out: dict[str, tuple[int, ...]] = {}
        for ref in refs:
            uri, _, version = ref.partition("@")
            parts = [r["key_sketch"] for r in rows
                     if r["uri"] == uri and (not version or r["version"] == version)]
            if parts:
                out[ref] = sketch.merge(parts)
        return out

    def eval_data_as_of(self, ref: str) -> int | None:
        """Return how recent a dataset version's data is, from its data-quality reports.

        A report's newest row is at ``ts - freshness_lag_ms`` where the pipeline named
        a timestamp column (``data.report(..., timestamp=...)``), else at its
        ``window_end``; the newest over the version's stored reports counts.
        """
        uri, _, version = ref.partition("@")
        rows = self._rows(
            "SELECT count() AS n, max(if(isNull(freshness_lag_ms), "  # noqa: S608
            "toUnixTimestamp64Milli(window_end), toUnixTimestamp64Milli(ts) - freshness_lag_ms))"
            f" AS end_ms FROM {self.db}.data_quality_reports FINAL "
            "WHERE dataset_uri = {u:String} AND ({v:String} = '' OR dataset_version = {v:String})",
            u=uri, v=version)
        return int(rows[0]["end_ms"]) if rows and int(rows[0]["n"]) else None

    def decisions(self, run_id: str) -> list[dict[str, Any]]:
        """Return a run's stored gate decisions, oldest first."""
        return self._rows(
            "SELECT event_id, toUnixTimestamp64Milli(ts) AS ts_ms, gate, "  # noqa: S608
            "toString(decision) AS decision, reasons, toString(evaluator) AS evaluator, policy, "
            f"approves FROM {self.db}.gate_decisions FINAL WHERE run_id = {{r:String}} "
            "ORDER BY ts, seq", r=run_id)
