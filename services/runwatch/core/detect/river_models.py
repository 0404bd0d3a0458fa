"""Wrappers around river's ADWIN and HalfSpaceTrees with JSON-able state.

* :class:`AdwinDetector` watches a key metric for drift. river keeps ADWIN's
  buckets in native code, so its JSON state is the bounded tail of recent
  values (``replay``) that is replayed into a fresh ADWIN on restore. The
  restored window is therefore the last ``replay`` values, not the exact
  bucket structure; detections on the restored detector can differ from an
  uninterrupted one only for changes older than ``replay`` values.
* :class:`HalfSpaceTreesDetector` is a small per-run river ``HalfSpaceTrees``
  over a normalized indicator vector. Its trees are rebuilt from the seed and
  the node masses restored, so a round trip is exact.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from river import anomaly, drift

from runwatch.core.detect.base import State, check_finite, check_kind


class AdwinDetector:
    """river ADWIN over one metric; score 1.0 on the update that detects drift."""

    __slots__ = ("delta", "replay", "_adwin", "_tail", "n_detections")

    def __init__(self, delta: float = 0.002, replay: int = 1024) -> None:
        """Create the detector.

        Args:
            delta: ADWIN confidence parameter.
            replay: Recent values kept in the JSON state for restore.

        """
        self.delta = delta
        self.replay = replay
        self._adwin = drift.ADWIN(delta=delta)
        self._tail: deque[float] = deque(maxlen=replay)
        self.n_detections = 0

    @property
    def estimation(self) -> float:
        """ADWIN's current mean estimate."""
        return float(self._adwin.estimation)

    @property
    def drift_detected(self) -> bool:
        """Whether the last learned value raised a drift."""
        return bool(self._adwin.drift_detected)

    def score_one(self, x: float) -> float:
        """Return 1.0 if the last learned value raised a drift, else 0.0.

        ADWIN decides only while updating, so this reports the most recent
        decision rather than probing a copy (copying the native window per
        update would be too slow for the hot path).
        """
        check_finite(x)
        return 1.0 if self._adwin.drift_detected else 0.0

    def learn_one(self, x: float) -> None:
        """Update ADWIN with ``x``."""
        x = check_finite(x)
        self._adwin.update(x)
        self._tail.append(x)
        if self._adwin.drift_detected:
            self.n_detections += 1

    def to_state(self) -> State:
        """Return the state as a JSON-able dict (replay tail)."""
        return {
            "kind": "adwin",
            "delta": self.delta,
            "replay": self.replay,
            "tail": list(self._tail),
            "n_detections": self.n_detections,
        }

    @classmethod
    def from_state(cls, state: State) -> AdwinDetector:
        """Rebuild by replaying the stored tail into a fresh ADWIN."""
        check_kind(state, "adwin")
        det = cls(delta=float(state["delta"]), replay=int(state["replay"]))
        for x in state["tail"]:
            det._adwin.update(float(x))
            det._tail.append(float(x))
        det.n_detections = int(state["n_detections"])
        return det


class HalfSpaceTreesDetector:
    """A small river ``HalfSpaceTrees`` over a dict of features in [0, 1]."""

    __slots__ = ("model",)

    def __init__(
        self, n_trees: int = 10, height: int = 8, window_size: int = 250, seed: int = 42
    ) -> None:
        """Create the model (the seed is required so that state can be restored)."""
        self.model = anomaly.HalfSpaceTrees(
            n_trees=n_trees, height=height, window_size=window_size, seed=seed
        )

    def score_one(self, x: dict[str, float]) -> float:
        """Return river's HST score for the feature dict, in [0, 1]."""
        return float(self.model.score_one(x))

    def learn_one(self, x: dict[str, float]) -> None:
        """Learn the feature dict."""
        self.model.learn_one(x)

    def to_state(self) -> State:
        """Return parameters, features and every node's masses as a JSON-able dict."""
        m = self.model
        masses = [[[n.l_mass, n.r_mass] for n in nodes] for nodes in m._tree_nodes]
        features: list[Any] = sorted(m.limits) if m.trees else []
        return {
            "kind": "hst",
            "params": [m.n_trees, m.height, m.window_size, m.seed],
            "features": features,
            "counter": m.counter,
            "first_window": m._first_window,
            "masses": masses,
        }

    @classmethod
    def from_state(cls, state: State) -> HalfSpaceTreesDetector:
        """Rebuild the trees from the seed, then restore the masses and counters."""
        check_kind(state, "hst")
        n_trees, height, window_size, seed = state["params"]
        det = cls(n_trees=n_trees, height=height, window_size=window_size, seed=seed)
        m = det.model
        if state["features"]:
            m.learn_one(dict.fromkeys(state["features"], 0.5))
            for nodes, saved in zip(m._tree_nodes, state["masses"], strict=True):
                for node, (lm, rm) in zip(nodes, saved, strict=True):
                    node.l_mass, node.r_mass = lm, rm
            m.counter = int(state["counter"])
            m._first_window = bool(state["first_window"])
        return det
