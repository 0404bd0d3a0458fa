from __future__ import annotations

from pathlib import Path

import pytest

from runwatch.core.storage.retention import (
    RetentionError,
    describe_rules,
    parse_duration,
    parse_rules,
    render_retention,
)

ROOT = Path(__file__).resolve().parents[2]
RULES = (ROOT / "schemas" / "retention.yaml").read_text()


@pytest.mark.parametrize(
    ("text", "seconds"), [("5s", 5), ("30m", 1800), ("12h", 43200), ("7d", 604800), (60, 60)]
)
def test_durations(text: object, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["0d", "-1d", "7w", "", "d", True, 0])
def test_bad_durations(bad: object) -> None:
    with pytest.raises(RetentionError):
        parse_duration(bad)


def test_repo_rules_parse_and_render() -> None:
    rules = parse_rules(RULES)
    assert rules.raw_ttl_s == 7 * 86400
    assert [(r.name, r.interval_s, r.ttl_s) for r in rules.resolutions] == [
        ("1m", 60, 90 * 86400),
        ("1h", 3600, 730 * 86400),
    ]
    sql = render_retention(rules)
    ttl = [s for s in sql if s.startswith("ALTER TABLE ${db}.gpu_samples MODIFY TTL")]
    assert len(ttl) == 1 and "DELETE WHERE dictGetOrDefault('${db}.retained_runs'" in ttl[0]
    assert "INTERVAL 604800 SECOND DELETE WHERE" in ttl[0]
    assert any("quantilesState(0.5, 0.9, 0.99)(toFloat64(util_pct))" in s for s in sql)
    assert any("TO ${db}.gpu_samples_1h AS" in s for s in sql)
    assert not any("run_manifests" in s or "run_summaries" in s for s in sql)  # kept forever


@pytest.mark.parametrize(
    ("change", "expect"),
    [
        ({"anomalous": "false"}, "max(anomalous)"),
        ({"material": "false"}, "max(material)"),
    ],
)
def test_rules_switch_off_reasons(change: dict[str, str], expect: str) -> None:
    text = RULES
    for key, value in change.items():
        text = text.replace(f"{key}: true", f"{key}: {value}")
    dictionary = render_retention(parse_rules(text))[0]
    assert expect not in dictionary
    assert expect in render_retention(parse_rules(RULES))[0]


@pytest.mark.parametrize(
    ("old", "new", "msg"),
    [
        ("keys: [run_id]\n", "keys: [bogus]\n", "unknown"),
        ("quantiles: [0.5, 0.9, 0.99]", "quantiles: [1.5]", "between 0 and 1"),
        ("ttl: 7d", "ttl: soon", "bad duration"),
        ("raw:", "notraw:", "'raw'"),
    ],
)
def test_bad_rules(old: str, new: str, msg: str) -> None:
    with pytest.raises(RetentionError, match=msg):
        parse_rules(RULES.replace(old, new, 1))


def test_describe_mentions_effective_rules() -> None:
    text = describe_rules(parse_rules(RULES))
    assert "routine runs: raw rows expire after 7d" in text
    assert "gpu_samples_1h: 1h buckets" in text and "kept 730d" in text
    assert "run_summaries: forever" in text
