"""Settings of the local stack (env prefix ``RUNWATCH_STACK_``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import cast

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from runwatch.resources import alertmanager_config, kafka_log4j


def find_checkout_root(start: Path | None = None) -> Path:
    """Find the checkout holding ``infra/kafka/pom.xml`` around the working directory.

    Looks upwards from ``start`` (default: the working directory). An installed
    package used outside a checkout works from the working directory.

    Args:
        start: Where to begin looking.

    Returns:
        The checkout root, or ``start`` (the working directory) when none is found.

    """
    origin = (start or Path.cwd()).resolve()
    for directory in (origin, *origin.parents):
        if (directory / "infra" / "kafka" / "pom.xml").is_file():
            return directory
    return origin


def user_cache_dir() -> Path:
    """Return runwatch's per-user cache folder (``$XDG_CACHE_HOME/runwatch``).

    Returns:
        The folder (not created here).

    """
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "runwatch"


class StackSettings(BaseSettings):
    """Where the local stack keeps its state and which ports it binds.

    Every field can be set from the environment, e.g.
    ``RUNWATCH_STACK_STATE_DIR=/tmp/rw RUNWATCH_STACK_KAFKA_PORT=19092``.
    """

    model_config = SettingsConfigDict(env_prefix="RUNWATCH_STACK_", extra="ignore")

    root: Path = Field(default_factory=find_checkout_root)
    state_dir: Path | None = None
    host: str = "127.0.0.1"
    kafka_port: int = Field(default=9092, ge=1, le=65535)
    controller_port: int = Field(default=9094, ge=1, le=65535)
    store_port: int = Field(default=8123, ge=1, le=65535)
    alertmanager_port: int = Field(default=9093, ge=1, le=65535)
    kafka_lib: Path | None = None
    kafka_heap: str = "512m"
    brokers: int = Field(default=1, ge=1, le=5)
    broker_port_step: int = Field(default=100, ge=1)
    kafka_partitions: int = Field(default=1, ge=1)
    java: str = "java"
    python: str = sys.executable
    alertmanager_bin: str = "prometheus-alertmanager"
    alertmanager_config: Path | None = None
    secure: bool = False
    start_timeout_s: float = Field(default=120.0, gt=0)
    stop_timeout_s: float = Field(default=30.0, gt=0)

    @property
    def state(self) -> Path:
        """The state directory (default ``<checkout>/.runwatch``)."""
        return (self.state_dir or self.root / ".runwatch").resolve()

    @property
    def logs(self) -> Path:
        """Where every service writes its logs."""
        return self.state / "logs"

    @property
    def in_checkout(self) -> bool:
        """Whether ``root`` is a runwatch checkout (it holds ``infra/kafka/pom.xml``)."""
        return (self.root / "infra" / "kafka" / "pom.xml").is_file()

    @property
    def lib(self) -> Path:
        """The broker classpath folder.

        ``RUNWATCH_STACK_KAFKA_LIB`` when set; in a checkout ``infra/kafka/lib``
        (filled by ``make jars``); otherwise ``<user cache>/kafka-lib``, which
        ``runwatch stack up`` fills with Maven from the packaged ``pom.xml``.
        """
        if self.kafka_lib is not None:
            return self.kafka_lib.resolve()
        if self.in_checkout:
            return (self.root / "infra" / "kafka" / "lib").resolve()
        return (user_cache_dir() / "kafka-lib").resolve()

    @property
    def log4j_config(self) -> Path:
        """The broker's log4j2 configuration (packaged)."""
        return kafka_log4j().resolve()

    @property
    def am_config(self) -> Path:
        """The Alertmanager configuration file (default: the packaged one)."""
        return (self.alertmanager_config or alertmanager_config()).resolve()

    @property
    def heap(self) -> str:
        """Each broker's JVM heap: ``kafka_heap``, default 384m per broker of a cluster."""
        if self.brokers > 1 and "kafka_heap" not in self.model_fields_set:
            return "384m"
        return self.kafka_heap

    def broker_ports(self, node: int) -> tuple[int, int]:
        """Return broker ``node``'s (client, controller) ports (node 1: the configured ones).

        Broker ``n`` listens ``(n - 1) * broker_port_step`` above ``kafka_port`` and
        ``controller_port``: 9092/9094, 9192/9194, 9292/9294 by default.
        """
        offset = (node - 1) * self.broker_port_step
        return self.kafka_port + offset, self.controller_port + offset

    @property
    def bootstrap_servers(self) -> str:
        """Kafka bootstrap servers of this stack (every broker of a cluster)."""
        return ",".join(f"{self.host}:{self.broker_ports(n)[0]}"
                        for n in range(1, self.brokers + 1))

    @property
    def secure_dir(self) -> Path:
        """The secured broker's CA, certificate and passwords (``--secure``)."""
        return self.state / "secure"

    def kafka_client_config(self, role: str = "admin") -> dict[str, str]:
        """Return the librdkafka config of a client of this broker (as ``role`` when secured).

        Args:
            role: The secured broker's role to log in as (ignored when not secured).

        Returns:
            The config (the password is read from its file).
        """
        from runwatch.adapters.settings import KafkaSettings

        return KafkaSettings.model_validate(self.kafka_env(role)).client_config()

    def kafka_env(self, role: str = "admin") -> dict[str, str]:
        """The ``KAFKA_*`` settings of a client of this stack's broker, as env-style keys.

        Args:
            role: The secured broker's role (ignored when not secured).

        Returns:
            Lower-case ``KafkaSettings`` field names → values.
        """
        if not self.secure:
            return {"bootstrap_servers": self.bootstrap_servers}
        from runwatch.stack.secure import ROLES, Role, SecureFiles, role_env

        if role not in ROLES:
            msg = f"unknown role {role!r} (choose from {', '.join(ROLES)})"
            raise ValueError(msg)
        env = role_env(SecureFiles(self.secure_dir), self.bootstrap_servers, cast("Role", role))
        return {k.removeprefix("KAFKA_").lower(): v for k, v in env.items()}

    @property
    def clickhouse_url(self) -> str:
        """HTTP URL of the ClickHouse store."""
        return f"http://{self.host}:{self.store_port}"

    @property
    def alertmanager_url(self) -> str:
        """HTTP URL of Alertmanager."""
        return f"http://{self.host}:{self.alertmanager_port}"
