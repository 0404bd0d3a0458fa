"""A page in headless Chromium, driven over the DevTools protocol (tests only).

Chromium (Debian's ``chromium``, installed by the Makefile) starts with
``--headless --remote-debugging-port=0``; the port it picked is read from its
``DevTools listening on ws://...`` line. The page target's websocket
(``websocket-client``, a dev dependency) enables ``Runtime``, ``Log`` and
``Page``, navigates, waits for the load event and collects what the console
and the browser log report at level error, plus uncaught exceptions. Console
errors are not parsed from ``--enable-logging=stderr``: Chromium's own log
lines there mix with the page's and their format changes between versions.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import websocket

_LISTENING = re.compile(r"DevTools listening on (ws://[^\s]+)")


def chromium_binary() -> str:
    """Return the Chromium executable (fails the test when it is not installed)."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    msg = "chromium is not installed (make installs it: APT_PACKAGES in the Makefile)"
    raise AssertionError(msg)


class Page:
    """One headless Chromium with one page; use as a context manager."""

    def __init__(self, width: int = 1200, height: int = 900) -> None:
        """Start Chromium (its own throwaway profile)."""
        self.profile = tempfile.mkdtemp(prefix="rw-chromium-")
        self.proc = subprocess.Popen(
            [chromium_binary(), "--headless", "--no-sandbox", "--disable-gpu",
             "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
             "--remote-debugging-port=0", f"--user-data-dir={self.profile}",
             f"--window-size={width},{height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.events: list[dict[str, Any]] = []
        self._id = 0
        browser_ws = self._listening(60)
        port = int(browser_ws.split(":")[2].split("/")[0])
        page_ws = self._page_target(port, 30)
        self.ws = websocket.create_connection(page_ws, timeout=30)
        for domain in ("Runtime", "Log", "Page"):
            self.call(f"{domain}.enable")

    def _listening(self, timeout_s: float) -> str:
        assert self.proc.stderr is not None
        deadline = time.monotonic() + timeout_s
        seen = []
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                if self.proc.poll() is not None:
                    break
                continue
            seen.append(line)
            m = _LISTENING.search(line)
            if m:
                return m.group(1)
        msg = f"chromium did not open its DevTools port: {''.join(seen)[-2000:]}"
        raise AssertionError(msg)

    @staticmethod
    def _page_target(port: int, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:  # noqa: S310
                targets = json.load(r)
            pages = [t for t in targets if t.get("type") == "page"]
            if pages:
                return str(pages[0]["webSocketDebuggerUrl"])
            time.sleep(0.2)
        msg = "chromium has no page target"
        raise AssertionError(msg)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one command and return its result (events seen meanwhile are kept)."""
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise AssertionError(f"{method}: {msg['error']}")
                return dict(msg.get("result") or {})
            self.events.append(msg)

    def wait_event(self, method: str, timeout_s: float = 30.0) -> dict[str, Any]:
        """Wait for an event (or find it among those already seen)."""
        for e in self.events:
            if e.get("method") == method:
                return e
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg = json.loads(self.ws.recv())
            self.events.append(msg)
            if msg.get("method") == method:
                return msg
        raise AssertionError(f"no {method} within {timeout_s} s")

    def open(self, path: Path) -> None:
        """Navigate to a local file and wait for its load event."""
        self.events.clear()
        self.call("Page.navigate", url=path.resolve().as_uri())
        self.wait_event("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        """Evaluate JavaScript in the page and return its value (JSON-able)."""
        got = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in got:
            raise AssertionError(f"evaluate failed: {got['exceptionDetails']}")
        return got["result"].get("value")

    def errors(self) -> list[str]:
        """Return the console errors, uncaught exceptions and browser log errors so far."""
        self.call("Runtime.evaluate", expression="0")  # drain what is queued
        out = []
        for e in self.events:
            m, p = e.get("method"), e.get("params") or {}
            if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append("console: " + " ".join(str(a.get("value", a.get("description")))
                                                   for a in p.get("args") or ()))
            elif m == "Runtime.exceptionThrown":
                out.append("exception: " + str(p.get("exceptionDetails")))
            elif m == "Log.entryAdded" and (p.get("entry") or {}).get("level") == "error":
                out.append("log: " + str(p["entry"].get("text")) + " "
                           + str(p["entry"].get("url", "")))
        return out

    def screenshot(self, path: Path) -> None:
        """Write a PNG of the whole page."""
        got = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(got["data"]))

    def close(self) -> None:
        """Stop Chromium and remove its profile."""
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Page:
        """Return the page."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the browser."""
        self.close()
