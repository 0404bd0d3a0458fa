"""The parts' cheap paths give exactly what the plain code gives (issue 17 item 6).

``round4`` stands in for ``round(x, 4)`` on the memory fraction of every GPU
reading, ``RunningStats.added`` for a from_state/add/to_state round trip per
indicator value, and the node aggregate's JSON is written by one shared
encoder: each must give the same floats and the same bytes as before.
"""

from __future__ import annotations

import json
import math
import random

from runwatch.core.signals.workload import RunningStats
from runwatch.core.stream.join_node import NodeAgg, NodeEntry, gpu_of, round4


def test_round4_is_round_to_four_places() -> None:
    rng = random.Random(17)
    xs = [rng.random() for _ in range(20_000)]
    xs += [rng.randrange(0, 80 * 2**30 + 1) / (80 * 2**30) for _ in range(20_000)]
    xs += [i / 20_000 for i in range(20_001)]  # exact and near halves of the 4th place
    xs += [(i + 0.5) / 1e4 for i in range(10_000)]
    xs += [math.nextafter(x, 2.0) for x in xs[-10_000:]]
    xs += [math.nextafter(x, -1.0) for x in xs[-10_000:]]
    xs += [0.0, 1.0, 0.00005, 0.99995, 1.5, 3.14159265, -0.25, 1e12]  # outside [0, 1] too
    wrong = [x for x in xs if round4(x) != round(x, 4) or type(round4(x)) is not float]
    assert wrong == []


def test_gpu_of_memory_fraction_and_link() -> None:
    g = gpu_of(3, 91.5, 70.0, 0, None, 0, 1_234_567_890, 80 * 2**30, 61.0, 1980, 1.5e9, 2.25e9)
    assert g == (3, 91.5, 70.0, 0, 0, 0, round(1_234_567_890 / (80 * 2**30), 4), 61.0, 1980,
                 3.75e9)
    assert gpu_of(0, 1.0, None, 0, 0, 0, 5, 0, 30.0, 0, None, None)[6:] == (None, 30.0, 0, None)


def test_running_stats_added_matches_the_object_round_trip() -> None:
    rng = random.Random(6)
    state: list[float] = [0, 0.0, 0.0]
    for _ in range(500):
        x = rng.gauss(3.0, 2.0)
        st = RunningStats.from_state(state)
        st.add(x)
        fast = RunningStats.added(state, x)
        assert fast == st.to_state()
        assert type(fast[0]) is int
        state = fast
    assert state[0] == 500


def test_node_agg_json_is_the_compact_dumps_of_its_lists() -> None:
    gpus = (gpu_of(0, 90.0, 70.0, 0, 0, 0, 1, 2, 60.0, 1900, None, None),
            gpu_of(1, 88.25, None, 4, 79, 1, 3, 4, 61.5, 1800, 1.0, 2.0))
    agg = NodeAgg("run-ü", 1_700_000_000_500, (NodeEntry("n1", 1_700_000_000_500, gpus),))
    plain = json.dumps({"v": 1, "run": "run-ü",
                        "n": [["n1", 1_700_000_000_500, [list(g) for g in gpus]]]},
                       separators=(",", ":")).encode()
    assert agg.to_json() == plain
    assert NodeAgg.from_json(agg.to_json()) == agg
