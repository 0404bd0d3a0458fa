"""The sink's process pool: exit descriptions and argument checks (no services)."""

from __future__ import annotations

import signal

import pytest

from runwatch.sink.pool import SinkPool, describe_exit


@pytest.mark.parametrize(
    ("code", "text"),
    [
        (0, "exit code 0"),
        (1, "exit code 1"),
        (-signal.SIGKILL, "signal SIGKILL"),
        (-signal.SIGTERM, "signal SIGTERM"),
        (None, "still running"),
        (-200, "signal 200"),
    ],
)
def test_describe_exit(code: int | None, text: str) -> None:
    assert describe_exit(code) == text


@pytest.mark.parametrize("n", [0, -1])
def test_pool_needs_a_process(n: int) -> None:
    from runwatch.adapters.settings import ClickHouseSettings, KafkaSettings
    from runwatch.sink.settings import SinkSettings

    with pytest.raises(ValueError, match="at least 1"):
        SinkPool(n, SinkSettings(), KafkaSettings(), ClickHouseSettings())


def _waits_for_a_signal(index, parent_pid, *_settings) -> None:
    """A child like the sink's: stops on SIGTERM/SIGINT after a short flush."""
    import threading
    import time

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait(60)
    time.sleep(0.05)


def _exits_at_once(index, parent_pid, *_settings) -> None:
    if index == 1:
        raise SystemExit(0)  # ends on its own, cleanly: still not what a sink may do
    _waits_for_a_signal(index, parent_pid)


def _pool(target, n: int = 2) -> SinkPool:
    from runwatch.adapters.settings import ClickHouseSettings, KafkaSettings
    from runwatch.sink.settings import SinkSettings

    return SinkPool(n, SinkSettings(), KafkaSettings(), ClickHouseSettings(), stop_timeout_s=10,
                    target=target)


@pytest.mark.parametrize("delay_s", [0.0, 0.3, 1.0, 1.6])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_to_the_whole_group_is_a_clean_stop(delay_s: float, sig: int) -> None:
    """Ctrl-C or systemd signal every process: children that stop first are no failure."""
    import os
    import threading

    pool = _pool(_waits_for_a_signal)
    stop = threading.Event()

    def group_signal() -> None:
        stop.set()  # what the parent's own handler does
        for child in pool.children:
            if child.pid is not None:
                os.kill(child.pid, sig)

    timer = threading.Timer(delay_s, group_signal)
    timer.start()
    try:
        assert pool.run(stop) == 0
    finally:
        timer.cancel()
    assert pool.failed == []
    assert all(c.exitcode in (0, -signal.SIGTERM, -signal.SIGINT) for c in pool.children)


def test_a_child_that_ends_on_its_own_fails_the_pool() -> None:
    import threading

    pool = _pool(_exits_at_once)
    assert pool.run(threading.Event()) == 1
    assert pool.failed == [(1, 0)]
    # the other one was stopped: cleanly, or by the SIGTERM if it came before its handler
    assert pool.children[0].exitcode in (0, -signal.SIGTERM)


def test_children_start_with_sigint_ignored() -> None:
    import threading

    pool = _pool(_reports_sigint, n=1)
    assert pool.run(threading.Event()) == 1  # it ends on its own: reporting is all it does
    assert pool.failed == [(0, 7)]


def _reports_sigint(index, parent_pid, *_settings) -> None:
    raise SystemExit(7 if signal.getsignal(signal.SIGINT) is signal.SIG_IGN else 3)


def test_a_child_stops_when_its_parent_is_killed(tmp_path) -> None:
    """The parent SIGKILLed: its child stops (PR_SET_PDEATHSIG / parent-pid watch)."""
    import os
    import subprocess
    import sys
    import time

    script = tmp_path / "parent.py"
    script.write_text(
        "import multiprocessing, sys, threading\n"
        "from runwatch.sink.pool import stop_with_parent\n"
        "def child(parent):\n"
        "    stop = threading.Event()\n"
        "    stop_with_parent(parent, stop, poll_s=0.2)\n"
        "    stop.wait(60)\n"
        "if __name__ == '__main__':\n"
        "    import os\n"
        "    p = multiprocessing.get_context('spawn').Process(target=child, args=(os.getpid(),))\n"
        "    p.start()\n"
        "    print(p.pid, flush=True)\n"
        "    p.join()\n"
    )
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE)
    child_pid = int(parent.stdout.readline())
    time.sleep(0.5)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(child_pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.kill(child_pid, signal.SIGKILL)
        pytest.fail("the child outlived its killed parent by 10 s")
