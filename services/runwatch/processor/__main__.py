"""``python -m runwatch.processor [faust worker args]`` — run one processor worker."""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from runwatch.adapters.clientlog import collapse_aiokafka_repeats
from runwatch.adapters.kafka_security import check_credentials
from runwatch.adapters.settings import KafkaSettings
from runwatch.adapters.topics import cluster_replication
from runwatch.core.paging.routes import RulesError
from runwatch.processor.app import build
from runwatch.processor.provision import ensure_internal_topics
from runwatch.processor.settings import ProcessorSettings

logger = logging.getLogger(__name__)


class _Worker(Protocol):
    sections: Any


W = TypeVar("W", bound=_Worker)


def main(argv: list[str] | None = None) -> None:
    """Build the app from env settings and hand the arguments to faust's worker CLI."""
    args = list(sys.argv[1:] if argv is None else argv) or ["worker", "-l", "info"]
    # aiokafka logs an error per connection attempt while the broker is away (75,000 lines
    # for a 96 s outage): each kind once, then once a minute with the count left out
    collapse_aiokafka_repeats()
    settings, kafka = ProcessorSettings(), KafkaSettings()
    if args[0] == "worker":
        args += worker_web_args(settings, args)
    check_credentials(kafka.client_config())  # a refused login fails here, naming the user
    if settings.replication_factor == 0:  # the cluster's: 3 on `runwatch stack up --brokers 3`
        rf = cluster_replication(dict(kafka.client_config()))
        settings = settings.model_copy(update={"replication_factor": rf})
        logger.info("topics the worker creates get replication factor %d", rf)
    ensure_internal_topics(settings, kafka)
    if settings.runtime == "plain":
        run_plain(settings, kafka)
        return
    use_event_loop(settings.event_loop)
    processor = prepared(lambda: build(settings, kafka), settings)
    sys.argv = ["runwatch-processor", *args]
    processor.app.main()


def run_plain(settings: ProcessorSettings, kafka: KafkaSettings) -> None:
    """Run the worker on the plain runtime (:mod:`runwatch.processor.plain`) until stopped."""
    from runwatch.adapters.changelog import DeliveryFailed
    from runwatch.processor.plain import PlainRuntime

    logging.basicConfig(level=logging.INFO,
                        format="[%(asctime)s] [%(process)d] [%(levelname)s] %(name)s: %(message)s")
    runtime = prepared(lambda: PlainRuntime(settings, kafka), settings)
    try:
        runtime.run()
    except DeliveryFailed as exc:  # nothing was committed past it: a restart replays
        msg = f"error: writes not delivered ({exc}); the worker stopped before committing them"
        raise SystemExit(msg) from None


def prepared(make: Callable[[], W], settings: ProcessorSettings) -> W:
    """Build a worker (either runtime) and tune the collector for it.

    Raises:
        SystemExit: ``error: FILE:LINE: ...`` when the ownership file is invalid.

    """
    try:
        worker = make()
    except RulesError as exc:  # the ownership file: its file, line and key
        msg = f"error: {exc}"
        raise SystemExit(msg) from None
    worker.sections.track_gc()  # the worker's log shows the collector's pauses
    tune_gc(settings.gc_threshold)
    return worker


def use_event_loop(name: str) -> str:
    """Install uvloop's event loop policy when asked for and installed; return the loop used."""
    if name != "uvloop":
        return "asyncio"
    try:
        import uvloop
    except ImportError:
        logger.warning("uvloop is not installed: the processor runs on asyncio's event loop")
        return "asyncio"
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return "uvloop"


def tune_gc(threshold0: int) -> tuple[int, int, int]:
    """Tune CPython's garbage collector for the worker; return the thresholds in effect.

    What is alive now (modules, the app) is frozen out of the collector's scans,
    and the generation-0 threshold is raised to ``threshold0`` (0 keeps Python's).
    """
    gc.collect()
    gc.freeze()
    if threshold0 > 0:
        gc.set_threshold(threshold0, *gc.get_threshold()[1:])
    return gc.get_threshold()  # type: ignore[return-value]


def worker_web_args(settings: ProcessorSettings, args: list[str]) -> list[str]:
    """Return faust worker options that make the web settings take effect.

    faust's worker CLI defaults to ``--with-web`` and would override the app's
    ``web_enabled``; explicit options on the command line win over settings.
    """
    out: list[str] = []
    if not any(a.startswith(("--with-web", "--without-web")) for a in args):
        out.append("--with-web" if settings.web_enabled else "--without-web")
    if settings.web_enabled and not any(a in ("-p", "--web-port") or a.startswith("--web-port=")
                                        for a in args):
        out += ["--web-port", str(settings.web_port), "--web-bind", settings.web_bind,
                "--web-host", settings.web_bind]
    return out


if __name__ == "__main__":
    main()
