"""The ClickHouse HTTP interface in front of the chDB engine.

A threaded HTTP/1.1 server (keep-alive, chunked bodies) that speaks enough of
ClickHouse's HTTP protocol for the unmodified clickhouse-connect client: ``/ping``,
queries with FORMAT pass-through, streamed inserts, Content-Encoding both
ways, ``param_*``, per-query settings, sessions, ``X-ClickHouse-*`` headers and
ClickHouse-style errors. Stopping is graceful: no new connections, in-flight
requests finish, idle keep-alive connections close, then the engine closes.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl

from runwatch.store.auth import User, authenticate, credentials_from_request
from runwatch.store.engine import Engine, Outcome
from runwatch.store.errors import StoreError
from runwatch.store.executor import Call, execute
from runwatch.store.http_body import decode_body, encode_body, iter_chunked, iter_sized
from runwatch.store.limits import Limits
from runwatch.store.request import (
    MAX_FORM_BYTES,
    choose_encoding,
    content_type,
    form_fields,
    is_form,
    parse_options,
)

logger = logging.getLogger(__name__)


def _lower(items: Iterable[tuple[str, str]]) -> dict[str, str]:
    return {name.lower(): value for name, value in items}


class StoreServer(ThreadingHTTPServer):
    """The HTTP server: one thread per connection, all sharing one engine."""

    daemon_threads = False
    block_on_close = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        engine: Engine,
        users: Mapping[str, User],
        *,
        keep_alive_timeout_s: float = 30.0,
        display_name: str | None = None,
    ) -> None:
        self.engine = engine
        self.limits = Limits(engine)
        self.users = dict(users)
        self.keep_alive_timeout_s = keep_alive_timeout_s
        self.display_name = display_name or socket.gethostname()
        self.stopping = False
        self._conns: dict[int, _Handler] = {}
        self._conns_lock = threading.Lock()
        super().__init__(address, _Handler)

    def track(self, handler: _Handler, *, add: bool) -> None:
        """Register or forget a connection's handler.

        Args:
            handler: The connection's handler.
            add: Register (True) or forget (False).

        """
        with self._conns_lock:
            if add:
                self._conns[id(handler)] = handler
            else:
                self._conns.pop(id(handler), None)

    def close_idle(self) -> None:
        """Close keep-alive connections that are waiting for a next request."""
        with self._conns_lock:
            handlers = list(self._conns.values())
        for handler in handlers:
            if not handler.busy:
                try:
                    handler.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def stop(self) -> None:
        """Stop gracefully: refuse new work, finish in-flight requests, close the engine."""
        self.stopping = True
        self.shutdown()  # no more accepts; returns once serve_forever has left its loop
        deadline = time.monotonic() + 5.0
        self.close_idle()
        while time.monotonic() < deadline:
            with self._conns_lock:
                busy = any(h.busy for h in self._conns.values())
            if not busy:
                break
            time.sleep(0.05)
            self.close_idle()
        self.server_close()  # joins every connection thread (block_on_close)
        self.limits.stop()
        self.engine.close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "runwatch-store"
    sys_version = ""
    server: StoreServer
    busy = False

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.keep_alive_timeout_s)
        self.server.track(self, add=True)

    def finish(self) -> None:
        self.server.track(self, add=False)
        try:
            super().finish()
        except OSError:
            pass

    def handle_one_request(self) -> None:
        self.busy = False
        try:
            super().handle_one_request()
        except (ConnectionError, TimeoutError):
            self.close_connection = True
        finally:
            self.busy = False

    def parse_request(self) -> bool:
        self.busy = True
        return super().parse_request()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        logger.debug("%s %s", self.address_string(), format % args)

    def do_GET(self) -> None:  # noqa: N802
        path, _, query = self.path.partition("?")
        params = dict(parse_qsl(query, keep_blank_values=True))
        if path in ("/ping", "/replicas_status") or (path == "/" and "query" not in params):
            self._send(200, b"Ok.\n", {"Content-Type": "text/html; charset=UTF-8"})
            return
        if path == "/play":  # the pager's investigation links open it (store/play.py)
            from runwatch.store.play import PLAY_HTML

            self._send(200, PLAY_HTML, {"Content-Type": "text/html; charset=UTF-8"})
            return
        self._query(path, params, http_get=True)

    def do_POST(self) -> None:  # noqa: N802
        path, _, query = self.path.partition("?")
        self._query(path, dict(parse_qsl(query, keep_blank_values=True)), http_get=False)

    def _raw_body(self) -> Iterator[bytes]:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return iter_chunked(self.rfile)
        length = int(self.headers.get("Content-Length") or 0)
        return iter_sized(self.rfile, length)

    def _query(self, path: str, params: dict[str, str], *, http_get: bool) -> None:
        query_id = params.get("query_id") or str(uuid.uuid4())
        raw = self._raw_body()
        try:
            if path != "/":
                err = StoreError.named("UNKNOWN_TYPE_OF_QUERY", f"There is no handle {path}")
                raise err
            user = authenticate(
                self.server.users, credentials_from_request(_lower(self.headers.items()), params)
            )
            body = decode_body(raw, self.headers.get("Content-Encoding"))
            if not http_get and is_form(self.headers.get("Content-Type")):
                params, body = self._form(params, body), iter(())
            try:
                opts = parse_options(params)
            except ValueError as exc:
                err = StoreError.named("BAD_ARGUMENTS", str(exc))
                raise err from exc
            server = self.server
            call = Call(server.engine, server.limits, user, opts, http_get, self.connection)
            outcome, fmt = execute(call, body)
        except StoreError as err:
            self._drain(raw)
            self._send_error(err, query_id)
            return
        except Exception:
            logger.exception("unexpected failure serving a query")
            self._drain(raw)
            failure = StoreError.named("STD_EXCEPTION", "Internal error of the store, see its log")
            self._send_error(failure, query_id)
            return
        self._send_result(outcome, fmt, query_id, opts.compress_response, opts.settings)

    def _form(self, params: dict[str, str], body: Iterator[bytes]) -> dict[str, str]:
        """The URL's parameters with the form's fields over them (the whole form is read)."""
        size, parts = 0, []
        for chunk in body:
            size += len(chunk)
            if size > MAX_FORM_BYTES:
                err = StoreError.named(
                    "BAD_ARGUMENTS", f"The multipart/form-data body is over {MAX_FORM_BYTES} "
                    "bytes, the most the local store reads into memory; send the data as "
                    "the request body instead")
                raise err
            parts.append(chunk)
        try:
            fields = form_fields(self.headers["Content-Type"], b"".join(parts))
        except ValueError as exc:
            err = StoreError.named("BAD_ARGUMENTS", str(exc))
            raise err from exc
        return {**params, **fields}

    def _drain(self, raw: Iterator[bytes]) -> None:
        try:
            for _ in raw:
                pass
        except (StoreError, OSError):
            self.close_connection = True

    def _common_headers(self, query_id: str, settings: Mapping[str, str] | None = None) -> dict:
        timezone = (settings or {}).get("session_timezone") or self.server.engine.timezone
        return {
            "X-ClickHouse-Query-Id": query_id,
            "X-ClickHouse-Server-Display-Name": self.server.display_name,
            "X-ClickHouse-Timezone": timezone,
        }

    def _send_result(
        self,
        outcome: Outcome,
        fmt: str,
        query_id: str,
        compress: bool,
        settings: Mapping[str, str],
    ) -> None:
        data: bytes | memoryview = outcome.data
        summary = {
            "read_rows": str(outcome.read_rows),
            "read_bytes": str(outcome.read_bytes),
            "written_rows": str(outcome.written_rows),
            "written_bytes": str(outcome.written_bytes),
            "total_rows_to_read": str(outcome.read_rows),
            "result_rows": "0",
            "result_bytes": str(len(data)),
            "elapsed_ns": str(int(outcome.elapsed_s * 1e9)),
        }
        headers = self._common_headers(query_id, settings)
        headers["Content-Type"] = content_type(fmt)
        headers["X-ClickHouse-Format"] = fmt
        headers["X-ClickHouse-Summary"] = json.dumps(summary, separators=(",", ":"))
        encoding = choose_encoding(self.headers.get("Accept-Encoding")) if compress else None
        if encoding:
            data = encode_body(data, encoding)
            headers["Content-Encoding"] = encoding
        self._send(200, data, headers)

    def _send_error(self, err: StoreError, query_id: str) -> None:
        headers = self._common_headers(query_id)
        headers["Content-Type"] = "text/plain; charset=UTF-8"
        headers["X-ClickHouse-Exception-Code"] = str(err.code)
        if err.status == 401:  # noqa: PLR2004
            headers["WWW-Authenticate"] = 'Basic realm="ClickHouse server HTTP API"'
        self._send(err.status, err.body(self.server.engine.version), headers)

    def _send(self, status: int, data: bytes | memoryview, headers: Mapping[str, str]) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        if self.server.stopping:
            self.close_connection = True
            self.send_header("Connection", "close")
        else:
            self.send_header("Keep-Alive", f"timeout={int(self.server.keep_alive_timeout_s)}")
        self.end_headers()
        self.wfile.write(data)


def serve(server: StoreServer, stop: threading.Event) -> None:
    """Serve until ``stop`` is set, then stop gracefully.

    Args:
        server: The bound server.
        stop: Set (for example by a signal handler) to stop.

    """
    thread = threading.Thread(target=server.serve_forever, name="store-accept", daemon=True)
    thread.start()
    stop.wait()
    logger.info("stopping: finishing in-flight requests")
    server.stop()
    thread.join()
