"""Node re-keying: node samples forwarded to the runs that own their GPUs (the ``nodes`` agent).

Node samples are decoded to dicts (no record objects), nodes that no run owns
are skipped at once, and what a run's join needs becomes one compact
:class:`~runwatch.core.stream.join_node.NodeAgg` per run per batch; the aggregates go
out on ``rw.internal.node-by-run`` (JSON, internal topic) bundled: one message
per destination partition per batch (:func:`bundles`), since every message
costs the producer and the runs agent far more than its bytes.

The runs agent sends each allocation change of a run as one
:class:`~runwatch.core.stream.join_node.AllocChange` record per node to
``rw.internal.job-by-node``, keyed and partitioned like ``rw.exec.node``
(node). The ``nodes`` agent reads both topics, so the node → runs index
(``node-runs``, keyed by node: JSON ``{run: [gpu indices]}``) is a local table
of the worker that owns the node's samples: no cross-worker race. An allocation
that arrives after samples taken once the run held the GPUs gets them replayed
from the last :data:`REPLAY_MAX` samples per node, kept in memory as their
encoded bytes (decoded again only when replayed: one untracked object per
sample instead of some forty dicts and lists that the garbage collector would
scan over and over while they age out).
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable
from typing import Any

from runwatch.core.codec import DecodeError
from runwatch.core.jsontext import parse
from runwatch.core.records import NodeSample
from runwatch.core.stream import rekey
from runwatch.core.stream.eventtime import absurd_event_time
from runwatch.core.stream.join_node import AllocChange, NodeAgg, NodeEntry
from runwatch.processor.outbox import JOB_BY_NODE, NODE_BY_RUN, Outbox

AGG_MS = 1_000  # entries of one node for one run within this span collapse to the newest
REPLAY_MAX = 8  # recent samples kept per node (in memory) for allocations that arrive late
ERRORS_KEPT = 8
"""Samples with an XID or uncorrected ECC errors a node keeps besides its recent ones: an
allocation later than :data:`REPLAY_MAX` samples (40 s at the agent's 5 s) lost the XID
of its run's GPU with the ordinary samples, and the XID never paged."""
RELEASES_KEPT = 8
"""Runs a node released lately (its index no longer names them) kept in memory, with
the GPUs they held there and when, for their samples that arrive after the release
(:meth:`NodeRekeyer._released`)."""
BUNDLE_MAX_BYTES = 256 * 1024  # one node-by-run message at most (Kafka's default limit: 1 MiB)
NodeIndex = rekey.NodeIndex
Table = Any  # a faust table of bytes → bytes, or a dict in memory
TableFactory = Callable[..., Table]


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


class NodeRekeyer:
    """The ``nodes`` agent: owns the node → runs index and the nodes' recent samples."""

    def __init__(self, out: Outbox, table: TableFactory,
                 as_current: Callable[[Any], None], *, min_event_ms: int = 0,
                 max_ahead_ms: int = 0) -> None:
        """Create the router and its table.

        Args:
            out: The worker's outbox.
            table: Makes a table by name (``node-runs``).
            as_current: Makes an event the current one (tables write to its partition).
            min_event_ms: Samples stamped before this are dead-lettered (0: off).
            max_ahead_ms: Samples stamped this far ahead of the clock are dead-lettered
                (0: off): one must not make a run's aggregate, and so every node's
                entries in it, late (:mod:`runwatch.core.stream.eventtime`).
        """
        self.time_bounds = (min_event_ms, max_ahead_ms)
        self.out = out
        self.as_current = as_current
        self.node_runs: Table = table("node-runs")  # node -> {run: [gpu indices]}, local
        # node -> its recent samples: (event time ms, runs routed to, encoded sample)
        self.node_recent: dict[str, deque[tuple[int, tuple[str, ...], bytes]]] = {}
        self.node_errors: dict[str, deque[tuple[int, tuple[str, ...], bytes]]] = {}
        self.procs_seen: set[str] = set()  # nodes whose samples showed GPU processes
        # node -> runs released from it lately: (run, its GPUs there, released at ms)
        self.releases: dict[str, list[tuple[str, list[int], int]]] = {}
        self.parsed: dict[str, tuple[bytes, NodeIndex]] = {}  # node -> (table bytes, parsed)

    async def batch(self, events: list[Any]) -> None:
        """Forward a batch of node samples as per-run aggregates.

        The batch interleaves ``rw.exec.node`` samples and ``rw.internal.job-by-node``
        allocation changes (both keyed by node, co-partitioned) in arrival order;
        each sample is routed with the node → runs index as it stands at that point.
        """
        out, sec = self.out, self.out.sections
        is_alloc = [out.deployed(ev.message.topic) == JOB_BY_NODE for ev in events]
        with sec.timed("node.decode", len(events)):
            decoded = iter(out.codec.decode_many_dicts([
                bytes(ev.value) if isinstance(ev.value, bytes | bytearray) else b""
                for ev, alloc in zip(events, is_alloc, strict=True) if not alloc]))
        pairs: list[tuple[str, NodeEntry]] = []
        with sec.timed("node.route", len(events)):
            cache: dict[str, NodeIndex] = {}
            for event, alloc in zip(events, is_alloc, strict=True):
                if alloc:
                    pairs += await self._alloc(event, cache)
                    continue
                dec = next(decoded)
                if isinstance(dec, DecodeError) or dec[0] != NodeSample.AVRO_NAME:
                    reason = (f"undecodable: {dec.reason}" if isinstance(dec, DecodeError)
                              else f"record {dec[0]} not allowed on topic "
                                   f"{out.deployed(event.message.topic)}")
                    await out.dead(event.message, reason, event.value, event.key)
                    continue
                absurd = absurd_event_time(dec[1]["emitted_at_ms"], out.clock(),
                                           *self.time_bounds)
                if absurd is not None:
                    await out.dead(event.message, absurd, event.value, event.key)
                    continue
                pairs += self._sample(dec[1], event.value, cache)
            aggs = aggregate(pairs)
        with sec.timed("node.forward", len(aggs)):
            for key, part, value in bundles(aggs, out.partition):
                await out.send(NODE_BY_RUN, key, value, partition=part)
        sec.maybe_log()

    def _sample(self, d: dict[str, Any], raw: bytes,
                cache: dict[str, NodeIndex]) -> list[tuple[str, NodeEntry]]:
        node = d["node"]
        index = self._index(node, cache)
        if node in self.releases:
            index = self._released(node, index, d["emitted_at_ms"])
        recent = self.node_recent.get(node)
        if recent is None:
            recent = self.node_recent[node] = deque(maxlen=REPLAY_MAX)
        if not index and not any(pr.get("run_id") for g in d["gpus"] for pr in g["processes"]):
            self.out.counters["unowned"] += 1  # no run owns a GPU here: skip early
            self._keep(node, recent, (d["emitted_at_ms"], (), raw), d)
            return []
        if any(g["processes"] for g in d["gpus"]):
            self.procs_seen.add(node)  # this node's agent reports GPU processes
        entries = rekey.node_entries(d, index, procs_visible=node in self.procs_seen)
        self._keep(node, recent, (d["emitted_at_ms"], tuple(entries), raw), d)
        return list(entries.items())

    def _released(self, node: str, index: NodeIndex, at: int) -> NodeIndex:
        """Return the node's index with the runs it released after ``at`` (a copy), if any.

        A release reaches this agent through the runs agent, so samples a node took
        before it (its agent behind the scheduler hook, a spool drained after a broker
        hiccup) can arrive after it: they go to the run that held the GPUs then, up to
        :data:`~runwatch.core.stream.rekey.REPLAY_SPAN_MS` before the release (an XID in
        its last seconds is its own, and paged the node's next job instead). A node's
        samples arrive in order, so once one stamped at or after a release has arrived,
        no earlier one follows: the release is forgotten.
        """
        kept = [r for r in self.releases[node] if at < r[2]]
        if not kept:
            del self.releases[node]
            return index
        self.releases[node] = kept
        back = {run: gpus for run, gpus, until in kept
                if run not in index and at >= until - rekey.REPLAY_SPAN_MS}
        return {**index, **back} if back else index

    def _keep(self, node: str, recent: deque[tuple[int, tuple[str, ...], bytes]],
              kept: tuple[int, tuple[str, ...], bytes], d: dict[str, Any]) -> None:
        """Keep a sample for late allocations: with the recent ones, and with the errors."""
        recent.append(kept)
        for g in d["gpus"]:  # (a loop: a generator per sample cost more than the rest of it)
            if g["xid"] or g["ecc_uncorrected"] > 0:
                errors = self.node_errors.get(node)
                if errors is None:
                    errors = self.node_errors[node] = deque(maxlen=ERRORS_KEPT)
                errors.append(kept)
                break

    def _index(self, node: str, cache: dict[str, NodeIndex]) -> NodeIndex:
        """Return the node's index for this batch, parsed once per value the table holds.

        The parsed index is kept with the bytes it came from and reused while the
        table still holds those very bytes; :meth:`_alloc` changes it only together
        with a write of new bytes, so a stale copy is never reused.
        """
        index = cache.get(node)
        if index is None:
            raw = self.node_runs.get(node.encode())
            hit = self.parsed.get(node)
            if not raw:
                self.parsed.pop(node, None)
                index = {}
            elif hit is not None and hit[0] is raw:
                index = hit[1]
            else:
                index = parse(raw)
                self.parsed[node] = (raw, index)
            cache[node] = index
        return index

    async def _alloc(self, event: Any, cache: dict[str, NodeIndex]) -> list[tuple[str, NodeEntry]]:
        """Apply one allocation change to the node → runs index (a local table).

        Returns:
            (run, entry) pairs of the node's recent samples that a newly added run
            missed (:func:`~runwatch.core.stream.rekey.replay_entries`).

        """
        try:
            value = bytes(event.value) if isinstance(event.value, bytes | bytearray) else b""
            change = AllocChange.from_json(value)
        except ValueError as exc:
            await self.out.dead(event.message, str(exc), event.value, event.key)
            return []
        index = self._index(change.node, cache)
        held = index.get(change.run_id)
        releases = self.releases.get(change.node)
        if releases and change.op == "add":  # allocated here again: the index routes it
            releases[:] = [r for r in releases if r[0] != change.run_id]
        elif change.op == "remove" and held is not None:
            releases = self.releases.setdefault(change.node, [])
            releases.append((change.run_id, held, change.at_ms))
            del releases[:-RELEASES_KEPT]
        if rekey.apply_alloc_change(index, change):
            self.as_current(event)  # the local table writes to this event's partition
            self.node_runs[change.node.encode()] = json.dumps(index).encode()
        codec = self.out.codec
        kept = {id(k): k for k in (*self.node_errors.get(change.node, ()),
                                   *self.node_recent.get(change.node, ()))}  # once each
        return [(change.run_id, e)
                for e in rekey.replay_entries(sorted(kept.values(), key=lambda k: k[0]), change,
                                              lambda raw: codec.decode_dict(raw)[1])]
