"""``runwatch emit``: publish records from scheduler hooks and scripts."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from runwatch.commands import delivery_timeout


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``emit`` command.

    Args:
        sub: The top-level sub-parsers.

    """
    p = sub.add_parser(
        "emit",
        help="publish job states (scheduler hooks) or JSON-lines records",
        description='Publish a job state, or JSON lines from stdin ({"type": "JobEvent", ...}).',
    )
    p.add_argument("--stdin", action="store_true", help="read JSON lines from stdin")
    p.add_argument("--timeout", type=delivery_timeout, default=15.0,
                   help="seconds to wait for delivery (0 to 3600)")
    p.add_argument("--topic-prefix", default="", help="prefix added to every topic name")
    p.set_defaults(func=run_stdin)
    kinds = p.add_subparsers(dest="kind", metavar="KIND")
    js = kinds.add_parser("job-state", help="one job state transition")
    js.add_argument("--run-id", required=True)
    js.add_argument(
        "--state",
        required=True,
        choices=[
            "queued",
            "scheduled",
            "running",
            "preempted",
            "retrying",
            "failed",
            "succeeded",
            "cancelled",
        ],
    )
    js.add_argument("--queue", default=None)
    js.add_argument("--attempt", type=int, default=0)
    js.add_argument("--reason", default=None)
    js.add_argument("--priority-class", default=None)
    js.add_argument("--nodes", default="",
                    help="the attempt's nodes, all of them: comma-separated names or a Slurm "
                         "hostlist (gpu-[01-04]; $SLURM_JOB_NODELIST)")
    js.add_argument("--gpus", default="",
                    help="the GPU indices on each node: numbers and ranges (0-3,6)")
    js.add_argument("--gpu-model", default=None)
    js.add_argument("--deadline-ms", type=int, default=None)
    js.add_argument("--team", default=None)
    js.add_argument("--experiment-family", default=None)
    js.add_argument("--event-id", default=None, help="fixed event id (idempotent re-runs)")
    # given before or after ``job-state``: a sub-command's own default would replace the
    # value given before it (``emit --timeout 1 job-state`` waited 15 s), so it has none
    js.add_argument("--timeout", type=delivery_timeout, default=argparse.SUPPRESS,
                    help="seconds to wait for delivery (default 15)")
    js.add_argument("--topic-prefix", default=argparse.SUPPRESS,
                    help="prefix added to every topic name")
    js.set_defaults(func=run_job_state)


def producer_settings() -> Any:
    """Return emit's producer settings: the environment's, a missing topic told in a second.

    A hook waits a few seconds (``--timeout 5``): by librdkafka's default a record to a
    topic the broker lacks timed out first, as in an outage, and was spooled for ever.
    """
    from runwatch.adapters.kafka import MISSING_CONFIRM_S, ProducerSettings

    return ProducerSettings(missing_topic_fail_ms=int(MISSING_CONFIRM_S * 1000))


def _publisher(args: argparse.Namespace) -> tuple[Any, list[Any]]:
    from runwatch.adapters.kafka import KafkaTransport, ProducerSettings, adopt_orphans
    from runwatch.adapters.publisher import Publisher, default_topics
    from runwatch.adapters.settings import KafkaSettings

    topics = (
        {t: args.topic_prefix + t for t in set(default_topics().values())}
        if args.topic_prefix
        else None
    )
    pub = Publisher(KafkaTransport(settings=producer_settings(), name="emit"), kind="hook",
                    topics=topics)
    # spools of emits that ran while this one's was in use, and ended during an outage
    orphans = adopt_orphans(KafkaSettings(), ProducerSettings(), prefix="emit-", exclude="emit")
    return pub, orphans


def _finish(pub: Any, errors: list[str], timeout: float, orphans: list[Any],
            handed: int | None = None) -> int:
    """Print the rejected lines, wait for delivery and say what became of the records.

    ``handed`` (``--stdin``): the records handed to the producer, summarised once their
    delivery is known (the summary said "published" before any was delivered, also of
    records the broker then refused).
    """
    for e in errors:
        print(e, file=sys.stderr)
    c = pub.transport.close(timeout)
    for t in orphans:
        t.close(0.0 if c.in_spool else min(timeout, 5.0))
    if handed is not None:
        print(delivery_summary(handed, len(errors), c), file=sys.stderr)
    left = c.in_spool
    if left:
        print(spooled_note(left, timeout), file=sys.stderr)
    return 1 if errors or c.failed else 0


def spooled_note(left: int, timeout: float) -> str:
    """Say that records were spooled, and when ``--timeout`` was too short to tell why.

    A topic the broker lacks is told from an outage in about
    :data:`~runwatch.adapters.kafka.MISSING_TOPIC_WAIT_S`; a record to one still waiting
    when a shorter timeout ends would be sent, and refused, by the next emit.
    """
    from runwatch.adapters.kafka import MISSING_TOPIC_WAIT_S

    text = f"{left} record(s) spooled locally; they are sent on the next emit"
    if timeout < MISSING_TOPIC_WAIT_S:
        text += (f" (--timeout {timeout:g} is too short to tell a topic the broker lacks from "
                 f"an outage: that takes about {MISSING_TOPIC_WAIT_S:g} s)")
    return text


def run_job_state(args: argparse.Namespace) -> int:
    """Publish one JobEvent.

    Args:
        args: Parsed arguments.

    Returns:
        Exit code.

    """
    from runwatch.client.emit import emit_records
    from runwatch.client.hostlist import expand_hostlist, expand_indices
    from runwatch.client.lineage import optional_text

    if args.event_id is not None and not args.event_id.strip():
        print("runwatch emit job-state: --event-id is empty: give the id that makes a re-run "
              "idempotent, or leave the option out for a new one", file=sys.stderr)
        return 2
    alloc = None
    if args.nodes or args.gpus or args.gpu_model:
        try:
            nodes = expand_hostlist(args.nodes)
        except ValueError as exc:
            print(f"runwatch emit job-state: --nodes: {exc}", file=sys.stderr)
            return 2
        try:
            gpus = expand_indices(args.gpus)
        except ValueError as exc:
            print(f"runwatch emit job-state: --gpus: {exc} (give indices and ranges: 0-3,6)",
                  file=sys.stderr)
            return 2
        alloc = {"nodes": nodes, "gpu_indices": gpus, "gpu_model": optional_text(args.gpu_model)}
    obj = {
        "type": "JobEvent",
        "run_id": args.run_id,
        "state": args.state,
        "attempt": args.attempt,
        "reason": optional_text(args.reason),  # an empty option is no value, as left out
        "queue": optional_text(args.queue),
        "priority_class": optional_text(args.priority_class),
        "allocation": alloc,
        "deadline_ms": args.deadline_ms,
        "team": optional_text(args.team),
        "experiment_family": optional_text(args.experiment_family),
    }
    if args.event_id is not None:
        obj["event_id"] = args.event_id
    pub, orphans = _publisher(args)
    res = emit_records(pub, [obj])
    return _finish(pub, res.errors, args.timeout, orphans)


def run_stdin(args: argparse.Namespace) -> int:
    """Publish JSON lines from stdin.

    Args:
        args: Parsed arguments.

    Returns:
        Exit code: 0 when every line was published (or spooled), 1 when any line
        was rejected (each named on stderr, ``line N: reason``; the good lines are
        published all the same) or delivery failed, 2 without ``--stdin``.

    """
    if not args.stdin:
        print("runwatch emit: give a KIND (job-state) or --stdin", file=sys.stderr)
        return 2
    from runwatch.client.emit import emit_lines, read_lines

    pub, orphans = _publisher(args)
    res = emit_lines(pub, read_lines(sys.stdin.buffer))  # bytes: each line is checked as UTF-8
    return _finish(pub, res.errors, args.timeout, orphans, handed=res.published)


def delivery_summary(handed: int, rejected: int, c: Any) -> str:
    """Return the ``--stdin`` summary: records handed over, delivered, refused, rejected.

    Args:
        handed: Records handed to the producer (lines that passed the checks).
        rejected: Lines refused before that (each named on stderr).
        c: The transport's final counters.

    """
    text = (f"handed {handed} to the producer, delivered {c.sent + c.replayed}, "
            f"rejected {rejected}")
    if c.failed:
        why = f": topic missing for {c.missing_topic}" if c.missing_topic else ""
        text += f", refused by the broker {c.failed}{why}"
    return text
