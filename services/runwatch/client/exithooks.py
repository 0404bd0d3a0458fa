"""Exit hooks of a run: uncaught exceptions, SIGTERM and interpreter exit.

Each hook publishes the run's final JobEvent and then chains to whatever was
installed before (the previous excepthook or SIGTERM handler still runs).
``sys.exit`` (and the ``exit``/``quit`` builtins scripts call too) is wrapped to
note the status the main thread exits with, so that a process ending without
``run.finish()`` is reported ``failed`` after ``sys.exit(3)`` or ``exit(3)`` and
``succeeded`` after ``sys.exit(0)`` or the end of the script. A bare
``raise SystemExit(3)`` goes through neither and is not seen. An uncaught Ctrl-C
(``KeyboardInterrupt``) ends the run ``cancelled``.
"""

from __future__ import annotations

import atexit
import builtins
import logging
import os
import signal
import sys
import threading
import weakref
from types import TracebackType
from typing import Any, NoReturn

logger = logging.getLogger(__name__)

_SYS_EXIT = sys.exit  # the interpreter's own, for a chain whose previous link is gone

#: Runs whose hooks are installed: a SIGTERM handler (main thread only) ends them all.
_LIVE: weakref.WeakSet[ExitHooks] = weakref.WeakSet()


class ExitHooks:
    """Mixin for :class:`runwatch.client.run.Run` (needs ``finish`` and ``finished``)."""

    _prev_hook: Any = None
    _prev_term: Any = None
    _prev_exit: Any = None
    _prev_builtins: dict[str, Any] | None = None  # the exit/quit builtins this run wrapped
    _exit_code: Any = None  # the argument of the main thread's last sys.exit call
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
        self._prev_exit = sys.exit
        sys.exit = self._exit
        self._prev_builtins = {}
        for name in ("exit", "quit"):  # site's Quitter raises SystemExit itself
            prev = getattr(builtins, name, None)
            if callable(prev):
                self._prev_builtins[name] = prev
                setattr(builtins, name, _Quit(self, prev))
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
        if sys.exit == self._exit:
            sys.exit = self._prev_exit
        for name, prev in (self._prev_builtins or {}).items():
            now = getattr(builtins, name, None)
            if isinstance(now, _Quit) and now.run is self:
                setattr(builtins, name, prev)
        self._prev_builtins = None
        atexit.unregister(self._atexit)

    def _excepthook(
        self, et: type[BaseException], ev: BaseException, tb: TracebackType | None
    ) -> None:
        try:
            if not self.forked:
                self.finish(*ended_by(et, ev, "uncaught "))
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

    def _exit(self, status: str | int | None = None, /) -> NoReturn:
        """``sys.exit`` while the run's hooks are installed: note the status, then exit.

        Only the main thread's call is noted: ``sys.exit`` in another thread ends
        that thread, not the process.
        """
        self._note_exit(status)
        (self._prev_exit or _SYS_EXIT)(status)
        raise SystemExit(status)  # a previous wrapper that returned

    def _note_exit(self, status: Any) -> None:
        if threading.current_thread() is threading.main_thread():
            self._exit_code = status

    def _atexit(self) -> None:
        if self.finished or self.forked:
            return
        code = self._exit_code
        if code is None or code == 0:
            self.finish("succeeded", reason="process exited without run.finish()")
            return
        # sys.exit(n) exits with n, sys.exit("message") with 1 after printing it
        status = code if isinstance(code, int) and not isinstance(code, bool) else 1
        told = "" if isinstance(code, int) else f": {code}"
        self.finish("failed", reason=f"process exited with status {status} without "
                                     f"run.finish(){told}"[:1000])


def ended_by(et: type[BaseException], ev: BaseException | None,
             prefix: str = "") -> tuple[str, str]:
    """The final state and reason of a run ended by an exception.

    A Ctrl-C (``KeyboardInterrupt``) is a run stopped on purpose: ``cancelled``, as the
    Lightning callback reports it (the exit hook said ``failed``); any other exception
    is ``failed`` with its type and text.
    """
    if issubclass(et, KeyboardInterrupt):
        return "cancelled", f"{prefix}KeyboardInterrupt"
    return "failed", f"{prefix}{et.__name__}: {ev}"[:1000]


class _Quit:
    """The ``exit``/``quit`` builtin while a run's hooks are installed: note, then chain."""

    def __init__(self, run: ExitHooks, prev: Any) -> None:
        self.run, self.prev = run, prev

    def __repr__(self) -> str:
        return repr(self.prev)

    def __call__(self, code: Any = None) -> NoReturn:
        self.run._note_exit(code)
        self.prev(code)
        raise SystemExit(code)  # a previous one that returned
