"""``runwatch emit`` refuses what the store cannot hold, tells a missing topic within its
timeout, and takes its options as written (the tester's round 14)."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import time
from array import array
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError

from runwatch.adapters import clickhouse as ch
from runwatch.adapters.kafka import KafkaTransport, ProducerSettings
from runwatch.adapters.publisher import CaptureTransport, Publisher
from runwatch.adapters.spool import Spool
from runwatch.client.emit import emit_records
from runwatch.core.codec import load_codec
from runwatch.core.records import JobEvent, NodeSample
from runwatch.core.storage.colbatch import TableColumns, append_fast
from runwatch.core.storage.columns import COLUMNS
from runwatch.core.storage.rows import UNSIGNED_BITS, Origin, check_row, rows_for
from runwatch.sink.batch import FlushBatch
from runwatch.sink.writer import Writer

T = 1_800_000_000_000
US, NS = T * 1000, T * 1_000_000  # the same instant in micro- and nanoseconds
Y2300 = 10_413_792_000_000  # 2300-01-01T00:00:00Z: one past the store's last instant
LAST = Y2300 - 1
CODEC = load_codec()

GPU = {"index": 0, "uuid": "GPU-0", "util_pct": 50.0, "mem_used_bytes": 1 << 30,
       "mem_total_bytes": 80 << 30, "power_w": 300.0, "temp_c": 60.0}
NODE = {"type": "NodeSample", "node": "n1", "cpu_pct": 12.0, "mem_used_bytes": 1 << 30,
        "mem_total_bytes": 1 << 40, "gpus": [GPU]}


def _emit(*objs: dict[str, Any]) -> tuple[list[str], CaptureTransport]:
    t = CaptureTransport()
    res = emit_records(Publisher(t, kind="hook", clock=lambda: T), objs)
    assert res.published == len(t.messages)
    return res.errors, t


def _job(**kw: Any) -> dict[str, Any]:
    return {"type": "job-state", "run_id": "r", "state": "queued", **kw}


def _node(node: dict[str, Any] | None = None, **gpu: Any) -> dict[str, Any]:
    out = copy.deepcopy(NODE)
    out.update(node or {})
    out["gpus"][0].update(gpu)
    return out


def _checkpoint(**kw: Any) -> dict[str, Any]:
    return {"type": "checkpoint", "run_id": "r", "step": 10, "started_at_ms": T - 5000,
            "ended_at_ms": T, "duration_ms": 5000.0, "uri": "s3://b/ck/10", "outcome": "ok",
            **kw}


# --------------------------------------------------------------- 1: instants past 2299
@pytest.mark.parametrize(("obj", "field", "value"), [
    (_job(deadline_ms=1_796_647_608_000_000), "deadline_ms", 1_796_647_608_000_000),
    (_job(deadline_ms=NS), "deadline_ms", NS),
    (_job(deadline_ms=Y2300), "deadline_ms", Y2300),
    (_job(emitted_at_ms=US), "emitted_at_ms", US),
    (_job(emitted_at_ms=Y2300), "emitted_at_ms", Y2300),
    (_checkpoint(started_at_ms=US), "started_at_ms", US),
    (_checkpoint(ended_at_ms=NS), "ended_at_ms", NS),
    ({"type": "data-quality", "dataset_uri": "s3://d", "window_start_ms": T - 1,
      "window_end_ms": US, "row_count": 5}, "window_end_ms", US),
])
def test_an_instant_past_what_the_store_holds_is_refused_naming_the_unit(
        obj: dict[str, Any], field: str, value: int) -> None:
    """A deadline in microseconds was published (exit 0); the sink stored it, every query of
    job_events then failed ("day 20794532 is outside the date range") and the queue rule
    never fired for it. Only seconds were refused."""
    errors, t = _emit(obj)
    assert t.messages == []
    assert len(errors) == 1 and errors[0].startswith("record 1: the store cannot hold this ")
    assert (f"{field} {value} is after 2299, past what the store holds "
            "(micro- or nanoseconds? give milliseconds)") in errors[0]


def test_the_stores_last_instant_and_seconds_keep_their_verdicts() -> None:
    errors, t = _emit(_job(deadline_ms=LAST), _checkpoint(ended_at_ms=LAST),
                      _job(deadline_ms=0), _job(deadline_ms=1_800_003_600))
    assert errors == ["record 4: the store cannot hold this JobEvent: deadline_ms 1800003600 "
                      "is before 2000 (epoch seconds? give milliseconds)"]
    assert len(t.messages) == 3


def test_the_cli_refuses_a_deadline_in_microseconds(tmp_path: Path) -> None:
    p = _cli(tmp_path, "job-state", "--run-id", "r", "--state", "queued",
             "--deadline-ms", "1796647608000000")
    assert p.returncode == 1, p.stderr
    assert "deadline_ms 1796647608000000 is after 2299" in p.stderr
    assert _spooled(tmp_path) == []


def test_the_sink_dead_letters_a_deadline_past_the_stores_range() -> None:
    """From a producer that does not check, the row was stored (and broke every query)."""
    row = _rows(JobEvent, _job(deadline_ms=US))[0][1]
    why = check_row("job_events", row, T)
    assert why is not None and f"job_events.deadline {US} ms is outside" in why


# ------------------------------------------------- 2: node values the columns cannot hold
@pytest.mark.parametrize(("obj", "why"), [
    (_node(index=-1), "gpu_samples.gpu_index -1 outside 0..255"),
    (_node(index=300), "gpu_samples.gpu_index 300 outside 0..255"),
    (_node(mem_used_bytes=-1), "gpu_samples.mem_used_bytes -1 outside 0.."),
    (_node(ecc_corrected=-2), "gpu_samples.ecc_corrected -2 outside 0.."),
    (_node(sm_clock_mhz=-7), "gpu_samples.sm_clock_mhz -7 outside 0..65535"),
    (_node(mem_clock_mhz=70_000), "gpu_samples.mem_clock_mhz 70000 outside 0..65535"),
    (_node(util_pct=150.0), "gpu util_pct 150.0 outside 0..100"),
    (_node({"mem_used_bytes": -1}), "host_samples.mem_used_bytes -1 outside 0.."),
])
def test_a_node_sample_the_store_cannot_hold_is_refused_naming_the_column(
        obj: dict[str, Any], why: str) -> None:
    """They were "delivered" (exit 0) and the sink dead-lettered them with "Unable to create
    native array for column gpu_index", while a JobEvent's gpu_indices [-1] was refused."""
    errors, t = _emit(obj, _job(allocation={"nodes": ["n1"], "gpu_indices": [-1]}))
    assert t.messages == []
    assert len(errors) == 2 and errors[0].startswith(
        "record 1: the store cannot hold this NodeSample: "), errors
    assert why in errors[0]
    assert "job_events.gpu_indices -1" in errors[1]


def test_a_node_sample_the_store_holds_is_published() -> None:
    errors, t = _emit(_node(index=255, sm_clock_mhz=65_535, util_pct=100.0))
    assert errors == [] and len(t.messages) == 1


@pytest.mark.parametrize("gpu", [{"index": 300}, {"ecc_corrected": -2}, {"sm_clock_mhz": -7},
                                 {"mem_used_bytes": -1}])
def test_the_sink_dead_letters_such_a_sample_with_the_reason_emit_gives(
        gpu: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """The sink's dead letter said "Unable to create native array for column gpu_index" (the
    client's refusal at insert); both of its paths now give the reason emit gives."""
    errors, _ = _emit(_node(**gpu))
    said = errors[0].split("the store cannot hold this NodeSample: ")[1]
    assert [check_row(t, row, T) for t, row in _rows(NodeSample, _node(**gpu))] == [None, said]
    # the fast path leaves column ranges to the insert: the writer names the refused row
    batch = FlushBatch()
    for offset, obj in enumerate([_node(), _node(**gpu), _node()]):
        decoded = CODEC.decode_dict(CODEC.encode(_record(NodeSample, obj)))[1]
        assert append_fast(NodeSample.AVRO_NAME, decoded, ("rw.t", 0, offset), T,
                           batch.columns) is not None
    stored: list[tuple[str, int]] = []
    monkeypatch.setattr(ch, "insert_rows", _serializer(stored))
    writer = Writer.__new__(Writer)
    writer.db, writer.stats = "db", {"rows": 0, "dead_letters": 0}
    writer._with_retry = lambda _what, fn: fn()  # type: ignore[method-assign]
    writer._client_now = lambda: None  # type: ignore[method-assign]
    rejected = TableColumns(len(COLUMNS["dead_letters"]))
    writer._insert("gpu_samples", batch.columns("gpu_samples"), batch, rejected)
    assert stored == [("gpu_samples", 1), ("gpu_samples", 1)]  # the good samples' rows
    reasons = [dict(zip(COLUMNS["dead_letters"], row, strict=True))["reason"]
               for row in rejected.rows()]
    assert reasons == [said]


def _serializer(stored: list[tuple[str, int]]) -> Any:
    """``insert_rows`` as clickhouse-connect's serializer treats an unsigned column: a value
    it cannot hold refuses the whole insert."""
    codes = {8: "B", 16: "H", 32: "I", 64: "Q"}

    def insert_rows(_client: Any, table: str, columns: Any, data: Any, **_kw: Any) -> None:
        name = table.split(".")[-1]
        for column, bits in UNSIGNED_BITS.get(name, {}).items():
            values = data[list(columns).index(column)]
            flat = [v for x in values for v in (x if isinstance(x, list | tuple) else (x,))]
            try:
                array(codes[bits], flat)
            except OverflowError:
                msg = f"Unable to create native array for column {column}"
                raise ch.ClickHouseRejected(msg) from None
        stored.append((name, len(data[0])))

    return insert_rows


# --------------------------------------------------------- 3: a missing topic, in time
class _Msg:
    def __init__(self, topic: str, value: bytes) -> None:
        self._t, self._v = topic, value

    def topic(self) -> str:
        return self._t

    def value(self) -> bytes:
        return self._v


class _Librdkafka:
    """As librdkafka treats a topic the broker lacks: its records wait, and fail with
    UNKNOWN_TOPIC_OR_PART once ``topic.metadata.propagation.max.ms`` has passed (else
    ``_MSG_TIMED_OUT`` at ``message.timeout.ms``)."""

    def __init__(self, conf: dict[str, Any], topics: set[str]) -> None:
        self.conf, self.topics, self.queue, self.log = conf, topics, [], []

    def produce(self, topic, value, key=None, on_delivery=None):  # noqa: ANN001, ANN201
        self.queue.append((time.monotonic(), _Msg(topic, value), on_delivery))

    def poll(self, timeout: float = 0) -> int:
        propagation = self.conf.get("topic.metadata.propagation.max.ms", 30_000) / 1000
        expiry = self.conf["message.timeout.ms"] / 1000
        keep = []
        for at, m, cb in self.queue:
            waited = time.monotonic() - at
            if m.topic() in self.topics:
                self.log.append(m.value())
                cb(None, m)
            elif waited >= min(propagation, expiry):
                code = KafkaError.UNKNOWN_TOPIC_OR_PART if propagation < expiry else (
                    KafkaError._MSG_TIMED_OUT)
                cb(KafkaError(code), m)
            else:
                keep.append((at, m, cb))
        self.queue = keep
        time.sleep(min(timeout, 0.01))
        return 0

    def flush(self, timeout: float = 0) -> int:
        self.poll(0)
        return len(self.queue)

    def purge(self, in_queue=True, in_flight=True, blocking=True) -> None:  # noqa: ANN001
        q, self.queue = self.queue, []
        for _at, m, cb in q:
            cb(KafkaError(KafkaError._PURGE_QUEUE), m)

    def list_topics(self, timeout: float | None = None) -> Any:
        from types import SimpleNamespace

        return SimpleNamespace(topics=dict.fromkeys(self.topics), brokers={1: "b"})

    def __len__(self) -> int:
        return len(self.queue)


def test_a_record_to_a_missing_topic_is_refused_within_a_hooks_timeout(tmp_path: Path) -> None:
    """With ``--timeout 5`` (the Slurm hooks') the record was reported "spooled locally;
    sent on the next emit" (exit 0), although it never can be: librdkafka kept it until
    its 10 s message timeout, as in an outage."""
    from runwatch.commands.emit import producer_settings

    settings = producer_settings().model_copy(update={"spool_dir": tmp_path,
                                                      "message_timeout_ms": 10_000})
    assert ProducerSettings().missing_topic_fail_ms is None  # the SDK's and agent's: 30 s
    t = KafkaTransport(settings=settings, name="emit",
                       producer_factory=lambda conf: _Librdkafka(conf, {"rw.exec.job"}))
    pub = Publisher(t, kind="hook", topics={"rw.exec.job": "typo.rw.exec.job"})
    assert emit_records(pub, [_job(), _job(state="running")]).errors == []
    start = time.monotonic()
    c = t.close(5.0)
    assert time.monotonic() - start < 5.0
    assert (c.missing_topic, c.failed, c.in_spool) == (2, 2, 0)


def test_a_timeout_too_short_to_tell_a_missing_topic_says_so(tmp_path: Path) -> None:
    p = _cli(tmp_path, "job-state", "--run-id", "r", "--state", "queued")
    assert p.returncode == 0, p.stderr
    assert ("1 record(s) spooled locally; they are sent on the next emit (--timeout 1 is too "
            "short to tell a topic the broker lacks from an outage") in p.stderr


# ------------------------------------------------------------------- 4: the options
def test_an_empty_event_id_is_refused_by_the_cli(tmp_path: Path) -> None:
    """``--event-id ""`` made a random id, losing the idempotency the hooks rely on."""
    for given in ("", "  "):
        p = _cli(tmp_path, "job-state", "--run-id", "r", "--state", "queued",
                 "--event-id", given)
        assert p.returncode == 2, p.stderr
        assert "--event-id is empty" in p.stderr
    assert _spooled(tmp_path) == []


def test_empty_optional_options_are_null_and_gpus_take_ranges(tmp_path: Path) -> None:
    """``--queue ""`` was published as ""; ``--gpus 0-3,6`` was refused."""
    p = _cli(tmp_path, "job-state", "--run-id", "r", "--state", "queued", "--queue", "",
             "--reason", "", "--team", "", "--nodes", "n[1-2]", "--gpus", "0-3,6",
             "--event-id", "e-1")
    assert p.returncode == 0, p.stderr
    (e,) = _spooled(tmp_path)
    assert (e.event_id, e.queue, e.reason, e.team) == ("e-1", None, None, None)
    assert e.allocation is not None
    assert (list(e.allocation.nodes), list(e.allocation.gpu_indices)) == (
        ["n1", "n2"], [0, 1, 2, 3, 6])


@pytest.mark.parametrize("gpus", ["0-x", "3-1", "-1", "0;1"])
def test_gpus_that_are_no_indices_or_ranges_are_refused(tmp_path: Path, gpus: str) -> None:
    p = _cli(tmp_path, "job-state", "--run-id", "r", "--state", "queued", "--nodes", "n1",
             "--gpus", gpus)
    assert p.returncode == 2, p.stderr
    assert "runwatch emit job-state: --gpus:" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize("node", ["", "  "])
def test_a_node_sample_without_a_node_name_is_refused(node: str) -> None:
    errors, t = _emit(_node({"node": node}))
    assert t.messages == []
    assert errors == [f'record 1: bad value for NodeSample: a blank node name "{node}" '
                      "(its topic's key, the samples' node)"]


@pytest.mark.parametrize("given", ["", "  "])
def test_the_agent_refuses_a_blank_node_name(given: str, capsys, monkeypatch,
                                             tmp_path: Path) -> None:
    """``runwatch agent --node "  "`` published samples of node "  "."""
    from runwatch import cli

    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    monkeypatch.setenv("RUNWATCH_PRODUCER_SPOOL_DIR", str(tmp_path))
    monkeypatch.setenv("RUNWATCH_PRODUCER_MESSAGE_TIMEOUT_MS", "300")
    assert cli.main(["agent", "--node", given, "--nvml-double", "--count", "1"]) == 2
    assert f"runwatch agent: --node {given!r} is blank" in capsys.readouterr().err


@pytest.mark.parametrize(("counts", "why"), [
    ({"row_count": -3}, "negative row_count -3"),
    ({"row_count": 5, "schema_failures": -1}, "negative schema_failures -1"),
    ({"row_count": 5, "duplicate_rows": -2}, "negative duplicate_rows -2"),
])
def test_a_negative_count_of_a_data_report_is_named(counts: dict[str, int], why: str) -> None:
    """row_count -3 was refused as "schema_failures 0 above row_count -3"."""
    errors, _ = _emit({"type": "data-quality", "dataset_uri": "s3://d", "window_start_ms": T - 1,
                       "window_end_ms": T, **counts})
    assert len(errors) == 1 and why in errors[0], errors
    assert "above row_count" not in errors[0]


# ------------------------------------------------------------------------ helpers
def _record(cls: type[Any], obj: dict[str, Any]) -> Any:
    """A record as another producer may send it (no emit checks)."""
    src = {"kind": "agent", "host": "h", "runwatch_version": "1"}
    body = {k: v for k, v in obj.items() if k != "type"}
    return cls.from_dict({"event_id": "e", "emitted_at_ms": T, "seq": 1, "source": src, **body})


def _rows(cls: type[Any], obj: dict[str, Any]) -> list[tuple[str, tuple[Any, ...]]]:
    """The rows the sink maps the record to, as it decodes it."""
    name, decoded = CODEC.decode_dict(CODEC.encode(_record(cls, obj)))
    return rows_for(name, decoded, Origin("rw.t", 0, 1))


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``runwatch emit ... --timeout 1`` with no broker (records spool under ``tmp_path``)."""
    env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:1",
               RUNWATCH_PRODUCER_SPOOL_DIR=str(tmp_path / "spool"),
               RUNWATCH_PRODUCER_MESSAGE_TIMEOUT_MS="1000")
    return subprocess.run([sys.executable, "-m", "runwatch", "emit", *args, "--timeout", "1"],
                          env=env, capture_output=True, text=True, timeout=60, check=False)


def _spooled(tmp_path: Path) -> list[JobEvent]:
    out = []
    root = tmp_path / "spool"
    for d in sorted(root.iterdir()) if root.is_dir() else ():
        spool = Spool(d)
        while batch := spool.peek(100):
            out += [CODEC.decode(r.value) for r in batch]
            spool.ack(len(batch))
        spool.close()
    return out
