import math

import pytest

from runwatch.core.signals import rules

T = 1_700_000_000_000


@pytest.mark.parametrize(
    ("call", "detector", "signal"),
    [
        (lambda: rules.non_finite_learning(math.nan, 1.0, 0, T), "rule:non_finite", "learning"),
        (lambda: rules.non_finite_learning(1.0, math.inf, 0, T), "rule:non_finite", "learning"),
        (lambda: rules.non_finite_learning(1.0, 1.0, 3, T), "rule:non_finite", "learning"),
        (lambda: rules.non_finite_learning(1.0, None, 0, T), None, None),
        (lambda: rules.zero_rows("ds@v1", 0, T), "rule:zero_rows", "data"),
        (lambda: rules.zero_rows("ds@v1", 10, T), None, None),
        (
            lambda: rules.image_allowed("evil.io/x:1", ("registry.local/",), T),
            "rule:image_allow_list",
            "artifact",
        ),
        (
            lambda: rules.image_allowed("registry.local/train@sha256:1", ("registry.local/",), T),
            None,
            None,
        ),
        (lambda: rules.image_allowed("anything", (), T), None, None),
        (lambda: rules.failed_gate("eval", False, "acc < 0.7", T), "rule:failed_gate", "artifact"),
        (lambda: rules.failed_gate("eval", True, "", T), None, None),
        (
            lambda: rules.checkpoint_integrity("a", "b", True, T),
            "rule:checkpoint_checksum",
            "artifact",
        ),
        (lambda: rules.checkpoint_integrity("a", "a", True, T), None, None),
        (lambda: rules.checkpoint_integrity("", "b", True, T), None, None),
        (
            lambda: rules.checkpoint_integrity("a", "a", False, T),
            "rule:checkpoint_serialization",
            "artifact",
        ),
        (lambda: rules.stalled(T, 1000.0, T + 10_001, 10, 0), "rule:stalled", "execution"),
        (lambda: rules.stalled(T, 1000.0, T + 9_999, 10, 0), None, None),
        (lambda: rules.stalled(T, 1000.0, T + 20_000, 10, 60_000), None, None),
        (lambda: rules.stalled(0, 1000.0, T, 10, 0), None, None),
        (lambda: rules.stalled(T, math.nan, T + 10**9, 10, 0), None, None),
        (lambda: rules.gpu_errors("n1", 3, 79, 0, T), "rule:gpu_xid", "infrastructure"),
        (lambda: rules.gpu_errors("n1", 3, 0, 2, T), "rule:gpu_ecc", "infrastructure"),
        (lambda: rules.gpu_errors("n1", 3, 0, 0, T), None, None),
        # deadline_ms is an absolute epoch-ms time (JobEvent schema), not a duration
        (
            lambda: rules.queue_deadline(T, None, T + 3_600_001, T + 3_600_000),
            "rule:queue_deadline",
            "execution",
        ),
        (lambda: rules.queue_deadline(T, None, T + 3_599_999, T + 3_600_000), None, None),
        (
            lambda: rules.queue_deadline(T, T + 3_600_001, T + 9e9, T + 3_600_000),
            "rule:queue_deadline",
            "execution",
        ),
        (lambda: rules.queue_deadline(T, T + 10, T + 9e9, T + 3_600_000), None, None),
        (lambda: rules.queue_deadline(T, None, T + 9e9, 0), None, None),
        (lambda: rules.queue_deadline(0, None, T + 9e9, T), None, None),
        # a duration-sized value would be an epoch time in 1970: every queued job is past it
        (lambda: rules.queue_deadline(T, T + 10, T + 20, 300_000), "rule:queue_deadline",
         "execution"),
    ],
)
def test_rule_table(call, detector, signal) -> None:
    f = call()
    if detector is None:
        assert f is None
    else:
        assert f is not None and (f.detector, f.signal, f.alert) == (detector, signal, True)


@pytest.mark.parametrize(
    ("datasets", "reported", "now", "missing"),
    [
        (["a@1", "b@1"], ["a@1"], T + 600_000, ["b@1"]),
        (["a@1", "b@1"], [], T + 599_999, []),
        (["a@1"], ["a@1"], T + 10**7, []),
        (["a@1", "a@1", "c"], [], T + 10**7, ["a@1", "c"]),
    ],
)
def test_missing_data_reports(datasets, reported, now, missing) -> None:
    found = rules.missing_data_reports(datasets, reported, T, now, 600_000)
    assert [f.subject for f in found] == missing
    assert all(f.signal == "data" for f in found)


def test_queue_deadline_reports_delay_against_the_allowed_wait() -> None:
    f = rules.queue_deadline(T, T + 90_000, T + 90_000, T + 60_000)
    assert f is not None
    assert (f.observed, f.expected, f.at_ms) == (90_000.0, 60_000.0, T + 90_000)


@pytest.mark.parametrize(
    ("call", "detector", "title"),
    [
        # a mismatch is the most specific evidence, whatever outcome came with it
        (lambda: rules.checkpoint_integrity("a", "b", False, T, corrupt=True),
         "rule:checkpoint_checksum", "Checkpoint checksum mismatch"),
        (lambda: rules.checkpoint_integrity("", "", True, T, corrupt=True),
         "rule:checkpoint_checksum", "Checkpoint reported corrupt"),
        (lambda: rules.checkpoint_integrity("a", "a", True, T, corrupt=True),
         "rule:checkpoint_checksum", "Checkpoint reported corrupt"),
        (lambda: rules.checkpoint_integrity("", "", False, T),
         "rule:checkpoint_serialization", "Checkpoint serialization failed"),
        (lambda: rules.image_allowed("", ("registry.local/",), T), None, None),
        (lambda: rules.image_allowed("", ("registry.local/",), T, "allow"), None, None),
        (lambda: rules.image_allowed("", (), T, "deny"), None, None),  # no allow-list: rule off
        (lambda: rules.image_allowed("", ("registry.local/",), T, "warn"),
         "rule:image_missing", "Run reports no container image (image allow-list in force)"),
        (lambda: rules.image_allowed("evil.io/x", ("registry.local/",), T, "allow"),
         "rule:image_allow_list", "Image evil.io/x is not allowed"),
    ],
)
def test_checkpoint_and_image_titles(call, detector, title) -> None:
    f = call()
    assert (f.detector, f.title) == (detector, title) if detector else f is None


@pytest.mark.parametrize(("policy", "severity"), [("warn", "warning"), ("deny", "critical")])
def test_image_missing_severity(policy, severity) -> None:
    f = rules.image_allowed("", ("registry.local/",), T, policy)
    assert f is not None and f.severity == severity and f.signal == "artifact"


def test_a_job_queued_after_its_deadline_is_not_queued_a_negative_time() -> None:
    """A deadline 60 s before the job was queued, judged on a horizon 57 s behind the
    queued event: the title said "Queued -60 s, 3 s past the deadline" (found 2026-12-07)."""
    from runwatch.core.signals.rules import queue_deadline

    f = queue_deadline(queued_at_ms=1_000_000, started_at_ms=None, now_ms=943_000,
                       deadline_ms=940_000)
    assert f is not None and f.observed == 0.0
    assert f.title == "Queued 0 s, 3 s past the deadline"
