"""Ownership: the default file's split, rule order and matchers, errors naming file/line/key,
the owner on the processor's alerts (fire, cause change, resolve) and routing by owner."""

from __future__ import annotations

import pytest

from runwatch.core.paging import lifecycle as alerting
from runwatch.core.paging.lifecycle import AlertBook, AlertContext, AlertPolicy
from runwatch.core.paging.ownership import load_ownership, parse_ownership
from runwatch.core.paging.payloads import alertmanager_alert
from runwatch.core.paging.routes import RulesError, alert_attributes, parse_rules, receivers_for
from runwatch.core.records import Source
from runwatch.core.signals.cause import Verdict
from runwatch.core.signals.rules import Finding
from runwatch.resources import ownership_file

SRC = Source(kind="processor", host="t", runwatch_version="0")
DEFAULT = load_ownership(ownership_file())


@pytest.mark.parametrize(("cause", "team"), [
    ("data", "data-engineering"),
    ("execution", "platform-engineering"),
    ("infrastructure", "platform-engineering"),
    ("learning", "ml-engineering"),
    ("artifact", "ml-engineering"),
    ("unknown", "ml-engineering"),
])
def test_default_file_follows_the_split(cause: str, team: str) -> None:
    owner = DEFAULT.owner_for(cause)
    assert owner.team == team
    assert owner.receiver == "alertmanager"
    assert owner.why.startswith(str(ownership_file()))


FILE = """\
teams:
  vision-data: {receiver: vision-oncall, owns: the image datasets}
  data: {receiver: data-oncall}
  ml: {receiver: ml-oncall}
rules:
  - probable_cause: data
    dataset: [s3://img/train, s3://img/val]
    owner: vision-data
  - probable_cause: data
    owner: data
  - experiment_family: llm
    owner: data
default: ml
"""


def test_first_matching_rule_wins_and_names_its_line() -> None:
    own = parse_ownership(FILE, "own.yaml")
    first = own.owner_for("data", dataset="s3://img/val")
    assert (first.team, first.receiver, first.owns) == ("vision-data", "vision-oncall",
                                                        "the image datasets")
    assert first.why == "own.yaml:6: probable_cause=data, dataset=s3://img/train|s3://img/val"
    assert own.owner_for("data", dataset="s3://txt").team == "data"
    assert own.owner_for("learning", experiment_family="llm").team == "data"
    fallback = own.owner_for("learning", experiment_family="vit")
    assert fallback.team == "ml"
    assert "default" in fallback.why


@pytest.mark.parametrize(("text", "where"), [
    ("teams: {a: {receiver: r}}\nrules:\n  - probable_cause: dta\n    owner: a\n",
     "x.yaml:3: 'probable_cause': unknown cause dta"),
    ("teams: {a: {receiver: r}}\nrules:\n  - probable_cause: data\n    owner: b\n",
     "x.yaml:4: 'owner': unknown team 'b'"),
    ("teams: {a: {receiver: r}}\nrules:\n  - cause: data\n    owner: a\n",
     "x.yaml:3: unknown key 'cause' in a rule"),
    ("teams: {a: {receiver: r}}\nrules:\n  - probable_cause: data\n",
     "x.yaml:3: a rule needs 'owner'"),
    ("teams:\n  a: {owns: x}\nrules: []\n", "x.yaml:2: team 'a' needs 'receiver'"),
    ("teams: {a: {receiver: r}}\nrules: []\ndefault: z\n", "x.yaml:3: 'default': unknown team"),
    ("teams: {a: {receiver: r}}\n", "x.yaml:1: the ownership file needs 'rules'"),
    ("teams: {a: {receiver: r}}\nrules: []\nowners: []\n", "x.yaml:3: unknown key 'owners'"),
    ("teams: [a\n", "x.yaml:2: invalid YAML"),
])
def test_bad_files_name_file_line_and_key(text: str, where: str) -> None:
    with pytest.raises(RulesError, match="^" + where.replace("|", r"\|").replace("(", r"\(")):
        parse_ownership(text, "x.yaml")


def _finding(signal: str, subject: str = "") -> Finding:
    return Finding("watch:x", "label_shift", signal, "warning", 0.6, 0.2, 0.8,  # type: ignore[arg-type]
                   1_700_000_000_000, "x", subject=subject)


def test_alerts_carry_the_owner_through_fire_cause_change_and_resolve() -> None:
    book = AlertBook()
    ctx = AlertContext("run-1", SRC, team="t", experiment_family="fam")
    policy = AlertPolicy(quiet_ms=60_000, cooldown_ms=0, ownership=DEFAULT)
    f = _finding("learning")
    (fired,) = alerting.fire(book, f, Verdict("learning", 1.0, ()), ctx, 1, policy,
                             one_shot=True)
    assert fired.owner == "ml-engineering"
    (updated,) = alerting.update_cause(book, f, Verdict("data", 1.0, ()), ctx, 2, policy)
    assert updated.owner == "data-engineering"
    (resolved,) = alerting.expire(book, ctx, 3, policy, f.at_ms + 120_000)
    assert (resolved.status, resolved.owner) == ("resolved", "data-engineering")
    am = alertmanager_alert(resolved, 3, "http://x", 60_000)
    assert am["labels"]["owner"] == "data-engineering"


def test_data_alerts_match_on_their_dataset_and_no_ownership_means_no_owner() -> None:
    ctx = AlertContext("run-1", SRC)
    own = parse_ownership(FILE, "own.yaml")
    (a,) = alerting.fire(AlertBook(), _finding("data", "s3://img/train"), Verdict("data", 1.0, ()),
                         ctx, 1, AlertPolicy(ownership=own), one_shot=True)
    assert a.owner == "vision-data"
    (b,) = alerting.fire(AlertBook(), _finding("data"), Verdict("data", 1.0, ()), ctx, 1,
                         AlertPolicy(), one_shot=True)
    assert b.owner == ""


def test_a_pager_route_matches_owner() -> None:
    rules = parse_rules("""\
receivers:
  - {name: default, kind: webhook, url: "http://d", secret_env: S}
  - {name: data-oncall, kind: webhook, url: "http://data", secret_env: S}
route:
  receiver: default
  routes:
    - match: {owner: data-engineering}
      receiver: data-oncall
""", "routes.yaml")
    ctx = AlertContext("run-1", SRC)
    policy = AlertPolicy(ownership=DEFAULT)
    (data,) = alerting.fire(AlertBook(), _finding("data"), Verdict("data", 1.0, ()), ctx, 1,
                            policy, one_shot=True)
    (other,) = alerting.fire(AlertBook(), _finding("learning"), Verdict("learning", 1.0, ()),
                             ctx, 1, policy, one_shot=True)
    assert [r.name for r in receivers_for(rules, alert_attributes(data))] == ["data-oncall"]
    assert [r.name for r in receivers_for(rules, alert_attributes(other))] == ["default"]


def test_an_unreadable_file_is_one_error_naming_it(tmp_path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(RulesError, match=f"^{missing}: cannot read the ownership file"):
        load_ownership(missing)


def test_investigate_refuses_a_bad_ownership_file_naming_file_line_and_key(tmp_path) -> None:
    import subprocess
    import sys

    bad = tmp_path / "own.yaml"
    bad.write_text("teams: {a: {receiver: r}}\nrules:\n  - probable_cause: dta\n    owner: a\n")
    got = subprocess.run([sys.executable, "-m", "runwatch", "investigate", "r1", "--ownership",
                          str(bad)], capture_output=True, text=True, timeout=60, check=False)
    assert got.returncode == 2
    assert got.stderr.strip() == (f"error: {bad}:3: 'probable_cause': unknown cause dta "
                                  "(one of artifact, data, execution, infrastructure, learning, "
                                  "unknown)")
