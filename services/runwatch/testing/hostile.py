"""A hostile producer for fuzz tests: good telemetry from the public entry points, bad bytes.

:func:`good_messages` publishes one small run through the SDK
(``runwatch.init``, ``run.step`` with a NaN loss, so the processor must raise
``rule:non_finite``), a data report (``runwatch.client.data.report``) and node
samples (the agent on the NVML double), captured as ``(topic, key, value)``.
:func:`bad_values` derives seeded bad values from them, as a broken or
hostile producer would write them: random bytes, truncations at every length
class, valid headers with unknown fingerprints, bit flips, huge values, and
well-formed records whose fields hold NaN, Inf, absurd timestamps or huge
strings. Each comes with its kind, so a failing case names what it was.
"""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from runwatch.core.codec import load_codec

Message = tuple[str, bytes | str | None, bytes]
TELEMETRY_TOPICS = ("rw.lineage", "rw.data", "rw.exec.job", "rw.exec.node", "rw.learning",
                    "rw.artifact")
INTERNAL_TOPICS = ("rw.internal.node-by-run", "rw.internal.data-by-run",
                   "rw.internal.manifest-by-dataset", "rw.internal.job-by-node")
KINDS = ("random", "truncated", "unknown_fingerprint", "bit_flip", "huge", "trailing", "json",
         "fields")
_LENGTHS = (0, 1, 2, 9, 10, 11, 64, 1000)  # header bounds and beyond
_NUMS: tuple[Any, ...] = (math.nan, math.inf, -math.inf, 1e308, -1.0)
_INTS = (-1, 0, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63))
_TIMES = (0, -1, 1_700_000_000, 2**62, 1_700_000_000_000_000, 1_700_000_000_000_000_000)
_STRS = ("", "\x00\n\r\t\x1b[31m'\"", "'); DROP TABLE runs; --", "é\u2028" * 50, "h" * 20_000)


def good_messages(run_id: str, t0_ms: int, baseline_dir: str | Path,
                  node: str = "fz-node") -> list[Message]:
    """Publish one run (NaN loss at step 3), one data report and two node samples.

    Args:
        run_id: The run's id.
        t0_ms: Its first event time (epoch ms).
        baseline_dir: Where ``data.report`` keeps baselines.
        node: The agent's node name.

    Returns:
        What producers handed to their transport, in order.

    """
    from runwatch.adapters.nvml import Nvml
    from runwatch.adapters.publisher import CaptureTransport, Publisher
    from runwatch.agent.service import NodeAgent
    from runwatch.client import data, init
    from runwatch.testing.nvml_double import FakeNvml8

    t = CaptureTransport()
    run: Any = init("fuzz", team="ml", run_id=run_id, transport=t, install_hooks=False,
                    capture_lineage=False, clock=lambda: t0_ms, datasets=["s3://fuzz/d"])
    for i in range(5):
        run.step(i, loss=1.0 if i < 3 else math.nan, now_ms=t0_ms + i * 1000)
    run.validation(4, {"acc": 0.5}, now_ms=t0_ms + 5000)
    run.checkpoint("s3://fuzz/ck/4", step=4, now_ms=t0_ms + 6000)
    run.artifact("s3://fuzz/model", "model", sha256="ab" * 32, now_ms=t0_ms + 7000)
    run.finish(now_ms=t0_ms + 10_000)
    data.report("s3://fuzz/d", "v1", "p=1", {"x": [1.0, 2.0, 3.0]},
                publisher=Publisher(t, kind="sdk"), now_ms=t0_ms, baseline_directory=baseline_dir)
    agent = NodeAgent(Publisher(t, kind="agent", clock=lambda: t0_ms), node=node,
                      nvml=Nvml.open(FakeNvml8()))
    agent.tick(t0_ms)
    agent.tick(t0_ms + 1000)
    return list(t.messages)


def _leaves(d: Any, pre: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    if isinstance(d, dict):
        for k, v in d.items():
            yield from _leaves(v, (*pre, k))
    elif isinstance(d, list):
        for i, v in enumerate(d):
            yield from _leaves(v, (*pre, i))
    elif pre:
        yield pre, d


def _hostile_fields(rng: random.Random, value: bytes, tag: str) -> bytes | None:
    """Re-encode a record with hostile field values (its run id made ``run-hostile-<tag>``)."""
    codec = load_codec()
    name, d = codec.decode_dict(value)
    d = copy.deepcopy(d)
    leaves = [(p, v) for p, v in _leaves(d) if p[-1] != "run_id" and not isinstance(v, bool)]
    for _ in range(rng.randint(1, 3)):
        path, v = rng.choice(leaves)
        key = path[-1] if isinstance(path[-1], str) else ""  # a list item's key is its index
        if key.endswith("_ms") and isinstance(v, int):
            new: Any = rng.choice(_TIMES)
        elif isinstance(v, float):
            new = rng.choice(_NUMS)
        elif isinstance(v, int):
            new = rng.choice(_INTS)
        elif isinstance(v, str):
            new = rng.choice(_STRS)
        else:
            continue
        target = d
        for k in path[:-1]:
            target = target[k]
        target[path[-1]] = new
    if d.get("run_id"):
        d["run_id"] = f"run-hostile-{tag}"
    try:
        return codec.encode_dict(name, d)
    except Exception:  # noqa: BLE001 - the codec refused it: a producer could not write it
        return None


def bad_value(rng: random.Random, kind: str, good: bytes, tag: str = "0") -> bytes:
    """Return one bad value of ``kind`` derived from a good encoded record."""
    if kind == "random":
        return rng.randbytes(rng.choice(_LENGTHS))
    if kind == "truncated":
        cut = rng.choice([n for n in _LENGTHS if n < len(good)] + [len(good) - 1])
        return good[:cut]
    if kind == "unknown_fingerprint":
        return good[:2] + rng.randbytes(8) + good[10:]
    if kind == "bit_flip":
        b = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
        return bytes(b)
    if kind == "huge":
        return good[:10] + rng.randbytes(512 * 1024)
    if kind == "trailing":
        return good + rng.randbytes(rng.randint(1, 16))
    if kind == "json":
        return b"{" + rng.randbytes(rng.randint(0, 40))
    hostile = _hostile_fields(rng, good, tag)
    return hostile if hostile is not None else good[:-1]


def bad_values(rng: random.Random, goods: list[Message], n: int,
               topics: tuple[str, ...] = TELEMETRY_TOPICS + INTERNAL_TOPICS,
               ) -> list[tuple[str, str, bytes | None, bytes]]:
    """Return ``n`` seeded bad messages ``(kind, topic, key, value)`` over ``topics``.

    Kinds and topics are taken in turn (every topic meets every kind as ``n``
    grows); keys are the good message's, none, or bytes that are not UTF-8.
    """
    out: list[tuple[str, str, bytes | None, bytes]] = []
    for i in range(n):
        kind = KINDS[i % len(KINDS)]
        topic = topics[(i // len(KINDS)) % len(topics)]
        src = rng.choice(goods)
        key = rng.choice([src[1], None, b"\xff\xfe"])
        k = key.encode() if isinstance(key, str) else key
        out.append((kind, topic, k, bad_value(rng, kind, src[2], str(i))))
    return out
