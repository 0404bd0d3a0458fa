"""Routing rules: tree semantics, matchers, validation errors with line numbers."""

from __future__ import annotations

import textwrap

import pytest

from runwatch.core.paging.routes import (
    RulesError,
    alert_attributes,
    parse_duration_ms,
    parse_rules,
    receivers_for,
)

RULES = textwrap.dedent(
    """\
    receivers:
      - name: default
        kind: alertmanager
        url: http://127.0.0.1:9093
      - name: pd-infra
        kind: pagerduty
        routing_key_env: PD_KEY
        repeat_interval: 1h
      - name: slack-ml
        kind: slack
        url_env: SLACK_URL
      - name: og
        kind: opsgenie
        api_key_file: /run/secrets/og
      - name: hook
        kind: webhook
        url: https://hooks.example.com/runwatch
        secret_env: HOOK_SECRET
    route:
      receiver: default
      routes:
        - match: {severity: critical}
          receiver: pd-infra
          continue: true
          routes:
            - match: {probable_cause: data}
              receiver: og
        - match_re: {team: "ml-.*"}
          receiver: slack-ml
        - match: {labels.env: prod}
          receiver: hook
    """
)


class FakeAlert:
    def __init__(self, **kw: object) -> None:
        self.severity = kw.get("severity", "warning")
        self.probable_cause = kw.get("probable_cause", "unknown")
        self.team = kw.get("team")
        self.experiment_family = kw.get("experiment_family")
        self.status = "firing"
        self.run_id = "r1"
        self.labels = kw.get("labels", {})


@pytest.mark.parametrize(
    ("alert", "expected"),
    [
        # no child matches: the root's receiver
        (dict(severity="info"), ["default"]),
        # critical + continue: pd-infra, then later siblings are tried too
        (dict(severity="critical"), ["pd-infra"]),
        (dict(severity="critical", team="ml-vision"), ["pd-infra", "slack-ml"]),
        # nested route wins inside the critical branch
        (dict(severity="critical", probable_cause="data"), ["og"]),
        (dict(severity="critical", probable_cause="data", team="ml-x"), ["og", "slack-ml"]),
        # first matching child without continue stops the walk
        (dict(team="ml-nlp", labels={"env": "prod"}), ["slack-ml"]),
        (dict(team="infra", labels={"env": "prod"}), ["hook"]),
        # regex is anchored: "xml-a" does not match "ml-.*"
        (dict(team="xml-a"), ["default"]),
        (dict(labels={"env": "staging"}), ["default"]),
    ],
)
def test_route_tree(alert: dict, expected: list[str]) -> None:
    rules = parse_rules(RULES, "routes.yaml")
    got = [r.name for r in receivers_for(rules, alert_attributes(FakeAlert(**alert)))]
    assert got == expected


def test_receivers_parsed_with_refs_and_repeat() -> None:
    rules = parse_rules(RULES, "routes.yaml")
    pd = rules.receivers["pd-infra"]
    assert pd.repeat_interval_ms == 3_600_000
    assert pd.settings["routing_key"].kind == "env"
    assert pd.settings["routing_key"].value == "PD_KEY"
    assert rules.receivers["og"].settings["api_key"].kind == "file"
    assert rules.receivers["default"].repeat_interval_ms == 4 * 3_600_000


def _replace(old: str, new: str) -> str:
    assert old in RULES
    return RULES.replace(old, new, 1)


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        (_replace("receiver: slack-ml", "receiver: nope"), 29, "unknown receiver 'nope'"),
        (_replace('match_re: {team: "ml-.*"}', 'match_re: {team: "ml-(("}'), 28, "invalid regex"),
        (_replace("match: {labels.env: prod}", "match: {colour: prod}"), 30, "unknown attribute"),
        (_replace("routing_key_env: PD_KEY", "routing_key: abc123"), 7, "literal secret"),
        (_replace("url_env: SLACK_URL", "url: https://hooks.slack.com/services/T/B/x"), 11,
         "literal secret 'url'"),
        (_replace("url: https://hooks.example.com/runwatch",
                  "url: https://hooks.example.com/x?token=abc"), 17, "carries a token"),
        (_replace("url: http://127.0.0.1:9093", "url: http://user:pw@127.0.0.1:9093"), 4,
         "credentials"),
        (_replace("kind: opsgenie", "kind: teams"), 13, "unknown kind 'teams'"),
        (_replace("repeat_interval: 1h", "repeat_interval: soon"), 8, "bad duration"),
        (_replace("    secret_env: HOOK_SECRET\n", ""), 15, "needs secret"),
        (_replace("continue: true", "continue: maybe"), 24, "true or false"),
        (_replace("  - name: og", "  - name: default"), 12, "duplicate receiver"),
        # stopped the pager at its first alert (httpx.InvalidURL), after passing --check
        (_replace("url: http://127.0.0.1:9093", "url: http://127.0.0.1:abc/x"), 4,
         "is not a valid URL"),
        (_replace("url: http://127.0.0.1:9093", "url: http://[::1"), 4, "is not a valid URL"),
        (_replace("url: http://127.0.0.1:9093", "url: http://:9093/"), 4, "has no host"),
        # Alertmanager got endsAt = now: every alert resolved as it fired
        (_replace("repeat_interval: 1h", "repeat_interval: 0s"), 8, "longer than 0"),
        # the literal URL silently won over the environment's
        (_replace("    kind: webhook\n", "    kind: webhook\n    url_env: HOOK_URL\n"), 18,
         "given twice"),
        # a typo in a closed set routed nothing, silently
        (_replace("match: {severity: critical}", "match: {severity: critcal}"), 22,
         "'critcal' is not one of severity's values"),
        ("route: {receiver: x}\n", 1, "needs both"),
        ("receivers: [\n", None, "invalid YAML"),
    ],
)
def test_bad_rules_name_the_line(text: str, line: int | None, fragment: str) -> None:
    with pytest.raises(RulesError) as err:
        parse_rules(text, "routes.yaml")
    msg = str(err.value)
    assert fragment in msg
    if line is not None:
        assert msg.startswith(f"routes.yaml:{line}:"), msg


@pytest.mark.parametrize(
    ("text", "ms"),
    [("500ms", 500), ("30s", 30_000), ("15m", 900_000), ("2h", 7_200_000), ("1d", 86_400_000)],
)
def test_durations(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "2", "h", "-1h", "1w", "1.5h"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match="bad duration"):
        parse_duration_ms(text)


@pytest.mark.parametrize("name", ["routes.yaml", "routes.example.yaml"])
def test_shipped_rules_files_are_valid(name: str) -> None:
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "infra" / "pager" / name
    rules = parse_rules(path.read_text(), str(path))
    assert rules.receivers


@pytest.mark.parametrize(
    ("alert", "expected"),
    [
        # what no route takes reaches Alertmanager, and the webhook mirrors everything
        (dict(severity="warning", probable_cause="learning", team="nlp"),
         ["audit-webhook", "alertmanager"]),
        (dict(severity="critical", probable_cause="execution", team="ml-vision"),
         ["audit-webhook", "pagerduty-infra", "slack-ml"]),
        (dict(severity="critical", probable_cause="infrastructure", team="nlp"),
         ["audit-webhook", "pagerduty-infra", "alertmanager"]),
        (dict(severity="warning", probable_cause="data", team="ml-x"),
         ["audit-webhook", "opsgenie-data"]),
    ],
)
def test_the_example_rules_route_as_their_comments_say(alert: dict, expected: list[str]) -> None:
    """Before the fix the example's always-matching ``continue: true`` mirror took every alert
    from the root, so "everything goes to Alertmanager by default" sent Alertmanager nothing."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "infra" / "pager" / "routes.example.yaml"
    rules = parse_rules(path.read_text(), str(path))
    got = [r.name for r in receivers_for(rules, alert_attributes(FakeAlert(**alert)))]
    assert got == expected


@pytest.mark.parametrize(("matcher", "line"), [
    ("match: {owner: data-engineerin}", 6),
    ("match_re: {owner: 'data-eng.*x'}", 6),
])
def test_check_refuses_an_owner_matcher_naming_no_team(
        matcher: str, line: int, tmp_path, capsys, monkeypatch) -> None:
    """``pager --check`` accepted ``match: {owner: data-engineerin}`` (a typo of a team of the
    ownership file), and the route silently caught nothing."""
    from runwatch import cli
    from runwatch.resources import ownership_file

    monkeypatch.delenv("RUNWATCH_PROCESSOR_OWNERSHIP_FILE", raising=False)
    rules = tmp_path / "routes.yaml"
    rules.write_text(textwrap.dedent(f"""\
        receivers:
          - {{name: am, kind: alertmanager, url: "http://am:9093"}}
        route:
          receiver: am
          routes:
            - {matcher}
              receiver: am
        """))
    assert cli.main(["pager", "--rules", str(rules), "--check"]) == 2
    err = capsys.readouterr().err
    assert f"{rules}:{line}:" in err and "names no team of the ownership file" in err, err
    assert "data-engineering" in err  # the teams it could have meant
    good = rules.read_text().replace("data-engineerin", "data-engineering").replace(".*x", ".*")
    rules.write_text(good)
    assert cli.main(["pager", "--rules", str(rules), "--check",
                     "--ownership", str(ownership_file())]) == 0
