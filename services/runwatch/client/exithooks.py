"""Exit hooks of a run: uncaught exceptions, SIGTERM and interpreter exit.

Each hook publishes the run's final JobEvent and then chains to whatever was
installed before (the previous excepthook or SIGTERM handler still runs).
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import sys
import threading
import weakref
from types import TracebackType
from typing import Any

logger = logging.getLogger(__name__)

#: Runs whose hooks are installed: a SIGTERM handler (main thread only) ends them all.
_LIVE: weakref.WeakSet[ExitHooks] = weakref.WeakSet()


class ExitHooks:
    """Mixin for :class:`runwatch.client.run.Run` (needs ``finish`` and ``finished``)."""

    _prev_hook: Any = None
    _prev_term: Any = None
    finished: bool
    forked: bool = False  # in a forked child the hooks only chain (the run is the parent's)
    _term_hooked: bool = False  # this run's own SIGTERM handler is installed

    def finish(
        self, status: str = "succeeded", reason: str | None = None, timeout: float = 10.0
    ) -> Any:
        """Publish the final state (implemented by the run)."""
        raise NotImplementedError

    def _install_hooks(self) -> None:
        self._prev_hook = sys.excepthook
        sys.excepthook = self._excepthook
        atexit.register(self._atexit)
        _LIVE.add(self)
        if threading.current_thread() is threading.main_thread():
            try:
                self._prev_term = signal.signal(signal.SIGTERM, self._on_sigterm)
                self._term_hooked = True
            except (ValueError, OSError):
                self._prev_term = None
        elif not any(r._term_hooked for r in list(_LIVE)):
            logger.warning(
                "runwatch.init called outside the main thread: a signal handler can only be "
                "set there, so a SIGTERM is reported for this run (preempted) only once a "
                "run is started in the main thread, or by your own handler calling "
                "run.finish('preempted')")

    def _uninstall_hooks(self) -> None:
        _LIVE.discard(self)
        if sys.excepthook == self._excepthook:
            sys.excepthook = self._prev_hook or sys.__excepthook__
        atexit.unregister(self._atexit)

    def _excepthook(
        self, et: type[BaseException], ev: BaseException, tb: TracebackType | None
    ) -> None:
        try:
            if not self.forked:
                self.finish("failed", reason=f"uncaught {et.__name__}: {ev}"[:1000])
        finally:
            (self._prev_hook or sys.__excepthook__)(et, ev, tb)

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        prev = self._prev_term
        if not self.forked:  # a forked worker (DataLoader, Pool) just goes on to die
            self.finish("preempted", reason="SIGTERM received", timeout=5.0)
            for run in list(_LIVE):  # runs started in other threads have no handler of theirs
                if run is not self and not run._term_hooked and not run.finished:
                    run.finish("preempted", reason="SIGTERM received", timeout=5.0)
        if callable(prev):
            prev(signum, frame)
        elif prev == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    def _atexit(self) -> None:
        if not self.finished and not self.forked:
            self.finish("succeeded", reason="process exited without run.finish()")
