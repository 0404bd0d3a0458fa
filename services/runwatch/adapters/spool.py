"""Durable local spool: an append-only FIFO of Kafka records on disk.

Size: one on-disk contract (segment format, rotation, fsync policy, ordered
replay); split, its invariants would span files.

The spool holds records the transport could not hand to Kafka (broker down,
local queue full) until they can be replayed, in the order they were spooled.

Layout: a directory of segment files ``<number>.seg`` (zero-padded, oldest
first) and a ``cursor`` file naming the first unconsumed byte. Each record is
``len:u32 | crc32:u32 | payload`` where payload is
``topic_len:u16 | topic | key_len:i32 (-1 = None) | key | value``. A record
whose checksum does not match is counted as corrupt and the rest of its
segment is skipped (a torn write can only be at the tail of a segment).

Fsync policy: ``none`` (the OS decides), ``batch`` (fsync when a segment is
rolled, on :meth:`Spool.sync` and on close) or ``always`` (after every append).

Size is bounded: when the total exceeds ``max_bytes`` the oldest segment is
deleted and its unconsumed records are counted as evicted.

If the directory cannot be created or written (full disk, permissions), the
spool degrades to memory with a loud warning; it never raises into callers.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import logging
import os
import struct
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

logger = logging.getLogger(__name__)

FsyncPolicy = Literal["none", "batch", "always"]

_HEADER = struct.Struct("<II")
_TOPIC_LEN = struct.Struct("<H")
_KEY_LEN = struct.Struct("<i")
_CURSOR = struct.Struct("<QQ")


@dataclass(frozen=True, slots=True)
class SpoolRecord:
    """One spooled Kafka record."""

    topic: str
    key: bytes | None
    value: bytes


def encode_record(rec: SpoolRecord) -> bytes:
    """Frame a record with its length and crc32.

    Args:
        rec: The record.

    Returns:
        The framed bytes.

    """
    topic = rec.topic.encode("utf-8")
    key = rec.key if rec.key is not None else b""
    payload = b"".join(
        (
            _TOPIC_LEN.pack(len(topic)),
            topic,
            _KEY_LEN.pack(len(key) if rec.key is not None else -1),
            key,
            rec.value,
        )
    )
    return _HEADER.pack(len(payload), zlib.crc32(payload)) + payload


def decode_payload(payload: bytes) -> SpoolRecord:
    """Decode a payload (without its frame header).

    Args:
        payload: The payload bytes.

    Returns:
        The record.

    """
    (tlen,) = _TOPIC_LEN.unpack_from(payload, 0)
    pos = _TOPIC_LEN.size
    topic = payload[pos : pos + tlen].decode("utf-8")
    pos += tlen
    (klen,) = _KEY_LEN.unpack_from(payload, pos)
    pos += _KEY_LEN.size
    key: bytes | None = None
    if klen >= 0:
        key = payload[pos : pos + klen]
        pos += klen
    return SpoolRecord(topic, key, payload[pos:])


def scan_segment(data: bytes, start: int = 0) -> tuple[list[tuple[int, SpoolRecord]], bool]:
    """Read the framed records of a segment from ``start``.

    Args:
        data: The segment's bytes.
        start: The offset to start at.

    Returns:
        ``([(end_offset, record), ...], corrupt)``; corrupt is True when a bad
        checksum or a torn frame stopped the scan before the end.

    """
    out: list[tuple[int, SpoolRecord]] = []
    pos = start
    while pos < len(data):
        if pos + _HEADER.size > len(data):
            return out, True
        length, crc = _HEADER.unpack_from(data, pos)
        body = data[pos + _HEADER.size : pos + _HEADER.size + length]
        if len(body) != length or zlib.crc32(body) != crc:
            return out, True
        pos += _HEADER.size + length
        try:
            out.append((pos, decode_payload(body)))
        except (struct.error, UnicodeDecodeError):
            return out, True
    return out, False


class Spool:
    """A bounded, durable FIFO of records with in-memory fallback.

    Not thread-safe: the transport serialises access with its own lock.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str] | None,
        *,
        max_bytes: int = 512 * 1024 * 1024,
        segment_bytes: int = 8 * 1024 * 1024,
        fsync: FsyncPolicy = "batch",
    ) -> None:
        """Open (or create) a spool.

        Args:
            directory: Where segments live; None for a memory-only spool.
            max_bytes: Bound on total size; oldest segments are evicted beyond it.
            segment_bytes: Roll to a new segment file after this many bytes.
            fsync: ``none``, ``batch`` or ``always``.

        """
        self.max_bytes = max_bytes
        self.segment_bytes = segment_bytes
        self.fsync: FsyncPolicy = fsync
        self.evicted = 0
        self.corrupt = 0
        self.degraded = False
        self.directory: Path | None = Path(directory) if directory is not None else None
        # segment number -> [size_bytes, record_count]; file mode only
        self._segments: collections.OrderedDict[int, list[int]] = collections.OrderedDict()
        self._read_seg = 0
        self._read_off = 0
        self._cache: collections.deque[tuple[int, int, SpoolRecord]] = collections.deque()
        self._cache_seg = -1
        self._cache_off = 0
        self._write_fh: object | None = None
        self._lock_fh: object | None = None
        # memory fallback (records after any file records)
        self._mem: collections.deque[tuple[int, SpoolRecord]] = collections.deque()
        self._mem_bytes = 0
        if self.directory is None:
            self.degraded = True
        else:
            try:
                self._open_dir(self.directory)
            except OSError as exc:
                self._degrade(f"cannot open spool directory {self.directory}: {exc}")

    # ------------------------------------------------------------------ setup
    def _open_dir(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        lock = open(directory / "lock", "a+b")  # noqa: SIM115
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            lock.close()
            msg = f"spool directory {directory} is in use by another process"
            raise OSError(msg) from exc
        self._lock_fh = lock
        for path in sorted(directory.glob("*.seg")):
            with contextlib.suppress(ValueError):
                num = int(path.stem)
                data = path.read_bytes()
                recs, corrupt = scan_segment(data)
                if corrupt:
                    self.corrupt += 1
                    logger.warning("spool segment %s has a corrupt tail; it is skipped", path)
                self._segments[num] = [len(data), len(recs)]
        cursor = directory / "cursor"
        if cursor.exists():
            raw = cursor.read_bytes()
            if len(raw) == _CURSOR.size:
                self._read_seg, self._read_off = _CURSOR.unpack(raw)
        for num in list(self._segments):
            if num < self._read_seg:
                self._delete_segment(num)
        if self._segments and self._read_seg not in self._segments:
            self._read_seg, self._read_off = next(iter(self._segments)), 0
        # recount the head segment from the cursor
        if self._read_seg in self._segments:
            data = (directory / f"{self._read_seg:020d}.seg").read_bytes()
            recs, _ = scan_segment(data, self._read_off)
            self._segments[self._read_seg][1] = len(recs)
        if self._segments:
            logger.info(
                "spool %s holds %d records from an earlier run; they will be replayed",
                directory,
                len(self),
            )

    def _degrade(self, reason: str) -> None:
        if not self.degraded:
            logger.warning(
                "SPOOL DEGRADED TO MEMORY: %s. Records are kept in memory (bounded to %d "
                "bytes) and are lost if this process dies before the broker returns.",
                reason,
                self.max_bytes,
            )
        self.degraded = True
        self._close_write()

    # ---------------------------------------------------------------- helpers
    def _seg_path(self, num: int) -> Path:
        assert self.directory is not None
        return self.directory / f"{num:020d}.seg"

    def _close_write(self) -> None:
        fh = self._write_fh
        self._write_fh = None
        if fh is not None:
            with contextlib.suppress(OSError):
                if self.fsync != "none":
                    fh.flush()  # type: ignore[attr-defined]
                    os.fsync(fh.fileno())  # type: ignore[attr-defined]
                fh.close()  # type: ignore[attr-defined]

    def _delete_segment(self, num: int) -> None:
        self._segments.pop(num, None)
        if self._cache_seg == num:
            self._cache.clear()
            self._cache_seg = -1
        with contextlib.suppress(OSError):
            self._seg_path(num).unlink()

    def _file_bytes(self) -> int:
        return sum(s[0] for s in self._segments.values())

    def __len__(self) -> int:
        """Return the number of unconsumed records."""
        return sum(s[1] for s in self._segments.values()) + len(self._mem)

    @property
    def nbytes(self) -> int:
        """Bytes held (file segments plus memory)."""
        return self._file_bytes() + self._mem_bytes

    # ----------------------------------------------------------------- append
    def append(self, rec: SpoolRecord) -> None:
        """Append a record at the tail, evicting the oldest beyond the bound.

        Args:
            rec: The record.

        """
        frame = encode_record(rec)
        if not self.degraded and not self._mem:
            try:
                self._append_file(frame)
            except OSError as exc:
                self._degrade(f"cannot write spool segment in {self.directory}: {exc}")
            else:
                self._evict_files()
                return
        self._mem.append((len(frame), rec))
        self._mem_bytes += len(frame)
        while self._mem_bytes + self._file_bytes() > self.max_bytes and self._mem:
            if self._segments:
                self._evict_oldest_segment()
                continue
            size, _ = self._mem.popleft()
            self._mem_bytes -= size
            self.evicted += 1

    def _append_file(self, frame: bytes) -> None:
        last = next(reversed(self._segments)) if self._segments else self._read_seg
        if (
            self._write_fh is None
            or not self._segments
            or self._segments[last][0] + len(frame) > self.segment_bytes
        ):
            if self._segments and self._segments[last][0] > 0:
                last += 1
            self._close_write()
            self._write_fh = open(self._seg_path(last), "ab")  # noqa: SIM115
            self._segments.setdefault(last, [0, 0])
        fh = self._write_fh
        fh.write(frame)  # type: ignore[attr-defined]
        fh.flush()  # type: ignore[attr-defined]
        if self.fsync == "always":
            os.fsync(fh.fileno())  # type: ignore[attr-defined]
        seg = self._segments[last]
        seg[0] += len(frame)
        seg[1] += 1

    def _evict_files(self) -> None:
        while self._file_bytes() + self._mem_bytes > self.max_bytes and len(self._segments) > 1:
            self._evict_oldest_segment()

    def _evict_oldest_segment(self) -> None:
        num = next(iter(self._segments))
        lost = self._segments[num][1]
        self.evicted += lost
        logger.warning("spool over %d bytes: evicted %d oldest records", self.max_bytes, lost)
        if num == last_key(self._segments):
            self._close_write()
        self._delete_segment(num)
        if self._segments:
            self._read_seg, self._read_off = next(iter(self._segments)), 0
        else:
            self._read_seg, self._read_off = num + 1, 0

    # ------------------------------------------------------------ read / ack
    def peek(self, n: int) -> list[SpoolRecord]:
        """Return up to ``n`` records from the head without consuming them.

        Args:
            n: Maximum number of records.

        Returns:
            The oldest records, oldest first.

        """
        out: list[SpoolRecord] = []
        if self._segments:
            self._fill_cache()
            out.extend(r for _, _, r in list(self._cache)[:n])
        if len(out) < n and not self._segments:
            out.extend(r for _, r in list(self._mem)[: n - len(out)])
        return out

    def _fill_cache(self) -> None:
        if self._cache and self._cache_seg == self._read_seg:
            return
        self._cache.clear()
        while self._segments:
            num = next(iter(self._segments))
            try:
                data = self._seg_path(num).read_bytes()
            except OSError:
                data = b""
            recs, corrupt = scan_segment(data, self._read_off if num == self._read_seg else 0)
            if corrupt:
                self.corrupt += 1
            if recs:
                self._cache_seg = num
                self._read_seg = num
                self._cache.extend((num, end, r) for end, r in recs)
                self._segments[num][1] = len(recs)
                return
            if num == last_key(self._segments) and not corrupt and self._write_fh is not None:
                self._segments[num][1] = 0
                return
            self._delete_segment(num)

    def ack(self, n: int) -> None:
        """Consume ``n`` records from the head (after they were delivered).

        Args:
            n: How many of the records returned by :meth:`peek` to consume.

        """
        for _ in range(n):
            if self._segments:
                self._fill_cache()
                if not self._cache:
                    break
                num, end, _ = self._cache.popleft()
                self._read_seg, self._read_off = num, end
                self._segments[num][1] -= 1
                if not self._cache and self._segments[num][1] <= 0:
                    if num == last_key(self._segments):
                        self._close_write()
                    self._delete_segment(num)
                    self._read_seg, self._read_off = num + 1, 0
            elif self._mem:
                size, _ = self._mem.popleft()
                self._mem_bytes -= size
        self._write_cursor()

    def _write_cursor(self) -> None:
        if self.directory is None or self.degraded and not self._segments:
            return
        try:
            tmp = self.directory / "cursor.tmp"
            tmp.write_bytes(_CURSOR.pack(self._read_seg, self._read_off))
            tmp.replace(self.directory / "cursor")
        except OSError as exc:
            logger.warning("cannot write spool cursor: %s", exc)

    def sync(self) -> None:
        """Flush and fsync the active segment (policies ``batch``/``always``)."""
        fh = self._write_fh
        if fh is not None and self.fsync != "none":
            with contextlib.suppress(OSError):
                fh.flush()  # type: ignore[attr-defined]
                os.fsync(fh.fileno())  # type: ignore[attr-defined]

    def close(self) -> int:
        """Close files; return how many in-memory records are lost."""
        self._close_write()
        if self._lock_fh is not None:
            with contextlib.suppress(OSError):
                self._lock_fh.close()  # type: ignore[attr-defined]
            self._lock_fh = None
        lost = len(self._mem)
        if lost:
            logger.warning("spool closed with %d in-memory records that are lost", lost)
            self._mem.clear()  # lost: no longer "in the spool" (they were reported as
            self._mem_bytes = 0  # "spooled locally; sent on the next emit")
        return lost


#: An empty spool directory younger than this is left alone (its producer may be starting).
_EMPTY_KEEP_S = 600.0


def in_use(directory: str | os.PathLike[str]) -> bool:
    """Whether a live process holds the lock of a spool directory."""
    try:
        with open(Path(directory) / "lock", "rb") as lock:
            try:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return True
    except OSError:
        return False  # no lock file (yet): not in use
    return False


def orphaned(root: str | os.PathLike[str], prefix: str, exclude: str) -> tuple[list[Path], int]:
    """Spool directories under ``root`` left by producers that have exited.

    A directory counts when its name starts with ``prefix``, it is not
    ``exclude`` and no process holds its lock. One that holds no record (only
    its lock and cursor files) is removed.

    Returns:
        (directories that still hold records, oldest first; how many empty ones were removed)

    """
    base = Path(root)
    try:
        dirs = sorted((d for d in base.iterdir()
                       if d.is_dir() and d.name.startswith(prefix) and d.name != exclude),
                      key=lambda d: d.stat().st_mtime)
    except OSError:
        return [], 0
    out: list[Path] = []
    removed = 0
    for d in dirs:
        try:
            if time.time() - d.stat().st_mtime < _EMPTY_KEEP_S and not any(d.glob("*.seg")):
                continue  # maybe a producer starting now, between its mkdir and its lock
        except OSError:
            continue
        try:
            with open(d / "lock", "a+b") as lock:
                try:
                    fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    continue  # a live producer's
                if any(f.stat().st_size for f in d.glob("*.seg")):
                    out.append(d)
                    continue
                for f in d.iterdir():
                    f.unlink()
            d.rmdir()
            removed += 1
        except OSError:
            continue
    return out, removed


def last_key(d: collections.OrderedDict[int, list[int]]) -> int:
    """Return the newest segment number of a non-empty mapping."""
    return next(reversed(d))
