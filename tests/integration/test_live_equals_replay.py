"""Replay and live produce the same alerts: one set of published messages, two ways in.

The simulator's producers (the SDK, ``data.report``, the node agent over the
NVML double, the scheduler hook) publish a cluster with faults and controls
into a capture transport. The same messages then go (a) through
``runwatch.sim.replay`` (the worker's agents in memory, as ``runwatch
simulate --offline`` runs them) and (b) to the real broker, read by a real
processor worker, on each runtime (faust and plain). Both must raise the same
alerts: same runs, detectors, causes and dedup keys.
"""

from __future__ import annotations

import pytest

from runwatch.client.publisher import CaptureTransport
from runwatch.core.codec import load_codec
from runwatch.core.records import Alert
from runwatch.sim import scenarios as sc
from runwatch.sim.replay import replay
from runwatch.sim.runner import SimConfig, run_simulation
from runwatch.testing.harness import Harness

pytestmark = pytest.mark.integration

FAULTS = ("nan_loss", "checkpoint_corrupt", "label_shift", "gpu_occupancy", "failed_gate")


def _published() -> list[tuple[str, bytes | str | None, bytes]]:
    transport = CaptureTransport()
    cfg = SimConfig(nodes=3, runs=2, seed=11, speed=100.0, duration_s=700.0, tick_s=0.02,
                    scenarios=tuple(sc.get(n) for n in FAULTS), collect_alerts=False)
    run_simulation(cfg, transport=transport)
    codec = load_codec()
    # in event-time order, as producers publishing in real time deliver them
    return sorted(transport.messages, key=lambda m: codec.decode(m[2]).emitted_at_ms)


def _key(a: Alert) -> tuple[str, str, str, str]:
    return (a.run_id or "", a.detector, a.probable_cause, a.dedup_key)


@pytest.mark.parametrize("runtime", ["faust", "plain"])
def test_the_same_messages_raise_the_same_alerts_live_and_replayed(harness: Harness,
                                                                    runtime: str) -> None:
    harness.env["RUNWATCH_PROCESSOR_RUNTIME"] = runtime
    messages = _published()
    allow = '["' + sc.ALLOWED_IMAGE_PREFIX + '"]'
    offline = {_key(a) for a in replay(messages) if a.status == "firing"}
    assert {a[1] for a in offline} >= {"rule:non_finite", "rule:failed_gate"}, offline

    harness.start_worker(RUNWATCH_PROCESSOR_IMAGE_ALLOW_LIST=allow)
    harness.wait_ready()
    harness.publish(messages)

    def firing(records: list) -> set[tuple[str, str, str, str]]:
        return {_key(a) for a in records if isinstance(a, Alert) and a.status == "firing"}

    records = harness.collect("rw.alerts", lambda r: firing(r) >= offline, 120, settle_s=15)
    live = firing(records)
    assert live == offline, (sorted(live - offline), sorted(offline - live),
                             harness.worker_log(tail=3000))
