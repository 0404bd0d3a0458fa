"""Ownership: which team owns an alert, from its probable cause (and family, team, dataset).

An ownership file (YAML, default ``infra/pager/ownership.yaml``) declares the
owning teams, each with the receiver that reaches it, and an ordered list of
rules. A rule matches on ``probable_cause``, ``experiment_family``, ``team``
and ``dataset`` (each a string or a list of strings; a key left out matches
anything); the first rule that matches names the owner; ``default`` names the
owner of what no rule takes::

    teams:
      data-engineering: {receiver: data-oncall, owns: data contracts and quality rules}
    rules:
      - probable_cause: data
        owner: data-engineering
    default: ml-engineering

The lookup is pure: the processor, the SLO evaluator, gate checks and
``runwatch investigate`` all call :meth:`Ownership.owner_for`. Parsing reads
the file through :mod:`runwatch.core.yamlconf`, so every error names the file,
line and key; it raises the routing rules' error class
(:class:`~runwatch.core.paging.routes.RulesError`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from runwatch.core.paging.routes import RulesError
from runwatch.core.yamlconf import Reader, compose
from runwatch.resources import read_config

#: The alert attributes a rule may match, and the Alert field each reads.
MATCH_KEYS: tuple[str, ...] = ("probable_cause", "experiment_family", "team", "dataset")
CAUSES = frozenset({"data", "execution", "learning", "artifact", "infrastructure", "unknown"})
_Reader = Reader[RulesError]

__all__ = [
    "MATCH_KEYS", "Owner", "OwnerRule", "Ownership", "RulesError", "load_ownership",
    "parse_ownership",
]


@dataclass(frozen=True, slots=True)
class Owner:
    """The answer of a lookup: the team, the receiver that reaches it, and why.

    Attributes:
        team: Owning team ("" when the file names none).
        receiver: The pager receiver (or contact) that reaches the team.
        owns: What the team owns, in words (from the file).
        why: Which rule decided, e.g. ``ownership.yaml:12: probable_cause=data``.
    """

    team: str
    receiver: str
    owns: str
    why: str


@dataclass(frozen=True, slots=True)
class OwnerRule:
    """One rule: matchers (attribute → accepted values) and the owning team."""

    match: tuple[tuple[str, frozenset[str]], ...]
    owner: str
    line: int

    def matches(self, attrs: Mapping[str, str]) -> bool:
        """Say whether every matcher accepts the attributes."""
        return all(attrs.get(key, "") in values for key, values in self.match)

    def describe(self) -> str:
        """Return the matchers as ``key=value`` text."""
        if not self.match:
            return "matches everything"
        return ", ".join(f"{k}={'|'.join(sorted(v))}" for k, v in self.match)


@dataclass(frozen=True, slots=True)
class Ownership:
    """A validated ownership file."""

    teams: Mapping[str, tuple[str, str]]  # team -> (receiver, owns)
    rules: tuple[OwnerRule, ...]
    default: str
    source: str = "<ownership>"

    def owner_for(self, probable_cause: str, *, team: str | None = None,
                  experiment_family: str | None = None, dataset: str | None = None) -> Owner:
        """Return the owner of an alert with these attributes.

        Args:
            probable_cause: The alert's probable cause.
            team: The run's team.
            experiment_family: The run's experiment family.
            dataset: The dataset the alert concerns, when one.

        Returns:
            The first matching rule's team, else the default.
        """
        attrs = {"probable_cause": probable_cause or "unknown", "team": team or "",
                 "experiment_family": experiment_family or "", "dataset": dataset or ""}
        for rule in self.rules:
            if rule.matches(attrs):
                return self._owner(rule.owner, f"{self.source}:{rule.line}: {rule.describe()}")
        return self._owner(self.default, f"{self.source}: default (no rule matched "
                                         f"probable_cause={attrs['probable_cause']})")

    def _owner(self, team: str, why: str) -> Owner:
        receiver, owns = self.teams.get(team, ("", ""))
        return Owner(team=team, receiver=receiver, owns=owns, why=why)


def load_ownership(path: Path) -> Ownership:
    """Read and validate an ownership file (runwatch's packaged one or the user's copy).

    Raises:
        RulesError: With the file, line and key of the problem (also when unreadable).
    """
    try:
        text = read_config(path)
    except OSError as exc:
        msg = f"{path}: cannot read the ownership file: {exc}"
        raise RulesError(msg) from exc
    return parse_ownership(text, str(path))


def parse_ownership(text: str, source: str = "<ownership>") -> Ownership:
    """Parse and validate an ownership file.

    Args:
        text: The YAML text.
        source: File name used in error messages.

    Returns:
        The validated ownership.

    Raises:
        RulesError: On any problem, naming ``source:line`` and the key.
    """
    root = compose(text, source, RulesError)
    if not isinstance(root, yaml.MappingNode):
        msg = f"{source}:1: the ownership file must be a mapping with 'teams' and 'rules'"
        raise RulesError(msg)
    r = Reader(source, RulesError)
    top = r.mapping(root, allowed={"teams", "rules", "default"}, where="top level")
    for need in ("teams", "rules"):
        if need not in top:
            raise r.err(root, "", f"the ownership file needs {need!r}")
    teams = _parse_teams(r, top["teams"][1])
    rules = _parse_rules(r, top["rules"][1], teams)
    default = ""
    if "default" in top:
        dnode = top["default"][1]
        default = r.string(dnode, "'default'")
        if default not in teams:
            raise r.err(dnode, "'default'", f"unknown team {default!r} "
                                            f"(declared: {', '.join(sorted(teams))})")
    return Ownership(teams=teams, rules=rules, default=default, source=source)


def _parse_teams(r: _Reader, node: yaml.Node) -> dict[str, tuple[str, str]]:
    items = r.mapping(node, where="'teams'")
    if not items:
        raise r.err(node, "", "'teams' needs at least one team")
    out: dict[str, tuple[str, str]] = {}
    for name, (_knode, vnode) in items.items():
        spec = r.mapping(vnode, allowed={"receiver", "owns"}, where=f"team {name!r}")
        if "receiver" not in spec:
            raise r.err(vnode, "", f"team {name!r} needs 'receiver'")
        receiver = r.string(spec["receiver"][1], f"team {name!r}: 'receiver'")
        owns = r.string(spec["owns"][1], f"team {name!r}: 'owns'") if "owns" in spec else ""
        out[name] = (receiver, owns)
    return out


def _values(r: _Reader, node: yaml.Node, key: str) -> frozenset[str]:
    if isinstance(node, yaml.SequenceNode):
        return frozenset(r.strings(node, repr(key)))
    return frozenset({r.string(node, repr(key))})


def _parse_rules(r: _Reader, node: yaml.Node,
                 teams: Mapping[str, object]) -> tuple[OwnerRule, ...]:
    out: list[OwnerRule] = []
    for item in r.sequence(node, "'rules'"):
        spec = r.mapping(item, allowed={*MATCH_KEYS, "owner"}, where="a rule")
        if "owner" not in spec:
            raise r.err(item, "", "a rule needs 'owner'")
        onode = spec["owner"][1]
        owner = r.string(onode, "'owner'")
        if owner not in teams:
            raise r.err(onode, "'owner'", f"unknown team {owner!r} "
                                          f"(declared: {', '.join(sorted(teams))})")
        match: list[tuple[str, frozenset[str]]] = []
        for key in MATCH_KEYS:
            if key not in spec:
                continue
            vnode = spec[key][1]
            values = _values(r, vnode, key)
            if key == "probable_cause" and not values <= CAUSES:
                bad = sorted(values - CAUSES)
                raise r.err(vnode, "'probable_cause'", f"unknown cause {', '.join(bad)} "
                                                       f"(one of {', '.join(sorted(CAUSES))})")
            match.append((key, values))
        out.append(OwnerRule(match=tuple(match), owner=owner, line=r.line(item)))
    return tuple(out)
