import pytest

from runwatch.core.signals.cause import classify, explains, in_window, symptom_kind
from runwatch.core.signals.rules import Finding

T = 1_000_000


def f(signal: str, at: int = T, indicator: str = "x", score: float = 0.5) -> Finding:
    return Finding(f"d:{indicator}", indicator, signal, "warning", 1.0, 0.0, score, at, indicator)


DECLINE = f("learning", T, "val_accuracy", 1.0)


@pytest.mark.parametrize(
    ("symptom", "evidence", "cause"),
    [
        (DECLINE, [f("data", T - 1000, "label_balance")], "data"),
        (
            DECLINE,
            [
                f("execution", T - 9000, "effective_batch_size"),
                f("execution", T - 5000, "restart_count"),
            ],
            "execution",
        ),
        (DECLINE, [], "learning"),
        (DECLINE, [f("learning", T - 10, "loss_trend")], "learning"),
        (DECLINE, [f("data", T - 10**7, "label_balance")], "learning"),  # outside the window
        (DECLINE, [f("data", T + 10, "label_balance")], "learning"),  # after the symptom
        (DECLINE, [f("data", T - 10, "a", 0.2), f("execution", T - 10, "b", 0.9)], "execution"),
        (
            DECLINE,
            [f("data", T - 10, "a", 0.5), f("execution", T - 10, "b", 0.5)],
            "data",
        ),  # tie → priority
        (
            DECLINE,
            [f("infrastructure", T - 10, "xid", 1.0), f("data", T - 10, "a", 0.5)],
            "infrastructure",
        ),
        (f("artifact", T, "checkpoint"), [f("data", T - 10)], "artifact"),
        (f("execution", T, "loader_share"), [f("data", T - 10)], "execution"),
        (f("infrastructure", T, "xid"), [], "infrastructure"),
    ],
)
def test_cause_table(symptom, evidence, cause) -> None:
    verdict = classify(symptom, evidence, window_ms=60_000)
    assert verdict.cause == cause
    assert verdict.evidence[-1] is symptom
    assert 0 < verdict.confidence <= 1


def test_confidence_is_share_of_weight() -> None:
    v = classify(DECLINE, [f("data", T - 1, "a", 0.75), f("execution", T - 1, "b", 0.25)], 60_000)
    assert (v.cause, v.confidence) == ("data", pytest.approx(0.75))


def test_in_window_sorts_and_filters() -> None:
    ev = [f("data", T - 5), f("data", T - 100_000), f("data", T - 50)]
    assert [e.at_ms for e in in_window(ev, T, 60_000)] == [T - 50, T - 5]


def rule(name: str, signal: str, indicator: str, at: int = T - 10) -> Finding:
    return Finding(f"rule:{name}", indicator, signal, "critical", 0.0, 1.0, 1.0, at, name)


NAN = rule("non_finite", "learning", "loss", T)
STALL = rule("stalled", "execution", "step_gap_ms", T)
IMAGE = rule("image_allow_list", "artifact", "image")


@pytest.mark.parametrize(
    ("symptom", "evidence", "cause"),
    [
        # an image-policy finding cannot cause a numerical or learning symptom
        (NAN, [IMAGE], "learning"),
        (NAN, [rule("image_missing", "artifact", "image")], "learning"),
        (DECLINE, [IMAGE, rule("failed_gate", "artifact", "gate")], "learning"),
        # a monitoring gap is not a fault in the data
        (DECLINE, [rule("missing_data_report", "data", "data_report")], "learning"),
        # data can: bad or shifted values reach the model
        (NAN, [IMAGE, f("data", T - 10, "label_balance", 0.3)], "data"),
        (NAN, [rule("zero_rows", "data", "rows")], "data"),
        # a corrupt checkpoint the run resumed from can
        (NAN, [rule("checkpoint_checksum", "artifact", "checkpoint")], "artifact"),
        (NAN, [rule("gpu_ecc", "infrastructure", "ecc_uncorrected")], "infrastructure"),
        (NAN, [f("execution", T - 10, "restart_count")], "execution"),
        # slowness explains slowness, not numerics
        (NAN, [f("execution", T - 10, "loader_share", 1.0)], "learning"),
        (NAN, [f("infrastructure", T - 10, "throttle_reasons", 1.0)], "learning"),
        (STALL, [f("execution", T - 10, "loader_share")], "execution"),
        (STALL, [rule("gpu_xid", "infrastructure", "xid")], "infrastructure"),
        # a throttled or idling GPU steps slower; it does not stop a job
        (STALL, [f("infrastructure", T - 10, "throttle_reasons", 1.0),
                 f("infrastructure", T - 10, "gpu_utilization", 1.0)], "execution"),
        (STALL, [f("execution", T - 10, "restart_count")], "execution"),
        (STALL, [IMAGE], "execution"),
        (STALL, [], "execution"),
    ],
)
def test_cause_weighs_only_plausible_evidence(symptom, evidence, cause) -> None:
    verdict = classify(symptom, evidence, window_ms=60_000)
    assert verdict.cause == cause
    assert verdict.evidence[-1] is symptom
    if cause not in ("learning", symptom.signal):
        assert all(e.signal == cause for e in verdict.evidence[:-1])
    assert IMAGE not in verdict.evidence


def test_plausibility_map_defaults_by_class() -> None:
    assert explains(f("data", T, "null_rate")) == {"numerics", "learning"}
    assert explains(f("infrastructure", T, "gpu_temperature")) == {"throughput"}
    assert explains(f("artifact", T, "registry_status")) == frozenset()
    assert explains(IMAGE) == frozenset()
    assert symptom_kind(NAN) == "numerics" and symptom_kind(DECLINE) == "learning"
    assert symptom_kind(STALL) == "stop"
    assert symptom_kind(IMAGE) is None
