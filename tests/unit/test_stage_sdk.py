"""The stage helper of the data SDK (``with runwatch.client.data.stage(...)``) and ``emit``.

Driven in process with a capture transport: what the helper publishes, on
success, on an exception in the block, and when the SDK itself fails.
"""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
from sdk_kit import Clock, ListTransport

from runwatch.adapters.publisher import Publisher
from runwatch.client import data
from runwatch.client.emit import emit_lines
from runwatch.core.codec import load_codec
from runwatch.core.records import DatasetRef, StageEvent

T0 = 1_764_547_200_000  # 2025-12-01


def batch(shift: float = 0.0, rows: int = 500) -> dict[str, list[float]]:
    rng = np.random.default_rng(3)
    return {"x": (rng.normal(0.0, 1.0, rows) + shift).round(6).tolist(),
            "y": rng.uniform(0.0, 1.0, rows).round(6).tolist()}


def publisher(clock: Clock) -> tuple[Publisher, ListTransport]:
    t = ListTransport()
    return Publisher(t, kind="sdk", clock=clock), t


def test_a_stage_publishes_its_boundary_event(tmp_path) -> None:
    clock = Clock(T0)
    pub, t = publisher(clock)
    data.report("s3://clean", "v6", None, batch(), baseline="ref", publisher=pub,
                baseline_directory=tmp_path)  # the reference distribution of the output
    with data.stage("dedup", code_version="git:1a2b", output="s3://clean@v7",
                    inputs=["s3://raw@2026-11-30", DatasetRef(uri="s3://dim", version="3")],
                    window=(T0 - 3_600_000, T0), publisher=pub,
                    baseline_directory=tmp_path) as st:
        st.rows_in = 600
        clock.t += 2_500
        assert st.compare(batch(shift=2.0), baseline="ref") is not None
    topic, key, value = t.out[-1]
    ev = load_codec().decode(value)
    assert isinstance(ev, StageEvent) and ev is not None
    assert (topic, key) == ("rw.data", "s3://clean")
    assert (ev.stage, ev.code_version, ev.dataset_uri, ev.dataset_version) == (
        "dedup", "git:1a2b", "s3://clean", "v7")
    assert [(d.uri, d.version) for d in ev.inputs] == [("s3://raw", "2026-11-30"),
                                                       ("s3://dim", "3")]
    assert (ev.window_start_ms, ev.window_end_ms, ev.started_at_ms) == (T0 - 3_600_000, T0, T0)
    assert ev.duration_ms == 2_500.0
    assert (ev.rows_in, ev.rows_out, ev.outcome, ev.error) == (600, 500, "succeeded", None)
    assert {f.name for f in ev.features} == {"x", "y"}
    assert ev.baseline == "ref" and ev.drift is not None
    assert ev.drift.drifted_features == ("x",)  # shifted by two sigmas; y is as the reference
    assert st.record == ev and st.counters == {"published": 1, "errors": 0}


def test_a_failing_block_is_published_as_failed_and_still_raises() -> None:
    clock = Clock(T0)
    pub, t = publisher(clock)
    with pytest.raises(KeyError, match="user_id"), data.stage(
            "join", output="s3://joined", inputs=["s3://a"], publisher=pub) as st:
        st.rows_in = 10
        raise KeyError("user_id")
    ev = load_codec().decode(t.out[-1][2])
    assert ev.outcome == "failed" and ev.error == "KeyError: 'user_id'"
    assert (ev.rows_in, ev.rows_out, ev.dataset_version) == (10, None, None)


class Broken(ListTransport):
    def produce(self, topic, key, value):
        raise RuntimeError("broker gone and no spool")


def test_the_sdk_failing_never_stops_the_pipeline() -> None:
    pub = Publisher(Broken(), kind="sdk", clock=Clock(T0))
    done = False
    with data.stage("load", output="s3://out@1", publisher=pub) as st:
        assert st.compare(object()) is None  # not a table: logged and counted
        done = True
    assert done and st.counters["errors"] >= 2 and st.counters["published"] == 0


def test_unreadable_inputs_are_left_out_not_fatal() -> None:
    pub, t = publisher(Clock(T0))
    with data.stage("s", output="s3://o", inputs=["s3://ok@1", ""], publisher=pub) as st:
        st.duration_ms = 12.5
    ev = load_codec().decode(t.out[-1][2])
    assert [d.uri for d in ev.inputs] == ["s3://ok"] and ev.duration_ms == 12.5
    assert st.counters == {"published": 1, "errors": 1}


@pytest.mark.parametrize(("ref", "uri", "version"), [
    ("s3://b/clicks@2026-11-30", "s3://b/clicks", "2026-11-30"),
    ("s3://user@host/x", "s3://user@host/x", None),
    ("hub:org/name", "hub:org/name", None),
    (("s3://t", "v2"), "s3://t", "v2"),
    ({"uri": "s3://m", "version": "v9", "content_hash": "sha256:ab"}, "s3://m", "v9"),
])
def test_dataset_refs(ref, uri, version) -> None:
    got = data.dataset_ref(ref)
    assert (got.uri, got.version) == (uri, version)


def test_emit_publishes_a_stage_event() -> None:
    t = ListTransport()
    line = json.dumps({"type": "stage", "stage": "ingest", "code_version": "1.0",
                       "inputs": [{"uri": "kafka://clicks"}], "dataset_uri": "s3://raw",
                       "dataset_version": "2026-11-30", "started_at_ms": T0,
                       "duration_ms": 4200.0, "rows_in": 10, "rows_out": 9})
    bad = json.dumps({"type": "stage", "stage": "ingest", "dataset_uri": "s3://raw"})
    res = emit_lines(Publisher(t, kind="hook"), [line, bad])
    assert res.published == 1
    assert len(res.errors) == 1 and res.errors[0].startswith("line 2: missing field")
    topic, key, value = t.out[0]
    ev = load_codec().decode(value)
    assert (topic, key, ev.stage, ev.rows_out, ev.outcome) == ("rw.data", "s3://raw", "ingest",
                                                               9, "succeeded")


def test_an_explicit_start_stamps_the_event_at_its_end() -> None:
    t = ListTransport()
    with data.stage("s", output="s3://o@1", publisher=Publisher(t, kind="sdk"),
                    now_ms=T0) as st:
        st.duration_ms = 1_500.0
    ev = load_codec().decode(t.out[-1][2])
    assert (ev.started_at_ms, ev.emitted_at_ms, ev.duration_ms) == (T0, T0 + 1_500, 1_500.0)


@pytest.mark.parametrize("bad", ["soon", float("nan"), [T0]])
def test_a_start_that_is_no_time_is_said_and_the_stage_still_published(bad, caplog) -> None:
    # int() of it raised at exit: the stage event was lost (logged as an error)
    t = ListTransport()
    with caplog.at_level(logging.WARNING, logger="runwatch.client.data"), data.stage(
            "s", output="s3://o@1", publisher=Publisher(t, kind="sdk", clock=lambda: T0),
            now_ms=bad) as st:
        st.rows_out = 3
    ev = load_codec().decode(t.out[-1][2])
    assert (ev.started_at_ms, ev.rows_out, ev.outcome) == (T0, 3, "succeeded")
    assert st.counters == {"published": 1, "errors": 1}
    assert "is not epoch milliseconds" in caplog.text
