"""The stack's Alertmanager is Debian's prometheus-alertmanager with a v2 API."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta

import httpx
import pytest

pytestmark = pytest.mark.integration


def _alert(name: str, **labels: str) -> dict:
    now = datetime.now(UTC)
    return {
        "labels": {"alertname": name, "severity": "warning", **labels},
        "annotations": {"summary": "loss diverged", "probable_cause": "lr too high"},
        "startsAt": now.isoformat(),
        "endsAt": (now + timedelta(minutes=10)).isoformat(),
        "generatorURL": "http://runwatch.invalid/runs/r1",
    }


def test_status_reports_version(stack) -> None:
    resp = httpx.get(f"{stack.alertmanager_url}/api/v2/status", timeout=5)
    assert resp.status_code == 200
    body = resp.json()
    assert body["versionInfo"]["version"]
    assert body["cluster"]["status"] == "disabled"  # started without gossip


@pytest.mark.parametrize("extra", [{}, {"run_id": "run-42", "class": "learning"}])
def test_post_alert_and_read_it_back(stack, extra: dict[str, str]) -> None:
    name = f"RunwatchTest{uuid.uuid4().hex[:8]}"
    resp = httpx.post(f"{stack.alertmanager_url}/api/v2/alerts", json=[_alert(name, **extra)],
                      timeout=5)
    assert resp.status_code == 200, resp.text
    found: list[dict] = []
    deadline = time.monotonic() + 10
    while not found and time.monotonic() < deadline:
        got = httpx.get(f"{stack.alertmanager_url}/api/v2/alerts",
                        params={"filter": f'alertname="{name}"'}, timeout=5)
        assert got.status_code == 200
        found = got.json()
        if not found:
            time.sleep(0.2)
    assert len(found) == 1
    assert found[0]["labels"] == {"alertname": name, "severity": "warning", **extra}
    assert found[0]["annotations"]["probable_cause"] == "lr too high"
    assert found[0]["status"]["state"] == "active"


@pytest.mark.parametrize(
    "payload",
    [
        [{"labels": {}}],  # an alert needs at least one label
        {"labels": {"alertname": "x"}},  # the API takes a list
        "not json at all",
    ],
)
def test_bad_alert_is_refused(stack, payload) -> None:
    if isinstance(payload, str):
        resp = httpx.post(f"{stack.alertmanager_url}/api/v2/alerts", content=payload,
                          headers={"Content-Type": "application/json"}, timeout=5)
    else:
        resp = httpx.post(f"{stack.alertmanager_url}/api/v2/alerts", json=payload, timeout=5)
    assert resp.status_code == 400, resp.text
