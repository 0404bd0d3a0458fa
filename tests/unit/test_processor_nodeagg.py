"""Node samples reduced to compact per-run aggregates (internal topic) and cheap state saves."""

import dataclasses
import json
import math
import random

import pytest

from runwatch.core.codec import load_codec
from runwatch.core.records import Alert, GpuProcess, GpuSample, NodeSample, Source
from runwatch.core.signals import indicators as ind
from runwatch.core.signals.indwatch import HEAVY_EVERY
from runwatch.core.stream import join_node, rekey, runstate
from runwatch.core.stream.join_node import NodeAgg, NodeEntry, pct_mean
from runwatch.processor.nodes import aggregate
from runwatch.processor.settings import ProcessorSettings
from runwatch.sim.replay import as_messages, replay
from runwatch.testing import scenarios

SRC = Source(kind="processor", host="h", runwatch_version="0")
CFG = runstate.RunConfig(source=SRC)
T0 = 1_700_000_000_000


def gpu(i, util=90.0, sm=70.0, xid=None, ecc=0, run=None):
    procs = (GpuProcess(pid=1, run_id=run, used_mem_bytes=1),) if run else ()
    return GpuSample(index=i, uuid=f"g{i}", util_pct=util, sm_active_pct=sm, mem_used_bytes=1,
                     mem_total_bytes=2, power_w=1.0, temp_c=1.0, sm_clock_mhz=1,
                     mem_clock_mhz=1, throttle_reasons=0, ecc_corrected=0,
                     ecc_uncorrected=ecc, xid=xid, processes=procs)


def sample(gpus, node="n0", at=T0):
    return NodeSample(event_id="e", run_id=None, emitted_at_ms=at, source=SRC, seq=0, node=node,
                      cpu_pct=1.0, mem_used_bytes=1, mem_total_bytes=2, disk_read_bps=0.0,
                      disk_write_bps=0.0, net_rx_bps=0.0, net_tx_bps=0.0, gpus=tuple(gpus))


@pytest.mark.parametrize(("gpus", "index"), [
    ([gpu(i) for i in range(8)], {"a": [0, 1, 2, 3], "b": [4, 5, 6, 7]}),
    ([gpu(0, run="c"), gpu(1)], {"a": []}),
    ([gpu(i, run="x") for i in range(4)], {}),
    ([gpu(0), gpu(1)], {"a": [1], "b": []}),
])
def test_node_entries_hold_exactly_the_routed_gpus(gpus, index) -> None:
    codec = load_codec()
    _, d = codec.decode_dict(codec.encode(sample(gpus)))
    entries = rekey.node_entries(d, index)
    routes = rekey.assign_gpus(d["gpus"], index)
    assert {r: [g[0] for g in e.gpus] for r, e in entries.items()} == {
        r: g for r, g in routes.items() if g}


@pytest.mark.parametrize("seed", range(5))
def test_pct_mean_equals_the_indicator(seed) -> None:
    rng = random.Random(seed)
    xs = [rng.choice([rng.uniform(-10, 120), math.nan]) for _ in range(rng.randint(0, 8))]
    want, got = ind.gpu_utilization(xs), pct_mean(xs)
    assert (math.isnan(want) and math.isnan(got)) or got == pytest.approx(want, abs=1e-12)


def test_node_agg_json_roundtrip_and_bad_payloads() -> None:
    agg = NodeAgg("r", T0 + 5, (NodeEntry("n0", T0, ((0, 90.0, None, 0, 0, 0),)),
                                NodeEntry("n1", T0 + 5, ((3, 50.0, 40.0, 1, 79, 2),))))
    assert NodeAgg.from_json(agg.to_json()) == agg
    assert NodeAgg.from_dict(agg.to_dict()) == agg
    for bad in (b"{}", b'{"v":2,"run":"r","n":[]}', b'{"v":1,"run":"r","n":[]}',
                b'{"v":1,"run":"r","n":[["n",1,[[1,2]]]]}', b"{nope"):
        with pytest.raises(ValueError, match="node aggregate"):
            NodeAgg.from_json(bad)


def agg_of(run: str, nodes: int = 1) -> NodeAgg:
    return NodeAgg(run, T0 + nodes, tuple(NodeEntry(f"n{i}", T0 + i, ((0, 90.0, 70.0, 0, 0, 0),))
                                          for i in range(1, nodes + 1)))


@pytest.mark.parametrize("n", [1, 2, 7])
def test_bundle_roundtrip_gives_each_aggregate_with_its_own_bytes(n) -> None:
    aggs = [agg_of(f"run-{i}\nx", nodes=i + 1) for i in range(n)]  # newline in a run id
    got = NodeAgg.unbundle(NodeAgg.bundle(aggs))
    assert [a for a, _ in got] == aggs
    assert [line for _, line in got] == [a.to_json() for a in aggs]


@pytest.mark.parametrize(("payload", "good", "bad"), [
    (b"", 0, ["empty payload"]),
    (b"\n\n", 0, ["empty payload"]),
    (agg_of("a").to_json() + b"\n{nope\n" + agg_of("b").to_json(), 2, ["not a node aggregate"]),
    (b'{"v":9,"run":"r","n":[]}', 0, ["version 9 unsupported"]),
])
def test_unbundle_keeps_good_lines_and_names_bad_ones(payload, good, bad) -> None:
    got = NodeAgg.unbundle(payload)
    assert sum(isinstance(a, NodeAgg) for a, _ in got) == good
    reasons = [a for a, _ in got if isinstance(a, str)]
    assert len(reasons) == len(bad)
    for reason, want in zip(reasons, bad, strict=True):
        assert want in reason


@pytest.mark.parametrize(("runs", "parts", "max_bytes"), [
    (1, 1, 1 << 20), (50, 8, 1 << 20), (50, 3, 2_000), (10, 4, 1)])
def test_bundles_put_every_aggregate_once_in_its_own_partition(runs, parts, max_bytes) -> None:
    from runwatch.processor.nodes import bundles

    aggs = [agg_of(f"r{i}", nodes=1 + i % 3) for i in range(runs)]

    def part_of(key: bytes) -> int:
        return sum(key) % parts

    out = bundles(aggs, part_of, max_bytes=max_bytes)
    seen = []
    for key, part, payload in out:
        got = [a for a, _ in NodeAgg.unbundle(payload)]
        assert key == got[0].run_id.encode()
        assert all(part_of(a.run_id.encode()) == part for a in got)
        seen += got
    assert sorted(seen, key=lambda a: a.run_id) == sorted(aggs, key=lambda a: a.run_id)
    per_part = {part_of(a.run_id.encode()) for a in aggs}
    if max_bytes >= 1 << 20:
        assert len(out) == len(per_part)  # one message per partition
    if max_bytes == 1:
        assert len(out) == runs  # every aggregate alone once over the bound


def test_aggregate_keeps_newest_per_slot_and_every_error() -> None:
    ok = ((0, 90.0, 70.0, 0, 0, 0),)
    err = ((0, 90.0, 70.0, 0, 79, 0),)
    pairs = [("r", NodeEntry("n0", T0, err)), ("r", NodeEntry("n0", T0 + 100, ok)),
             ("r", NodeEntry("n0", T0 + 200, ok)), ("r", NodeEntry("n1", T0 + 50, ok)),
             ("s", NodeEntry("n0", T0 + 1500, ok))]
    got = {a.run_id: [(e.node, e.at_ms) for e in a.nodes] for a in aggregate(pairs)}
    assert got == {"r": [("n0", T0), ("n1", T0 + 50), ("n0", T0 + 200)],
                   "s": [("n0", T0 + 1500)]}


@pytest.mark.parametrize("updates", [1, HEAVY_EVERY - 1, HEAVY_EVERY, 3 * HEAVY_EVERY + 2])
def test_detector_snapshot_lags_at_most_heavy_every_and_gates_are_exact(updates) -> None:
    """Gates are written on every save; detector snapshots only every HEAVY_EVERY updates."""
    spec = CFG.specs["loader_share"]
    st = runstate.new_state("r")
    w = runstate.watch_of(st, CFG, "loader_share", None)
    rng = random.Random(updates)
    runstate.dumps(st)  # first save: snapshot at 0 updates
    states = [w.to_state()]
    for _ in range(updates):
        w.update(rng.uniform(0.05, 0.5), spec)
        states.append(w.to_state())
        saved = json.loads(runstate.dumps(st))["watches"]["loader_share"]
        assert saved["w"] == w.gate.to_state()
        lag = next(i for i, s in enumerate(reversed(states))
                   if {k: s[k] for k in ("z", "t", "a")} == {k: saved[k] for k in ("z", "t", "a")})
        assert lag < HEAVY_EVERY
    back = runstate.loads(runstate.dumps(st))
    assert runstate.watch_of(back, CFG, "loader_share", None).gate.to_state() == w.gate.to_state()


def without_sm(e, util_from_sm):
    """The same record as a node without SM counters would send it (sm_active_pct null)."""
    if not isinstance(e, NodeSample):
        return e
    gpus = tuple(dataclasses.replace(
        g, sm_active_pct=None,
        util_pct=(g.sm_active_pct + 20.0) if util_from_sm else g.util_pct) for g in e.gpus)
    return dataclasses.replace(e, gpus=gpus)


@pytest.mark.parametrize(("kind", "gpm", "util_declines", "alerts", "source"), [
    # SM occupancy measured: it drives the indicator
    ("gpu_occupancy", True, False, [("watch:gpu_occupancy", "infrastructure")], "sm_occupancy"),
    ("healthy", True, False, [], "sm_occupancy"),
    # no SM occupancy: utilization stands in and still catches the decline
    ("gpu_occupancy", False, True, [("watch:gpu_occupancy", "infrastructure")],
     "gpu_utilization"),
    ("healthy", False, True, [], "gpu_utilization"),
    # no SM occupancy and steady utilization: nothing to see
    ("gpu_occupancy", False, False, [], "gpu_utilization"),
])
def test_occupancy_falls_back_to_utilization(kind, gpm, util_declines, alerts, source) -> None:
    """Through the worker's node re-keying and run join (published as a node agent would)."""
    events = [e if gpm else without_sm(e, util_declines)
              for e in scenarios.build(kind, "run-x", T0)]
    outs = replay(as_messages(events), ProcessorSettings(save_interval_s=0))
    fired = [a for a in outs if isinstance(a, Alert) and a.status == "firing"]
    assert [(a.detector, a.probable_cause) for a in fired] == alerts
    for a in fired:
        details = [ev.detail for ev in a.evidence if ev.indicator == "gpu_occupancy"]
        assert details and all(f"source={source}" in d for d in details)


@pytest.mark.parametrize(("gpus", "value", "source"), [
    ([(0, 90.0, 40.0, 0, 0, 0), (1, 80.0, 60.0, 0, 0, 0)], 0.5, "sm_occupancy"),
    ([(0, 90.0, None, 0, 0, 0), (1, 70.0, None, 0, 0, 0)], 0.8, "gpu_utilization"),
    # SM occupancy on some GPUs only: those count, utilization does not mix in
    ([(0, 90.0, 30.0, 0, 0, 0), (1, 10.0, None, 0, 0, 0)], 0.3, "sm_occupancy"),
])
def test_node_entry_feeds_the_occupancy_watch_from_the_right_source(gpus, value, source):
    st = runstate.new_state("run-y")
    join_node.node_entry(st, NodeEntry("n0", T0, tuple(gpus)), T0, T0, CFG, None)
    assert "gpu_occupancy" not in st.stats  # the round goes on (join_node.GPU_ROUND_MS)
    later = T0 + join_node.GPU_ROUND_MS
    join_node.node_entry(st, NodeEntry("n0", later, tuple(gpus)), later, later, CFG, None)
    n, mean, _ = st.stats["gpu_occupancy"]
    assert n == 1 and mean == pytest.approx(value)
    assert ind.occupancy_or_utilization([g[2] for g in gpus], [g[1] for g in gpus]) == (
        pytest.approx(value), source)
