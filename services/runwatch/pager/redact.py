"""Keep the receivers' secrets out of every log line while the pager runs.

A Slack webhook's URL is its secret, and httpx logs each request's URL
(``HTTP Request: POST https://hooks.slack.com/services/T0/B0/<token> ...``, at INFO), as
error texts may: every value read from a receiver's ``*_env`` / ``*_file`` is replaced by
``<secret: receiver field>`` in each record that reaches a handler of the root logger,
whatever the log level (``--log-level DEBUG`` included).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

MIN_SECRET_CHARS = 4
"""Shorter values are not redacted (replacing ``ab`` everywhere would garble every line)."""


def secret_texts(receiver: str, field: str, value: str) -> dict[str, str]:
    """Return the texts that give ``value`` away, each with its replacement.

    A URL also in the form httpx prints it, and its path and query on their own (a Slack
    webhook's token is its path).
    """
    label = f"<secret: {receiver} {field}>"
    out = {value: label}
    if field == "url" or value.startswith(("http://", "https://")):
        parts = urlsplit(value)
        if parts.port in (80, 443):  # httpx prints the URL without a default port
            out[value.replace(f":{parts.port}", "", 1)] = label
        tail = parts.path + (f"?{parts.query}" if parts.query else "")
        if len(tail.strip("/")) >= MIN_SECRET_CHARS:
            out[tail] = label
    return {k: v for k, v in out.items() if len(k) >= MIN_SECRET_CHARS}


class RedactSecrets(logging.Filter):
    """A handler filter that replaces secret texts in a record's message and traceback."""

    def __init__(self, secrets: Mapping[str, str]) -> None:
        """Keep the secret texts (longest first, so a URL goes before its path).

        Args:
            secrets: Secret text -> what to print instead.

        """
        super().__init__()
        self.secrets = sorted(secrets.items(), key=lambda kv: -len(kv[0]))

    def redact(self, text: str) -> str:
        """Return ``text`` with every secret replaced."""
        for secret, label in self.secrets:
            if secret in text:
                text = text.replace(secret, label)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        """Redact the record in place; never drop it."""
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string: leave it to the handler
            return True
        clean = self.redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        return True


def install(secrets: Mapping[str, str],
            handlers: Iterable[logging.Handler] | None = None) -> RedactSecrets:
    """Add a :class:`RedactSecrets` to the root logger's handlers (or ``handlers``).

    Returns:
        The filter (pass it to :func:`uninstall`).

    """
    flt = RedactSecrets(secrets)
    for handler in logging.getLogger().handlers if handlers is None else handlers:
        handler.addFilter(flt)
    return flt


def uninstall(flt: RedactSecrets) -> None:
    """Take the filter off the root logger's handlers."""
    for handler in logging.getLogger().handlers:
        handler.removeFilter(flt)
