"""The processor's fast JSON (core/jsontext.py): the same values as the standard library.

``compact`` (ujson) writes the run-state checkpoints, watch snapshots and node
aggregates; ``parse`` reads them back. Both must give exactly what
``json.dumps(.., separators=(",", ":"))`` and ``json.loads`` give, NaN and big
integers included, with and without ujson installed; the node aggregate's GPU
reader and the step-nearness search must equal the plain code they replace.
"""

from __future__ import annotations

import json
import math
import random
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runwatch.client.publisher import CaptureTransport
from runwatch.core import jsontext
from runwatch.core.jsontext import compact, parse
from runwatch.core.stream import runstate
from runwatch.core.stream.join_node import NodeAgg, _gpu, _gpus, stepping
from runwatch.processor.memory import MemoryProcessor
from runwatch.sim import scenarios as sc
from runwatch.sim.replay import replay_worker
from runwatch.sim.runner import SimConfig, run_simulation

STD = json.JSONEncoder(separators=(",", ":")).encode


def same(a: str | bytes, b: str | bytes) -> bool:
    """Whether two JSON texts hold the same values (NaN equal to NaN)."""
    return json.dumps(json.loads(a)) == json.dumps(json.loads(b))


VALUES = [
    {"a": [1.5, float("nan"), None, True, False, "x/y", (1, 2)]},
    {"inf": [float("inf"), -float("inf"), -0.0, 1e-5, 1e16, 1e300, 5e-324]},
    {"é": "ü\u2028\x01", "k": {"n": [[], {}]}},
    {1: 2, 2.5: "float key", None: "none key"},
    {True: "bool key", False: 0},
    [2**63 - 1, -(2**63), 2**70, -(2**80)],  # past 64 bits: the standard library writes them
    "plain string",
    12345678901234567890123,
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_compact_writes_what_json_dumps_writes(value) -> None:
    assert same(compact(value), STD(value))
    assert compact(value).isascii()


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_without_ujson_compact_is_the_standard_library(monkeypatch, value) -> None:
    monkeypatch.setattr(jsontext, "_ujson", None)
    assert compact(value) == STD(value)
    assert json.dumps(parse(STD(value))) == json.dumps(json.loads(STD(value)))


def test_compact_refuses_what_json_refuses() -> None:
    with pytest.raises(TypeError):
        compact({"x": object()})
    with pytest.raises(TypeError):
        compact([b"bytes"])
    deep: list = []
    inner = deep
    for _ in range(5_000):  # ujson stops at 1,024 levels: the standard library's error comes
        inner.append([])
        inner = inner[0]
    with pytest.raises(RecursionError):
        compact(deep)


def test_floats_round_trip_exactly() -> None:
    rng = random.Random(3)
    xs = [struct.unpack("d", struct.pack("Q", rng.getrandbits(64)))[0] for _ in range(20_000)]
    xs += [rng.random() * 10 ** rng.randint(-300, 300) for _ in range(20_000)]
    xs = [x for x in xs if math.isfinite(x)]
    text = compact(xs)
    assert parse(text) == xs
    assert json.loads(text) == xs
    assert parse(STD(xs)) == xs


@pytest.mark.parametrize("text", [
    b'{"a":[1.5,NaN,Infinity,-Infinity,null]}', b"[123456789012345678901234567890]",
    '["\u00e9"]'.encode(), b'{"a":1,"a":2}', b' [1] ', b'"\\ud800"',
])
def test_parse_reads_what_json_loads_reads(text) -> None:
    assert json.dumps(parse(text)) == json.dumps(json.loads(text))


@pytest.mark.parametrize("text", [b"", b"x", b"[1,]", b'{"a":1,}', b"[1] x", b'["\xff"]'])
def test_parse_refuses_what_json_loads_refuses(text) -> None:
    with pytest.raises(ValueError):
        json.loads(text)
    with pytest.raises(ValueError):
        parse(text)


@pytest.fixture(scope="module")
def worker() -> MemoryProcessor:
    transport = CaptureTransport()
    cfg = SimConfig(nodes=3, runs=3, seed=5, speed=100.0, duration_s=650.0, tick_s=0.02,
                    scenarios=tuple(sc.get(n) for n in ("gpu_occupancy", "nan_loss",
                                                        "loader_slowdown")),
                    collect_alerts=False)
    run_simulation(cfg, transport=transport)
    return replay_worker(transport.messages)


def test_run_states_save_the_same_values_with_and_without_ujson(worker, monkeypatch) -> None:
    states = [runstate.loads(raw) for raw in worker.p.runs.runstate.values()]
    assert len(states) >= 3
    fast = [runstate.dumps(s) for s in states]
    monkeypatch.setattr(jsontext, "_ujson", None)
    plain = [runstate.dumps(s) for s in states]
    assert all(same(f, p) for f, p in zip(fast, plain, strict=True))


def test_node_aggregates_read_the_same_with_and_without_ujson(worker, monkeypatch) -> None:
    lines = [line for t, _k, v, _p in worker.internal if t == "rw.internal.node-by-run"
             for line in v.split(b"\n") if line.strip()]
    assert len(lines) > 10
    fast = [NodeAgg.from_json(line) for line in lines]
    monkeypatch.setattr(jsontext, "_ujson", None)
    assert [NodeAgg.from_json(line) for line in lines] == fast
    assert [NodeAgg.from_json(a.to_json()) for a in fast] == fast


GPU10 = [0, 90.0, 70.0, 0, 0, 0, 0.5, 60.0, 1900, None]


@pytest.mark.parametrize("gpus", [
    [GPU10, [1, 88, None, 4, 79, 1, None, None, None, 2.5e9]],  # ints where floats go: floats
    [[0, 90.0, 70.0, 0, 0, 0], [1, 50, None, 0, 0, 0]],  # an older worker's six fields
    [GPU10, [1, 90.0, 70.0, 0, 0, 0]],  # mixed
    [],
])
def test_gpus_read_as_the_per_gpu_reader_reads_them(gpus) -> None:
    assert _gpus(gpus) == tuple(_gpu(g) for g in gpus)
    assert all(type(g[1]) is float for g in _gpus(gpus))


@pytest.mark.parametrize("gpus", [
    [[0, "x", 70.0, 0, 0, 0, 0.5, 60.0, 1900, None]],  # not a number
    [[0, None, 70.0, 0, 0, 0, 0.5, 60.0, 1900, None]],  # no utilization
    [[0, 90.0, 70.0, 0, 0, 0, 0.5, 60.0, 1900, None, 7]],  # eleven fields
    [5],  # not a list
])
def test_bad_gpus_fail_as_the_per_gpu_reader_fails(gpus) -> None:
    with pytest.raises((TypeError, ValueError)) as fast:
        _gpus(gpus)
    with pytest.raises((TypeError, ValueError)) as plain:
        tuple(_gpu(g) for g in gpus)
    assert type(fast.value) is type(plain.value)


@given(st.lists(st.integers(0, 10_000), min_size=1, max_size=64),
       st.integers(-1_000, 11_000),
       st.one_of(st.integers(0, 3_000), st.floats(0, 3_000), st.just(math.inf)))
def test_stepping_is_the_scan_it_stands_for(times, at, gap) -> None:
    times = sorted(times)
    after = [t for t in times if t >= at]
    before = [t for t in times if t < at]
    want = bool(after) and after[0] - (before[-1] if before else at) <= gap
    assert stepping(times, at, gap) == want
