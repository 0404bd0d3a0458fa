"""HTTP body codecs: chunked transfer decoding and Content-Encoding (every frame).

clickhouse-connect compresses each insert block as its own lz4 or zstd frame, so
a body is a concatenation of frames; gzip bodies may hold several members.
Each decoder here keeps going across frame boundaries and refuses truncated or
corrupt input with the ClickHouse error the real server would raise.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import lz4.frame
import zstandard

from runwatch.store.errors import StoreError

_READ_CHUNK = 1 << 20


class Reader(Protocol):
    """What the body readers need of a socket stream."""

    def read(self, size: int = -1, /) -> bytes:
        """Read up to ``size`` bytes."""
        ...

    def readline(self, size: int = -1, /) -> bytes:
        """Read one line of at most ``size`` bytes."""
        ...


class _Decompressor(Protocol):
    eof: bool
    unused_data: bytes

    def decompress(self, data: bytes) -> bytes: ...


def iter_sized(stream: Reader, length: int) -> Iterator[bytes]:
    """Yield exactly ``length`` bytes of ``stream`` in chunks.

    Args:
        stream: The socket reader.
        length: The Content-Length.

    Yields:
        Chunks of the body.

    Raises:
        StoreError: When the peer closes early.

    """
    left = length
    while left > 0:
        chunk = stream.read(min(left, _READ_CHUNK))
        if not chunk:
            err = StoreError.named("CANNOT_READ_ALL_DATA", f"Body ended {left} bytes early")
            raise err
        left -= len(chunk)
        yield chunk


def iter_chunked(stream: Reader) -> Iterator[bytes]:
    """Decode a ``Transfer-Encoding: chunked`` body.

    Args:
        stream: The socket reader, positioned at the first chunk size line.

    Yields:
        The chunks' payloads.

    Raises:
        StoreError: On a malformed or truncated chunk.

    """
    while True:
        line = stream.readline(1024)
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError as exc:
            err = StoreError.named("CANNOT_PARSE_TEXT", f"Malformed chunk size line {line[:40]!r}")
            raise err from exc
        if size == 0:
            while stream.readline(1024) not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return
        yield from iter_sized(stream, size)
        if stream.readline(16) not in (b"\r\n", b"\n"):
            err = StoreError.named("CANNOT_PARSE_TEXT", "Chunk not terminated by CRLF")
            raise err


def _frames(
    chunks: Iterator[bytes], factory: Callable[[], Any], error: str, what: str
) -> Iterator[bytes]:
    decoder: _Decompressor | None = None
    pending = b""
    for chunk in chunks:
        data = pending + chunk if pending else chunk
        pending = b""
        while data:
            if decoder is None:
                decoder = factory()
            try:
                out = decoder.decompress(data)
            except Exception as exc:  # each library raises its own type
                err = StoreError.named(error, f"{what} decoding failed: {exc}")
                raise err from exc
            if out:
                yield out
            if decoder.eof:
                data = decoder.unused_data
                decoder = None
            else:
                data = b""
    if decoder is not None:
        err = StoreError.named(error, f"{what} stream is truncated (frame not finished)")
        raise err


def _lz4() -> Any:
    return lz4.frame.LZ4FrameDecompressor()


def _zstd() -> Any:
    return zstandard.ZstdDecompressor().decompressobj()


def _gzip() -> Any:
    return zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)


def _deflate() -> Any:
    return zlib.decompressobj()


_DECODERS: dict[str, tuple[Callable[[], Any], str, str]] = {
    "lz4": (_lz4, "LZ4_DECODER_FAILED", "lz4"),
    "zstd": (_zstd, "ZSTD_DECODER_FAILED", "zstd"),
    "gzip": (_gzip, "ZLIB_INFLATE_FAILED", "gzip"),
    "x-gzip": (_gzip, "ZLIB_INFLATE_FAILED", "gzip"),
    "deflate": (_deflate, "ZLIB_INFLATE_FAILED", "deflate"),
}


def decode_body(chunks: Iterator[bytes], encoding: str | None) -> Iterator[bytes]:
    """Undo a request's Content-Encoding, across every frame.

    Args:
        chunks: The raw body chunks.
        encoding: The Content-Encoding header value, or None.

    Returns:
        An iterator of decoded chunks.

    Raises:
        StoreError: ``NOT_IMPLEMENTED`` for an unknown encoding (decoding errors
            surface while iterating).

    """
    name = (encoding or "").strip().lower()
    if name in ("", "identity", "none"):
        return chunks
    if name not in _DECODERS:
        err = StoreError.named(
            "NOT_IMPLEMENTED",
            f"Unknown compression method '{encoding}'. Supported: gzip, deflate, zstd, lz4",
        )
        raise err
    factory, error, what = _DECODERS[name]
    return _frames(chunks, factory, error, what)


def encode_body(data: bytes | memoryview, encoding: str) -> bytes:
    """Compress a response body.

    Args:
        data: The response.
        encoding: One of ``gzip``, ``deflate``, ``zstd``, ``lz4``.

    Returns:
        The compressed bytes (one frame).

    """
    if encoding == "lz4":
        return bytes(lz4.frame.compress(data))
    if encoding == "zstd":
        return bytes(zstandard.ZstdCompressor(level=1).compress(data))
    if encoding == "gzip":
        return gzip.compress(data, compresslevel=3)
    return zlib.compress(data, 3)
