"""Dataset re-keying: data reports forwarded to the runs that read the dataset (the ``data`` agent).

Data reports are joined to runs as a co-partitioned stream join: the runs
agent sends one ``{"v":1,"run","uri","ref"}`` record per manifest dataset to
``rw.internal.manifest-by-dataset``, keyed and partitioned like ``rw.data``
(dataset uri). The ``data`` agent reads both topics, so the dataset → runs
index (``dataset-index``, keyed by uri: JSON ``{ref: [run ids]}``) and the
reports kept per reference (``dataset-reports``: JSON ``{"first", "recent"}``,
base64 Avro) are local tables of one worker: no cross-worker race.

Stage events (``StageEvent``, keyed by their output dataset on ``rw.data``)
take the same path: kept per output reference under ``stage|<ref>`` in
``dataset-reports`` and forwarded to the runs reading that dataset version
(and to the run the stage names, without subscribing it: a run that writes a
dataset does not read it), so a run knows its upstream stages.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

from runwatch.core.records import DataQualityReport, StageEvent
from runwatch.core.signals import rules
from runwatch.core.stream import rekey
from runwatch.processor.outbox import DATA_BY_RUN, MANIFEST_BY_DATASET, Outbox

RECENT_MAX = 16  # latest reports kept per dataset reference (besides the first one)
STAGE = "stage|"  # dataset-reports key prefix of the stage events of an output reference
Table = Any  # a faust table of bytes → bytes, or a dict in memory
TableFactory = Callable[..., Table]


class DatasetRekeyer:
    """The ``data`` agent: owns the dataset → runs index and each dataset's kept reports."""

    def __init__(self, out: Outbox, table: TableFactory) -> None:
        """Create the re-keyer and its tables.

        Args:
            out: The worker's outbox.
            table: Makes a table by name (``dataset-index``, ``dataset-reports``).
        """
        self.out = out
        self.dataset_index: Table = table("dataset-index")  # uri -> {ref: [run ids]}, local
        self.dataset_reports: Table = table("dataset-reports")  # ref -> first/recent, local

    async def event(self, event: Any) -> None:
        """Handle one event of rw.data or rw.internal.manifest-by-dataset.

        Both topics are keyed by dataset uri with the producers' partitioner and
        read by this one agent, so a dataset's reports and the manifests naming it
        meet in one worker, in partition order, with the index in local tables.
        """
        if self.out.deployed(event.message.topic) == MANIFEST_BY_DATASET:
            await self._manifest_ref(event)
        else:
            await self._report(event)

    def _index(self, uri: str) -> dict[str, list[str]]:
        raw = self.dataset_index.get(uri.encode())
        return json.loads(raw) if raw else {}

    async def _manifest_ref(self, event: Any) -> None:
        """Index a run under a dataset and send it the dataset's first and recent reports.

        A ``remove`` record (the runs agent retired the run's state) takes it out again.
        After the reports, an ``add`` is answered with a
        :class:`~runwatch.core.stream.rekey.DataAck` (even when there were none to send).

        They are sent even when the run is indexed already (a repeated manifest,
        or a report that named the run): the run may not have been able to fold
        them then (held while it was unseen, and dead-lettered), and it folds a
        report it has folded before only once (its event id).
        """
        try:
            value = bytes(event.value) if isinstance(event.value, bytes | bytearray) else b""
            run_id, uri, ref, op = rekey.parse_manifest_ref(value)
        except ValueError as exc:
            await self.out.dead(event.message, str(exc), event.value, event.key)
            return
        index = self._index(uri)
        if op == "remove":  # the run's state was retired: it gets no more reports
            if rekey.remove_run(index, ref, run_id):
                if index:
                    self.dataset_index[uri.encode()] = json.dumps(index).encode()
                else:
                    del self.dataset_index[uri.encode()]
            return
        if rekey.add_run(index, ref, run_id):
            self.dataset_index[uri.encode()] = json.dumps(index).encode()
        reports = self.recent_reports(STAGE + ref) + self.recent_reports(ref)
        for report in reports:
            await self.out.send(DATA_BY_RUN, run_id.encode(), report)
        # then the answer: what this agent had of the dataset has been sent (the run's
        # missing-report rule waits for it, however far event time ran ahead meanwhile)
        await self.out.send(DATA_BY_RUN, run_id.encode(),
                            rekey.DataAck(run_id, uri, ref, len(reports)).to_json())

    async def _stage(self, event: Any, rec: StageEvent) -> None:
        """Remember a stage event per output dataset; forward it to the runs reading that."""
        value = bytes(event.value)
        b64 = base64.b64encode(value).decode()
        self.remember(STAGE + rekey.report_ref(rec), b64)
        if rec.dataset_version:  # for runs that declare the dataset unversioned (any version)
            self.remember(STAGE + rec.dataset_uri, b64)
        runs = rekey.runs_for_report(self._index(rec.dataset_uri), rec)
        if rec.run_id and rec.run_id not in runs:
            runs.append(rec.run_id)  # the run the stage ran in: it knows the stage too
        for run_id in runs:
            await self.out.send(DATA_BY_RUN, run_id.encode(), value)

    async def _report(self, event: Any) -> None:
        """Remember a data report per dataset and forward it to the runs consuming it.

        Each copy is keyed by the run it goes to (the runs agent folds it into
        that run whatever the report's own ``run_id``): every run whose manifest
        names the dataset gets it once, and so does the run the report names. A report
        that cannot be true (:func:`runwatch.core.signals.rules.report_problem`: no
        dataset, more failing rows than rows) is dead-lettered here, once, whether or
        not it names a run, and reaches no run.
        """
        out = self.out
        rec = out.decode(event.message.topic, event.value)
        if isinstance(rec, StageEvent):
            await self._stage(event, rec)
            return
        if isinstance(rec, str) or not isinstance(rec, DataQualityReport):
            reason = rec if isinstance(rec, str) else "not a DataQualityReport"
            await out.dead(event.message, reason, event.value, event.key)
            return
        why = rules.report_problem(rec.dataset_uri, rec.row_count, rec.schema_failures,
                                   rec.duplicate_rows)
        if why is not None:  # as a run's join does; one naming no run reached none, unsaid
            await out.dead(event.message, why, event.value, event.key, run_id=rec.run_id)
            return
        value = bytes(event.value)
        ref = rekey.report_ref(rec)
        index = self._index(rec.dataset_uri)
        if rec.run_id and rec.run_id not in rekey.runs_for_report(index, rec):
            # a report naming its run subscribes that run to the dataset, as its manifest
            # would: it first gets the stored reports (older ones before this one)
            for report in self.recent_reports(ref):
                await out.send(DATA_BY_RUN, rec.run_id.encode(), report)
            rekey.add_run(index, ref, rec.run_id)
            self.dataset_index[rec.dataset_uri.encode()] = json.dumps(index).encode()
        b64 = base64.b64encode(value).decode()
        self.remember(ref, b64)
        if rec.dataset_version:  # for runs that declare the dataset unversioned (any version)
            self.remember(rec.dataset_uri, b64)
        for run_id in rekey.runs_for_report(index, rec):  # each run once, keyed by the run
            await out.send(DATA_BY_RUN, run_id.encode(), value)

    def remember(self, ref: str, b64: str) -> None:
        """Keep a report (base64) as the first and among the recent ones of a dataset reference."""
        key = ref.encode()
        raw = self.dataset_reports.get(key)
        doc = json.loads(raw) if raw else {}
        doc.setdefault("first", b64)
        doc["recent"] = [*doc.get("recent", []), b64][-RECENT_MAX:]
        self.dataset_reports[key] = json.dumps(doc).encode()

    def recent_reports(self, ref: str) -> list[bytes]:
        """Return a dataset's first report (its reference) and its latest ones, oldest first."""
        raw = self.dataset_reports.get(ref.encode())
        if not raw:
            return []
        doc = json.loads(raw)
        recent = doc.get("recent", [])
        first = [doc["first"]] if doc.get("first") and doc["first"] not in recent else []
        return [base64.b64decode(x) for x in first + recent]
