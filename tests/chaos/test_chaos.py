"""The chaos suite end to end: every fault, then exact counts (docs/chaos.md).

`make chaos` runs it. The suite starts its own 3-broker stack (state in
`.runwatch-chaos/`, ports 39092-39294, store 39123, Alertmanager 39093), so the
shared local stack is never touched.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runwatch.chaos.faults import FAULTS
from runwatch.chaos.runner import ChaosSettings, run
from runwatch.testing.nvml_double import FakeNvml8

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(1200)]

REPO = Path(__file__).resolve().parents[2]


def test_every_fault_loses_nothing_and_pages_once() -> None:
    cfg = ChaosSettings(state_dir=REPO / ".runwatch-chaos")
    result = run(cfg, print, nvml_module=FakeNvml8(gpus=2))
    print(result.table)
    assert [r.fault for r in result.rows] == [f.name for f in FAULTS]
    baseline = result.rows[0]
    assert baseline.alerts.raised, "the fault-free phase raised no alert: nothing to compare"
    for row in result.rows:
        assert row.unaccounted == 0, (row.fault, row.counts, row.notes)
        assert row.alerts.equal, (row.fault, row.alerts)
        assert not row.alerts.paged_twice, (row.fault, row.alerts.paged_twice)
    assert result.seconds < 15 * 60
