"""Row-key sketches: do two datasets share rows? (eval data disjoint from training data).

A data-quality report may carry a bottom-k sketch of its batch's row keys
(``data.report(..., key="account_id")``): the :data:`K` smallest distinct
63-bit hashes of the key values. The sketches of one dataset version's
reports merge into one (the k smallest of their union). Two merged sketches
are compared below the smaller of their largest hashes, where each holds
*every* key hash of its dataset: a hash found in both there is a row key in
both (63-bit hashes: collisions are negligible), and the count scales to an
estimate of the shared keys. The sketch finds an overlap when the shared
keys number about ``|larger set| / K`` or more; smaller overlaps can go unseen.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Iterable, Sequence

K = 1024
"""Hashes kept per sketch (8 KiB a report)."""
_SPACE = 2 ** 63


def key_hash(value: object) -> int:
    """Return the 63-bit hash of one row key (its text, UTF-8; None is skipped by callers)."""
    digest = hashlib.blake2b(str(value).encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def sketch(keys: Iterable[object], k: int = K) -> tuple[int, ...]:
    """Return the bottom-k sketch (ascending) of row keys, None values left out."""
    return tuple(heapq.nsmallest(k, {key_hash(v) for v in keys if v is not None}))


def merge(sketches: Iterable[Sequence[int]], k: int = K) -> tuple[int, ...]:
    """Merge the sketches of one dataset's batches into the sketch of their union."""
    return tuple(heapq.nsmallest(k, {h for s in sketches for h in s}))


def shared(a: Sequence[int], b: Sequence[int], k: int = K) -> tuple[int, float]:
    """Return ``(shared hashes seen, estimated shared keys)`` of two merged sketches.

    Args:
        a: One dataset's sketch.
        b: The other's.
        k: The sketches' size (a sketch shorter than k holds every key).

    Returns:
        The hashes both hold in their common range and the estimate of the
        shared keys they stand for (0, 0.0 when either sketch is empty).

    """
    if not a or not b:
        return 0, 0.0
    full_a, full_b = len(a) < k, len(b) < k
    top = min(a[-1] if not full_a else _SPACE, b[-1] if not full_b else _SPACE)
    common = len({h for h in a if h <= top} & {h for h in b if h <= top})
    return common, common * (_SPACE / max(top, 1)) if top < _SPACE else float(common)
