"""Gate policies (``gates.yaml``): the model, parsing and validation.

Size: one file format: every key's parsing and validation, each error naming file, line and key.

A policy file holds ``policies``, a list; each policy names the runs it governs
(``match``: an experiment family, or a ``model`` label) and the evidence a
candidate needs. Every key is optional except ``name``, ``match`` and
``primary``; a check whose key is absent is not made. Two policies may not
match the same family (or the same ``model`` label). Unknown keys, wrong
types and impossible values are errors that name the file, the line and the
key (``gates.yaml:14: policies[0].slices.max_deterioration: must be a finite
number >= 0, got 'high'``), read through :mod:`runwatch.core.yamlconf`. The
reference is docs/gates.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import yaml

from runwatch.core.signals import metrics
from runwatch.core.yamlconf import Reader, compose

OnMissing = Literal["review", "fail"]
REVIEW_WHEN = ("always", "dirty_code", "new_training_data")


class PolicyError(ValueError):
    """A policy file is invalid; the message names the file, line and key."""


@dataclass(frozen=True, slots=True)
class Threshold:
    """Bounds on one metric of the whole evaluation set (None: no bound)."""

    min: float | None = None
    max: float | None = None


@dataclass(frozen=True, slots=True)
class Policy:
    """One release-gate policy (see docs/gates.md for each field's meaning).

    Attributes:
        name: Policy (and gate) name.
        family: Experiment family it governs ('' when it matches a model label).
        model: ``model`` label it governs ('' when it matches a family).
        primary: The metric compared with the incumbent, across slices and seeds.
        higher_is_better: Direction of ``primary`` (default: higher unless its name
            says lower: a loss, an error rate, a perplexity, :mod:`runwatch.core.signals.metrics`).
        metrics: Required metrics with their bounds.
        incumbent_run: A fixed incumbent run ('' : the candidate's recorded incumbent).
        incumbent_required: Whether a comparison with an incumbent is required.
        same_dataset_version: The incumbent must have been evaluated on the same
            evaluation dataset version (the fixed protocol).
        margin: Least ``candidate - incumbent`` on ``primary`` (direction-aware;
            negative: non-inferiority).
        required_slices: Slices (protected populations) that must be evaluated.
        max_deterioration: Most a slice's ``primary`` may fall behind the incumbent's.
        slice_bounds: Per-slice overrides of ``max_deterioration``.
        min_samples: Least samples per evaluated slice (0: not checked).
        max_slice_spread: Most spread (max - min) of ``primary`` across slices.
        seeds_min: Least repeats (distinct seeds, the candidate included) (0: off).
        max_seed_spread: Most spread of ``primary`` across the repeats' evaluations.
        max_ci_width: Widest confidence interval of ``primary`` where recorded.
        max_eval_age_ms: Oldest evaluation data allowed (0: not checked).
        disjoint_from_training: The evaluation dataset must not be one the run trained on.
        rerun_tolerance: Most ``|rerun - candidate|`` on ``primary`` (None: off).
        review_when: Conditions that need a human decision.
        on_missing: What missing evidence gives: ``review`` or ``fail``.
        source: ``file#name`` (recorded in the decision).

    """

    name: str
    primary: str
    family: str = ""
    model: str = ""
    higher_is_better: bool = True
    metrics: dict[str, Threshold] = field(default_factory=dict)
    incumbent_run: str = ""
    incumbent_required: bool = False
    same_dataset_version: bool = True
    margin: float | None = None
    required_slices: tuple[str, ...] = ()
    max_deterioration: float | None = None
    slice_bounds: dict[str, float] = field(default_factory=dict)
    min_samples: int = 0
    max_slice_spread: float | None = None
    seeds_min: int = 0
    max_seed_spread: float | None = None
    max_ci_width: float | None = None
    max_eval_age_ms: int = 0
    disjoint_from_training: bool = False
    rerun_tolerance: float | None = None
    review_when: tuple[str, ...] = ()
    on_missing: OnMissing = "review"
    source: str = ""


@dataclass(frozen=True, slots=True)
class PolicySet:
    """The policies of one file."""

    policies: tuple[Policy, ...]
    source: str

    def for_run(self, family: str | None, labels: dict[str, str]) -> Policy | None:
        """Return the policy governing a run: its ``model`` label first, then its family."""
        model = labels.get("model", "")
        for p in self.policies:
            if p.model and p.model == model:
                return p
        for p in self.policies:
            if p.family and p.family == (family or ""):
                return p
        return None


# ----------------------------------------------------------------- parsing

_Reader = Reader[PolicyError]


def _names(r: _Reader, node: yaml.Node, key: str) -> tuple[str, ...]:
    out = r.strings(node, key, non_empty=False)
    if len(set(out)) != len(out):
        raise r.err(node, key, "names a slice twice")
    return out


_TOP = {"version", "policies"}
_POLICY = {"name", "match", "primary", "higher_is_better", "metrics", "incumbent", "slices",
           "stability", "eval_data", "reproducibility", "review"}


def parse_policies(text: str, source: str = "gates.yaml") -> PolicySet:
    """Parse and validate a policy file.

    Args:
        text: The YAML text.
        source: File name used in error messages and recorded in decisions.

    Returns:
        The validated policies.

    Raises:
        PolicyError: On any problem, naming ``source:line`` and the key.

    """
    root = compose(text, source, PolicyError)
    r = Reader(source, PolicyError)
    if root is None:
        msg = f"{source}:1: policies: the file is empty (expected a 'policies' list)"
        raise PolicyError(msg)
    top = r.mapping(root, "(top level)", _TOP)
    if "version" in top and top["version"][1].value != "1":
        got = top["version"][1].value
        raise r.err(top["version"][1], "version", f"unsupported version {got!r} (expected 1)")
    if "policies" not in top:
        raise r.err(root, "policies", "missing (a list of policies)")
    items = r.sequence(top["policies"][1], "policies", non_empty=True)
    policies = [_policy(r, item, f"policies[{i}]") for i, item in enumerate(items)]
    seen: dict[str, int] = {}
    governs: dict[tuple[str, str], int] = {}  # (family|model, value) -> the policy's index
    for i, p in enumerate(policies):
        if p.name in seen:
            raise r.err(items[i], f"policies[{i}].name", f"duplicate policy name {p.name!r}")
        seen[p.name] = i
        what = ("model", p.model) if p.model else ("family", p.family)
        if what in governs:  # for_run would pick the first and never use this one
            j = governs[what]
            match = r.mapping(items[i], f"policies[{i}]")["match"][1]
            raise r.err(match, f"policies[{i}].match",
                        f"{what[0]} {what[1]!r} is already matched by policy "
                        f"{policies[j].name!r} (policies[{j}], line {r.line(items[j])}): "
                        "a run is governed by one policy")
        governs[what] = i
    return PolicySet(policies=tuple(policies), source=source)


def _policy(r: _Reader, node: yaml.Node, key: str) -> Policy:  # noqa: C901, PLR0912 - one key each
    items = r.mapping(node, key, _POLICY)
    for need in ("name", "match", "primary"):
        r.need(items, need, node, key)
    name = r.string(items["name"][1], f"{key}.name")
    primary = r.string(items["primary"][1], f"{key}.primary")
    kw: dict[str, object] = {"name": name, "primary": primary,
                             "higher_is_better": metrics.higher_is_better(primary) is not False,
                             "source": f"{r.source}#{name}"}
    match = r.mapping(items["match"][1], f"{key}.match", {"family", "model"})
    if len(match) != 1:
        raise r.err(items["match"][1], f"{key}.match", "give exactly one of family or model")
    for k, (_, v) in match.items():
        kw[k] = r.string(v, f"{key}.match.{k}")
    if "higher_is_better" in items:
        kw["higher_is_better"] = r.boolean(items["higher_is_better"][1], f"{key}.higher_is_better")
    if "metrics" in items:
        kw["metrics"] = _metrics(r, items["metrics"][1], f"{key}.metrics")
    if "incumbent" in items:
        k2 = f"{key}.incumbent"
        inc = r.mapping(items["incumbent"][1], k2, {"run", "required", "same_dataset_version",
                                                    "margin"})
        if "run" in inc:
            kw["incumbent_run"] = r.string(inc["run"][1], f"{k2}.run")
        if "required" in inc:
            kw["incumbent_required"] = r.boolean(inc["required"][1], f"{k2}.required")
        if "same_dataset_version" in inc:
            kw["same_dataset_version"] = r.boolean(inc["same_dataset_version"][1],
                                                   f"{k2}.same_dataset_version")
        if "margin" in inc:
            kw["margin"] = r.number(inc["margin"][1], f"{k2}.margin")
    if "slices" in items:
        k2 = f"{key}.slices"
        sl = r.mapping(items["slices"][1], k2, {"required", "max_deterioration", "bounds",
                                                "min_samples", "max_spread"})
        if "required" in sl:
            kw["required_slices"] = _names(r, sl["required"][1], f"{k2}.required")
        if "max_deterioration" in sl:
            kw["max_deterioration"] = r.number(sl["max_deterioration"][1],
                                               f"{k2}.max_deterioration", minimum=0)
        if "bounds" in sl:
            required: tuple[str, ...] = kw.get("required_slices", ())  # type: ignore[assignment]
            b = r.mapping(sl["bounds"][1], f"{k2}.bounds", set(required))
            kw["slice_bounds"] = {n: r.number(v, f"{k2}.bounds.{n}", minimum=0)
                                  for n, (_, v) in b.items()}
        if "min_samples" in sl:
            kw["min_samples"] = r.whole(sl["min_samples"][1], f"{k2}.min_samples")
        if "max_spread" in sl:
            kw["max_slice_spread"] = r.number(sl["max_spread"][1], f"{k2}.max_spread", minimum=0)
    if "stability" in items:
        k2 = f"{key}.stability"
        st = r.mapping(items["stability"][1], k2, {"seeds", "max_ci_width"})
        if "seeds" in st:
            sd = r.mapping(st["seeds"][1], f"{k2}.seeds", {"min", "max_spread"})
            if "min" in sd:
                kw["seeds_min"] = r.whole(sd["min"][1], f"{k2}.seeds.min")
            if "max_spread" in sd:
                kw["max_seed_spread"] = r.number(sd["max_spread"][1], f"{k2}.seeds.max_spread",
                                                 minimum=0)
                kw["seeds_min"] = max(int(kw.get("seeds_min", 0)), 2)  # type: ignore[call-overload]
        if "max_ci_width" in st:
            kw["max_ci_width"] = r.number(st["max_ci_width"][1], f"{k2}.max_ci_width", minimum=0)
    if "eval_data" in items:
        k2 = f"{key}.eval_data"
        ed = r.mapping(items["eval_data"][1], k2, {"max_age", "disjoint_from_training"})
        if "max_age" in ed:
            kw["max_eval_age_ms"] = r.duration(ed["max_age"][1], f"{k2}.max_age")
        if "disjoint_from_training" in ed:
            kw["disjoint_from_training"] = r.boolean(ed["disjoint_from_training"][1],
                                                     f"{k2}.disjoint_from_training")
    if "reproducibility" in items:
        k2 = f"{key}.reproducibility"
        rp = r.mapping(items["reproducibility"][1], k2, {"tolerance"})
        tolerance = r.need(rp, "tolerance", items["reproducibility"][1], k2)
        kw["rerun_tolerance"] = r.number(tolerance, f"{k2}.tolerance", minimum=0)
    if "review" in items:
        k2 = f"{key}.review"
        rv = r.mapping(items["review"][1], k2, {"when", "on_missing"})
        if "when" in rv:
            when = _names(r, rv["when"][1], f"{k2}.when")
            for i, w in enumerate(when):
                if w not in REVIEW_WHEN:
                    raise r.err(rv["when"][1].value[i], f"{k2}.when[{i}]",
                                f"unknown condition {w!r} (one of {', '.join(REVIEW_WHEN)})")
            kw["review_when"] = when
        if "on_missing" in rv:
            om = r.string(rv["on_missing"][1], f"{k2}.on_missing")
            if om not in ("review", "fail"):
                raise r.err(rv["on_missing"][1], f"{k2}.on_missing",
                            f"must be review or fail, got {om!r}")
            kw["on_missing"] = om
    return Policy(**kw)  # type: ignore[arg-type]


def _metrics(r: _Reader, node: yaml.Node, key: str) -> dict[str, Threshold]:
    if not isinstance(node, yaml.MappingNode):
        raise r.err(node, key, "expected a mapping of metric -> {min, max}")
    out: dict[str, Threshold] = {}
    for name, (_k, v) in r.mapping(node, key).items():
        b = r.mapping(v, f"{key}.{name}", {"min", "max"})
        if not b:
            raise r.err(v, f"{key}.{name}", "give min, max or both")
        lo = r.number(b["min"][1], f"{key}.{name}.min") if "min" in b else None
        hi = r.number(b["max"][1], f"{key}.{name}.max") if "max" in b else None
        if lo is not None and hi is not None and lo > hi:
            raise r.err(v, f"{key}.{name}", f"min {lo:g} is above max {hi:g}")
        out[name] = Threshold(min=lo, max=hi)
    return out
