"""Leave-one-set-out cross-validation of NAB scores.

NAB chooses one threshold per detector and profile on the labels of the very
files it then scores, and a detector's own constants are usually chosen on the
same files too: both are in-sample. Here every label-dependent choice is made
without the files it is scored on. The corpus's sets (the folder under
``data/``: ``artificialNoAnomaly``, ``realKnownCause``, ...) are the folds; for
each held-out set:

1. for each candidate configuration of a detector's pre-declared grid, the
   NAB threshold is optimised on the *other* sets' files and labels;
2. the configuration with the best score on those other sets is chosen
   (ties: the first declared, the shipped configuration comes first);
3. the held-out set's files are scored with that configuration and threshold.

The pooled cross-validated score sums the held-out raw scores of every fold
and normalises by the pooled null and perfect scores (their sums over the
folds, i.e. the whole corpus's). A set without anomaly windows (NAB's
``artificialNoAnomaly``) has no normalised score of its own (null = perfect =
0): its fold only contributes its false-positive cost to the pooled raw score.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from runwatch.bench.scorer import (
    LabeledScores,
    ProfileResult,
    optimize_threshold,
    score_at_threshold,
)


def set_of(key: str) -> str:
    """Return the set (first folder under ``data/``) of a file key."""
    return key.split("/", 1)[0]


@dataclass(frozen=True, slots=True)
class Fold:
    """One fold: the choices made on the other sets and the held-out result.

    Attributes:
        held_out: The held-out set.
        config: The configuration chosen on the other sets.
        train: The chosen configuration's result on the other sets (its threshold is used).
        test: The held-out set's result at that configuration and threshold.

    """

    held_out: str
    config: str
    train: ProfileResult
    test: ProfileResult

    @property
    def held_out_score(self) -> float | None:
        """Normalised held-out score, None when the set has no window (undefined)."""
        if self.test.perfect == self.test.null:
            return None
        return self.test.normalized


@dataclass(frozen=True, slots=True)
class CrossValidation:
    """Leave-one-set-out result of one detector under one profile."""

    profile: str
    folds: tuple[Fold, ...]

    @property
    def raw(self) -> float:
        """Sum of the held-out raw scores."""
        return sum(f.test.raw for f in self.folds)

    @property
    def null(self) -> float:
        """Sum of the held-out null scores (the corpus's null score)."""
        return sum(f.test.null for f in self.folds)

    @property
    def perfect(self) -> float:
        """Sum of the held-out perfect scores (the corpus's perfect score)."""
        return sum(f.test.perfect for f in self.folds)

    @property
    def normalized(self) -> float:
        """Pooled cross-validated score: ``100 (raw - null) / (perfect - null)``."""
        denom = self.perfect - self.null
        return 100.0 * (self.raw - self.null) / denom if denom else 0.0


def leave_one_set_out(
    candidates: Mapping[str, Sequence[LabeledScores]], profile: str
) -> CrossValidation:
    """Cross-validate a detector's configuration and threshold over the corpus's sets.

    Args:
        candidates: Per configuration (in declared order, the shipped one
            first), the scores and windows of every file of the corpus.
        profile: NAB profile name.

    Returns:
        One fold per set, in sorted set order.

    Raises:
        ValueError: If there are no candidates, the candidates do not cover the
            same files, or the corpus has fewer than two sets.

    """
    if not candidates:
        msg = "cross-validation needs at least one candidate configuration"
        raise ValueError(msg)
    key_sets = {name: sorted(f.key for f in files) for name, files in candidates.items()}
    keys = next(iter(key_sets.values()))
    if any(k != keys for k in key_sets.values()):
        msg = "every candidate configuration must score the same files"
        raise ValueError(msg)
    sets = sorted({set_of(k) for k in keys})
    if len(sets) < 2:
        msg = f"leave-one-set-out needs at least two sets, got {sets}"
        raise ValueError(msg)
    folds = []
    for held_out in sets:
        trained = [
            (name, optimize_threshold([f for f in files if set_of(f.key) != held_out], profile))
            for name, files in candidates.items()
        ]
        # Same training files for every candidate, so raw ranks as normalised
        # does; max() keeps the first of equals (the shipped configuration).
        name, train = max(trained, key=lambda c: c[1].raw)
        test_files = [f for f in candidates[name] if set_of(f.key) == held_out]
        test = score_at_threshold(test_files, profile, train.threshold)
        folds.append(Fold(held_out=held_out, config=name, train=train, test=test))
    return CrossValidation(profile=profile, folds=tuple(folds))
