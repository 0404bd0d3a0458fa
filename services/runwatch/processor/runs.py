"""The run folder (the ``runs`` agent): run states, their checkpoints and acks, timers.

Every run-keyed topic (lineage, job, learning, artifact, the two internal
re-key topics and the timer's tick topic) comes here. Each record is folded
into its run's state (:mod:`runwatch.core.stream.join`), kept as JSON bytes in the
``runstate`` table (changelog-backed, never pickle); alerts and rejects go
out through the :class:`~runwatch.processor.outbox.Outbox`. Allocation changes
and manifest datasets are sent to the node and dataset re-keyers' internal
topics. Workload baselines are a global table (``baselines``) learned from
finished runs.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from runwatch.core.records import JobEvent, LearningStep, RunManifest, StepTiming
from runwatch.core.signals.workload import merge_finished
from runwatch.core.stream import join, rekey, runstate
from runwatch.core.stream.eventtime import absurd_event_time
from runwatch.core.stream.horizon import InputHorizon
from runwatch.core.stream.join_node import AllocChange, NodeAgg
from runwatch.core.stream.rekey import DataAck
from runwatch.processor.outbox import DATA_BY_RUN, JOB_BY_NODE, MANIFEST_BY_DATASET, Outbox

logger = logging.getLogger(__name__)

TELEMETRY = (StepTiming, LearningStep, NodeAgg)
"""High-rate records whose state changes may wait for the next checkpoint (:class:`RunFolder`)."""
Table = Any  # a faust table of bytes → bytes, or a dict in memory
TableFactory = Callable[..., Table]


def _tick_ms(value: Any) -> int | None:
    """Return a tick's time (epoch ms; empty: 0), or None when it is no integer."""
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return None


def _utf8(key: bytes) -> bool:
    try:
        key.decode()
    except UnicodeDecodeError:
        return False
    return True


class RunFolder:
    """The ``runs`` agent's state: run states (cache, deferred saves, acks) and baselines.

    Runs whose batch held only high-rate telemetry (:data:`TELEMETRY`) and
    raised nothing are saved by the next checkpoint, every ``save_interval_s``,
    instead of on every batch. Their events are acked only after that write,
    so Kafka offsets never pass state that is not in the changelog: a crash
    replays them (at-least-once).
    """

    def __init__(self, out: Outbox, table: TableFactory, as_current: Callable[[Any], None], *,
                 cfg: runstate.RunConfig, tick_topic: str, save_interval_s: float,
                 unacked_max: int, waiting_for_acks: Callable[[], bool]) -> None:
        """Create the folder and its tables.

        Args:
            out: The worker's outbox.
            table: Makes a table by name (``runstate``; ``baselines`` with ``glob=True``).
            as_current: Makes an event the current one (tables write to its partition).
            cfg: The join's configuration.
            tick_topic: Name of the timer's tick topic (its events run the time-driven rules).
            save_interval_s: Deferred-save interval (0: every batch saves).
            unacked_max: Checkpoint once this many events wait for their ack.
            waiting_for_acks: Whether the runtime waits for every started event's ack.
        """
        self.out = out
        self.as_current = as_current
        self.cfg = cfg
        self.tick_topic = tick_topic
        self.save_interval_s = save_interval_s
        self.unacked_max = unacked_max
        self.waiting_for_acks = waiting_for_acks
        self.runstate: Table = table("runstate")
        self.baselines: Table = table("baselines", glob=True)
        self.cache: dict[bytes, tuple[bytes, runstate.RunState]] = {}
        # deferred saves: run -> (live state, an event of its partition); their events' acks
        # wait in ``unacked`` until the checkpoint has written every dirty state
        self.dirty: dict[bytes, tuple[runstate.RunState, Any]] = {}
        self.horizon = InputHorizon()  # event time the runs agent's input has reached
        self.unacked: list[Any] = []
        self.checkpoint_at = time.monotonic()
        self.base_cache: dict[bytes, tuple[bytes, dict[str, list[float]]]] = {}

    # ------------------------------------------------------------------ state

    def load(self, key: bytes) -> runstate.RunState:
        """Return a run's live state (deferred, cached, from the table, or new)."""
        live = self.dirty.get(key)
        if live is not None:
            return live[0]  # changed since its last save (a checkpoint will write it)
        raw = self.runstate.get(key)
        hit = self.cache.get(key)
        if raw is not None and hit is not None and hit[0] is raw:
            return hit[1]  # live state (detectors as objects) still matches the table
        if raw is None:
            return runstate.new_state(key.decode())
        return runstate.loads(raw)

    def save(self, key: bytes, state: runstate.RunState) -> None:
        """Write a run's state to its table (and the cache)."""
        raw = runstate.dumps(state)
        self.runstate[key] = raw
        self.cache[key] = (raw, state)
        self.dirty.pop(key, None)

    async def checkpoint(self, *, force: bool = False) -> None:
        """Write every deferred state, then ack the events behind them."""
        due = time.monotonic() - self.checkpoint_at >= self.save_interval_s
        if not self.unacked or not (force or due or len(self.unacked) >= self.unacked_max):
            return
        with self.out.sections.timed("runs.checkpoint", len(self.dirty)):
            for key, (state, event) in list(self.dirty.items()):
                self.as_current(event)  # the table writes to the partition of the run's events
                self.save(key, state)
            for event in self.unacked:
                event.ack()  # the stream's own ack came first: this one is the final
            self.unacked = []
        self.checkpoint_at = time.monotonic()

    def revoked(self, revoked: set[Any]) -> None:
        """Forget deferred state of revoked partitions whose events were not acked.

        Normally none is left: the runtime waits for every started event to be
        acked before it revokes, and the timer checkpoints during a rebalance.
        Should some remain, the next owner (maybe this worker again) restores the
        saved state from the changelog and replays them from the last committed offset.
        """
        parts = {tp.partition for tp in revoked}
        for key in [k for k in self.dirty if self.out.partition(k) in parts]:
            del self.dirty[key]
            self.cache.pop(key, None)  # the cached object carries the unsaved changes
        self.unacked = [ev for ev in self.unacked if ev.message.tp not in revoked]

    def _baseline(self, state: runstate.RunState) -> dict[str, list[float]] | None:
        key = state.workload.encode()
        raw = self.baselines.get(key)
        if not raw:
            return None
        hit = self.base_cache.get(key)
        if hit is not None and hit[0] is raw:
            return hit[1]
        parsed: dict[str, list[float]] = json.loads(raw)
        self.base_cache[key] = (raw, parsed)
        return parsed

    def _learn_baseline(self, state: runstate.RunState) -> None:
        stats = join.finished_stats(state)
        if stats and state.alerts.get("fired"):
            # a run that paged teaches nothing of its indicators, but a pause it came back
            # from is its workload's normal range even when that pause is what paged
            stats = {k: v for k, v in stats.items() if k == join.PAUSE_STAT}
        if not stats:
            return
        key = state.workload.encode()
        raw = self.baselines.get(key)
        merged = merge_finished(json.loads(raw) if raw else {}, stats)
        self.baselines[key] = json.dumps(merged).encode()

    # ------------------------------------------------------------------ batches

    async def batch(self, events: list[Any]) -> None:
        """Fold one batch the agent took; acks wait for the checkpoint when saves are deferred."""
        if self.save_interval_s <= 0:
            await self.fold(events)
            return
        for event in events:
            event.message.incref()  # hold the ack until the state is in the changelog
        try:
            await self.fold(events)
        finally:  # only whole batches wait for a checkpoint (the timer may run one midway)
            self.unacked.extend(events)
        await self.checkpoint(force=self.waiting_for_acks())

    async def fold(self, events: list[Any]) -> None:
        """Fold a batch into the run states: one load, one join pass, one table write per run."""
        sec = self.out.sections
        with sec.timed("runs.batch", len(events)):
            await self._fold(events)
        sec.maybe_log()

    async def _fold(self, events: list[Any]) -> None:
        out = self.out
        by_run: dict[bytes, list[tuple[Any, Any, bytes]]] = {}
        held: dict[str, list[str]] = {}  # run -> allocated nodes, as of this batch
        wall = out.clock()
        for event in events:
            msg = event.message
            self.as_current(event)
            if msg.topic == self.tick_topic:
                await self._flush(by_run)
                by_run = {}
                self.as_current(event)
                at_ms = _tick_ms(event.value)
                why = ("tick value is not an integer (epoch ms)" if at_ms is None else
                       absurd_event_time(at_ms, wall, 0, self.cfg.max_ahead_ms))
                if why is not None or at_ms is None:  # a far-future tick would stall every run
                    await out.dead(msg, why or "", event.value, event.key)
                    continue
                await self.tick(msg.partition, at_ms)
                continue
            out.counters["events"] += 1
            rec = out.decode(msg.topic, event.value)
            if isinstance(rec, list):  # a bundle of node aggregates, all runs of this partition
                for i, (agg, raw) in enumerate(rec):
                    if isinstance(agg, str):
                        await out.dead(msg, agg, raw, event.key, part=i)
                    else:
                        self.horizon.observe(msg.tp, agg.emitted_at_ms, wall)
                        by_run.setdefault(agg.run_id.encode(), []).append((agg, event, raw))
                continue
            if isinstance(rec, str):
                await out.dead(msg, rec, event.value, event.key)
                continue
            if isinstance(rec, DataAck):  # no event time: not an input of the horizon
                run = bytes(event.key or b"")
                if run and run not in self.dirty and run not in self.runstate:
                    out.counters["data_acks_without_state"] += 1  # retired since: nothing waits
                    continue
            else:
                self.horizon.observe(msg.tp, rec.emitted_at_ms, wall)
                run = self._run_of(msg.topic, event.key, rec)
            if not run:
                await out.dead(msg, "run-keyed record without run_id", event.value, event.key)
                continue
            if not _utf8(run):  # only a message key can be (a run id field is UTF-8 Avro)
                await out.dead(msg, "message key is not a UTF-8 run id", event.value, event.key)
                continue
            if isinstance(rec, JobEvent):
                await self._index_job(rec, held)
            elif isinstance(rec, RunManifest):
                await self._index_manifest(rec)
            by_run.setdefault(run, []).append((rec, event, event.value))
        await self._flush(by_run)

    def _run_of(self, topic: str, key: bytes | None, rec: Any) -> bytes:
        """Return the run a record of a run-keyed topic is folded into (empty: none).

        A data report re-keyed by the data agent belongs to the run it was
        forwarded to, its message key: a dataset's report goes to every run
        that reads the dataset, and most reports name no run at all.
        """
        if self.out.deployed(topic) == DATA_BY_RUN:
            return bytes(key or b"")
        return (rec.run_id or "").encode()

    async def _flush(self, by_run: dict[bytes, list[tuple[Any, Any, bytes]]]) -> None:
        now = self.out.clock()
        outputs: list[Any] = []
        sec = self.out.sections
        for key, items in by_run.items():
            self.as_current(items[0][1])
            state = self.load(key)
            finished = False
            before = len(outputs)
            with sec.timed("runs.join", len(items)):
                for rec, event, raw in items:
                    state, outs = join.step(state, rec, now, self.cfg, raw=bytes(raw),
                                            topic=event.message.topic,
                                            baseline=self._baseline(state))
                    outputs += outs
                    finished = finished or isinstance(rec, JobEvent)
            if finished:
                self._learn_baseline(state)
            if (self.save_interval_s > 0 and len(outputs) == before
                    and all(isinstance(it[0], TELEMETRY) for it in items)):
                self.dirty[key] = (state, items[-1][1])  # saved by the next checkpoint
                continue
            with sec.timed("runs.save"):
                self.save(key, state)
        with sec.timed("runs.publish", len(outputs)):
            await self.out.publish(outputs)

    async def tick(self, partition: int, at_ms: int) -> None:
        """Run the time-driven rules (stall, missing report, hold expiry) of one partition."""
        now = max(at_ms, self.out.clock())
        horizon = self.horizon.at(now)  # absence rules: event time the input has reached
        keys = list(self.runstate.keys())
        keys += [k for k in self.dirty if k not in self.runstate]  # new runs not saved yet
        retired = 0
        for key in keys:
            if self.out.partition(key) != partition:
                continue
            state = self.load(key)
            before = join.tick_fingerprint(state)
            state, outputs = join.tick(state, now, self.cfg, horizon)
            if join.retire_due(state, self.cfg, horizon):
                outputs += join.retire(state, self.cfg, now, horizon)
                await self._retire(key, state)
                retired += 1
            elif outputs or join.tick_fingerprint(state) != before:
                self.save(key, state)
            await self.out.publish(outputs)
        if retired:
            logger.info("partition %d: retired %d run states past their retention "
                        "(%d retired since start)", partition, retired,
                        self.out.counters["runs_retired"])

    async def _retire(self, key: bytes, state: runstate.RunState) -> None:
        """Delete a run's state (a changelog tombstone); drop its datasets and nodes.

        A run that never ended still holds its nodes in the nodes agent's index: their
        samples would start a state of it again and again, each dropped after the hold.
        A later event of the run starts a new state, as for a run never seen.
        """
        for node in state.nodes:  # at 0: long off its GPUs, no late sample is its own
            change = AllocChange(state.run_id, node, "remove", (), 0)
            await self.out.send(JOB_BY_NODE, node.encode(), change.to_json())
        for uri, ref in state.dataset_keys:
            await self.out.send(MANIFEST_BY_DATASET, uri.encode(),
                                rekey.manifest_ref_json(state.run_id, uri, ref, "remove"))
        if key in self.runstate:
            del self.runstate[key]
        self.cache.pop(key, None)
        self.dirty.pop(key, None)
        self.out.counters["runs_retired"] += 1

    async def _index_job(self, rec: JobEvent, held: dict[str, list[str]]) -> None:
        """Send the run's allocation changes to the workers owning its nodes' samples."""
        run_id = rec.run_id or ""
        prev = held.get(run_id)
        if prev is None or rec.state in join.NOT_RUNNING:
            state = self.load(run_id.encode())
            if state.nodes and join.stale_job_event(state, rec):  # older than the run's
                return
            prev = state.nodes if prev is None else prev
        changes, held[run_id] = rekey.allocation_changes(rec, prev)
        for change in changes:
            await self.out.send(JOB_BY_NODE, change.node.encode(), change.to_json())

    async def _index_manifest(self, rec: RunManifest) -> None:
        """Send one record per dataset of the manifest to the worker owning that dataset."""
        if not rec.run_id:
            return
        for uri, ref in rekey.manifest_keys(rec.datasets):
            await self.out.send(MANIFEST_BY_DATASET, uri.encode(),
                                rekey.manifest_ref_json(rec.run_id, uri, ref))
