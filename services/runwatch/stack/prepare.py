"""What the optional services need before they start: topics and the ClickHouse schema."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable

from runwatch.stack.settings import StackSettings


class PrepareError(RuntimeError):
    """Topics or the schema could not be provisioned (message says which and why)."""


def ensure_topics(settings: StackSettings, prefix: str = "") -> list[str]:
    """Create the topics of ``schemas/topics.yaml`` missing on this stack's broker.

    Args:
        settings: The stack settings.
        prefix: Prefix of every topic name.

    Returns:
        The topics created.

    Raises:
        PrepareError: The broker refused or did not answer.

    """
    from runwatch.adapters.topics import TopicProvisionError
    from runwatch.adapters.topics import ensure_topics as create

    try:
        return create(settings.kafka_client_config("admin"), prefix=prefix)
    except TopicProvisionError as exc:
        msg = f"topics: {exc}"
        raise PrepareError(msg) from exc


def migrate(settings: StackSettings, database: str | None = None,
            timeout_s: float = 180.0) -> str:
    """Run ``runwatch db migrate`` against this stack's store (idempotent).

    Args:
        settings: The stack settings.
        database: Database to migrate (default: ``CLICKHOUSE_DATABASE`` or runwatch).
        timeout_s: Bound on the migration.

    Returns:
        What the migration printed.

    Raises:
        PrepareError: The migration failed (with its output).

    """
    argv = [settings.python, "-m", "runwatch", "db", "migrate"]
    if database:
        argv += ["--database", database]
    env = {**os.environ, "CLICKHOUSE_URL": settings.clickhouse_url}
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,  # noqa: S603
                             check=False, env=env, cwd=settings.root)
    except subprocess.TimeoutExpired as exc:
        msg = f"runwatch db migrate did not finish in {timeout_s:.0f}s"
        raise PrepareError(msg) from exc
    if res.returncode != 0:
        msg = f"runwatch db migrate failed ({res.returncode}):\n{res.stdout}{res.stderr}"
        raise PrepareError(msg)
    return res.stdout.strip()


def prepare(settings: StackSettings, services: list[str],
            report: Callable[[str], None]) -> None:
    """Provision what the given optional services need (topics; schema for the sink, SLOs).

    Args:
        settings: The stack settings.
        services: Services about to start.
        report: Progress callback.

    Raises:
        PrepareError: When provisioning fails.

    """
    if not services:
        return
    made = ensure_topics(settings)
    if made:
        report(f"topics: created {len(made)} from schemas/topics.yaml")
    check_partitions(settings)
    if "sink" in services or "slo" in services:  # the SLO evaluator reads and writes tables too
        out = migrate(settings)
        report(f"database: {out.splitlines()[-1] if out else 'migrated'}")


def check_partitions(settings: StackSettings, prefix: str = "",
                     timeout_s: float = 30.0) -> None:
    """Refuse topics whose partition count differs from the topic map.

    Run-keyed topics must share one partition count so that one worker sees
    everything about a run; a topic made elsewhere with another count (for
    example auto-created by a broker when a producer wrote first) would split a
    run across workers. Growing it in place would move keys between partitions,
    so this names the topics and leaves the repair to the operator.

    Args:
        settings: The stack settings.
        prefix: Prefix of every topic name.
        timeout_s: Timeout of the admin call.

    Raises:
        PrepareError: A topic differs from the map, or the broker did not answer.

    """
    from runwatch.adapters.topics import TopicProvisionError, topic_states

    conf = settings.kafka_client_config("admin")
    try:
        states = topic_states(conf, prefix=prefix, timeout_s=timeout_s)
    except TopicProvisionError as exc:
        raise PrepareError(str(exc)) from exc
    wrong = [s for s in states if s.partitions not in (None, s.expected_partitions)]
    if wrong:
        names = ", ".join(
            f"{s.name} has {s.partitions} (map: {s.expected_partitions})" for s in wrong
        )
        msg = (f"topics: partition counts differ from schemas/topics.yaml: {names}; "
               "delete and recreate them (`runwatch topics ensure`) or fix the map")
        raise PrepareError(msg)


def secure_broker(settings: StackSettings, report: Callable[[str], None]) -> None:
    """Give every role of the secured broker its SCRAM password and ACLs (idempotent).

    The passwords are those under ``<state>/secure/passwords`` (a rotated one
    replaces the broker's); the ACLs are :func:`runwatch.stack.secure.acl_table`.

    Args:
        settings: The stack settings (``secure`` set).
        report: Progress callback.

    Raises:
        PrepareError: The broker refused the admin or a change.

    """
    from runwatch.adapters.kafka_security import (
        KafkaAuthError,
        KafkaSecurityError,
        apply_acls,
        check_credentials,
        upsert_scram_users,
    )
    from runwatch.stack.secure import MECHANISM, ROLES, SecureFiles, acl_table

    files = SecureFiles(settings.secure_dir)
    conf = settings.kafka_client_config("admin")
    rules = acl_table()
    try:
        check_credentials(conf)
        upsert_scram_users(conf, {role: files.password(role) for role in ROLES}, MECHANISM)
        apply_acls(conf, [(r.resource, r.name, r.pattern, r.principal, r.operation)
                          for r in rules])
    except (KafkaAuthError, KafkaSecurityError) as exc:
        msg = f"securing the broker: {exc}"
        raise PrepareError(msg) from exc
    report(f"kafka: SASL_SSL ({MECHANISM}) with {len(rules)} ACLs for "
           f"{', '.join(r for r in ROLES if r != 'admin')}; credentials in {files.root}")
