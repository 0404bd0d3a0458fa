"""``runwatch agent``: the GPU/host node agent."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``agent`` command.

    Args:
        sub: The top-level sub-parsers.

    """
    p = sub.add_parser("agent", help="sample GPUs (NVML) and host figures; publish NodeSamples")
    p.add_argument("--interval", type=float, default=None, help="seconds between samples (1.0)")
    p.add_argument("--node", default=None, help="node name (default: RUNWATCH_NODE or host name)")
    p.add_argument(
        "--nvml-double",
        action="store_true",
        help="use the FakeNvml8 TEST DOUBLE (8 fake GPUs) instead of the NVML driver",
    )
    p.add_argument("--allocation-file", type=Path, default=None, help="GPU -> run id JSON file")
    p.add_argument(
        "--count", type=int, default=0, help="stop after N samples (0: run until signalled)"
    )
    p.add_argument("--topic", default=None, help="override the node topic (default rw.exec.node)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the agent until SIGTERM/SIGINT.

    Args:
        args: Parsed arguments.

    Returns:
        Exit code.

    """
    from runwatch.adapters.host import HostSampler
    from runwatch.adapters.kafka import KafkaTransport, ProducerSettings, delivery_wait_s
    from runwatch.adapters.nvml import Nvml
    from runwatch.adapters.publisher import Publisher
    from runwatch.adapters.settings import KafkaSettings
    from runwatch.agent.service import (
        INTERVAL_MAX_S,
        INTERVAL_MIN_S,
        AgentSettings,
        NodeAgent,
        RunAttributor,
        default_node,
    )

    settings = AgentSettings()
    interval = args.interval if args.interval is not None else settings.interval_s
    if not INTERVAL_MIN_S <= interval <= INTERVAL_MAX_S:  # also False for NaN
        print(f"runwatch agent: --interval {interval!r} must be between {INTERVAL_MIN_S:g} "
              f"and {INTERVAL_MAX_S:g} seconds", file=sys.stderr)
        return 2
    if args.count < 0:  # "stop after -3 samples" took one sample and stopped
        print(f"runwatch agent: --count {args.count} must be 0 (run until signalled) or more",
              file=sys.stderr)
        return 2
    node: str = args.node if args.node is not None else settings.node or default_node()
    if not node.strip():  # a blank name was published as the samples' node
        name = ("--node" if args.node is not None else
                "RUNWATCH_AGENT_NODE" if settings.node else "RUNWATCH_NODE")
        print(f"runwatch agent: {name} {node!r} is blank: give the node's name (as the "
              "scheduler names it)", file=sys.stderr)
        return 2
    module: Any = None
    if args.nvml_double or settings.nvml_double:
        from runwatch.testing.nvml_double import FakeNvml8

        module = FakeNvml8()
        logger.warning("using the FakeNvml8 TEST DOUBLE: GPU figures are not real")
    nvml = Nvml.open(module)
    transport = KafkaTransport(KafkaSettings(), ProducerSettings(), name=f"agent-{node}")
    topics = {"rw.exec.node": args.topic} if args.topic else None
    publisher = Publisher(transport, kind="agent", topics=topics)
    agent = NodeAgent(
        publisher,
        node=node,
        nvml=nvml,
        host=HostSampler(),
        attributor=RunAttributor(
            settings.proc_root, args.allocation_file or settings.allocation_file
        ),
    )
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    gpus = nvml.device_count() if nvml else 0
    logger.info("agent on %s: %d GPUs, every %.2fs", node, gpus, interval)
    agent.run(stop, interval, max_ticks=args.count)
    if nvml is not None:
        nvml.close()
    # past the producer's message timeout, by which a record to a topic the broker lacks
    # is told from an outage and refused, naming the topic (a 10 s wait ended first: a
    # short run with a misspelt --topic exited 0, its records left in the spool)
    c = transport.close(delivery_wait_s(transport.settings))
    logger.info("agent stopped after %d samples", agent.ticks)
    return 0 if c.failed == 0 else 1
