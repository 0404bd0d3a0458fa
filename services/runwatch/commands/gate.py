"""``runwatch gate check|approve``: release gates decided from the evidence in ClickHouse.

``gate check RUN`` picks the policy governing the run (``--policy`` file, by
its ``model`` label or experiment family, or ``--name``), reads the evidence,
decides, prints every measurement and reason, publishes the GateDecision to
``rw.artifact`` and exits 0 (pass), 1 (fail) or 2 (review). ``gate approve
RUN --by NAME --reason TEXT`` records a human approval of a ``review`` as a
new GateDecision naming the review it approves; the automated decision stays
stored as it was. Anything that prevents a decision (an invalid policy file,
no policy for the run, bad arguments, the store or broker unreachable) exits
3, so CI never mistakes it for a review.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, NoReturn

from runwatch.commands import delivery_timeout
from runwatch.core.jsontext import json_text
from runwatch.resources import read_config

EXIT = {"pass": 0, "fail": 1, "review": 2}
EXIT_ERROR = 3
POLICY_ENV = "RUNWATCH_GATES_FILE"


class _Parser(argparse.ArgumentParser):
    """Usage errors exit 3: 2 means ``review`` to a CI pipeline."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\n")


class _Refused(Exception):
    """A gate command cannot decide (exit 3 with this message)."""


def _policy_file(arg: str | None) -> Path:
    if arg:
        return Path(arg)
    if os.environ.get(POLICY_ENV):
        return Path(os.environ[POLICY_ENV])
    from runwatch.resources import resource

    return resource("schemas", "gates.yaml")


def _store(args: argparse.Namespace) -> Any:
    from runwatch.adapters import clickhouse as ch
    from runwatch.adapters.gates import GateStore
    from runwatch.adapters.settings import ClickHouseSettings

    settings = ClickHouseSettings(**({"database": args.database} if args.database else {}))
    try:  # the check every governance command shares: name, existence, runwatch tables
        client = ch.open_database(settings, readonly=True, as_default=True)
    except ch.ClickHouseRejected as exc:  # no such database: say so, not "cannot reach"
        raise _Refused(str(exc)) from exc
    except Exception as exc:  # noqa: BLE001 - unreachable or refused: one line
        msg = f"cannot reach ClickHouse at {settings.url}: {exc}"
        raise _Refused(msg) from exc
    return GateStore(client, settings.database)


def _publish(args: argparse.Namespace, fields: dict[str, Any], at_ms: int | None = None) -> str:
    """Publish a GateDecision and wait for Kafka to store it; refuse (exit 3) when it did not.

    No disk spool: the exit code must say whether the decision reached Kafka. A
    spooled decision would wait for the next ``runwatch gate`` on the same
    machine (a CI runner's spool is gone with the runner) while the pipeline
    promotes the model on exit 0.
    """
    from runwatch.adapters.kafka import KafkaTransport, ProducerSettings
    from runwatch.adapters.publisher import Publisher, default_topics
    from runwatch.core.records import GateDecision

    topics = ({t: args.topic_prefix + t for t in set(default_topics().values())}
              if args.topic_prefix else None)
    transport = KafkaTransport(settings=ProducerSettings(spool_dir=None), name="gate")
    pub = Publisher(transport, kind="cli", topics=topics)
    rec = GateDecision(**pub.meta(at_ms), run_id=args.run, **fields)
    topic = pub.topic_for(rec)
    handed = pub.publish([rec])
    c = transport.close(args.timeout)
    if not handed:
        msg = f"the gate decision for {args.run} could not be encoded (see the log above)"
        raise _Refused(msg)
    if c.failed or c.in_spool or c.sent + c.replayed < 1:
        why = (f"topic {topic!r} does not exist (check --topic-prefix)" if c.missing_topic
               else f"Kafka did not store it in topic {topic!r} within --timeout "
                    f"{args.timeout:g} s")
        msg = (f"the gate decision for {args.run} was not delivered: {why}; nothing was "
               "recorded, run the command again")
        raise _Refused(msg)
    return str(rec.event_id)


def _crashed(exc: BaseException) -> int:
    """Print an unexpected error with its traceback and exit 3 (could not decide)."""
    import traceback

    traceback.print_exception(exc, file=sys.stderr)
    print(f"error: gate could not decide: {type(exc).__name__}: {exc}", file=sys.stderr)
    return EXIT_ERROR


def _guard(fn: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        from runwatch.core.gates.policy import PolicyError

        try:
            from runwatch.adapters.gates import GateStoreError
        except ModuleNotFoundError:  # no clickhouse_connect: reported below
            GateStoreError = _Refused  # type: ignore[misc,assignment]  # noqa: N806
        try:
            return int(fn(args))
        except (_Refused, PolicyError, GateStoreError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_ERROR
        except ModuleNotFoundError as exc:  # the base install: exit 3, never 2 (review)
            from runwatch.extras import extra_for, install_hint

            extra = extra_for("gate", exc.name)
            if extra is None:
                return _crashed(exc)
            print(f"{install_hint(extra, 'runwatch gate')} (missing: {exc.name})",
                  file=sys.stderr)
            return EXIT_ERROR
        except Exception as exc:  # noqa: BLE001 - a traceback exits 1, which CI reads as fail
            return _crashed(exc)

    return run


def _check_at(args: argparse.Namespace) -> None:
    """Refuse an ``--at-ms`` in another unit: the sink would dead-letter the decision."""
    import time

    from runwatch.core.storage.rows import implausible_ms

    why = "" if args.at_ms is None else implausible_ms(args.at_ms, int(time.time() * 1000))
    if why:
        msg = f"--at-ms {args.at_ms}: {why}"
        raise _Refused(msg)


def bounds_of(key: str, thresholds: dict[str, float]) -> list[tuple[str, float]]:
    """Return the bounds a policy set on one measurement: (word, value) pairs.

    The decision names a bound after what it limits (``auc.min``, ``margin.auc``,
    ``seeds.min``), not always after the measurement (``auc``, ``delta.auc``,
    ``seeds``): :func:`bound_names` pairs them, so every measurement is printed
    with its bound.
    """
    return [(word, thresholds[name]) for name, word in bound_names(key) if name in thresholds]


def bound_names(key: str) -> list[tuple[str, str]]:
    """Return the threshold names that may bound a measurement, each with its word."""
    head, _, rest = key.partition(".")
    if key == "seeds":
        names = [("seeds.min", "at least")]
    elif head == "delta":
        names = [(f"margin.{rest}", "at least")]
    elif head == "rerun_diff":
        names = [(f"rerun_tolerance.{rest}", "at most")]
    elif head == "ci_width":
        names = [("ci_width", "at most")]
    elif head == "slice" and key.endswith(".deterioration"):
        names = [(key.removesuffix("deterioration") + "max_deterioration", "at most")]
    else:
        names = [(key, "bound"), (f"{key}.min", "min"), (f"{key}.max", "max")]
    return names


def _check_run(args: argparse.Namespace) -> None:
    if not args.run.strip():
        msg = "the run id must not be empty"
        raise _Refused(msg)


def _approval_at(args: argparse.Namespace, review_ms: int) -> int:
    """Return the approval's event time: after the review it approves.

    A run's gates count their latest decision by event time, so an approval
    stamped at or before its review (an ``--at-ms`` in the past, a reviewer's
    clock behind the CI runner's) would be stored and never release the run.
    """
    import time

    if args.at_ms is not None:
        if args.at_ms <= review_ms:
            msg = (f"--at-ms {args.at_ms} is not after the review it approves (at "
                   f"{review_ms}): a gate counts its latest decision by time, so this "
                   "approval would not release the run")
            raise _Refused(msg)
        return int(args.at_ms)
    return max(int(time.time() * 1000), review_ms + 1)


def check(args: argparse.Namespace) -> int:
    """Decide a run's gate, print it, publish it; exit 0 pass, 1 fail, 2 review, 3 error."""
    from runwatch.core.gates.evaluate import decide
    from runwatch.core.gates.policy import parse_policies
    from runwatch.core.records import SliceResult

    _check_at(args)
    _check_run(args)
    path = _policy_file(args.policy)
    policies = parse_policies(read_config(path), str(path))
    store = _store(args)
    manifest = store.manifest(args.run)
    if args.name:
        policy = next((p for p in policies.policies if p.name == args.name), None)
        if policy is None:
            msg = f"{path}: no policy named {args.name!r}"
            raise _Refused(msg)
    elif manifest is None:
        msg = (f"run {args.run} has no stored manifest, so no policy can be chosen for it "
               "(name one with --name)")
        raise _Refused(msg)
    else:
        policy = policies.for_run(manifest["family"], dict(manifest["labels"]))
        if policy is None:
            msg = (f"{path}: no policy governs run {args.run} (family "
                   f"{manifest['family'] or '(none)'!r}, model label "
                   f"{dict(manifest['labels']).get('model', '(none)')!r})")
            raise _Refused(msg)
    evidence = store.evidence(args.run, policy.incumbent_run)
    if manifest is None and not evidence.candidate.evaluations:
        msg = (f"nothing is stored for run {args.run}: no manifest and no evaluation (a "
               "mistyped run id, or the sink has not written its records yet)")
        raise _Refused(msg)
    d = decide(policy, evidence)
    fields = dict(gate=policy.name, decision=d.decision, thresholds=d.thresholds,
                  measured=d.measured, reasons=tuple(d.reasons), evaluator="runwatch gate check",
                  policy=policy.source,
                  slices=tuple(SliceResult(name=s.name, measured=s.measured, passed=s.passed)
                               for s in d.slices))
    event_id = _publish(args, fields) if not args.no_publish else ""
    code = EXIT[d.decision]
    if args.json:
        out = {"run_id": args.run, **{k: v for k, v in fields.items() if k != "slices"},
               "slices": [{"name": s.name, "measured": s.measured, "passed": s.passed}
                          for s in d.slices],
               "event_id": event_id, "exit_code": code}
        print(json_text(out, default=list))
        return code
    print(f"gate {policy.name} for run {args.run}: {d.decision.upper()} ({policy.source})")
    for r in d.reasons:
        print(f"  {r}")
    for k in sorted(d.measured):
        bounds = ", ".join(f"{word} {value:.6g}" for word, value in bounds_of(k, d.thresholds))
        print(f"  measured {k} = {d.measured[k]:.6g}" + (f" ({bounds})" if bounds else ""))
    for s in d.slices:
        print(f"  slice {s.name}: {'ok' if s.passed else 'FAILED'} "
              + ", ".join(f"{k}={v:.6g}" for k, v in sorted(s.measured.items())))
    if event_id:
        print(f"  published GateDecision {event_id}")
    return code


def approve(args: argparse.Namespace) -> int:
    """Record a human approval of a run's ``review`` as a new GateDecision."""
    _check_at(args)
    _check_run(args)
    by, reason = args.by.strip(), args.reason.strip()
    if not by or not reason:
        msg = "--by and --reason must not be empty"
        raise _Refused(msg)
    stored = _store(args).decisions(args.run)
    rows = [r for r in stored if not r["approves"]]
    if args.gate:
        rows = [r for r in rows if r["gate"] == args.gate]
    if not rows:
        what = f"gate {args.gate}" if args.gate else "any gate"
        msg = (f"no automated decision of {what} is stored for run {args.run} (run `runwatch "
               "gate check` first; the sink may still be writing it)")
        raise _Refused(msg)
    latest = rows[-1]
    if latest["decision"] != "review":
        msg = (f"the latest decision of gate {latest['gate']} for run {args.run} is "
               f"{latest['decision']}, not review: only a review is approved (a fail needs "
               "new evidence and a new check)")
        raise _Refused(msg)
    done = [r for r in stored if r["approves"] == latest["event_id"]]
    if done:
        msg = (f"review {latest['event_id']} of gate {latest['gate']} is already approved by "
               f"{done[-1]['evaluator']}")
        raise _Refused(msg)
    event_id = _publish(args, dict(
        gate=latest["gate"], decision="pass", evaluator=f"human:{by}",
        reasons=(f"approved by {by}: {reason}",), policy=latest["policy"] or None,
        approves=latest["event_id"]), _approval_at(args, int(latest["ts_ms"])))
    out = {"run_id": args.run, "gate": latest["gate"], "approves": latest["event_id"],
           "by": by, "reason": reason, "event_id": event_id}
    if args.json:
        print(json_text(out))
    else:
        print(f"approved: gate {latest['gate']} of run {args.run} (review {latest['event_id']}) "
              f"by {by}; release allowed. Published GateDecision {event_id}")
    return 0


def _help(p: argparse.ArgumentParser) -> Any:
    def show(_args: argparse.Namespace) -> int:
        p.print_help(sys.stderr)
        return EXIT_ERROR

    return show


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``gate`` command.

    Args:
        sub: The top-level sub-parsers.

    """
    p = sub.add_parser("gate", help="release gates: check a run's evidence, approve a review",
                       description=__doc__.split("\n\n")[1] if __doc__ else None)
    p.error = _Parser.error.__get__(p)  # type: ignore[method-assign]
    # usage_exit: the exit status of an argument the top-level parser does not recognize
    # (a mistyped --policy), which it, not this command's parser, reports (cli.main)
    p.set_defaults(func=_help(p), usage_exit=EXIT_ERROR)
    kinds = p.add_subparsers(dest="gate_command", metavar="ACTION", parser_class=_Parser)

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("run", help="the candidate run id")
        q.add_argument("--database", help="ClickHouse database (default CLICKHOUSE_DATABASE)")
        q.add_argument("--topic-prefix", default="", help="prefix added to every topic name")
        q.add_argument("--timeout", type=delivery_timeout, default=15.0,
                       help="seconds to wait for delivery (0 to 3600)")
        q.add_argument("--at-ms", type=int, default=None,
                       help="event time of the published decision (default: now)")
        q.add_argument("--json", action="store_true", help="print the decision as JSON")

    c = kinds.add_parser("check", help="decide pass/fail/review from the stored evidence "
                         "(exit 0/1/2; 3: could not decide)")
    common(c)
    c.add_argument("--policy", help=f"policy file (default ${POLICY_ENV}, else the shipped "
                   "schemas/gates.yaml)")
    c.add_argument("--name", help="the policy to apply (default: by model label, then family)")
    c.add_argument("--no-publish", action="store_true", help="decide and print only")
    c.set_defaults(func=_guard(check))
    a = kinds.add_parser("approve", help="record a human approval of a review (never "
                         "overwrites the automated decision)")
    common(a)
    a.add_argument("--by", required=True, help="who approves")
    a.add_argument("--reason", required=True, help="why")
    a.add_argument("--gate", help="the gate (default: the run's latest automated decision)")
    a.set_defaults(func=_guard(approve))
