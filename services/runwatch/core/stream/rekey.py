"""Re-keying to runs: which runs a node sample or a data-quality report concerns.

Size: the pure halves of both re-keyers (node → runs, dataset → runs) and their internal
formats (allocation changes, manifest refs, the data agent's acks).

Node samples are keyed by node and data reports by dataset; the run state is
keyed by run. These pure functions maintain the two indices (node → runs with
their GPUs, dataset → runs) as JSON-able dicts and answer the routing question;
the processor forwards the records to internal topics keyed by run id. The
node index is fed by :class:`~runwatch.core.stream.join_node.AllocChange` records
(:func:`allocation_changes`) re-keyed by node, so it is joined with the node's
samples in one worker.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, TypeVar

from runwatch.core.records import DataQualityReport, DatasetRef, JobEvent, StageEvent
from runwatch.core.stream.join_node import AllocChange, NodeEntry, gpu_of

T = TypeVar("T")

ENDED = frozenset({"succeeded", "failed", "cancelled"})

NodeIndex = dict[str, list[int]]
"""Per node: run id → GPU indices allocated to it on that node (empty = all)."""


def dataset_ref(uri: str, version: str | None) -> str:
    """Return the canonical dataset reference ``uri@version`` (``uri`` when unversioned).

    Args:
        uri: Dataset uri or logical id.
        version: Dataset version, if any.

    Returns:
        The reference string used as the dataset key.

    """
    return f"{uri}@{version}" if version else uri


def refs_match(declared: str, reported: str) -> bool:
    """Return whether a run's dataset reference and a report's name the same data.

    Equal references match, and an unversioned reference (the bare uri, as a
    dataset given to ``runwatch.init`` as a plain string) matches every
    version of that uri, whichever side is unversioned: a run that reads
    ``s3://d`` gets the reports of ``s3://d@v3``, and a report on ``s3://d``
    reaches every run of any version of it.

    Args:
        declared: A reference from a manifest (:func:`dataset_ref`).
        reported: A reference from a report (:func:`report_ref`).

    Returns:
        Whether they match.

    """
    return (declared == reported or reported.startswith(declared + "@")
            or declared.startswith(reported + "@"))


def covered_refs(declared: Iterable[str], reported: Iterable[str]) -> list[str]:
    """Return the declared dataset references that some reported reference matches.

    Args:
        declared: A run's dataset references (from its manifest).
        reported: References its data-quality reports were about.

    Returns:
        The declared references with a matching report (:func:`refs_match`), sorted.

    """
    seen = list(reported)
    return sorted({d for d in declared if any(refs_match(d, r) for r in seen)})


def manifest_refs(datasets: Iterable[DatasetRef]) -> list[str]:
    """Return the sorted, distinct dataset references of a manifest.

    Args:
        datasets: The manifest's dataset refs.

    Returns:
        References as produced by :func:`dataset_ref`.

    """
    return sorted({dataset_ref(d.uri, d.version) for d in datasets})


def manifest_keys(datasets: Iterable[DatasetRef]) -> list[tuple[str, str]]:
    """Return the sorted, distinct (dataset uri, reference) pairs of a manifest.

    The uri is the key producers give the dataset's reports on ``rw.data``; the
    processor keys a manifest's per-dataset records with it so both land in the
    same partition.

    Args:
        datasets: The manifest's dataset refs.

    Returns:
        (uri, reference as produced by :func:`dataset_ref`) pairs.

    """
    return sorted({(d.uri, dataset_ref(d.uri, d.version)) for d in datasets})


def manifest_ref_json(run_id: str, uri: str, ref: str, op: str = "add") -> bytes:
    """Encode one run's use of one dataset (``rw.internal.manifest-by-dataset``).

    Args:
        run_id: The run consuming the dataset.
        uri: The dataset uri (the record's key).
        ref: The dataset reference (:func:`dataset_ref`).
        op: ``add`` (the run reads it) or ``remove`` (the run's state was retired).

    Returns:
        Compact JSON ``{"v":1,"run":..,"uri":..,"ref":..}`` (``"op":"remove"`` added
        for a removal).

    """
    doc = {"v": 1, "run": run_id, "uri": uri, "ref": ref}
    if op != "add":
        doc["op"] = op
    return json.dumps(doc, separators=(",", ":")).encode()


def parse_manifest_ref(raw: bytes) -> tuple[str, str, str, str]:
    """Decode a record of :func:`manifest_ref_json`.

    Args:
        raw: The JSON bytes.

    Returns:
        (run id, dataset uri, dataset reference, op: ``add`` or ``remove``).

    Raises:
        ValueError: Not such a record (the reason says why).

    """
    doc, (run, uri, ref) = _dataset_doc(raw, "manifest ref")
    op = doc.get("op", "add")
    if op not in ("add", "remove"):
        msg = f"manifest ref: op must be add or remove, not {op!r}"
        raise ValueError(msg)
    return run, uri, ref, op


def _dataset_doc(raw: bytes, what: str, **const: str) -> tuple[dict[str, Any], list[str]]:
    """Parse a v1 record naming a run and a dataset; return it and its run, uri and ref.

    Raises:
        ValueError: Not JSON, not an object with ``v`` 1 (and the ``const`` values),
            or run, uri and ref not all non-empty strings (the reason names ``what``).

    """
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        msg = f"{what} is not JSON: {exc}"
        raise ValueError(msg) from exc
    if (not isinstance(doc, dict) or doc.get("v") != 1
            or any(doc.get(k) != v for k, v in const.items())):
        wanted = "".join(f' and {k}="{v}"' for k, v in const.items())
        msg = f"{what}: expected a JSON object with v=1{wanted}"
        raise ValueError(msg)
    fields = [doc.get(k) for k in ("run", "uri", "ref")]
    out = [f for f in fields if isinstance(f, str) and f]
    if len(out) != len(fields):
        msg = f"{what}: run, uri and ref must be non-empty strings"
        raise ValueError(msg)
    return doc, out


@dataclass(frozen=True, slots=True)
class DataAck:
    """The data agent's answer to a run's subscription (``rw.internal.data-by-run``, JSON).

    Sent after the dataset's kept reports, to the run, for every ``add``
    :func:`manifest_ref_json` record: the run knows that what the data agent
    had for the dataset has reached it (``reports`` of them, maybe none), so
    ``rule:missing_data_report`` judges the dataset only from then on
    (:func:`~runwatch.core.stream.join.data_answered`).
    """

    run_id: str
    uri: str
    ref: str
    reports: int = 0

    def to_json(self) -> bytes:
        """Return ``{"v":1,"ack":"subscribed","run":..,"uri":..,"ref":..,"reports":n}``."""
        return json.dumps({"v": 1, "ack": "subscribed", "run": self.run_id, "uri": self.uri,
                           "ref": self.ref, "reports": self.reports},
                          separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> DataAck:
        """Parse :meth:`to_json` output.

        Raises:
            ValueError: Not such a record (the reason says why).

        """
        doc, (run, uri, ref) = _dataset_doc(raw, "data ack", ack="subscribed")
        reports = doc.get("reports", 0)
        if type(reports) is not int or reports < 0:
            msg = f"data ack: reports must be a count, not {reports!r}"
            raise ValueError(msg)
        return cls(run, uri, ref, reports)


def remove_run(index: dict[str, list[str]], ref: str, run_id: str) -> bool:
    """Forget that a run consumes a dataset reference (a reference left with no run goes).

    Returns:
        Whether the index changed.

    """
    runs = index.get(ref)
    if not runs or run_id not in runs:
        return False
    runs.remove(run_id)
    if not runs:
        del index[ref]
    return True


def add_run(index: dict[str, list[str]], ref: str, run_id: str) -> bool:
    """Record that a run consumes a dataset reference.

    Args:
        index: Dataset reference → run ids; updated in place.
        ref: The dataset reference.
        run_id: The run.

    Returns:
        Whether the run was newly added.

    """
    runs = index.setdefault(ref, [])
    if run_id in runs:
        return False
    runs.append(run_id)
    return True


def report_ref(report: DataQualityReport | StageEvent) -> str:
    """Return the dataset reference a data-quality report (or a stage's output) is about.

    Args:
        report: The report.

    Returns:
        ``uri@version``.

    """
    return dataset_ref(report.dataset_uri, report.dataset_version)


def _assign(attributed_pairs: list[tuple[int, str]], all_gpus: set[int], busy: set[int],
           runs_on_node: NodeIndex, procs_visible: bool) -> dict[str, list[int]]:
    out: dict[str, set[int]] = {}
    attributed: set[int] = set()
    for index, run_id in attributed_pairs:
        out.setdefault(run_id, set()).add(index)
        attributed.add(index)
    for run_id, mine in runs_on_node.items():
        if mine:
            owned = set(mine) - attributed
        elif run_id in out:
            continue  # allocated without a GPU list: its attributed processes name its GPUs
        else:
            owned = all_gpus - attributed
        if procs_visible:  # an allocated GPU running no process is not in use: the run
            owned &= busy  # has not started there yet, or has already finished
        if owned or run_id not in out:
            out.setdefault(run_id, set()).update(owned)
    return {r: sorted(g) for r, g in out.items()}


def runs_for_report(index: dict[str, list[str]],
                    report: DataQualityReport | StageEvent) -> list[str]:
    """Return the runs consuming the dataset version a report (or a stage's output) is about.

    A report on an unversioned dataset reaches every run of any version of it,
    and a run that declared the dataset unversioned gets the reports of every
    version (:func:`refs_match`).

    Args:
        index: Dataset reference → run ids.
        report: The report.

    Returns:
        Sorted run ids.

    """
    ref = report_ref(report)
    runs = set(index.get(ref, []))
    if report.dataset_version:
        runs.update(index.get(report.dataset_uri, []))
    else:
        prefix = f"{report.dataset_uri}@"
        for key, rs in index.items():
            if key.startswith(prefix):
                runs.update(rs)
    return sorted(runs)


def assign_gpus(gpus: list[dict[str, Any]], runs_on_node: NodeIndex,
               procs_visible: bool = False) -> dict[str, list[int]]:
    """Return the runs a node sample concerns and the GPU indices of each.

    Process attribution in the sample wins (a GPU running a process of run R
    belongs to R); allocation from job events fills in GPUs without attributed
    processes. A run allocated with no GPU list owns every unattributed GPU,
    unless the sample attributes processes to it: then those GPUs are its own
    (an idle GPU next to it, or one a finished run left, is not). Where the
    node shows GPU processes at all, an allocated GPU running none is left
    out: the run has not started there yet or has already finished (its
    processes exit before the scheduler's end event arrives), and its idle
    GPUs must not read as falling occupancy.

    Args:
        gpus: The sample's GPUs as decoded dicts (``Codec.decode_dict``).
        runs_on_node: Run id → allocated GPU indices on this node.
        procs_visible: The node is known to report GPU processes (it did before),
            so a GPU running none is idle even when no GPU of this sample runs one
            (every run on the node finished before its end event arrived).

    Returns:
        Run id → sorted GPU indices; empty when no run is known on the node.

    """
    pairs: list[tuple[int, str]] = []
    busy: set[int] = set()
    indices: set[int] = set()
    for g in gpus:  # one pass: most GPUs list no process
        index = g["index"]
        indices.add(index)
        procs = g["processes"]
        if procs:
            busy.add(index)
            pairs += [(index, p["run_id"]) for p in procs if p.get("run_id")]
    if not pairs and not runs_on_node:
        return {}
    return _assign(pairs, indices, busy, runs_on_node, procs_visible or bool(busy))


_ENTRY_FIELDS = itemgetter("index", "util_pct", "sm_active_pct", "throttle_reasons", "xid",
                           "ecc_uncorrected", "mem_used_bytes", "mem_total_bytes", "temp_c",
                           "sm_clock_mhz", "nvlink_rx_bps", "nvlink_tx_bps")
"""A GPU's fields in :func:`~runwatch.core.stream.join_node.gpu_of` argument order."""


def node_entries(sample: dict[str, Any], runs_on_node: NodeIndex,
                 procs_visible: bool = False) -> dict[str, NodeEntry]:
    """Reduce a decoded node sample to one compact entry per run it concerns.

    Each entry keeps only that run's GPUs (see :func:`assign_gpus`) and the
    fields the run join reads (utilization, SM activity, throttling, XID, ECC,
    memory used/total, temperature, SM clock, NVLink rate:
    :data:`~runwatch.core.stream.join_node.Gpu`).

    Args:
        sample: A NodeSample as a decoded dict.
        runs_on_node: Run id → allocated GPU indices on this node.
        procs_visible: The node reported GPU processes before (see :func:`assign_gpus`).

    Returns:
        Run id → entry; empty when no run owns any GPU of the node.

    """
    gpus = sample["gpus"]
    routes = assign_gpus(gpus, runs_on_node, procs_visible)
    if not routes:
        return {}
    by_index = {g["index"]: g for g in gpus}
    node, at = sample["node"], int(sample["emitted_at_ms"])
    out = {}
    for run_id, indices in routes.items():
        if not indices:
            continue
        out[run_id] = NodeEntry(node, at, tuple(gpu_of(*_ENTRY_FIELDS(by_index[i]))
                                                for i in indices))
    return out


def entry_has_errors(entry: NodeEntry) -> bool:
    """Return whether a node entry carries an XID or uncorrected ECC errors (never dropped)."""
    return any(g[4] or g[5] > 0 for g in entry.gpus)


def allocation_changes(event: JobEvent, held: Sequence[str]) -> tuple[list[AllocChange], list[str]]:
    """Turn a job event into per-node allocation changes (``rw.internal.job-by-node``).

    An allocation adds the run to each of its nodes and removes it from nodes it
    held before but no longer has; an end (succeeded/failed/cancelled) removes
    it from every node it held or the event names; other events change nothing.

    Args:
        event: The job event.
        held: The nodes the run holds so far (its state's allocation).

    Returns:
        (changes, nodes the run holds afterwards).

    """
    run_id = event.run_id
    if not run_id:
        return [], list(held)
    at = int(event.emitted_at_ms)
    alloc = event.allocation
    nodes = list(dict.fromkeys(alloc.nodes)) if alloc is not None else []
    if event.state in ENDED:
        gone = sorted(set(held) | set(nodes))
        return [AllocChange(run_id, n, "remove", (), at) for n in gone], []
    if alloc is None:
        return [], list(held)
    gpus = tuple(sorted(set(alloc.gpu_indices)))
    out = [AllocChange(run_id, n, "add", gpus, at) for n in nodes]
    out += [AllocChange(run_id, n, "remove", (), at) for n in sorted(set(held) - set(nodes))]
    return out, nodes


def apply_alloc_change(runs_on_node: NodeIndex, change: AllocChange) -> bool:
    """Apply an allocation change to one node's index entry.

    Args:
        runs_on_node: Run id → allocated GPU indices on the change's node; updated in place.
        change: The change.

    Returns:
        Whether the entry changed.

    """
    if change.op == "remove":
        return runs_on_node.pop(change.run_id, None) is not None
    gpus = list(change.gpus)
    if runs_on_node.get(change.run_id) == gpus:
        return False
    runs_on_node[change.run_id] = gpus
    return True


REPLAY_SPAN_MS = 300_000
"""How far after an allocation a node's recent samples are replayed to the run."""


def replay_entries(recent: Iterable[tuple[int, Collection[str], T]], change: AllocChange,
                   decode: Callable[[T], dict[str, Any]]) -> list[NodeEntry]:
    """Return the entries a newly allocated run missed among a node's recent samples.

    A node's samples and the allocation records reach the node agent on two
    topics, so an allocation may arrive after samples taken once the run held the
    GPUs. Those samples (event time from the allocation's to
    :data:`REPLAY_SPAN_MS` after it) go to the run now, unless it already got
    them (process attribution). Samples further ahead are not the race this
    covers: a node's clock ahead of the scheduler's, or a simulation that ran
    its virtual clock ahead on the same node names, would otherwise push the
    run's watermark into the future and make its real samples late.

    Args:
        recent: The node's recent samples, oldest first, as (event time ms, the
            runs it was routed to, the sample in any form ``decode`` takes).
        change: An ``add`` change.
        decode: Gives a sample as a decoded dict (called only for samples replayed).

    Returns:
        The run's entries, oldest first; empty for a ``remove``.

    """
    if change.op != "add":
        return []
    out = []
    for at, routed, sample in recent:
        if change.run_id in routed or not change.at_ms <= at <= change.at_ms + REPLAY_SPAN_MS:
            continue
        entry = node_entries(decode(sample), {change.run_id: list(change.gpus)}).get(change.run_id)
        if entry is not None:
            out.append(entry)
    return out
