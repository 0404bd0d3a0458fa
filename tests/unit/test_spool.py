from __future__ import annotations

from pathlib import Path

import pytest

from runwatch.adapters.spool import Spool, SpoolRecord, encode_record, scan_segment


def recs(n: int, start: int = 0, size: int = 10) -> list[SpoolRecord]:
    return [
        SpoolRecord("rw.t", None if i % 3 == 0 else f"k{i}".encode(), bytes([i % 256]) * size)
        for i in range(start, start + n)
    ]


def drain(sp: Spool, batch: int = 7) -> list[SpoolRecord]:
    out: list[SpoolRecord] = []
    while True:
        got = sp.peek(batch)
        if not got:
            return out
        out.extend(got)
        sp.ack(len(got))


@pytest.mark.parametrize("fsync", ["none", "batch", "always"])
@pytest.mark.parametrize("segment_bytes", [64, 1000, 1 << 20])
def test_fifo_order_across_segments(tmp_path: Path, fsync, segment_bytes) -> None:
    sp = Spool(tmp_path, segment_bytes=segment_bytes, fsync=fsync)
    data = recs(50)
    for r in data:
        sp.append(r)
    assert len(sp) == 50
    assert drain(sp) == data
    assert len(sp) == 0
    # appending after a full drain still works
    more = recs(5, start=100)
    for r in more:
        sp.append(r)
    assert drain(sp) == more
    sp.close()


@pytest.mark.parametrize("consumed", [0, 1, 13, 30])
def test_survives_restart_from_cursor(tmp_path: Path, consumed) -> None:
    data = recs(30)
    sp = Spool(tmp_path, segment_bytes=200)
    for r in data:
        sp.append(r)
    left = consumed
    while left:
        got = sp.peek(left)
        sp.ack(len(got))
        left -= len(got)
    sp.close()
    sp2 = Spool(tmp_path, segment_bytes=200)
    assert len(sp2) == 30 - consumed
    assert drain(sp2) == data[consumed:]
    sp2.close()


def test_interleaved_append_and_ack(tmp_path: Path) -> None:
    sp = Spool(tmp_path, segment_bytes=150)
    expect = recs(100)
    got: list[SpoolRecord] = []
    it = iter(expect)
    for i, r in enumerate(it):
        sp.append(r)
        if i % 4 == 3:
            batch = sp.peek(3)
            got.extend(batch)
            sp.ack(len(batch))
    got.extend(drain(sp))
    assert got == expect


@pytest.mark.parametrize("max_bytes,segment_bytes", [(500, 100), (2000, 300)])
def test_bounded_with_oldest_first_eviction(tmp_path: Path, max_bytes, segment_bytes) -> None:
    sp = Spool(tmp_path, max_bytes=max_bytes, segment_bytes=segment_bytes)
    data = recs(200)
    for r in data:
        sp.append(r)
    assert sp.nbytes <= max_bytes
    left = drain(sp)
    assert sp.evicted + len(left) == 200
    assert sp.evicted > 0
    # what is left is the newest suffix, in order
    assert left == data[200 - len(left) :]


def test_corrupt_tail_is_counted_and_skipped(tmp_path: Path) -> None:
    sp = Spool(tmp_path, segment_bytes=1 << 20)
    data = recs(10)
    for r in data:
        sp.append(r)
    sp.close()
    seg = sorted(tmp_path.glob("*.seg"))[0]
    raw = bytearray(seg.read_bytes())
    raw[-3] ^= 0xFF  # flip a byte in the last record
    seg.write_bytes(bytes(raw))
    sp2 = Spool(tmp_path)
    assert drain(sp2) == data[:9]
    assert sp2.corrupt >= 1


@pytest.mark.parametrize(
    "rec", recs(4, size=0) + [SpoolRecord("t", b"", b"v"), SpoolRecord("ü", None, b"")]
)
def test_frame_roundtrip(rec) -> None:
    frame = encode_record(rec)
    out, corrupt = scan_segment(frame)
    assert not corrupt and [r for _, r in out] == [rec]


def test_unwritable_dir_degrades_to_memory(tmp_path: Path, caplog) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    sp = Spool(blocker / "spool", max_bytes=10_000)
    data = recs(20)
    for r in data:
        sp.append(r)
    assert sp.degraded
    assert "DEGRADED" in caplog.text
    assert drain(sp) == data


def test_memory_spool_is_bounded() -> None:
    sp = Spool(None, max_bytes=300)
    data = recs(100)
    for r in data:
        sp.append(r)
    left = drain(sp)
    assert sp.evicted + len(left) == 100 and sp.evicted > 0
    assert left == data[100 - len(left) :]


def test_write_failure_midway_degrades(tmp_path: Path, monkeypatch) -> None:
    sp = Spool(tmp_path, segment_bytes=1 << 20)
    data = recs(20)
    for r in data[:10]:
        sp.append(r)

    def boom(self, frame):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Spool, "_append_file", boom)
    for r in data[10:]:
        sp.append(r)
    assert sp.degraded
    assert drain(sp) == data


def test_second_process_cannot_share_dir(tmp_path: Path) -> None:
    a = Spool(tmp_path)
    b = Spool(tmp_path)
    assert not a.degraded and b.degraded
    a.close()
    b.close()


def test_memory_records_lost_at_close_are_no_longer_counted_as_spooled(tmp_path) -> None:
    """``runwatch emit`` with an unwritable spool folder and no broker printed "1 record(s)
    spooled locally; they are sent on the next emit" for a record lost at exit."""
    from runwatch.adapters.kafka import KafkaTransport, ProducerSettings
    from runwatch.adapters.settings import KafkaSettings

    blocked = tmp_path / "file"
    blocked.write_text("")  # a spool folder below a file cannot be made: memory only
    t = KafkaTransport(KafkaSettings(bootstrap_servers="127.0.0.1:9"),
                       ProducerSettings(spool_dir=blocked / "spool", message_timeout_ms=300),
                       name="emit")
    t.produce("rw.exec.job", "r1", b"v")
    c = t.close(0.5)
    assert (c.failed, c.in_spool) == (1, 0)
