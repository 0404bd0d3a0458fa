"""Re-keying agents of the processor: node samples and data reports forwarded to runs.

Split from :mod:`runwatch.processor.app`. Node samples are decoded to dicts
(no record objects), nodes that no run owns are skipped at once, and what a
run's join needs becomes one compact :class:`~runwatch.core.join_node.NodeAgg`
per run per batch; the aggregates go out on ``rw.internal.node-by-run`` (JSON,
internal topic) bundled: one message per destination partition per batch
(:func:`bundles`), since every message costs the faust producer and the runs
agent far more than its bytes.

Node samples are joined to runs the same way as data reports below: the runs
agent sends each allocation change of a run as one
:class:`~runwatch.core.join_node.AllocChange` record per node to
``rw.internal.job-by-node``, keyed and partitioned like ``rw.exec.node``
(node). The ``nodes`` agent reads both topics, so the node → runs index
(``node-runs``, keyed by node: JSON ``{run: [gpu indices]}``) is a local table
of the worker that owns the node's samples: no cross-worker race. An allocation
that arrives after samples taken once the run held the GPUs gets them replayed
from the last :data:`REPLAY_MAX` samples per node, kept in memory as their
encoded bytes (decoded again only when replayed: one untracked object per
sample instead of some forty dicts and lists that the garbage collector would
scan over and over while they age out).

Data reports are joined to runs as a co-partitioned stream join: the lineage
agent sends one ``{"v":1,"run","uri","ref"}`` record per manifest dataset to
``rw.internal.manifest-by-dataset``, keyed and partitioned like ``rw.data``
(dataset uri). The ``data`` agent reads both topics, so the dataset → runs
index (``dataset-index``, keyed by uri: JSON ``{ref: [run ids]}``) and the
reports kept per reference (``dataset-reports``: JSON ``{"first", "recent"}``,
base64 Avro) are local tables of one worker: no cross-worker race.
"""

from __future__ import annotations

import base64
import json
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from runwatch.core import rekey
from runwatch.core.codec import DecodeError
from runwatch.core.join_node import AllocChange, NodeAgg, NodeEntry
from runwatch.core.records import DataQualityReport, NodeSample

if TYPE_CHECKING:
    from runwatch.processor.app import Processor

AGG_MS = 1_000  # entries of one node for one run within this span collapse to the newest
RECENT_MAX = 16  # latest reports kept per dataset reference (besides the first one)
MANIFEST_BY_DATASET = "rw.internal.manifest-by-dataset"
JOB_BY_NODE = "rw.internal.job-by-node"
REPLAY_MAX = 8  # recent samples kept per node (in memory) for allocations that arrive late
BUNDLE_MAX_BYTES = 256 * 1024  # one node-by-run message at most (Kafka's default limit: 1 MiB)
NodeIndex = rekey.NodeIndex


def aggregate(entries: list[tuple[str, NodeEntry]]) -> list[NodeAgg]:
    """Collapse a batch's (run, node entry) pairs into one aggregate per run.

    Per (run, node) only the newest entry per ``AGG_MS`` of event time is kept,
    plus every older one that carries an XID or uncorrected ECC error; a
    replayed backlog keeps its history.

    Args:
        entries: (run id, entry) in arrival order.

    Returns:
        One :class:`NodeAgg` per run, entries in event-time order.

    """
    latest: dict[tuple[str, str, int], NodeEntry] = {}
    keep: dict[str, list[NodeEntry]] = {}
    for run_id, e in entries:
        slot = (run_id, e.node, e.at_ms // AGG_MS)
        prev = latest.get(slot)
        if prev is not None and rekey.entry_has_errors(prev) and prev.at_ms <= e.at_ms:
            keep.setdefault(run_id, []).append(prev)
        if prev is None or prev.at_ms <= e.at_ms:
            latest[slot] = e
        elif rekey.entry_has_errors(e):
            keep.setdefault(run_id, []).append(e)
    for (run_id, _node, _slot), e in latest.items():
        keep.setdefault(run_id, []).append(e)
    return [NodeAgg(run_id, max(e.at_ms for e in es), tuple(sorted(es, key=lambda e: e.at_ms)))
            for run_id, es in keep.items()]


async def node_batch(p: Processor, events: list[Any]) -> None:
    """Forward a batch of node samples as per-run aggregates.

    The batch interleaves ``rw.exec.node`` samples and ``rw.internal.job-by-node``
    allocation changes (both keyed by node, co-partitioned) in arrival order;
    each sample is routed with the node → runs index as it stands at that point.
    """
    is_alloc = [p._deployed(ev.message.topic) == JOB_BY_NODE for ev in events]
    with p.sections.timed("node.decode", len(events)):
        decoded = iter(p.codec.decode_many_dicts([
            bytes(ev.value) if isinstance(ev.value, bytes | bytearray) else b""
            for ev, alloc in zip(events, is_alloc, strict=True) if not alloc]))
    pairs: list[tuple[str, NodeEntry]] = []
    with p.sections.timed("node.route", len(events)):
        cache: dict[str, NodeIndex] = {}
        for event, alloc in zip(events, is_alloc, strict=True):
            msg = event.message
            if alloc:
                pairs += await alloc_event(p, event, cache)
                continue
            dec = next(decoded)
            if isinstance(dec, DecodeError) or dec[0] != NodeSample.AVRO_NAME:
                reason = (f"undecodable: {dec.reason}" if isinstance(dec, DecodeError)
                          else f"record {dec[0]} not allowed on topic {p._deployed(msg.topic)}")
                await p._dead(msg.topic, msg.partition, msg.offset, reason, event.value,
                              event.key)
                continue
            d = dec[1]
            node = d["node"]
            index = _node_runs(p, node, cache)
            recent = p.node_recent.get(node)
            if recent is None:
                recent = p.node_recent[node] = deque(maxlen=REPLAY_MAX)
            if not index and not any(pr.get("run_id") for g in d["gpus"]
                                     for pr in g["processes"]):
                p.counters["unowned"] += 1  # no run owns a GPU here: skip early
                recent.append((d["emitted_at_ms"], (), event.value))
                continue
            if any(g["processes"] for g in d["gpus"]):
                p.procs_seen.add(node)  # this node's agent reports GPU processes
            entries = rekey.node_entries(d, index, procs_visible=node in p.procs_seen)
            recent.append((d["emitted_at_ms"], tuple(entries), event.value))
            pairs.extend(entries.items())
        aggs = aggregate(pairs)
    with p.sections.timed("node.forward", len(aggs)):
        for key, part, value in bundles(aggs, p._partition):
            await p._send(p.node_by_run, key, value, partition=part)
    p.sections.maybe_log()


def bundles(aggs: list[NodeAgg], partition_of: Callable[[bytes], int],
            max_bytes: int = BUNDLE_MAX_BYTES) -> list[tuple[bytes, int, bytes]]:
    """Group a batch's aggregates into one payload per destination partition.

    Every run in a bundle hashes to the partition it is sent to, so the runs
    agent that reads it owns all of them (and their table partitions). A
    partition's bundle is split once it would pass ``max_bytes``.

    Args:
        aggs: The batch's aggregates.
        partition_of: The producers' partitioner (run id bytes → partition).
        max_bytes: Bound on one payload (well under Kafka's 1 MiB message limit).

    Returns:
        (key: the first run id, partition, :meth:`NodeAgg.bundle` payload) per message.

    """
    groups: dict[int, list[list[NodeAgg]]] = {}
    sizes: dict[int, int] = {}
    for agg in aggs:
        part = partition_of(agg.run_id.encode())
        size = 64 + 48 * sum(len(e.gpus) + 1 for e in agg.nodes)  # rough JSON size
        chunks = groups.setdefault(part, [[]])
        if chunks[-1] and sizes.get(part, 0) + size > max_bytes:
            chunks.append([])
            sizes[part] = 0
        chunks[-1].append(agg)
        sizes[part] = sizes.get(part, 0) + size
    return [(chunk[0].run_id.encode(), part, NodeAgg.bundle(chunk))
            for part, chunks in groups.items() for chunk in chunks]


def _node_runs(p: Processor, node: str, cache: dict[str, NodeIndex]) -> NodeIndex:
    index = cache.get(node)
    if index is None:
        raw = p.node_runs.get(node.encode())
        index = cache[node] = json.loads(raw) if raw else {}
    return index


async def alloc_event(p: Processor, event: Any,
                      cache: dict[str, NodeIndex]) -> list[tuple[str, NodeEntry]]:
    """Apply one allocation change to the node → runs index (a local table).

    Returns:
        (run, entry) pairs of the node's recent samples that a newly added run
        missed (:func:`~runwatch.core.rekey.replay_entries`).

    """
    msg = event.message
    try:
        value = bytes(event.value) if isinstance(event.value, bytes | bytearray) else b""
        change = AllocChange.from_json(value)
    except ValueError as exc:
        await p._dead(msg.topic, msg.partition, msg.offset, str(exc), event.value, event.key)
        return []
    index = _node_runs(p, change.node, cache)
    if rekey.apply_alloc_change(index, change):
        p.as_current(event)  # the local table writes to this event's partition
        p.node_runs[change.node.encode()] = json.dumps(index).encode()
    return [(change.run_id, e)
            for e in rekey.replay_entries(p.node_recent.get(change.node, ()), change,
                                          lambda raw: p.codec.decode_dict(raw)[1])]


async def dataset_event(p: Processor, event: Any) -> None:
    """Handle one event of the ``data`` agent (rw.data or rw.internal.manifest-by-dataset).

    Both topics are keyed by dataset uri with the producers' partitioner and
    read by this one agent, so a dataset's reports and the manifests naming it
    meet in one worker, in partition order, with the index in local tables.
    """
    if p._deployed(event.message.topic) == MANIFEST_BY_DATASET:
        await manifest_ref_event(p, event)
    else:
        await data_event(p, event)


def _index(p: Processor, uri: str) -> dict[str, list[str]]:
    raw = p.dataset_index.get(uri.encode())
    return json.loads(raw) if raw else {}


async def manifest_ref_event(p: Processor, event: Any) -> None:
    """Index a run under a dataset and send it the dataset's first and recent reports.

    They are sent even when the run is indexed already (a repeated manifest,
    or a report that named the run): the run may not have been able to fold
    them then (held while it was unseen, and dead-lettered), and it folds a
    report it has folded before only once (its event id).
    """
    msg = event.message
    try:
        value = bytes(event.value) if isinstance(event.value, bytes | bytearray) else b""
        run_id, uri, ref = rekey.parse_manifest_ref(value)
    except ValueError as exc:
        await p._dead(msg.topic, msg.partition, msg.offset, str(exc), event.value, event.key)
        return
    index = _index(p, uri)
    if rekey.add_run(index, ref, run_id):
        p.dataset_index[uri.encode()] = json.dumps(index).encode()
    for report in recent_reports(p, ref):
        await p._forward(p.data_by_run, run_id, report)


async def data_event(p: Processor, event: Any) -> None:
    """Remember a data report per dataset and forward it to the runs consuming it.

    Each copy is keyed by the run it goes to (the runs agent folds it into
    that run whatever the report's own ``run_id``): every run whose manifest
    names the dataset gets it once, and so does the run the report names.
    """
    msg = event.message
    rec = p._decode(msg.topic, event.value)
    if isinstance(rec, str) or not isinstance(rec, DataQualityReport):
        reason = rec if isinstance(rec, str) else "not a DataQualityReport"
        await p._dead(msg.topic, msg.partition, msg.offset, reason, event.value, event.key)
        return
    value = bytes(event.value)
    ref = rekey.report_ref(rec)
    index = _index(p, rec.dataset_uri)
    if rec.run_id and rec.run_id not in rekey.runs_for_report(index, rec):
        # a report naming its run subscribes that run to the dataset, as its manifest
        # would: it first gets the stored reports (older ones before this one)
        for report in recent_reports(p, ref):
            await p._forward(p.data_by_run, rec.run_id, report)
        rekey.add_run(index, ref, rec.run_id)
        p.dataset_index[rec.dataset_uri.encode()] = json.dumps(index).encode()
    b64 = base64.b64encode(value).decode()
    remember_report(p, ref, b64)
    if rec.dataset_version:  # for runs that declare the dataset unversioned (any version)
        remember_report(p, rec.dataset_uri, b64)
    for run_id in rekey.runs_for_report(index, rec):  # each run once, keyed by the run
        await p._forward(p.data_by_run, run_id, value)


def remember_report(p: Processor, ref: str, b64: str) -> None:
    """Keep a report (base64) as the first and among the recent ones of a dataset reference."""
    key = ref.encode()
    raw = p.dataset_reports.get(key)
    doc = json.loads(raw) if raw else {}
    doc.setdefault("first", b64)
    doc["recent"] = [*doc.get("recent", []), b64][-RECENT_MAX:]
    p.dataset_reports[key] = json.dumps(doc).encode()


def recent_reports(p: Processor, ref: str) -> list[bytes]:
    """Return a dataset's first report (its reference) and its latest ones, oldest first."""
    raw = p.dataset_reports.get(ref.encode())
    if not raw:
        return []
    doc = json.loads(raw)
    recent = doc.get("recent", [])
    first = [doc["first"]] if doc.get("first") and doc["first"] not in recent else []
    return [base64.b64decode(x) for x in first + recent]
