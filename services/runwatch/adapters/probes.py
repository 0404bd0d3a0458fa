"""Health probes for the local services: TCP, Kafka metadata, HTTP.

These are the stack supervisor's only network clients, kept here because
adapters are the only importers of Kafka and HTTP client libraries.
"""

from __future__ import annotations

import socket
from typing import Any

import httpx


def _tcp_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def kafka_ready(bootstrap: str, timeout_s: float = 3.0,
                conf: dict[str, str] | None = None) -> bool:
    """Return whether the broker answers a metadata request with a live broker.

    Args:
        bootstrap: ``host:port`` of the broker.
        timeout_s: Metadata request timeout.
        conf: The client config to ask with (a secured broker's TLS and SASL settings).

    Returns:
        True when metadata lists at least one broker.

    """
    host, _, port = bootstrap.rpartition(":")
    if not _tcp_open(host, int(port)):
        return False
    from confluent_kafka.admin import AdminClient

    client: dict[str, Any] = {
        **(conf or {}),
        "bootstrap.servers": bootstrap,
        "log_level": 0,
        "error_cb": lambda _err: None,
    }
    admin = AdminClient(client)
    try:
        meta = admin.list_topics(timeout=timeout_s)
    except Exception:  # noqa: BLE001 - any failure means not ready
        return False
    return bool(meta.brokers)


def http_ready(url: str, expect: str | None = None) -> bool:
    """Return whether ``GET url`` answers 200 (and contains ``expect``).

    Args:
        url: The health URL.
        expect: Text the body must contain, if given.

    Returns:
        True when healthy.

    """
    try:
        resp = httpx.get(url, timeout=2.0)
    except httpx.HTTPError:
        return False
    return resp.status_code == 200 and (expect is None or expect in resp.text)


__all__ = ["http_ready", "kafka_ready"]
