"""Size and sha256 of local files (run on the SDK's worker thread)."""

from __future__ import annotations

import hashlib
import stat
from collections.abc import Callable
from pathlib import Path


def file_size(uri: str) -> int:
    """Size of a local file, 0 for remote URIs."""
    try:
        return Path(uri).stat().st_size
    except (OSError, ValueError):
        return 0


def file_stamp(uri: str) -> tuple[int, int, int] | None:
    """Size, modification time (ns) and inode of a local file; None otherwise.

    One ``stat``, cheap enough for the caller's thread: it tells whether the file
    the worker thread hashes later is still the one the call was about.
    """
    if "://" in uri and not uri.startswith("file://"):
        return None
    try:
        st = Path(uri[7:] if uri.startswith("file://") else uri).stat()
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(st.st_mode):  # a directory (an HF checkpoint): not stamped
        return None
    return st.st_size, st.st_mtime_ns, st.st_ino


def file_digest(uri: str, stop: Callable[[], bool] | None = None) -> tuple[int, str | None]:
    """Size and sha256 of a local file (or directory tree); (0, None) otherwise.

    Args:
        uri: A local path (``file://`` allowed) or a remote URI.
        stop: Asked between reads; once true the hashing stops and the size is
            returned without a digest (``run.finish``'s wait ran out: a checkpoint
            of tens of GB took the run's final JobEvent with it).

    Returns:
        (size, hex digest or None).

    """
    path = Path(uri[7:] if uri.startswith("file://") else uri)
    if "://" in uri and not uri.startswith("file://"):
        return 0, None
    try:
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        h = hashlib.sha256()
        size = 0
        for f in files:
            with f.open("rb") as fh:
                while chunk := fh.read(1 << 20):
                    if stop is not None and stop():
                        return sum(x.stat().st_size for x in files), None
                    h.update(chunk)
                    size += len(chunk)
        return size, h.hexdigest()
    except OSError:
        return 0, None


