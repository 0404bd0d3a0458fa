"""HTTP clients for paging receivers: Alertmanager, PagerDuty, Opsgenie, Slack, webhook.

Each :class:`HttpReceiver` makes exactly one HTTP request per :meth:`send` and
reports what came back; retries, backoff and the circuit breaker belong to the
pager (:mod:`runwatch.pager.deliver`). Secrets are resolved from the
environment or files named in the rules file and never logged.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

from runwatch.core.paging import payloads
from runwatch.core.paging.routes import ReceiverSpec, url_problem
from runwatch.core.paging.signing import SIGNATURE_HEADER, TIMESTAMP_HEADER, sign

log = logging.getLogger(__name__)

PAGERDUTY_URL = "https://events.pagerduty.com/v2/enqueue"
OPSGENIE_URL = "https://api.opsgenie.com"
USER_AGENT = "runwatch-pager/0.1"
MAX_BODY_KEPT = 4000


class ReceiverConfigError(ValueError):
    """A receiver's endpoint or secret cannot be resolved."""


@dataclass(frozen=True, slots=True)
class HttpResult:
    """What one request produced.

    Attributes:
        status: HTTP status, or None when no answer came (transport error).
        body: The response body (truncated), or the transport error text.
        retry_after: The Retry-After header, if any.

    """

    status: int | None
    body: str
    retry_after: str | None = None


@dataclass(frozen=True, slots=True)
class ReceiverOptions:
    """Pager-wide options the payloads need."""

    investigate_url_template: str = "http://127.0.0.1:8123/play?user=analyst#{query_b64}"
    database: str = "runwatch"


def resolve_settings(
    spec: ReceiverSpec, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Resolve a receiver's ``*_env`` / ``*_file`` references.

    Args:
        spec: The receiver as declared.
        environ: The environment (defaults to ``os.environ``).

    Returns:
        Setting name → value.

    Raises:
        ReceiverConfigError: Naming the receiver, setting and rules line.

    """
    env = os.environ if environ is None else environ
    out: dict[str, str] = {}
    for name, ref in spec.settings.items():
        where = f"receiver {spec.name!r} (rules line {spec.line}), {name}"
        if ref.kind == "literal":
            out[name] = ref.value
        elif ref.kind == "env":
            value = env.get(ref.value, "").strip()
            if not value:
                msg = f"{where}: environment variable {ref.value} is not set"
                raise ReceiverConfigError(msg)
            out[name] = value
        else:
            try:
                out[name] = Path(ref.value).read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError) as exc:
                msg = f"{where}: cannot read {ref.value}: {getattr(exc, 'strerror', exc)}"
                raise ReceiverConfigError(msg) from exc
            if not out[name]:  # an empty secret signs with an empty key: anyone can forge it
                msg = f"{where}: {ref.value} is empty"
                raise ReceiverConfigError(msg)
        if name == "url" and (problem := url_problem(out[name])) is not None:
            msg = f"{where}: the URL {problem}"  # not the value: it may hold a token
            raise ReceiverConfigError(msg)
    return out


class HttpReceiver:
    """One configured receiver: turns an alert into one HTTP request."""

    def __init__(
        self,
        spec: ReceiverSpec,
        settings: Mapping[str, str],
        client: httpx.Client,
        options: ReceiverOptions | None = None,
    ) -> None:
        """Bind a receiver to its resolved settings and an HTTP client.

        Args:
            spec: The receiver as declared.
            settings: Resolved settings (see :func:`resolve_settings`).
            client: A shared httpx client (timeouts, TLS).
            options: Pager-wide options.

        """
        self.spec = spec
        self.name = spec.name
        self.kind = spec.kind
        self.repeat_interval_ms = spec.repeat_interval_ms
        self._settings = dict(settings)
        self._client = client
        self._options = options or ReceiverOptions()

    def secret_settings(self) -> dict[str, str]:
        """Return the settings read from ``*_env`` / ``*_file`` (secrets: never to be logged)."""
        return {k: v for k, v in self._settings.items()
                if k in self.spec.settings and self.spec.settings[k].kind != "literal"}

    def link(self, alert: object) -> str:
        """Return the investigation link for an alert's run.

        Args:
            alert: The Alert record.

        Returns:
            The URL.

        """
        return payloads.investigation_url(
            self._options.investigate_url_template,
            str(getattr(alert, "run_id", None) or ""),
            self._options.database,
        )

    def send(self, alert: object, now_ms: int) -> HttpResult:
        """Send one alert (firing or resolved) once.

        Args:
            alert: The Alert record.
            now_ms: Current time (for timestamps and signatures).

        Returns:
            What the receiver answered.

        """
        method, url, body, headers = self.request(alert, now_ms)
        try:
            resp = self._client.request(method, url, content=body, headers=headers)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            log.warning("receiver %s: transport error: %s", self.name, type(exc).__name__)
            return HttpResult(None, f"{type(exc).__name__}: {exc}")
        return HttpResult(
            resp.status_code, resp.text[:MAX_BODY_KEPT], resp.headers.get("retry-after")
        )

    def request(self, alert: object, now_ms: int) -> tuple[str, str, bytes, dict[str, str]]:
        """Build the request for an alert without sending it.

        Args:
            alert: The Alert record.
            now_ms: Current time.

        Returns:
            Method, URL, body bytes and headers.

        """
        s = self._settings
        headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT}
        resolved = getattr(alert, "status", "firing") == "resolved"
        data: object
        if self.kind == "alertmanager":
            url = s["url"].rstrip("/") + "/api/v2/alerts"
            data = [payloads.alertmanager_alert(
                alert, now_ms, self.link(alert), self.repeat_interval_ms
            )]
            if "token" in s:
                headers["Authorization"] = f"Bearer {s['token']}"
        elif self.kind == "pagerduty":
            url = s.get("url", PAGERDUTY_URL)
            data = payloads.pagerduty_event(alert, s["routing_key"], now_ms, self.link(alert))
        elif self.kind == "opsgenie":
            base = s.get("url", OPSGENIE_URL).rstrip("/")
            headers["Authorization"] = f"GenieKey {s['api_key']}"
            if resolved:
                url = base + payloads.opsgenie_close_path(
                    payloads.opsgenie_alias(str(getattr(alert, "dedup_key", "")))
                )
                data = payloads.opsgenie_close(alert)
            else:
                url = base + "/v2/alerts"
                data = payloads.opsgenie_create(alert)
        elif self.kind == "slack":
            url = s["url"]
            data = payloads.slack_message(alert, self.link(alert))
        else:
            url = s["url"]
            body = payloads.json_bytes(payloads.webhook_body(alert))
            headers[TIMESTAMP_HEADER] = str(now_ms)
            headers[SIGNATURE_HEADER] = sign(s["secret"].encode(), now_ms, body)
            # the same for every attempt of one alert record: a delivery the pager was
            # killed in the middle of is sent again after its restart
            headers["Idempotency-Key"] = str(getattr(alert, "event_id", ""))
            if "token" in s:
                headers["Authorization"] = f"Bearer {s['token']}"
            return "POST", url, body, headers
        return "POST", url, payloads.json_bytes(data), headers


def build_client(timeout_s: float = 10.0, verify: bool | str = True) -> httpx.Client:
    """Build the shared HTTP client.

    Args:
        timeout_s: Per-request timeout.
        verify: TLS verification: True, False, or a CA bundle path.

    Returns:
        An httpx client (close it when done).

    """
    return httpx.Client(timeout=timeout_s, verify=verify, follow_redirects=False)


def build_receivers(
    specs: Mapping[str, ReceiverSpec],
    client: httpx.Client,
    options: ReceiverOptions | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, HttpReceiver]:
    """Resolve every receiver's settings and bind it to the client.

    Args:
        specs: Receivers from the rules file.
        client: The shared HTTP client.
        options: Pager-wide options.
        environ: The environment (defaults to ``os.environ``).

    Returns:
        Receiver name → receiver.

    Raises:
        ReceiverConfigError: When an endpoint or secret cannot be resolved.

    """
    return {
        name: HttpReceiver(spec, resolve_settings(spec, environ), client, options)
        for name, spec in specs.items()
    }
