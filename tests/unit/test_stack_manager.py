"""Stack supervision of the optional services (processor, sink, pager) with stand-in programs."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from runwatch.stack.manager import Stack
from runwatch.stack.services import OPTIONAL_SERVICES, SERVICES
from runwatch.stack.settings import StackSettings

# logs what each service logs once ready (the processor's and the SLO evaluator's markers)
SLEEPER = (sys.executable, "-c",
           "import time; print('Ready; 3 objectives every 60 s', flush=True); time.sleep(60)")


@pytest.fixture
def stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Stack:
    for var in ("RUNWATCH_STACK_STATE_DIR",):
        monkeypatch.delenv(var, raising=False)
    st = Stack(StackSettings(state_dir=tmp_path / "state", start_timeout_s=20))
    for name in OPTIONAL_SERVICES:  # stand-ins: same supervision, no Kafka needed
        st.specs[name] = replace(st.specs[name], argv=SLEEPER, needs=())
    yield st
    st.down(services=OPTIONAL_SERVICES)


@pytest.mark.parametrize("wanted", [("processor",), ("sink", "pager"), OPTIONAL_SERVICES])
def test_optional_services_start_record_report_and_stop(stack: Stack, wanted) -> None:
    result = stack.up(services=wanted)
    assert result.ok and set(result.started) == set(wanted)
    records = stack.registry.load()
    assert set(records) == set(wanted)
    names = [s.name for s in stack.status()]
    assert names == [*SERVICES, *[s for s in OPTIONAL_SERVICES if s in wanted]]
    assert {s.state for s in stack.status(wanted)} == {"healthy"}
    again = stack.up(services=wanted)  # a second up reuses them
    assert set(again.already_running) == set(wanted) and not again.started
    outcome = stack.down()  # the default stops everything recorded
    assert {k for k, v in outcome.items() if v != "not running"} == set(wanted)
    assert stack.registry.load() == {}
    assert all(p is None for p in map(stack.running, wanted))


def test_plain_status_lists_only_the_stack(stack: Stack) -> None:
    assert [s.name for s in stack.status()] == list(SERVICES)


def test_optional_service_needing_an_unhealthy_service_fails_clearly(stack: Stack) -> None:
    stack.specs["sink"] = replace(stack.specs["sink"], needs=("store",))
    stack.specs["store"] = replace(stack.specs["store"], probe=lambda: False,
                                   argv=(sys.executable, "-c", "raise SystemExit(3)"),
                                   ports=(1,))
    result = stack.up(services=("sink",))
    assert "sink" in result.failed and "store" in result.failed
    assert "needs store" in result.failed["sink"]
    assert stack.running("sink") is None
