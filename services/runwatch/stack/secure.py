"""The secured broker (``runwatch stack up --secure``): roles, ACLs, passwords, listeners.

Pure logic and files only; the admin calls that apply it live in
:mod:`runwatch.adapters.kafka_security`.

* Clients connect to one ``SASL_SSL`` listener with SCRAM-SHA-512; the broker
  certificate is signed by a local CA (:mod:`runwatch.stack.pki`).
* The controller listener is mutual TLS: only a holder of a certificate from
  that CA (the broker itself) gets in, as the super user ``User:CN=runwatch-broker``.
* ``StandardAuthorizer`` with no ``allow.everyone``: a principal may do what
  :func:`acl_table` grants its role and nothing else.
* One SCRAM user per role (:data:`ROLES`); its password is generated on first
  use into ``<state>/secure/passwords/<role>`` (mode 0600) and read from there
  by clients (``KAFKA_SASL_PASSWORD_FILE``).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from runwatch.stack.pki import BROKER_CN, TlsFiles, ensure_tls, write_private

Role = Literal["admin", "producer", "processor", "sink", "pager", "slo"]
#: Every role, one SCRAM user each (the user name is the role name).
ROLES: tuple[Role, ...] = ("admin", "producer", "processor", "sink", "pager", "slo")
MECHANISM = "SCRAM-SHA-512"
#: What producers (SDK, agent, ``runwatch emit``) write; nothing else.
TELEMETRY: tuple[str, ...] = ("rw.lineage", "rw.data", "rw.exec.job", "rw.exec.node",
                              "rw.learning", "rw.artifact")
ALERTS, DLQ, INTERNAL_PREFIX = "rw.alerts", "rw.dlq", "rw.internal."
SUPER_USERS: tuple[str, ...] = ("User:admin", f"User:CN={BROKER_CN}")

ResourceType = Literal["topic", "group", "cluster"]
Pattern = Literal["literal", "prefixed"]
Operation = Literal["read", "write", "create", "describe", "describe_configs"]


@dataclass(frozen=True, slots=True, order=True)
class AclRule:
    """One ALLOW rule: ``principal`` may do ``operation`` on a resource.

    Attributes:
        principal: ``User:<role>``.
        resource: ``topic``, ``group`` or ``cluster``.
        name: Resource name (``kafka-cluster`` for the cluster).
        pattern: ``literal`` (that name) or ``prefixed`` (every name starting with it).
        operation: What is allowed (``read`` and ``write`` imply ``describe``).
    """

    principal: str
    resource: ResourceType
    name: str
    pattern: Pattern
    operation: Operation


def acl_table(processor_app_id: str = "runwatch-processor", sink_group: str = "runwatch-sink",
              pager_group: str = "runwatch-pager") -> list[AclRule]:
    """Return every ACL of the secured broker, by role.

    * ``producer``: write the telemetry topics (idempotent producing needs
      nothing more since Kafka 3.0); no read, no create, no other topic.
    * ``processor``: read telemetry and ``rw.internal.*``; write ``rw.alerts``,
      ``rw.dlq`` and ``rw.internal.*``; create ``rw.internal.*``; read, write
      and create every topic and group named after its app id (the faust
      consumer group, tick topic, table changelogs and assignor topic).
    * ``sink``: read telemetry, ``rw.alerts`` and ``rw.dlq`` with its group.
    * ``pager``: read ``rw.alerts`` with its group (and ``runwatch alerts
      tail``'s ``runwatch-tail-*`` groups); write ``rw.dlq`` (undeliverable alerts).
    * ``admin``: a super user (creates topics and ACLs), like the broker itself.

    Args:
        processor_app_id: ``RUNWATCH_PROCESSOR_APP_ID``.
        sink_group: The sink's consumer group.
        pager_group: The pager's consumer group.

    Returns:
        The rules, sorted.
    """
    rules: list[AclRule] = []

    def allow(role: Role, resource: ResourceType, names: Iterable[str],
              ops: Iterable[Operation], pattern: Pattern = "literal") -> None:
        rules.extend(AclRule(f"User:{role}", resource, n, pattern, op)
                     for n in names for op in ops)

    allow("producer", "topic", TELEMETRY, ("write",))
    allow("processor", "topic", TELEMETRY, ("read",))
    allow("processor", "topic", (ALERTS, DLQ), ("write",))
    allow("processor", "topic", (INTERNAL_PREFIX,), ("read", "write", "create"), "prefixed")
    allow("processor", "topic", (processor_app_id,),
          ("read", "write", "create", "describe_configs"), "prefixed")
    allow("processor", "group", (processor_app_id,), ("read",), "prefixed")
    allow("sink", "topic", (*TELEMETRY, ALERTS, DLQ), ("read",))
    allow("sink", "group", (sink_group,), ("read",))
    allow("pager", "topic", (ALERTS,), ("read",))
    allow("pager", "topic", (DLQ,), ("write",))
    allow("pager", "group", (pager_group,), ("read",))
    allow("pager", "group", ("runwatch-tail-",), ("read",), "prefixed")
    allow("slo", "topic", (ALERTS,), ("write",))
    return sorted(rules)


def writers_of(topic: str, rules: Iterable[AclRule]) -> set[str]:
    """Return the principals an ACL lets write a topic (super users aside)."""
    return {r.principal for r in rules if r.resource == "topic" and r.operation == "write"
            and (r.name == topic if r.pattern == "literal" else topic.startswith(r.name))}


@dataclass(frozen=True, slots=True)
class SecureFiles:
    """The secured stack's files under ``<state>/secure``."""

    root: Path

    @property
    def tls(self) -> TlsFiles:
        """The CA and broker certificate."""
        return TlsFiles.under(self.root / "tls")

    def password_file(self, role: Role) -> Path:
        """The file holding a role's SCRAM password (mode 0600)."""
        return self.root / "passwords" / role

    def password(self, role: Role) -> str:
        """Return a role's password, generating it on first use.

        Args:
            role: The role.

        Returns:
            The password.
        """
        path = self.password_file(role)
        if not path.is_file():
            write_private(path, (secrets.token_urlsafe(24) + "\n").encode())
        return path.read_text(encoding="utf-8").strip()

    def rotate(self, role: Role) -> str:
        """Write a new password for a role (the broker learns it on the next upsert).

        Args:
            role: The role.

        Returns:
            The new password.
        """
        self.password_file(role).unlink(missing_ok=True)
        return self.password(role)

    def ensure(self, host: str) -> dict[Role, str]:
        """Generate whatever is missing (CA, broker certificate, passwords).

        Args:
            host: The broker's host name or address (in its certificate).

        Returns:
            Every role's password.
        """
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.root.chmod(0o700)
        ensure_tls(self.tls.broker_pem.parent, (host, "127.0.0.1", "localhost"))
        return {role: self.password(role) for role in ROLES}


def scram_args(passwords: dict[Role, str]) -> list[str]:
    """Return ``kafka-storage format`` arguments that create every role's SCRAM user."""
    out: list[str] = []
    for role, password in passwords.items():
        out += ["--add-scram", f"{MECHANISM}=[name={role},password={password}]"]
    return out


def _jaas(user: str, password: str) -> str:
    return ("org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{user}" password="{password}";')


def secure_properties(host: str, port: int, controller_port: int, tls: TlsFiles,
                      admin_password: str) -> dict[str, str]:
    """Return the listener, TLS, SASL and authorizer lines of ``server.properties``.

    Args:
        host: Address the listeners bind.
        port: The client (``SASL_SSL``) port.
        controller_port: The controller (mutual TLS) port.
        tls: The CA and broker certificate.
        admin_password: The admin user's password (the broker's own SASL login).

    Returns:
        Property name → value (they replace the plaintext listener lines).
    """
    return {
        "listeners": f"SASL_SSL://{host}:{port},CONTROLLER://{host}:{controller_port}",
        "advertised.listeners": f"SASL_SSL://{host}:{port}",
        "inter.broker.listener.name": "SASL_SSL",
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:SSL",
        "sasl.enabled.mechanisms": MECHANISM,
        "sasl.mechanism.inter.broker.protocol": MECHANISM,
        f"listener.name.sasl_ssl.{MECHANISM.lower()}.sasl.jaas.config":
            _jaas("admin", admin_password),
        "listener.name.controller.ssl.client.auth": "required",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(tls.broker_pem),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(tls.ca_cert),
        "ssl.endpoint.identification.algorithm": "https",
        "ssl.enabled.protocols": "TLSv1.3,TLSv1.2",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "false",
        "super.users": ";".join(SUPER_USERS),
    }


def role_env(files: SecureFiles, bootstrap: str, role: Role) -> dict[str, str]:
    """Return the ``KAFKA_*`` environment a client of a role connects with.

    Args:
        files: The secured stack's files.
        bootstrap: The broker's ``host:port``.
        role: The role.

    Returns:
        Env variable → value (the password stays in its file).
    """
    files.password(role)
    return {
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "KAFKA_SASL_MECHANISM": MECHANISM,
        "KAFKA_SASL_USERNAME": role,
        "KAFKA_SASL_PASSWORD_FILE": str(files.password_file(role)),
        "KAFKA_SSL_CA_LOCATION": str(files.tls.ca_cert),
    }


#: The role each optional service of the stack runs as.
SERVICE_ROLES: dict[str, Role] = {"processor": "processor", "sink": "sink", "pager": "pager"}
