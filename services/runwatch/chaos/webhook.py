"""A recording webhook receiver for the pager: counts accepted pages, fails on demand.

The chaos run routes every alert to Alertmanager and, with ``continue``, to
this receiver. While :attr:`Receiver.failing` is set it answers 503 (the
pager retries with backoff: the "mid-retry" the pager fault kills it in);
otherwise 200, and the delivery is counted as a page.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Receiver:
    """The receiver's state and its HTTP server (127.0.0.1, a free port)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.failing = threading.Event()
        self.accepted: list[tuple[float, str, str]] = []  # (time, dedup key, status)
        self.refused = 0
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                if owner.failing.is_set():
                    with owner._lock:
                        owner.refused += 1
                    self.send_response(503)
                    self.send_header("Retry-After", "1")
                    self.end_headers()
                    return
                owner._accept(body)
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *_args: Any) -> None:
                return

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.url = f"http://{host}:{self.server.server_address[1]}/page"
        self._thread = threading.Thread(target=self.server.serve_forever, name="chaos-webhook",
                                        daemon=True)

    def _accept(self, body: bytes) -> None:
        # a firing page counts per probable cause and owner: the pager sends an alert the
        # processor re-sent with a new cause (an update, docs/pager.md), not a double page
        try:
            doc = json.loads(body)
            alert = doc.get("alert") or {}
            key, status = str(alert.get("dedup_key", "")), str(doc.get("status", ""))
            if status == "firing":
                status += f" as {alert.get('probable_cause')}/{alert.get('owner')}"
        except (ValueError, AttributeError):
            key, status = "<undecodable>", ""
        with self._lock:
            self.accepted.append((time.monotonic(), key, status))

    def pages(self) -> list[tuple[float, str, str]]:
        """Return the accepted deliveries so far."""
        with self._lock:
            return list(self.accepted)

    def start(self) -> Receiver:
        """Serve in a daemon thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving."""
        self.server.shutdown()
        self.server.server_close()


def routes_yaml(webhook_url_env: str, secret_env: str, am_url_env: str) -> str:
    """Return the pager's routing rules of a chaos run: Alertmanager, and the webhook too."""
    return (
        "receivers:\n"
        "  - name: alertmanager\n"
        "    kind: alertmanager\n"
        f"    url_env: {am_url_env}\n"
        "    repeat_interval: 4h\n"
        "  - name: chaos-webhook\n"
        "    kind: webhook\n"
        f"    url_env: {webhook_url_env}\n"
        f"    secret_env: {secret_env}\n"
        "    repeat_interval: 4h\n"
        "route:\n"
        "  receiver: alertmanager\n"
        "  routes:\n"
        "    - receiver: chaos-webhook\n"
        "      continue: true\n"
        "    - receiver: alertmanager\n"
    )
