"""``runwatch investigate`` on runs the SDK published, the processor judged and the sink stored.

The SDK publishes into a capture; a processor worker (in memory, the live code) reads it;
its alerts and the producers' records go through the sink's row mapping into an own
store; the CLI answers as a user runs it.

* Deterministic: run ``clean`` of a lineage went through step 39 without a NaN; run
  ``fail`` of the same lineage (same data, code, image, config, hardware and seed policy)
  logged a NaN loss from step 25. The answer was "unknown: one attempt and no other run
  with the same lineage", with ``same_lineage_runs: []``: only runs of the lineage that
  fired an alert were read. Control: two runs of another lineage, both NaN from step 25,
  are deterministic.
* Release: a model registered with no gate decision at all paged
  ``rule:registry_without_gate`` (critical), and its investigation said "Release: not
  blocked (no gate decision recorded for this run)"; so did one registered before its
  required ``safety`` gate decided (``rule:missing_gate``). Controls: a model registered
  after its gate passed, and one whose required gate passed after the page, are not
  blocked.
* State: the SDK ended the run ``failed`` and the scheduler's epilog ``succeeded`` after
  it; the answer said "state succeeded" (the latest job event) beside the cost answer's
  outcome ``failed`` (the store's rule), and "Resume point: none needed".
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
import uuid
from typing import Any

import pytest
from costkit import cli_json, store_capture
from sinkkit import ROOT, Store

import runwatch
from runwatch.adapters.publisher import CaptureTransport, Publisher
from runwatch.client import data
from runwatch.client.emit import emit_records
from runwatch.core.codec import load_codec
from runwatch.core.records import Alert
from runwatch.processor.memory import MemoryProcessor
from runwatch.processor.outbox import ALERTS
from runwatch.processor.settings import ProcessorSettings

pytestmark = pytest.mark.integration
STEP = 10_000
LINEAGE = {"code_revision": "c0ffee1", "image_digest": "registry.local/train@sha256:" + "a" * 64,
           "hardware": {"nodes": ["r16-n1"], "gpu_count": 8, "gpu_model": "H100"},
           "framework_versions": {"torch": "2.5.1"}}


@pytest.fixture(scope="module")
def store(module_store: Store) -> Store:
    return module_store


class Runs:
    """Runs published through the SDK into one capture, judged by an in-memory worker."""

    def __init__(self) -> None:
        self.t = CaptureTransport()
        self.ids: list[str] = []
        self.tag = f"r16{uuid.uuid4().hex[:6]}"
        self.base = (int(time.time()) // 60) * 60_000 - 4 * 3_600_000

    def run(self, name: str, dataset: str, start: int, steps: int, *,
            nan_from: int | None = None) -> Any:
        rid = f"{self.tag}-{name}"
        self.ids.append(rid)
        run = runwatch.init(f"{self.tag}-fam", team="vision", run_id=rid, transport=self.t,
                            install_hooks=False, capture_lineage=False, strict=True,
                            config={"lr": 0.001, "batch": 256}, seed_policy="fixed:1",
                            lineage=LINEAGE, datasets=[dataset], clock=lambda: start)
        for i in range(steps):
            loss = math.nan if nan_from is not None and i >= nan_from else 2.0 * 0.99 ** i
            run.step(i, loss=loss, lr=0.001, now_ms=start + (i + 1) * STEP,
                     step_ms=float(STEP), samples=256)
        return run

    def report(self, dataset: str, at: int) -> None:
        uri, version = dataset.split("@")
        data.report(uri, version, "part=0", {"f_x": [0.1 * i for i in range(200)]},
                    publisher=Publisher(self.t, kind="sdk"),
                    now_ms=at)

    def judge(self, settings: ProcessorSettings | None = None) -> list[Alert]:
        codec = load_codec()
        worker = MemoryProcessor(settings)
        msgs = list(self.t.messages)
        for i in range(0, len(msgs), 50):
            worker.feed(msgs[i:i + 50])
        now = int(time.time() * 1000)
        for k in range(60):  # past the registry wait (GATE_WAIT_MS) of the worker's clock
            worker.tick(now + k * 5000)
        for a in worker.alerts:  # rw.alerts, as the worker published them
            self.t.messages.append((ALERTS, a.run_id, codec.encode(a)))
        return list(worker.alerts)


def _detectors(alerts: list[Alert], rid: str) -> set[str]:
    return {a.detector for a in alerts if a.run_id == rid}


def test_a_run_of_the_lineage_that_went_past_the_step_cleanly_is_evidence(store: Store) -> None:
    r = Runs()
    b = r.base
    same, other = f"s3://{r.tag}/same@v1", f"s3://{r.tag}/other@v1"
    for ds in (same, other):
        r.report(ds, b - 60_000)
    r.run("clean", same, b, 40).finish("succeeded", now_ms=b + 41 * STEP)
    r.run("fail", same, b + 3_600_000, 40, nan_from=25).finish(
        "failed", now_ms=b + 3_600_000 + 41 * STEP)
    r.run("rep1", other, b, 40, nan_from=25).finish("failed", now_ms=b + 41 * STEP)
    r.run("rep2", other, b + 3_600_000, 40, nan_from=25).finish(
        "failed", now_ms=b + 3_600_000 + 41 * STEP)
    alerts = r.judge()
    assert "rule:non_finite" in _detectors(alerts, f"{r.tag}-fail")
    assert "rule:non_finite" not in _detectors(alerts, f"{r.tag}-clean")
    db, client = store_capture(store.url, r.t, r.ids)

    det = cli_json(store.url, db, "investigate", f"{r.tag}-fail")["deterministic"]
    assert det["same_lineage_runs"] == [f"{r.tag}-clean"], det
    assert det["deterministic"] is False, det
    assert f"run {r.tag}-clean of the same lineage went past it to step 39 without it" \
        in det["reason"]
    control = cli_json(store.url, db, "investigate", f"{r.tag}-rep2")["deterministic"]
    assert control["deterministic"] is True, control
    assert control["same_lineage_runs"] == [f"{r.tag}-rep1"]
    client.command(f"DROP DATABASE {db}")


def test_a_model_registered_before_its_gates_allowed_it_blocks_the_release(
        store: Store) -> None:
    r = Runs()
    b = r.base
    ds = f"s3://{r.tag}/d@v1"
    r.report(ds, b - 60_000)
    end = b + 11 * STEP
    cases: dict[str, list[tuple[str, str]]] = {
        # control: both required gates passed before the registration
        "passed": [("gate", "eval"), ("gate", "safety"), ("registered", "")],
        "nosafety": [("gate", "eval"), ("registered", "")],  # the required safety gate
        "latesafety": [("gate", "eval"), ("registered", ""), ("later", "safety")],
    }
    for name, acts in cases.items():
        run = r.run(name, ds, b, 10)
        for k, (what, gate) in enumerate(acts):
            at = end + k * 1000
            if what == "gate":
                run.gate(gate, "pass", reasons=["ok"], now_ms=at)
            elif what == "later":  # decided ten minutes after the registration paged
                run.gate(gate, "pass", reasons=["ok"], now_ms=at + 600_000)
            else:
                run.artifact(f"s3://{r.tag}/{name}/model.pt", "model", sha256="0" * 64,
                             registry_status="registered", now_ms=at)
        run.finish("succeeded", now_ms=end + 700_000)
    # the site requires eval and safety before a model is registered
    required = ProcessorSettings(save_interval_s=0, required_gates=["eval", "safety"])
    alerts = r.judge(required)
    assert "rule:missing_gate" in _detectors(alerts, f"{r.tag}-nosafety"), alerts
    db, client = store_capture(store.url, r.t, r.ids)

    def release(name: str) -> dict[str, Any]:
        return dict(cli_json(store.url, db, "investigate", f"{r.tag}-{name}")["release"])

    missing = release("nosafety")
    assert missing["blocked"] is True, missing
    assert any(x.startswith("rule:missing_gate: ") and "safety" in x
               for x in missing["reasons"]), missing
    late = release("latesafety")
    assert late["blocked"] is False, late
    assert release("passed")["blocked"] is False
    client.command(f"DROP DATABASE {db}")

    r2 = Runs()  # registry control (no required gates): a model registered with no gate
    run = r2.run("nogate", ds, b, 10)
    run.artifact(f"s3://{r2.tag}/model.pt", "model", sha256="0" * 64,
                 registry_status="registered", now_ms=end)
    run.finish("succeeded", now_ms=end + 1000)
    alerts = r2.judge()
    assert "rule:registry_without_gate" in _detectors(alerts, f"{r2.tag}-nogate"), alerts
    db, client = store_capture(store.url, r2.t, r2.ids)
    got = cli_json(store.url, db, "investigate", f"{r2.tag}-nogate")["release"]
    assert got["blocked"] is True, got
    assert [x.partition(": ")[0] for x in got["reasons"]] == ["rule:registry_without_gate"]
    client.command(f"DROP DATABASE {db}")


def test_the_runs_state_is_the_sdks_end_over_a_later_scheduler_end(store: Store) -> None:
    """A Slurm epilog that read exit 0 publishes ``succeeded`` after the SDK's ``failed``
    (a NaN loss): the run summary, ``--since`` and ``runwatch slo`` read the run failed,
    its investigation read the latest job event: "state succeeded" beside a cost answer
    of outcome failed, and "Resume point: none needed (the run succeeded)"."""
    r = Runs()
    b = r.base
    ds = f"s3://{r.tag}/d@v1"
    r.report(ds, b - 60_000)
    hook = Publisher(r.t, kind="hook")
    ends = {"epilog": ("failed", "succeeded"), "teardown": ("succeeded", "failed")}
    for name, (sdk_end, hook_end) in ends.items():
        rid = f"{r.tag}-{name}"
        got = emit_records(hook, [{  # the scheduler hook, as `runwatch emit` publishes it
            "type": "job-state", "run_id": rid, "state": "running", "team": "vision",
            "experiment_family": f"{r.tag}-fam", "emitted_at_ms": b,
            "allocation": {"nodes": ["r16-n1"], "gpu_indices": list(range(8)),
                           "gpu_model": "H100"}}])
        assert not got.errors, got.errors
        run = r.run(name, ds, b + 1000, 40, nan_from=30 if sdk_end == "failed" else None)
        run.checkpoint(f"s3://{r.tag}/{name}/step-20.ckpt", step=20, duration_ms=1000.0,
                       now_ms=b + 1000 + 21 * STEP + 2)
        end = b + 1000 + 41 * STEP
        run.finish(sdk_end, now_ms=end)
        got = emit_records(hook, [{"type": "job-state", "run_id": rid, "state": hook_end,
                                   "team": "vision", "experiment_family": f"{r.tag}-fam",
                                   "emitted_at_ms": end + 5000}])
        assert not got.errors, got.errors
    r.judge()
    db, client = store_capture(store.url, r.t, r.ids)
    hurting = {x["run_id"]: x["state"] for x in cli_json(
        store.url, db, "investigate", "--since", "6h")["runs"]}
    assert hurting == {f"{r.tag}-epilog": "failed"}
    for name, (sdk_end, _hook_end) in ends.items():
        got = cli_json(store.url, db, "investigate", f"{r.tag}-{name}")
        assert (got["run"]["state"], got["cost"]["run"]["outcome"]) == (sdk_end, sdk_end), name
    text = subprocess.run(
        [sys.executable, "-m", "runwatch", "investigate", f"{r.tag}-epilog"], cwd=ROOT,
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "CLICKHOUSE_URL": store.url, "CLICKHOUSE_DATABASE": db})
    assert text.returncode == 0, text.stderr
    resume = text.stdout.partition("Resume point")[2].partition("\n")[0]
    assert "none needed" not in resume and "step 20" in resume, resume
    client.command(f"DROP DATABASE {db}")


def test_a_digest_in_another_case_is_the_same_lineage_not_a_change(store: Store) -> None:
    """The reference recorded its image digest in lower case, the next run (another
    launcher) in upper case: one canonical lineage, the stored lineage hashes equal, and the
    answer named an image change and suspected it. Control: another digest is named."""
    r = Runs()
    b = r.base
    ds = f"s3://{r.tag}/d@v1"
    r.report(ds, b - 60_000)
    digest = "registry.local/train@sha256:" + "ab" * 32
    for name, image, start in (("ref", digest, b), ("upper", digest.upper(), b + 600_000),
                               ("other", "registry.local/train@sha256:" + "cd" * 32,
                                b + 1_200_000)):
        rid = f"{r.tag}-{name}"
        r.ids.append(rid)
        run = runwatch.init(f"{r.tag}-fam", team="vision",
                            run_id=rid, transport=r.t, install_hooks=False,
                            capture_lineage=False, strict=True, config={"lr": 0.001},
                            seed_policy="fixed:1", lineage={**LINEAGE, "image_digest": image},
                            datasets=[ds], clock=lambda start=start: start)
        for i in range(10):
            run.step(i, loss=1.0, now_ms=start + (i + 1) * STEP, step_ms=float(STEP))
        run.finish("succeeded" if name == "ref" else "failed", now_ms=start + 11 * STEP)
    r.judge()
    db, client = store_capture(store.url, r.t, r.ids)
    hashes = dict(client.query(
        f"SELECT toString(run_id), lineage_hash FROM {db}.run_manifests",  # noqa: S608
    ).result_rows)
    assert hashes[f"{r.tag}-ref"] == hashes[f"{r.tag}-upper"] != hashes[f"{r.tag}-other"]
    for name, want in (("upper", []), ("other", [("image", "image_digest")])):
        got = cli_json(store.url, db, "investigate", f"{r.tag}-{name}")["what_changed"]
        assert got["reference_run_id"] == f"{r.tag}-ref", got
        assert [(c["kind"], c["key"]) for c in got["changes"]] == want, (name, got["changes"])
    client.command(f"DROP DATABASE {db}")
