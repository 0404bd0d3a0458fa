"""Connection settings shared by every service.

Each service builds one pydantic-settings class in its ``__main__`` and passes
it down. These classes hold the connection parts they all share: where Kafka
and ClickHouse are and how to authenticate. Secrets come from the environment
or from files named by ``*_FILE`` variables, never from code.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Literal
from urllib.parse import urlparse

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]


def read_secret(value: SecretStr | None, file: Path | None) -> str | None:
    """Return a secret given inline or in a file (the file wins).

    Args:
        value: The secret given directly (for example from an env variable).
        file: A file whose stripped content is the secret.

    Returns:
        The secret, or None when neither is set.
    """
    if file is not None:
        return file.read_text(encoding="utf-8").strip()
    return value.get_secret_value() if value is not None else None


class KafkaSettings(BaseSettings):
    """Where Kafka is and how to talk to it (env prefix ``KAFKA_``)."""

    model_config = SettingsConfigDict(env_prefix="KAFKA_", extra="ignore")

    bootstrap_servers: str = "127.0.0.1:9092"
    security_protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    sasl_password_file: Path | None = None
    ssl_ca_location: Path | None = None
    ssl_certificate_location: Path | None = None
    ssl_key_location: Path | None = None
    schema_registry_url: str | None = None

    def password(self) -> str | None:
        """Return the SASL password (``KAFKA_SASL_PASSWORD_FILE`` wins)."""
        return read_secret(self.sasl_password, self.sasl_password_file)

    def ssl_context(self) -> ssl.SSLContext | None:
        """Return a TLS context for Python clients (faust/aiokafka), None without TLS.

        It trusts ``KAFKA_SSL_CA_LOCATION`` (else the system's CAs), checks the
        broker's hostname, and presents ``KAFKA_SSL_CERTIFICATE_LOCATION`` /
        ``KAFKA_SSL_KEY_LOCATION`` when both are set.
        """
        if self.security_protocol not in ("SSL", "SASL_SSL"):
            return None
        cafile = str(self.ssl_ca_location) if self.ssl_ca_location else None
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cafile)
        if self.ssl_certificate_location and self.ssl_key_location:
            context.load_cert_chain(self.ssl_certificate_location, self.ssl_key_location)
        return context

    def client_config(self) -> dict[str, str]:
        """Return the librdkafka configuration for these settings.

        Returns:
            A dict ready for confluent_kafka Producer/Consumer/AdminClient.
        """
        conf: dict[str, str] = {
            "bootstrap.servers": self.bootstrap_servers,
            "security.protocol": self.security_protocol,
        }
        if self.sasl_mechanism:
            conf["sasl.mechanism"] = self.sasl_mechanism
        if self.sasl_username:
            conf["sasl.username"] = self.sasl_username
        password = self.password()
        if password:
            conf["sasl.password"] = password
        for key, path in (
            ("ssl.ca.location", self.ssl_ca_location),
            ("ssl.certificate.location", self.ssl_certificate_location),
            ("ssl.key.location", self.ssl_key_location),
        ):
            if path is not None:
                conf[key] = str(path)
        return conf


class ClickHouseSettings(BaseSettings):
    """Where ClickHouse is and who we are (env prefix ``CLICKHOUSE_``).

    ``CLICKHOUSE_URL`` points at the embedded store by default and at a real
    ClickHouse server or cluster in production.
    """

    model_config = SettingsConfigDict(env_prefix="CLICKHOUSE_", extra="ignore")

    url: str = "http://127.0.0.1:8123"
    database: str = "runwatch"
    user: str = "runwatch"
    password: SecretStr | None = Field(default=SecretStr("runwatch"))
    password_file: Path | None = None
    readonly_user: str = "analyst"
    readonly_password: SecretStr | None = Field(default=SecretStr("analyst"))
    readonly_password_file: Path | None = None
    verify_tls: bool = True
    ca_cert: Path | None = None

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        parts = urlparse(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            # the value is not echoed: a URL may carry a password
            msg = ("not an http(s) URL with a host; write it as http://HOST:8123 "
                   "(or https://HOST:8443 for TLS)")
            raise ValueError(msg)
        return value

    def password_value(self, *, readonly: bool = False) -> str:
        """Return the password of the pipeline user, or of the readonly user.

        Args:
            readonly: Return the readonly (ad hoc SQL) user's password.

        Returns:
            The password, empty when none is configured.
        """
        if readonly:
            return read_secret(self.readonly_password, self.readonly_password_file) or ""
        return read_secret(self.password, self.password_file) or ""


_SECRET_WORDS = ("password", "secret", "token", "key", "url")


def settings_error_line(exc: ValidationError) -> str:
    """Describe a settings class's refusal as one line naming each environment variable.

    Args:
        exc: What a settings class (``ClickHouseSettings``, ``PagerSettings``...) raised
            when built.

    Returns:
        ``CLICKHOUSE_VERIFY_TLS='maybe': Input should be a valid boolean ...``; values of
        fields that may hold a secret (passwords, tokens, URLs) are not shown.

    """
    prefix = _env_prefix(exc.title)
    parts = []
    for err in exc.errors():
        field = ".".join(str(x) for x in err.get("loc", ())) or "?"
        name = f"{prefix}{field}".upper() if prefix is not None else field
        shown = ""
        if not any(w in field.lower() for w in _SECRET_WORDS) and "input" in err:
            shown = f"={str(err['input'])[:80]!r}"
        message = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        parts.append(f"{name}{shown}: {message}")
    where = f"{exc.title}: " if prefix is None else ""
    return f"bad setting: {where}{'; '.join(parts)}"


def _env_prefix(title: str) -> str | None:
    todo: list[type] = [BaseSettings]
    while todo:
        cls = todo.pop()
        if cls.__name__ == title and cls is not BaseSettings:
            return str(getattr(cls, "model_config", {}).get("env_prefix", ""))
        todo.extend(cls.__subclasses__())
    return None
