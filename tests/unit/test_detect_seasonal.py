import copy
import json
import random
from datetime import UTC, datetime

import pytest

from runwatch.core.detect import DefaultConfig, DefaultDetector
from runwatch.core.detect.seasonal import SlotBaseline, epoch_hour, season_slot

FIVE_MIN = 300_000
START = int(datetime(2024, 1, 1, tzinfo=UTC).timestamp() * 1000)  # a Monday, 00:00 UTC


def _ms(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


@pytest.mark.parametrize(
    ("when", "slots", "slot"),
    [
        ("2024-01-01 00:00", 24, 0),
        ("2024-01-01 13:59", 24, 13),
        ("2024-01-01 00:00", 168, 0),  # Monday
        ("2024-01-07 23:30", 168, 167),  # Sunday, last hour of the week
        ("1970-01-01 05:00", 168, 3 * 24 + 5),  # a Thursday
    ],
)
def test_season_slot_is_hour_of_day_or_of_week(when: str, slots: int, slot: int) -> None:
    assert season_slot(_ms(when), slots) == slot


def _daily(i: int, rng: random.Random) -> float:
    """Square daily wave: 10 from 00:00 to 12:00, 0 after, small noise."""
    hour = (i * FIVE_MIN // 3_600_000) % 24
    return (10.0 if hour < 12 else 0.0) + rng.gauss(0.0, 0.05)


def _feed(det: DefaultDetector, days: int, timed: bool) -> None:
    rng = random.Random(3)
    for i in range(days * 288):
        x = _daily(i, rng)
        det.score_one(x, START + i * FIVE_MIN if timed else None)
        det.learn_one(x, START + i * FIVE_MIN if timed else None)


def test_a_missing_daily_drop_is_found_by_the_hour_of_day_baseline_only() -> None:
    # Day 8 keeps its morning level (10) through the afternoon: no jump (the
    # difference evidence sees nothing) and 10 is a common value (so does the
    # global baseline), but for the hours after noon it is far from the usual 0.
    # The recurring-move gate (on, as by default) does not silence the seasonal
    # evidence, though 10 -> 10 is the most familiar move of all.
    scores = {}
    for season in ("off", "day"):
        det = DefaultDetector(cfg=DefaultConfig(season=season))
        _feed(det, 7, timed=True)
        rng = random.Random(9)
        out = []
        for i in range(7 * 288, 7 * 288 + 216):  # day 8, 00:00 to 18:00
            x = 10.0 + rng.gauss(0.0, 0.05)
            t = START + i * FIVE_MIN
            out.append(det.score_one(x, t))
            det.learn_one(x, t)
        scores[season] = max(out[144:])  # after noon
    fire = DefaultConfig().fire_level
    assert scores["day"] >= fire > scores["off"]


def _weekdays(i: int, rng: random.Random) -> float:
    """Hourly series: 10 on weekdays, 0 at weekends, small noise (START is a Monday)."""
    return (10.0 if (i // 24) % 7 < 5 else 0.0) + rng.gauss(0.0, 0.05)


def test_after_two_weeks_a_weekday_level_on_a_saturday_is_found_by_the_week_baseline() -> None:
    scores = {}
    for season in ("day", "day+week"):
        det = DefaultDetector(cfg=DefaultConfig(season=season))
        rng = random.Random(4)
        out = []
        for i in range(6 * 7 * 24):  # six weeks, hourly; week 6's Saturday stays at 10
            saturday_6 = i // 24 == 5 * 7 + 5
            x = 10.0 + rng.gauss(0.0, 0.05) if saturday_6 else _weekdays(i, rng)
            t = START + i * 3_600_000
            out.append(det.score_one(x, t))
            det.learn_one(x, t)
        scores[season] = max(out[(5 * 7 + 5) * 24 : (5 * 7 + 6) * 24])
    fire = DefaultConfig().fire_level
    assert scores["day+week"] >= fire > scores["day"]


@pytest.mark.parametrize("slots", [24, 168])
def test_slot_baseline_learns_each_slot_and_round_trips(slots: int) -> None:
    base = SlotBaseline(slots=slots, fading=0.002, warmup=20)
    assert base.raw(5.0, epoch_hour(START), 1e-9, 4.0) == 0.0  # empty slot: no evidence
    rng = random.Random(2)
    for i in range(slots * 30):
        t = START + i * 3_600_000
        base.learn(float(season_slot(t, slots)) + rng.gauss(0.0, 0.1), epoch_hour(t))
    assert all(abs(m - k) < 0.2 for k, m in enumerate(base.means))
    assert 0.05 < base.sq**0.5 < 0.2  # the pooled spread is the noise, not the slot pattern
    hour = epoch_hour(START + 3 * 3_600_000)
    assert base.raw(3.0, hour, 1e-9, 4.0) < 0.3 < base.raw(6.0, hour, 1e-9, 4.0)
    assert SlotBaseline.from_state(json.loads(json.dumps(base.to_state()))) == base


def test_unknown_season_is_refused() -> None:
    with pytest.raises(ValueError, match="season must be one of"):
        DefaultDetector(cfg=DefaultConfig(season="month"))


def test_without_times_a_seasonal_detector_scores_as_the_plain_one() -> None:
    plain = DefaultDetector(cfg=DefaultConfig(season="off"))
    seasonal = DefaultDetector(cfg=DefaultConfig(season="day+week"))
    rng = random.Random(5)
    for _ in range(800):
        x = rng.gauss(0.0, 1.0)
        assert seasonal.score_one(x) == plain.score_one(x)
        plain.learn_one(x)
        seasonal.learn_one(x)


CONFIGS = [DefaultConfig(season=s) for s in ("off", "day", "week", "day+week")]


@pytest.mark.parametrize("cfg", CONFIGS, ids=["off", "day", "week", "day+week"])
@pytest.mark.parametrize("timed", [True, False])
def test_detector_protocol(cfg: DefaultConfig, timed: bool) -> None:
    """Scoring does not learn, state round-trips through JSON exactly, NaN is refused."""
    det = DefaultDetector(cfg=cfg)
    rng = random.Random(11)
    for i in range(1500):
        x = _daily(i, rng) + (25.0 if i == 1400 else 0.0)
        t = START + i * FIVE_MIN if timed else None
        before = copy.deepcopy(det.to_state())
        det.score_one(x, t)
        state = det.to_state()
        state.pop("cache"), before.pop("cache")
        assert state == before
        det.learn_one(x, t)
    back = DefaultDetector.from_state(json.loads(json.dumps(det.to_state())))
    assert back.to_state() == det.to_state()
    t = START + 1500 * FIVE_MIN if timed else None
    assert back.score_one(3.0, t) == det.score_one(3.0, t)
    with pytest.raises(ValueError, match="finite"):
        det.score_one(float("nan"), t)


def test_a_state_saved_before_the_season_fields_still_loads() -> None:
    det = DefaultDetector()
    for i in range(50):
        det.score_one(float(i % 5))
        det.learn_one(float(i % 5))
    old = json.loads(json.dumps(det.to_state()))
    for name in ("seasons", "slayer", "t_first"):
        old.pop(name)
    old["cfg"].pop("season")
    old["cache"] = old["cache"][:8]  # the cache had no time entry
    back = DefaultDetector.from_state(old)
    assert back.score_one(2.0) == det.score_one(2.0)
