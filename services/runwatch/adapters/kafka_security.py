"""Kafka security administration and checks: ACLs, SCRAM users, failing fast on bad credentials.

The secured local stack (``runwatch stack up --secure``) applies its ACLs
and SCRAM users through :func:`apply_acls` and :func:`upsert_scram_users`, as
its admin (a super user). :func:`check_credentials` is what a client runs
before it starts when it is configured for SASL: librdkafka retries a refused
login forever, so a wrong password would otherwise show as a client that
never receives anything.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from runwatch.errors import FatalError

#: (resource, name, pattern, principal, operation), as in ``runwatch.stack.secure.AclRule``.
AclTuple = tuple[str, str, str, str, str]

_RESOURCES = {"topic": ResourceType.TOPIC, "group": ResourceType.GROUP,
              "cluster": ResourceType.BROKER}
_PATTERNS = {"literal": ResourcePatternType.LITERAL, "prefixed": ResourcePatternType.PREFIXED}
_OPERATIONS = {"read": AclOperation.READ, "write": AclOperation.WRITE,
               "create": AclOperation.CREATE, "describe": AclOperation.DESCRIBE,
               "describe_configs": AclOperation.DESCRIBE_CONFIGS}
_MECHANISMS = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256,
               "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}
#: librdkafka error codes that no retry fixes: the credentials or the TLS setup are wrong.
AUTH_ERRORS = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED,
                         KafkaError._SSL})


class KafkaAuthError(FatalError):
    """The broker refused this client's credentials or TLS handshake (message says which)."""


class KafkaAuthorizationError(FatalError):
    """The broker's ACLs do not let this principal do what it asked (message says what)."""


class KafkaSecurityError(RuntimeError):
    """An ACL or SCRAM user could not be applied."""


def auth_failure_message(conf: Mapping[str, Any], err: KafkaError | str) -> str:
    """Return the message a client shows when the broker refuses its login.

    Args:
        conf: The client's librdkafka config (the password is never shown).
        err: What librdkafka reported.

    Returns:
        One line naming the broker, the user, the mechanism and the env settings to check.
    """
    who = conf.get("sasl.username") or "(no KAFKA_SASL_USERNAME)"
    return (f"Kafka at {conf.get('bootstrap.servers')} refused the login of user {who!r} "
            f"({conf.get('security.protocol')}, {conf.get('sasl.mechanism') or 'no mechanism'}): "
            f"{err}; check KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD(_FILE) and "
            "KAFKA_SSL_CA_LOCATION (`runwatch stack env --role ROLE` prints them for the "
            "local secured stack)")


#: librdkafka error codes of an ACL refusal.
AUTHORIZATION_ERRORS = frozenset({KafkaError.TOPIC_AUTHORIZATION_FAILED,
                                  KafkaError.CLUSTER_AUTHORIZATION_FAILED,
                                  KafkaError.GROUP_AUTHORIZATION_FAILED,
                                  KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED})


def authorization_message(conf: Mapping[str, Any], err: KafkaError | str) -> str:
    """Return the message a client shows when the broker's ACLs refuse it.

    Args:
        conf: The client's librdkafka config.
        err: What librdkafka reported.

    Returns:
        One line naming the user and the refusal.
    """
    who = conf.get("sasl.username") or "this client"
    return (f"Kafka at {conf.get('bootstrap.servers')} refused user {who!r}: {err}; its role's "
            "ACLs do not allow it (docs/security.md lists what each role may do)")


def is_auth_error(err: KafkaError) -> bool:
    """Whether a librdkafka error means the credentials or TLS setup are wrong."""
    return err.code() in AUTH_ERRORS


def check_credentials(conf: Mapping[str, Any], timeout_s: float = 10.0) -> None:
    """Log in once and ask for metadata; raise at once if the broker refuses the login.

    Does nothing for a ``PLAINTEXT`` client. Other failures (no broker yet)
    are left to the client's own retries.

    Args:
        conf: The client's librdkafka config (``KafkaSettings.client_config()``).
        timeout_s: Bound on the check.

    Raises:
        KafkaAuthError: The login or the TLS handshake was refused.
    """
    if str(conf.get("security.protocol", "PLAINTEXT")).upper() == "PLAINTEXT":
        return
    errors: list[KafkaError] = []
    client: dict[str, Any] = {**conf, "error_cb": errors.append, "log_level": 0}
    admin = AdminClient(client)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=min(1.0, max(deadline - time.monotonic(), 0.1)))
        except KafkaException as exc:
            errors.append(exc.args[0])
        else:
            return
        admin.poll(0)
        refused = [e for e in errors if isinstance(e, KafkaError) and is_auth_error(e)]
        if refused:
            raise KafkaAuthError(auth_failure_message(conf, refused[0].str()))


def apply_acls(conf: Mapping[str, Any], rules: Iterable[AclTuple], timeout_s: float = 30.0) -> int:
    """Create ALLOW ACLs (existing ones are kept; creating one again is a no-op).

    Args:
        conf: An admin's librdkafka config.
        rules: ``(resource, name, pattern, principal, operation)`` tuples.
        timeout_s: Bound on the request.

    Returns:
        How many bindings were sent.

    Raises:
        KafkaSecurityError: The broker refused one.
    """
    bindings = [
        AclBinding(_RESOURCES[res], name, _PATTERNS[pattern], principal, "*",
                   _OPERATIONS[op], AclPermissionType.ALLOW)
        for res, name, pattern, principal, op in rules
    ]
    if not bindings:
        return 0
    admin = AdminClient(dict(conf))
    for binding, fut in admin.create_acls(bindings, request_timeout=timeout_s).items():
        try:
            fut.result(timeout=timeout_s)
        except KafkaException as exc:
            msg = f"cannot create ACL {binding}: {exc}"
            raise KafkaSecurityError(msg) from exc
    return len(bindings)


def upsert_scram_users(conf: Mapping[str, Any], users: Mapping[str, str],
                       mechanism: str = "SCRAM-SHA-512", iterations: int = 8192,
                       timeout_s: float = 30.0) -> None:
    """Create or replace SCRAM credentials (rotation: upsert a new password).

    Args:
        conf: An admin's librdkafka config.
        users: User name → password.
        mechanism: ``SCRAM-SHA-256`` or ``SCRAM-SHA-512``.
        iterations: PBKDF2 iterations (4096 at least).
        timeout_s: Bound on the request.

    Raises:
        KafkaSecurityError: The broker refused one (the password is not shown).
    """
    info = ScramCredentialInfo(_MECHANISMS[mechanism], iterations)
    alterations: list[Any] = [UserScramCredentialUpsertion(user, info, password.encode())
                              for user, password in users.items()]
    if not alterations:
        return
    admin = AdminClient(dict(conf))
    for user, fut in admin.alter_user_scram_credentials(
            alterations, request_timeout=timeout_s).items():
        try:
            fut.result(timeout=timeout_s)
        except KafkaException as exc:
            msg = f"cannot set the SCRAM credential of user {user!r}: {exc}"
            raise KafkaSecurityError(msg) from exc


__all__ = ["AUTHORIZATION_ERRORS", "AUTH_ERRORS", "KafkaAuthError", "KafkaAuthorizationError",
           "KafkaSecurityError", "apply_acls", "auth_failure_message", "authorization_message",
           "check_credentials", "is_auth_error", "upsert_scram_users"]
