"""Wiring of ``runwatch store``: settings → engine → HTTP server, with signals."""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType

from runwatch.store.engine import DICTIONARY_CHECK_S, Engine
from runwatch.store.server import StoreServer, serve
from runwatch.store.settings import StoreSettings

logger = logging.getLogger(__name__)


def run_store(settings: StoreSettings) -> int:
    """Open the data directory and serve the ClickHouse HTTP interface until SIGTERM/SIGINT.

    Args:
        settings: Where to listen, where the data lives, the users.

    Returns:
        The exit code: 0 after a graceful stop.

    """
    users = settings.users()
    floors: dict[str, int] = {}
    for user in users.values():
        floors[user.profile.name] = min(floors.get(user.profile.name, 2), user.readonly)
    engine = Engine(settings.path, [u.profile for u in users.values()], floors)
    try:
        server = StoreServer(
            (settings.host, settings.port),
            engine,
            users,
            keep_alive_timeout_s=settings.keep_alive_timeout_s,
            display_name=settings.display_name,
        )
    except OSError:
        engine.close()
        raise
    stop = threading.Event()

    def _on_signal(signum: int, _frame: FrameType | None) -> None:
        logger.info("received %s", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    host, port = server.server_address[:2]
    logger.info(
        "store serving ClickHouse HTTP on http://%s:%s (chDB %s, data %s, users %s)",
        host,
        port,
        engine.version,
        settings.path,
        ", ".join(sorted(users)),
    )
    keeper = threading.Thread(target=_keep_dictionaries, args=(engine, stop),
                              name="dictionaries", daemon=True)
    keeper.start()
    serve(server, stop)
    keeper.join(timeout=DICTIONARY_CHECK_S)
    logger.info("store stopped cleanly")
    return 0


def _keep_dictionaries(engine: Engine, stop: threading.Event) -> None:
    """Reload the dictionaries due (the embedded engine does not) until the store stops."""
    while not stop.wait(DICTIONARY_CHECK_S):
        try:
            for name in engine.reload_due_dictionaries():
                logger.debug("reloaded dictionary %s", name)
        except Exception:  # a failed round must not end the loop: the next one tries again
            logger.exception("dictionary reload round failed")
