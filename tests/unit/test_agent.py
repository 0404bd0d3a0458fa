from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runwatch.adapters.nvml import Nvml
from runwatch.adapters.publisher import Publisher
from runwatch.agent.service import NodeAgent, RunAttributor, parse_allocation
from runwatch.core.codec import load_codec
from runwatch.testing.nvml_double import FakeNvml8, NVMLError


class ListTransport:
    def __init__(self):
        self.out = []

    def produce(self, topic, key, value):
        self.out.append((topic, key, value))


@pytest.fixture
def child_with_run():
    p = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"],
        env=dict(os.environ, RUNWATCH_RUN_ID="run-from-env"),
    )
    yield p.pid
    p.kill()
    p.wait()


def make_agent(fake=None, **kw):
    t = ListTransport()
    nv = Nvml.open(fake) if fake is not None else None
    return NodeAgent(Publisher(t, kind="agent"), node="n1", nvml=nv, **kw), t


def test_double_describes_8_gpus_with_every_figure() -> None:
    agent, t = make_agent(FakeNvml8())
    agent.tick()
    s = agent.tick()
    assert len(s.gpus) == 8 and [g.index for g in s.gpus] == list(range(8))
    g = s.gpus[7]
    assert g.mem_total_bytes == 80 * 1024**3 and g.power_w > 0 and g.temp_c == 47
    assert g.sm_clock_mhz == 1980 and g.throttle_reasons == 0x4
    assert s.gpus[5].ecc_corrected == 3
    assert g.pcie_rx_bps == 8 * 1000 * 1024 and g.nvlink_rx_bps is not None and g.nvlink_rx_bps > 0
    assert len({x.uuid for x in s.gpus}) == 8
    topic, key, value = t.out[-1]
    assert topic == "rw.exec.node" and key == "n1" and load_codec().decode(value) == s


def test_process_attribution_from_environ(child_with_run) -> None:
    fake = FakeNvml8()
    fake.attach_process(0, child_with_run)
    fake.attach_process(1, 999_999_999)  # gone: no run
    agent, _ = make_agent(fake)
    s = agent.sample()
    assert s.gpus[0].processes[0].run_id == "run-from-env"
    assert s.gpus[1].processes[0].run_id is None
    assert s.run_id == "run-from-env"
    assert s.gpus[0].util_pct >= 90 and s.gpus[2].util_pct < 10


@pytest.mark.parametrize(
    "doc,expect",
    [
        ({"0": "r1", "3": "r2"}, {0: "r1", 3: "r2"}),
        (
            [{"run_id": "r1", "gpus": [0, 1]}, {"run_id": "r2", "gpus": [2]}],
            {0: "r1", 1: "r1", 2: "r2"},
        ),
        ({}, {}),
    ],
)
def test_parse_allocation(doc, expect) -> None:
    assert parse_allocation(doc) == (expect, [])


@pytest.mark.parametrize(("bad", "why"), [
    ({"run_id": "r9"}, "entry 1: not"),                  # no gpus
    (["r9"], "entry 1: not"),                            # not an object
    ({"run_id": None, "gpus": [3]}, "run id None"),      # once the run "None"
    ({"run_id": "r9", "gpus": [None]}, "GPU None"),
    ({"run_id": "r9", "gpus": "01"}, "entry 1: not"),    # once GPUs 0 and 1
    ({"run_id": "r9", "gpus": [-1]}, "GPU -1"),
])
def test_a_bad_allocation_entry_is_skipped_and_the_others_still_attribute(
        tmp_path: Path, caplog, bad, why: str) -> None:
    """One bad entry raised inside the per-GPU read: every GPU with a process vanished from
    the node's samples (errors += 8 a tick), logged as 'GPU N unreadable'."""
    alloc = tmp_path / "alloc.json"
    alloc.write_text(json.dumps([{"run_id": "slurm-77", "gpus": [4, 5]}, bad]))
    fake = FakeNvml8()
    fake.attach_process(4, 999_999_998)
    fake.attach_process(3, 999_999_997)
    agent, _ = make_agent(fake, attributor=RunAttributor(allocation_file=alloc))
    with caplog.at_level(logging.WARNING):
        samples = [agent.sample() for _ in range(3)]
    for s in samples:
        assert len(s.gpus) == 8  # no GPU lost
        assert s.gpus[4].processes[0].run_id == "slurm-77"
        assert s.gpus[3].processes[0].run_id is None  # not "None"
    assert caplog.text.count("skipped") == 1 and why in caplog.text


def test_attribution_from_allocation_file(tmp_path: Path) -> None:
    alloc = tmp_path / "alloc.json"
    alloc.write_text(json.dumps([{"run_id": "slurm-77", "gpus": [4, 5]}]))
    fake = FakeNvml8()
    fake.attach_process(4, 999_999_998)
    agent, _ = make_agent(fake, attributor=RunAttributor(allocation_file=alloc))
    s = agent.sample()
    assert s.gpus[4].processes[0].run_id == "slurm-77" and s.run_id == "slurm-77"


def test_xid_events_land_on_their_gpu() -> None:
    fake = FakeNvml8()
    agent, _ = make_agent(fake)
    agent.sample()
    fake.inject_xid(6, 79)
    s = agent.sample()
    assert [g.xid for g in s.gpus] == [None] * 6 + [79, None]
    assert all(g.xid is None for g in agent.sample().gpus)


class LosingGpus(FakeNvml8):
    """The double, with GPUs that fail every NVML call once lost (GPU_IS_LOST)."""

    def __init__(self) -> None:
        super().__init__()
        self.lost: set[int] = set()

    def _h(self, h):
        i = super()._h(h)
        if i in self.lost:
            raise NVMLError(15)  # NVML_ERROR_GPU_IS_LOST
        return i


def test_the_xid_of_a_gpu_that_fell_off_the_bus_is_sent_on_the_gpu_as_last_seen(
        tmp_path: Path) -> None:
    alloc = tmp_path / "alloc.json"
    alloc.write_text(json.dumps([{"run_id": "r1", "gpus": [5]}]))
    fake = LosingGpus()
    fake.attach_process(5, 999_999_998)
    agent, _ = make_agent(fake, attributor=RunAttributor(allocation_file=alloc))
    before = agent.sample().gpus[5]
    fake.inject_xid(5, 79)
    fake.lost.add(5)
    gpus = {g.index: g for g in agent.sample().gpus}
    assert gpus[5].xid == 79 and gpus[5].uuid == before.uuid
    assert [p.run_id for p in gpus[5].processes] == ["r1"]  # routed to the run it served
    assert 5 not in {g.index for g in agent.sample().gpus}  # no XID: left out, as before


def test_no_nvml_logs_once_and_host_figures_continue(caplog) -> None:
    nv = Nvml.open()  # no driver on this machine (or a real one: then it is not None)
    if nv is not None:
        nv.close()
        pytest.fail("this test expects a machine without an NVIDIA driver")
    assert "NVML unavailable" in caplog.text
    agent, t = make_agent(None)
    s = agent.tick()
    assert s.gpus == () and s.mem_total_bytes > 0 and 0 <= s.cpu_pct <= 100 * os.cpu_count()


def test_unreadable_gpu_is_skipped_not_fatal() -> None:
    fake = FakeNvml8()
    agent, _ = make_agent(fake)

    def broken(h):
        raise RuntimeError("GPU fell off the bus")

    fake.nvmlDeviceGetName = broken  # type: ignore[method-assign]
    s = agent.sample()
    assert s.gpus == () and agent.errors == 8


def test_cli_agent_with_double_runs(tmp_path: Path) -> None:
    # no broker on this port: samples are spooled, the agent still exits cleanly
    env = dict(
        os.environ,
        KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:1",
        RUNWATCH_PRODUCER_SPOOL_DIR=str(tmp_path),
        RUNWATCH_PRODUCER_MESSAGE_TIMEOUT_MS="1000",
    )
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "runwatch",
            "agent",
            "--nvml-double",
            "--interval",
            "0.1",
            "--count",
            "3",
            "--node",
            "cli-node",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "TEST DOUBLE" in p.stderr and "8 GPUs" in p.stderr
    assert "left_in_spool=3" in p.stderr, p.stderr[-2000:]


# --- SM occupancy through NVML GPM -------------------------------------------------------


class NoGpmBinding(FakeNvml8):
    """An older pynvml without the GPM functions."""

    def __getattribute__(self, name):
        if name.startswith(("nvmlGpm", "c_nvmlGpm")):
            raise AttributeError(name)
        return super().__getattribute__(name)


@pytest.mark.parametrize(
    ("make", "occupancy", "expect"),
    [
        # GPM on every GPU: the occupancy set per GPU, busy default 65 %, idle 0 %
        (lambda: FakeNvml8(), {3: 42.5, 6: 10.0}, [65.0, 0.0, 0.0, 42.5, 0.0, 0.0, 10.0, 0.0]),
        # no GPM on the GPUs: null everywhere, whatever the occupancy
        (lambda: FakeNvml8(gpm=False), {3: 42.5}, [None] * 8),
        # a binding without GPM functions
        (lambda: NoGpmBinding(), {3: 42.5}, [None] * 8),
    ],
)
def test_sm_occupancy_from_gpm(make, occupancy, expect) -> None:
    fake = make()
    fake.attach_process(0, 4242)
    for g, pct in occupancy.items():
        fake.set_occupancy(g, pct)
    agent, t = make_agent(fake)
    for _ in range(3):
        s = agent.tick()
        assert [g.sm_active_pct for g in s.gpus] == expect
    assert load_codec().decode(t.out[-1][2]).gpus[3].sm_active_pct == expect[3]


def test_sm_occupancy_follows_the_double_tick_by_tick() -> None:
    fake = FakeNvml8()
    agent, _ = make_agent(fake)
    seen = []
    for pct in (80.0, 55.0, 30.0):
        fake.set_occupancy(2, pct)
        seen.append(agent.sample().gpus[2].sm_active_pct)
    assert seen == [80.0, 55.0, 30.0]


def test_gpm_partly_unsupported_logs_once_and_never_retries(caplog) -> None:
    fake = FakeNvml8()
    fake.gpm_unsupported = {2, 5}
    caplog.set_level("INFO", logger="runwatch.adapters.nvml")
    agent, _ = make_agent(fake)
    calls_after_open = fake.gpm_calls
    for _ in range(5):
        s = agent.sample()
    assert [g.index for g in s.gpus if g.sm_active_pct is None] == [2, 5]
    assert fake.gpm_calls - calls_after_open == 5 * 6  # only the 6 supported GPUs are asked
    lines = [r for r in caplog.records if "GPM unavailable" in r.getMessage()]
    assert len(lines) == 1 and "[2, 5]" in lines[0].getMessage()


@pytest.mark.parametrize(("failures", "recovers"), [(1, True), (2, True), (3, False), (9, False)])
def test_gpm_failures_recover_or_give_up_without_leaking(failures, recovers, caplog) -> None:
    fake = FakeNvml8()
    agent, _ = make_agent(fake)
    fake.set_occupancy(4, 33.0)
    fake.gpm_failing[4] = failures
    for _ in range(6):
        s = agent.sample()
    assert s.gpus[4].sm_active_pct == (33.0 if recovers else None)
    assert s.gpus[3].sm_active_pct == 0.0
    assert fake.gpm_live == (8 if recovers else 7)  # one held sample per live GPU
    gave_up = [r for r in caplog.records if "no longer reported" in r.getMessage()]
    assert len(gave_up) == (0 if recovers else 1)
    agent.nvml.close()
    assert fake.gpm_live == 0


@pytest.mark.parametrize("interval", ["0", "-1", "nan", "7200"])
def test_an_interval_the_agent_cannot_keep_is_refused(interval: str, capsys,
                                                      monkeypatch) -> None:
    """``--interval 0`` (or negative, NaN) was accepted: the agent spun a core, 1,200
    samples a second, exit 0."""
    from runwatch import cli

    assert cli.main(["agent", "--interval", interval, "--nvml-double", "--count", "1"]) == 2
    assert "must be between 0.05 and 3600 seconds" in capsys.readouterr().err
    monkeypatch.setenv("RUNWATCH_AGENT_INTERVAL_S", interval)
    assert cli.main(["agent", "--nvml-double", "--count", "1"]) == 2
    assert "RUNWATCH_AGENT_INTERVAL_S" in capsys.readouterr().err


def test_a_negative_count_is_refused(capsys) -> None:
    """``--count -3`` took one sample and stopped, exit 0."""
    from runwatch import cli

    assert cli.main(["agent", "--nvml-double", "--count", "-3"]) == 2
    assert "--count -3 must be 0 (run until signalled) or more" in capsys.readouterr().err
