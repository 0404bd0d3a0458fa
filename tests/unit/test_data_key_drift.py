"""``data.report(key=...)``: the row-key column is an identifier, never compared for drift.

Ids drawn from a shared range (a hashed key, users sampled from a population) overlap the
baseline's range, so the sequence rule does not leave them out; each batch's new block of
ids was marked drifted, and that drift named ``data`` the cause of a run's learning symptoms.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from runwatch.adapters.publisher import CaptureTransport, Publisher
from runwatch.client import data

T0 = 1_800_000_000_000


def batch(rng: np.random.Generator, k: int, shift: float = 0.0) -> pd.DataFrame:
    """500 rows of users k*100k .. k*100k+100k of a population of 1M, and a feature."""
    return pd.DataFrame({"user_id": rng.integers(k * 100_000, (k + 1) * 100_000, 500),
                         "x": rng.normal(10 + shift, 2, 500)})


def drifted(tmp_path: Path, key: str | None, shift: float = 0.0) -> list[tuple[str, ...]]:
    pub = Publisher(CaptureTransport(), kind="sdk")
    rng = np.random.default_rng(7)
    first = pd.concat([batch(rng, k) for k in range(10)])  # the baseline: the whole range
    data.report("s3://users", "v1", "p0", first, baseline="ref", publisher=pub,
                baseline_directory=tmp_path, now_ms=T0, key=key)
    out = []
    for k in range(1, 6):
        rec = data.report("s3://users", "v1", f"p{k}", batch(rng, k, shift), baseline="ref",
                          publisher=pub, baseline_directory=tmp_path, now_ms=T0 + k * 60_000,
                          key=key)
        assert rec.drift is not None
        out.append(rec.drift.drifted_features)
    return out


def test_a_key_column_of_sampled_ids_is_not_drift(tmp_path: Path) -> None:
    assert drifted(tmp_path, "user_id") == [()] * 5


def test_the_same_column_not_named_the_key_is_compared(tmp_path: Path) -> None:
    """The control: without ``key=`` the block of ids reads as a shift (what the key stops)."""
    assert all("user_id" in d for d in drifted(tmp_path, None))


def test_a_feature_shift_beside_a_key_is_still_drift(tmp_path: Path) -> None:
    assert drifted(tmp_path, "user_id", shift=4.0) == [("x",)] * 5
