"""Read the evidence about a run from ClickHouse, for ``runwatch investigate``.

Size: one query per question's evidence (manifests, jobs, alerts, checkpoints,
artifacts, gates, data quality, stages, GPU faults, family, sharing, repeats,
series, cost), each small; together they are the investigation's read side.

Every query names the run (or its nodes in its time span, or its datasets),
so it reads one run's slice of the ordered tables, never a scan: telemetry
comes back aggregated into at most :data:`BUCKETS` points per indicator.
A table the database lacks (an older schema: no ``stage_events``) is noted in
``Evidence.missing``, not an error. Times come back as epoch milliseconds.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import ClickHouseError

from runwatch.adapters.clickhouse import no_tables
from runwatch.core.cost.prices import Prices
from runwatch.core.cost.waste import HISTORY_S, RUN_COST_COLUMNS, run_cost_from_row
from runwatch.core.investigate import answers
from runwatch.core.investigate import lineage as lin
from runwatch.core.investigate.answers import Evidence, Router
from runwatch.core.investigate.cost import CostRow
from runwatch.core.investigate.html import checkpoint_share
from runwatch.core.paging.ownership import Ownership
from runwatch.core.storage.outcome import OUTCOME_SQL

BUCKETS = 300
STEP_BUCKETS = 1200
FAMILY_RUNS = 50
#: At most this many of the family's run summaries are read for its cost baseline and peers.
COST_RUNS = 5000
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MANIFEST_COLS = (
    "event_id", "dataset_uris", "dataset_versions", "transform_names", "transform_versions",
    "code_revision", "code_dirty", "image_digest", "config_hash", "config", "hardware_nodes",
    "gpu_count", "gpu_model", "seed_policy", "framework_versions", "experiment_family", "team",
    "labels", "resumed_from_checkpoint",
)
_ALERT_ORDER = "ts, kafka_partition, kafka_offset"
"""An alert's records in the order the processor published them: by time, then by offset (an
alert that fired and resolved in one millisecond, as a backfilled run's or a retired run's,
read firing at random when only the time ordered them)."""
_ALERT_COLS = (
    "toUnixTimestamp64Milli(ts) AS ts_ms, toString(run_id) AS run_id, alert_id, status, "
    "severity, detector, indicator, probable_cause, "
    "arrayMap(x -> toUnixTimestamp64Milli(x), evidence_at) AS evidence_at_ms, "
    "evidence_indicators, toUnixTimestamp64Milli(first_seen) AS first_seen_ms, title, "
    "toString(team) AS team, toString(experiment_family) AS experiment_family, "
    "toString(node) AS node, labels, {owner}"
)


class EvidenceError(ValueError):
    """The database cannot be investigated (it does not exist, or is not runwatch's)."""


class EvidenceReader:
    """Queries over one runwatch database (use a readonly client)."""

    def __init__(self, client: Client, database: str) -> None:
        """Bind a client and a database; the database must be a plain identifier."""
        if not _IDENT.match(database):
            msg = f"bad database name {database!r}"
            raise EvidenceError(msg)
        self.client, self.db = client, database
        cols = self._rows("SELECT table, name FROM system.columns WHERE database = {db:String}",
                          db=database)
        self.columns: dict[str, set[str]] = {}
        for r in cols:
            self.columns.setdefault(str(r["table"]), set()).add(str(r["name"]))
        self.tables = set(self.columns)
        self._learn_span: tuple[int, int] | None = None
        if "run_manifests" not in self.tables or "alerts" not in self.tables:
            raise EvidenceError(no_tables(database))

    # ------------------------------------------------------------------ plumbing

    def _rows(self, sql: str, **params: Any) -> list[dict[str, Any]]:
        try:
            result = self.client.query(sql, parameters=params)
        except (ClickHouseError, OSError) as exc:
            msg = f"ClickHouse refused or failed a query on {self.db!r}: {exc}"
            raise EvidenceError(msg) from exc
        names = list(result.column_names)
        return [dict(zip(names, row, strict=True)) for row in result.result_rows]

    def _rows_in(self, sql: str, ids: Sequence[str], **params: Any) -> list[dict[str, Any]]:
        """Run ``sql`` with ``{r:Array(String)}`` bound to ``ids`` (none: no rows, no query).

        Past 4 KiB of parameters clickhouse-connect sends a multipart form, which
        ClickHouse and the local store both read.
        """
        ids = list(ids)
        return self._rows(sql, r=ids, **params) if ids else []

    def _t(self, table: str) -> str:
        return f"{self.db}.{table}"

    def _have(self, table: str, ev: Evidence) -> bool:
        if table in self.tables:
            return True
        ev.missing.append(f"no {table} table in database {self.db!r}")
        return False

    def _alert_cols(self) -> str:
        stored = "owner" in self.columns.get("alerts", set())  # Alert v2, migration 0050
        return _ALERT_COLS.format(owner="toString(owner) AS owner" if stored else "'' AS owner")

    def _manifest_select(self) -> str:
        extra = [c for c in ("lineage_hash", "repeat_group")
                 if c in self.columns.get("run_manifests", set())]
        return ", ".join(("toString(run_id) AS run_id", "toUnixTimestamp64Milli(ts) AS ts_ms",
                          *_MANIFEST_COLS, *extra))

    # ------------------------------------------------------------------ the run

    def evidence(self, run_id: str, now_ms: int) -> Evidence:
        """Read everything about one run but the runs sharing its inputs (see :meth:`sharing`).

        Args:
            run_id: The run.
            now_ms: Now (stamped on the answer).

        Returns:
            The evidence (empty lists where nothing is recorded).
        """
        ev = Evidence(run_id=run_id, database=self.db, now_ms=now_ms)
        t = self._t
        ev.manifests = self._rows(
            f"SELECT {self._manifest_select()} FROM {t('run_manifests')} FINAL "  # noqa: S608
            "WHERE run_id = {r:String} ORDER BY ts, event_id", r=run_id)
        ev.jobs = self._rows(
            "SELECT toUnixTimestamp64Milli(ts) AS ts_ms, state, attempt, nodes, gpu_count, "  # noqa: S608
            "toString(team) AS team, toString(experiment_family) AS experiment_family, reason "
            f"FROM {t('job_events')} FINAL WHERE run_id = {{r:String}} ORDER BY ts", r=run_id)
        if ev.jobs:  # the run's state as the run summary, slo and --since read it
            ev.outcome = self._states([run_id]).get(run_id, "")
        ev.alerts = self._rows(
            f"SELECT {self._alert_cols()} FROM {t('alerts')} FINAL WHERE run_id = {{r:String}} "  # noqa: S608
            f"ORDER BY {_ALERT_ORDER}", r=run_id)
        if self._have("checkpoints", ev):
            ev.checkpoints = self._rows(
                "SELECT toUnixTimestamp64Milli(ts) AS ts_ms, step, sha256, expected_sha256, "  # noqa: S608
                f"outcome, uri, duration_ms FROM {t('checkpoints')} FINAL "
                "WHERE run_id = {r:String} ORDER BY ts", r=run_id)
        if self._have("artifacts", ev):
            ev.artifacts = self._rows(
                "SELECT toUnixTimestamp64Milli(ts) AS ts_ms, uri, kind, sha256, "  # noqa: S608
                f"serialization_ok, registry_status FROM {t('artifacts')} FINAL "
                "WHERE run_id = {r:String} ORDER BY ts", r=run_id)
        if self._have("gate_decisions", ev):
            ev.gates = self._rows(
                "SELECT toUnixTimestamp64Milli(ts) AS ts_ms, toString(run_id) AS run_id, gate, "  # noqa: S608
                f"decision, reasons FROM {t('gate_decisions')} FINAL "
                "WHERE run_id = {r:String} ORDER BY ts", r=run_id)
        me = lin.normalize(ev.manifests[0]) if ev.manifests else None
        nodes = sorted({str(n) for j in ev.jobs for n in j.get("nodes") or ()}
                       | set(me["hardware"]["nodes"] if me else ()))
        self._steps(ev)
        span = self._span(ev)
        datasets = dict(me["datasets"]) if me else {}
        self._quality(ev, datasets, span)
        self._stages(ev, datasets)
        if span and nodes:
            ev.infra = self._rows(
                "SELECT toUnixTimestamp64Milli(ts) AS ts_ms, toString(node) AS node, "  # noqa: S608
                f"gpu_index, xid, ecc_uncorrected FROM {t('gpu_samples')} "
                "WHERE node IN {n:Array(String)} "
                "AND ts BETWEEN fromUnixTimestamp64Milli({a:Int64}) "
                "AND fromUnixTimestamp64Milli({b:Int64}) "
                "AND (xid IS NOT NULL OR ecc_uncorrected > 0) "
                "ORDER BY ts LIMIT 1000", n=nodes, a=span[0], b=span[1])
        family = (me or {}).get("experiment_family") or next(
            (str(j["experiment_family"]) for j in ev.jobs if j.get("experiment_family")), "")
        if family:
            self._family(ev, family, int(ev.manifests[0]["ts_ms"]) if ev.manifests else now_ms)
        if me is not None:
            self._repeats(ev, me)
        self._series(ev, nodes, span)
        self._costs(ev, family)
        return ev

    def _costs(self, ev: Evidence, family: str) -> None:
        """Read the run's summary and its family's of the baseline history (``run_costs``).

        The same view and columns as ``runwatch cost`` (0031,
        :data:`~runwatch.core.cost.waste.RUN_COST_COLUMNS`); pricing and waste are core's.
        """
        if "run_costs" not in self.tables:
            ev.cost_rows = None
            return
        rows = self._rows(
            f"SELECT {RUN_COST_COLUMNS} FROM {self._t('run_costs')} "  # noqa: S608 - fixed columns
            "WHERE run_id = {r:String} OR (experiment_family = {f:String} AND {f:String} != '' "
            "AND ended_at >= fromUnixTimestamp64Milli({h:Int64}, 'UTC')) "
            "ORDER BY ended_at DESC LIMIT {n:UInt32}",
            r=ev.run_id, f=family, h=ev.now_ms - HISTORY_S * 1000, n=COST_RUNS)
        ev.cost_rows = []
        for r in rows:
            values = tuple(r.values())
            ev.cost_rows.append(CostRow(run_cost_from_row(values), int(values[-1])))

    def _steps(self, ev: Evidence) -> None:
        """Read the run's learning steps once: its span, steps by time, the loss series."""
        ((n, first, last),) = [tuple(r.values()) for r in self._rows(
            "SELECT count(), toUnixTimestamp64Milli(min(ts)), "  # noqa: S608
            f"toUnixTimestamp64Milli(max(ts)) FROM {self._t('learning_steps')} "
            "WHERE run_id = {r:String}", r=ev.run_id)]
        self._learn_span = (int(first), int(last)) if n else None
        if not n:
            return
        t0 = int(first)
        width = max(1, (int(last) - t0) // STEP_BUCKETS + 1)
        rows = self._rows(
            "SELECT intDiv(toUnixTimestamp64Milli(ts) - {t0:Int64}, {w:Int64}) AS k, "  # noqa: S608
            "min(toUnixTimestamp64Milli(ts)) AS t, min(step) AS s, "
            "avgIf(loss, isFinite(loss)) AS v "
            f"FROM {self._t('learning_steps')} WHERE run_id = {{r:String}} "
            "GROUP BY k ORDER BY k", r=ev.run_id, t0=t0, w=width)
        ev.steps_at = [(int(r["t"]), int(r["s"])) for r in rows]
        ev.series["loss"] = [(t0 + int(r["k"]) * width + width // 2, float(r["v"]))
                             for r in rows if r["v"] == r["v"] and r["v"] is not None]

    def _span(self, ev: Evidence) -> tuple[int, int] | None:
        times = [int(j["ts_ms"]) for j in ev.jobs] + list(self._learn_span or ())
        if not times:
            return None
        return min(times), max(times)

    def _quality(self, ev: Evidence, datasets: Mapping[str, str],
                 span: tuple[int, int] | None) -> None:
        if not datasets or not self._have("data_quality_reports", ev):
            return
        until = span[1] if span else ev.now_ms
        rows = self._rows(
            "SELECT toUnixTimestamp64Milli(ts) AS ts_ms, toString(dataset_uri) AS dataset_uri, "  # noqa: S608
            "toString(dataset_version) AS dataset_version, row_count, schema_failures, "
            "rejected_samples, drifted_features, max_psi, label_distribution "
            f"FROM {self._t('data_quality_reports')} FINAL "
            "WHERE dataset_uri IN {u:Array(String)} "
            "AND ts <= fromUnixTimestamp64Milli({b:Int64}) ORDER BY ts LIMIT 5000",
            u=sorted(datasets), b=until)
        ev.quality = [r for r in rows if datasets.get(r["dataset_uri"]) == r["dataset_version"]]

    def _stages(self, ev: Evidence, datasets: Mapping[str, str]) -> None:
        if "stage_events" not in self.tables:
            ev.stages = None
            return
        if not datasets:
            ev.stages = []
            return
        rows = self._rows(
            "SELECT toUnixTimestamp64Milli(ts) AS ts_ms, stage, code_version, "  # noqa: S608
            "toString(dataset_uri) AS dataset_uri, toString(dataset_version) AS dataset_version, "
            f"outcome, rows_in, rows_out, drifted_features FROM {self._t('stage_events')} FINAL "
            "WHERE dataset_uri IN {u:Array(String)} ORDER BY ts LIMIT 1000", u=sorted(datasets))
        ev.stages = [r for r in rows if datasets.get(r["dataset_uri"]) == r["dataset_version"]]

    def _states(self, run_ids: Sequence[str]) -> dict[str, str]:
        if not run_ids:
            return {}
        rows = self._rows_in(
            f"SELECT toString(run_id) AS run_id, {OUTCOME_SQL} AS state "  # noqa: S608
            f"FROM {self._t('job_events')} WHERE run_id IN {{r:Array(String)}} GROUP BY run_id",
            run_ids)
        return {str(r["run_id"]): str(r["state"]) for r in rows}

    def _alerts_of(self, run_ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {r: [] for r in run_ids}
        if not run_ids:
            return out
        for r in self._rows_in(f"SELECT {self._alert_cols()} FROM {self._t('alerts')} "  # noqa: S608
                               "FINAL WHERE run_id IN {r:Array(String)} "
                               f"ORDER BY {_ALERT_ORDER} LIMIT 20000",
                               run_ids):
            out.setdefault(str(r["run_id"]), []).append(r)
        return out

    def _family(self, ev: Evidence, family: str, before_ms: int) -> None:
        rows = self._rows(
            f"SELECT {self._manifest_select()} FROM {self._t('run_manifests')} FINAL "  # noqa: S608
            "WHERE experiment_family = {f:String} AND run_id != {r:String} "
            "AND ts < fromUnixTimestamp64Milli({b:Int64}) "
            "ORDER BY ts, event_id LIMIT 1 BY run_id", f=family, r=ev.run_id, b=before_ms)
        rows = sorted(rows, key=lambda r: -int(r["ts_ms"]))[:FAMILY_RUNS]
        ids = [str(r["run_id"]) for r in rows]
        states = self._states(ids)
        alerts = self._alerts_of(ids)
        for r in rows:
            rid = str(r["run_id"])
            bad = {a["alert_id"] for a in alerts.get(rid, ())
                   if a["severity"] in ("warning", "critical") and a["status"] == "firing"}
            ev.family_runs.append({"run_id": rid, "ts_ms": int(r["ts_ms"]),
                                   "state": states.get(rid, ""), "bad_alerts": len(bad),
                                   "manifest": r})
        if "gate_decisions" in self.tables and ids:
            ev.family_gates = self._rows_in(
                "SELECT toUnixTimestamp64Milli(ts) AS ts_ms, toString(run_id) AS run_id, "  # noqa: S608
                f"gate, decision, reasons FROM {self._t('gate_decisions')} FINAL "
                "WHERE run_id IN {r:Array(String)} ORDER BY ts LIMIT 5000", ids)

    def _repeats(self, ev: Evidence, me: Mapping[str, Any]) -> None:
        if me.get("repeat_group"):
            rows = self._rows(
                f"SELECT {self._manifest_select()} FROM {self._t('run_manifests')} FINAL "  # noqa: S608
                "WHERE repeat_group = {g:String} AND run_id != {r:String} "
                "ORDER BY ts LIMIT 1 BY run_id LIMIT 50", g=me["repeat_group"], r=ev.run_id)
        else:  # a cheap prefilter, then the repeat key computed here
            rows = self._rows(
                f"SELECT {self._manifest_select()} FROM {self._t('run_manifests')} FINAL "  # noqa: S608
                "WHERE config_hash = {c:String} AND code_revision = {k:String} "
                "AND image_digest = {i:String} AND run_id != {r:String} "
                "ORDER BY ts LIMIT 1 BY run_id LIMIT 200", c=me["config_hash"],
                k=me["code_revision"], i=me["image_digest"], r=ev.run_id)
            key = lin.repeat_key(me)
            rows = [r for r in rows if lin.repeat_key(lin.normalize(r)) == key][:50]
        ids = [str(r["run_id"]) for r in rows]
        # every run of the lineage, alerts or not: one that went past the failing step
        # without the failure is evidence that it does not recur
        ev.lineage_runs = dict.fromkeys(ids)
        for r in self._rows_in(
                "SELECT toString(run_id) AS run_id, min(step) AS lo, max(step) AS hi "  # noqa: S608
                f"FROM {self._t('learning_steps')} WHERE run_id IN {{r:Array(String)}} "
                "GROUP BY run_id", ids):
            ev.lineage_runs[str(r["run_id"])] = (int(r["lo"]), int(r["hi"]))
        for rid, alerts in self._alerts_of(ids).items():
            for a in alerts:
                if a["status"] != "firing":
                    continue
                ((step,),) = [tuple(x.values()) for x in self._rows(
                    f"SELECT max(step) FROM {self._t('learning_steps')} "  # noqa: S608
                    "WHERE run_id = {r:String} AND ts <= fromUnixTimestamp64Milli({t:Int64})",
                    r=rid, t=int(a["first_seen_ms"]))]
                ev.repeats.append({"run_id": rid, "detector": a["detector"],
                                   "indicator": a["indicator"],
                                   "first_seen_ms": a["first_seen_ms"], "step": int(step)})

    # ------------------------------------------------------------------ sharing

    def sharing(self, ev: Evidence, suspects: Iterable[Mapping[str, str]]) -> None:
        """Read the other runs that share a suspect input (fills ``ev.sharing``).

        Args:
            ev: The run's evidence.
            suspects: ``{"kind": dataset|image|code|node, "value": ...}`` items.
        """
        sus = list(suspects)
        pairs = sorted({s["value"] for s in sus if s["kind"] == "dataset"})  # uri@version
        images = sorted({s["value"] for s in sus if s["kind"] == "image"})
        codes = sorted({s["value"] for s in sus if s["kind"] == "code"})
        nodes = sorted({s["value"] for s in sus if s["kind"] == "node"})
        if not sus:
            return
        manifests = self._rows(
            f"SELECT {self._manifest_select()} FROM {self._t('run_manifests')} FINAL "  # noqa: S608
            "WHERE run_id != {r:String} AND (hasAny(arrayMap((u, v) -> concat(u, '@', v), "
            "dataset_uris, dataset_versions), {u:Array(String)}) "
            "OR image_digest IN {i:Array(String)} OR code_revision IN {c:Array(String)} "
            "OR hasAny(hardware_nodes, {n:Array(String)})) "
            "ORDER BY ts LIMIT 1 BY run_id LIMIT 500", r=ev.run_id, u=pairs, i=images,
            c=codes, n=nodes)
        by_id: dict[str, dict[str, Any]] = {str(m["run_id"]): {"manifest": m, "nodes": []}
                                            for m in manifests}
        if nodes:
            span = self._span(ev) or (ev.now_ms, ev.now_ms)
            for r in self._rows(
                    "SELECT toString(run_id) AS run_id, groupUniqArrayArray(nodes) AS nodes "  # noqa: S608
                    f"FROM {self._t('job_events')} WHERE hasAny(nodes, {{n:Array(String)}}) "
                    "AND run_id != {r:String} AND ts BETWEEN fromUnixTimestamp64Milli({a:Int64}) "
                    "AND fromUnixTimestamp64Milli({b:Int64}) GROUP BY run_id LIMIT 500",
                    n=nodes, r=ev.run_id, a=span[0], b=span[1]):
                by_id.setdefault(str(r["run_id"]), {"manifest": {}, "nodes": []})["nodes"] = \
                    list(r["nodes"])
        ids = sorted(by_id)
        states, alerts = self._states(ids), self._alerts_of(ids)
        for rid in ids:
            m = dict(by_id[rid]["manifest"])
            m["hardware_nodes"] = sorted(set(m.get("hardware_nodes") or ())
                                         | set(by_id[rid]["nodes"]))
            ev.sharing.append({"run_id": rid, "experiment_family": m.get("experiment_family", ""),
                               "team": m.get("team", ""), "state": states.get(rid, ""),
                               "manifest": m, "alerts": alerts.get(rid, [])})

    # ------------------------------------------------------------------ series

    def _series(self, ev: Evidence, nodes: Sequence[str], span: tuple[int, int] | None) -> None:
        if span is None:
            return
        t0, t1 = span
        width = max(1, (t1 - t0) // BUCKETS + 1)
        r, t = ev.run_id, self._t

        def bucketed(sql: str, **params: Any) -> list[tuple[int, float]]:
            rows = self._rows(sql, r=r, t0=t0, w=width, **params)
            return [(t0 + int(x["k"]) * width + width // 2, float(x["v"])) for x in rows
                    if x["v"] is not None]

        key = "intDiv(toUnixTimestamp64Milli(ts) - {t0:Int64}, {w:Int64}) AS k"
        if "step_timings" in self.tables:
            ev.series["loader_share"] = bucketed(
                f"SELECT {key}, sum(loader_wait_ms) / nullIf(sum(step_ms), 0) AS v "  # noqa: S608
                f"FROM {t('step_timings')} WHERE run_id = {{r:String}} GROUP BY k ORDER BY k")
        vals = self._rows(
            "SELECT toUnixTimestamp64Milli(ts) AS ts_ms, metrics "  # noqa: S608
            f"FROM {t('validation_results')} WHERE run_id = {{r:String}} ORDER BY ts LIMIT 20000",
            r=r)
        names = sorted({k for v in vals for k in (v["metrics"] or {})})
        metric = "accuracy" if "accuracy" in names else (names[0] if names else "")
        ev.series["validation:" + metric if metric else "validation"] = [
            (int(v["ts_ms"]), float(v["metrics"][metric])) for v in vals
            if metric in (v["metrics"] or {})]
        ev.series["gpu_util"] = bucketed(
            f"SELECT {key}, avg(util_pct) AS v FROM {t('gpu_samples')} "  # noqa: S608
            "WHERE node IN {n:Array(String)} AND (run_id = {r:String} OR run_id = '') "
            "AND ts BETWEEN fromUnixTimestamp64Milli({t0:Int64}) "
            "AND fromUnixTimestamp64Milli({t1:Int64}) GROUP BY k ORDER BY k",
            n=list(nodes), t1=t1) if nodes else []

    # ------------------------------------------------------------------ since

    def hurting(self, since_ms: int, family: str | None) -> list[dict[str, Any]]:
        """Return the latest row of every alert first seen since a time, with its run's state."""
        # aliases unlike the columns: WHERE reads the stored experiment_family, not argMax's.
        # The latest record: by time, then by the order the processor published them (an
        # alert fired and resolved in one millisecond, as when a run is retired)
        latest = (f"(SELECT *, ({_ALERT_ORDER}) AS o "  # noqa: S608
                  f"FROM {self._t('alerts')} FINAL)")
        rows = self._rows(
            "SELECT alert_id, toString(argMax(run_id, o)) AS a_run, "  # noqa: S608
            "argMax(status, o) AS a_status, argMax(severity, o) AS a_severity, "
            "argMax(detector, o) AS a_detector, argMax(probable_cause, o) AS a_cause, "
            "toString(argMax(team, o)) AS a_team, "
            "toString(argMax(experiment_family, o)) AS a_family, "
            + ("toString(argMax(owner, o)) AS a_owner, "
               if "owner" in self.columns.get("alerts", set()) else "'' AS a_owner, ") +
            "toUnixTimestamp64Milli(min(first_seen)) AS a_first, "
            "arrayMap(x -> toUnixTimestamp64Milli(x), argMax(evidence_at, o)) AS a_evidence "
            "FROM " + latest + " "
            "WHERE first_seen >= fromUnixTimestamp64Milli({s:Int64}) "
            "AND ({f:String} = '' OR experiment_family = {f:String}) "
            "GROUP BY alert_id LIMIT 100000", s=since_ms, f=family or "")
        names = {"a_run": "run_id", "a_status": "status", "a_severity": "severity",
                 "a_detector": "detector", "a_cause": "probable_cause", "a_team": "team",
                 "a_family": "experiment_family", "a_first": "first_seen_ms",
                 "a_evidence": "evidence_at_ms", "a_owner": "owner"}
        rows = [{names.get(k, k): v for k, v in r.items()} for r in rows]
        states = self._states(sorted({str(r["run_id"]) for r in rows}))
        for r in rows:
            r["state"] = states.get(str(r["run_id"]), "")
        return rows


__all__ = ["BUCKETS", "EvidenceError", "EvidenceReader", "investigate_run"]


def investigate_run(client: Client, database: str, run_id: str, now_ms: int, *,
                    ownership: Ownership | None = None, route: Router | None = None,
                    prices: Prices | None = None,
                    ) -> tuple[dict[str, Any], dict[str, list[tuple[int, float]]]]:
    """Read a run's evidence and answer the questions (``runwatch investigate``, the demo).

    Args:
        client: A (readonly) client.
        database: The runwatch database.
        run_id: The run.
        now_ms: Now.
        ownership: The ownership file.
        route: Pager routing (alert attributes → receiver names).
        prices: The prices file (``runwatch cost``'s; None: the cost answer is unpriced).

    Returns:
        The answer (JSON shape version 1) and the page's indicator series.

    Raises:
        EvidenceError: The database is not runwatch's, or a query failed.
    """
    reader = EvidenceReader(client, database)
    ev = reader.evidence(run_id, now_ms)
    reader.sharing(ev, answers.suspects(ev))
    result = answers.investigate(ev, ownership, route, prices)
    series = dict(ev.series)
    run = result["run"]
    if run["started_ms"] is not None and run["ended_ms"] is not None:
        series["checkpoint_share"] = checkpoint_share(
            ev.checkpoints, (int(run["started_ms"]), int(run["ended_ms"])))
    return result, series
