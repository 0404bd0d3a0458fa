"""Evidence → decision: ``decide(policy, evidence)`` with every measurement and reason.

Size: one check per policy key (thresholds, protocol, slices, stability, data, reruns, review).

Each check adds measurements and, when it does not hold, a reason of one of
three kinds: a *failure* (the evidence says no), *missing* evidence (the
policy's ``on_missing`` says whether that is ``review`` or ``fail``; never a
silent pass) or a *review* condition (a human must decide). The decision is
``fail`` when anything failed, else ``review`` when anything is missing or
needs review, else ``pass``. Comparisons are direction-aware: for a metric
where lower is better (a ``*loss``), a rise is a deterioration. A bound met
as written is met: :func:`exceeds` compares a difference of measurements with
its bound beyond float rounding (``0.795 - 0.8`` is ``-0.0050000000000000044``,
which meets a margin of ``-0.005``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from runwatch.core.gates import sketch
from runwatch.core.gates.evidence import WHOLE, Evaluation, Evidence, RunEvidence, StoredArtifact
from runwatch.core.gates.policy import Policy
from runwatch.core.signals.rules import artifact_empty, is_model

Verdict = Literal["pass", "fail", "review"]


@dataclass(frozen=True, slots=True)
class SliceOutcome:
    """One slice's measurements and whether it met the policy."""

    name: str
    measured: dict[str, float]
    passed: bool


@dataclass(slots=True)
class Decision:
    """A gate decision with its evidence.

    Attributes:
        decision: pass, fail or review.
        failures: Reasons the evidence says no.
        missing: Evidence the policy needs and the store does not hold.
        reviews: Conditions that need a human decision.
        measured: Measurement name -> value.
        thresholds: Bound name -> value.
        slices: Per-slice outcomes.

    """

    decision: Verdict = "pass"
    failures: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    reviews: list[str] = field(default_factory=list)
    measured: dict[str, float] = field(default_factory=dict)
    thresholds: dict[str, float] = field(default_factory=dict)
    slices: list[SliceOutcome] = field(default_factory=list)

    @property
    def reasons(self) -> list[str]:
        """Return every reason, failures first, each prefixed with its kind."""
        return ([f"fail: {r}" for r in self.failures] + [f"missing: {r}" for r in self.missing]
                + [f"review: {r}" for r in self.reviews])


#: Relative tolerance of :func:`exceeds`: far above float rounding (about 1e-16 of the
#: values), far below any bound a policy or an objective writes.
REL_TOLERANCE = 1e-12


def exceeds(value: float, bound: float, *operands: float) -> bool:
    """Return whether ``value`` is above ``bound`` by more than float rounding.

    A difference of two measurements carries rounding error relative to the
    measurements themselves, not to the difference: pass them as ``operands``.
    ``value`` counts as above ``bound`` only when it is more than
    :data:`REL_TOLERANCE` of the largest magnitude among value, bound and operands
    above it, so a bound equal to the measured difference as written holds.

    Args:
        value: The measured quantity (a difference, a spread, a distance).
        bound: The most it may be.
        *operands: The measurements ``value`` was computed from.

    """
    scale = max(abs(value), abs(bound), *(abs(x) for x in operands))
    return value - bound > REL_TOLERANCE * scale


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def _dataset_match(a: str, b: str) -> bool:
    """Whether two ``uri@version`` refs name the same data (an unversioned ref: any version)."""
    if a == b:
        return True
    ua, _, va = a.partition("@")
    ub, _, vb = b.partition("@")
    return ua == ub and (not va or not vb)


def decide(policy: Policy, ev: Evidence) -> Decision:
    """Decide a candidate's gate under a policy.

    Args:
        policy: The policy governing the candidate.
        ev: The stored evidence.

    Returns:
        The decision with every measurement and reason.

    """
    d = Decision()
    c = ev.candidate
    if not c.has_manifest:
        d.missing.append(f"no run manifest stored for {c.run_id} (lineage unknown)")
    whole = c.evaluations.get(WHOLE)
    _non_finite(d, c)
    _model_integrity(d, c)
    if whole is None:
        d.missing.append(f"no release evaluation of the whole set for {c.run_id} "
                         "(run.evaluation without slice)")
    else:
        _thresholds(d, policy, whole)
    inc = _incumbent(d, policy, ev, whole)
    _slices(d, policy, c, inc)
    _stability(d, policy, c, ev.repeats)
    if whole is not None:
        _eval_data(d, policy, c, whole, ev.eval_data_as_of_ms)
        if policy.disjoint_from_training and whole.dataset:
            _row_keys(d, c, whole.dataset, ev.key_sketches)
    _review(d, policy, c, inc)
    # a non-finite value is a failure reason above, not a measurement: the decision's JSON
    # (gate check --json) and the GateDecision's map stay finite numbers
    d.measured = {k: v for k, v in d.measured.items() if math.isfinite(v)}
    if d.failures or (d.missing and policy.on_missing == "fail"):
        d.decision = "fail"
    elif d.missing or d.reviews:
        d.decision = "review"
    return d


def _non_finite(d: Decision, c: RunEvidence) -> None:
    for name, e in sorted(c.evaluations.items()):
        for metric, value in sorted(e.metrics.items()):
            if not math.isfinite(value):
                where = f"slice {name}" if name else "the whole set"
                d.failures.append(f"metric {metric} on {where} is {value} (non-finite): "
                                  "the evaluation is not usable")


def _model_integrity(d: Decision, c: RunEvidence) -> None:
    """Fail a candidate whose model artifact, as last recorded, is unusable.

    A model that did not load back (``serialization_ok`` false) or that holds no bytes (the
    checksum of empty content: :func:`~runwatch.core.signals.rules.artifact_empty`) is no
    release, whatever its evaluations say: the processor paged it, and the gate passed it.
    Each model's latest row counts (a re-upload to the same location that loaded back
    clears it); a run without a model artifact yet is not judged by this.
    """
    latest: dict[str, StoredArtifact] = {}
    for a in sorted(c.artifacts, key=lambda a: a.at_ms):
        if is_model(a.kind):
            latest[a.uri] = a
    for uri, a in sorted(latest.items()):
        if not a.serialization_ok:
            d.failures.append(f"model artifact {uri} did not load back (serialization failed)")
        elif artifact_empty(uri, a.kind, a.size_bytes, a.sha256, a.at_ms) is not None:
            d.failures.append(f"model artifact {uri} is empty (0 bytes)")


def _signed(p: Policy, x: float) -> float:
    return x if p.higher_is_better else -x


def _thresholds(d: Decision, p: Policy, whole: Evaluation) -> None:
    needed = dict(p.metrics)
    if p.primary not in needed and p.primary not in whole.metrics:
        d.missing.append(f"primary metric {p.primary} not in the whole-set evaluation")
    for metric, t in sorted(needed.items()):
        value = whole.metrics.get(metric)
        if t.min is not None:
            d.thresholds[f"{metric}.min"] = t.min
        if t.max is not None:
            d.thresholds[f"{metric}.max"] = t.max
        if value is None:
            d.missing.append(f"required metric {metric} not evaluated")
            continue
        d.measured[metric] = value
        if not math.isfinite(value):
            continue  # failed as non-finite already
        if t.min is not None and value < t.min:
            d.failures.append(f"{metric} {_fmt(value)} below its minimum {_fmt(t.min)}")
        if t.max is not None and value > t.max:
            d.failures.append(f"{metric} {_fmt(value)} above its maximum {_fmt(t.max)}")
    if p.primary in whole.metrics:
        d.measured[p.primary] = whole.metrics[p.primary]
    if whole.sample_count:
        d.measured["samples"] = float(whole.sample_count)


def _needs_incumbent(p: Policy) -> bool:
    return p.incumbent_required or bool(p.incumbent_run) or p.margin is not None \
        or p.max_deterioration is not None or bool(p.slice_bounds)


def _incumbent(d: Decision, p: Policy, ev: Evidence,
               whole: Evaluation | None) -> RunEvidence | None:
    recorded = whole.incumbent_run_id if whole is not None else ""
    named = p.incumbent_run or recorded
    if p.incumbent_run and recorded and recorded != p.incumbent_run:
        d.failures.append(f"protocol violated: the candidate was compared against {recorded}, "
                          f"the policy's incumbent is {p.incumbent_run}")
    if not named:
        if _needs_incumbent(p):
            d.missing.append("no incumbent named (policy incumbent.run, or "
                             "run.evaluation(incumbent=...))")
        return None
    inc = ev.incumbent
    iw = inc.evaluations.get(WHOLE) if inc is not None else None
    if inc is None or iw is None:
        d.missing.append(f"incumbent {named} has no recorded whole-set evaluation")
        return inc
    if whole is None:
        return inc
    if p.same_dataset_version and whole.dataset != iw.dataset:
        d.failures.append(f"protocol violated: the candidate was evaluated on {whole.dataset}, "
                          f"the incumbent {named} on {iw.dataset}")
    cand, base = whole.metrics.get(p.primary), iw.metrics.get(p.primary)
    if base is None:  # evidence the store lacks (a failure only where the candidate's is bad)
        if _needs_incumbent(p):
            d.missing.append(f"incumbent {named} recorded no {p.primary} on the whole set")
        return inc
    d.measured[f"incumbent.{p.primary}"] = base
    if cand is None or not (math.isfinite(cand) and math.isfinite(base)):
        return inc
    delta = _signed(p, cand) - _signed(p, base)
    d.measured[f"delta.{p.primary}"] = delta
    if p.margin is not None:
        d.thresholds[f"margin.{p.primary}"] = p.margin
        if exceeds(p.margin, delta, cand, base):
            d.failures.append(f"{p.primary} {_fmt(cand)} vs incumbent {_fmt(base)}: change "
                              f"{delta:+.4g} below the margin {p.margin:+.4g}")
    return inc


def _slices(d: Decision, p: Policy, c: RunEvidence, inc: RunEvidence | None) -> None:
    names = sorted(n for n in c.evaluations if n != WHOLE)
    for need in p.required_slices:
        if need not in c.evaluations:
            d.missing.append(f"required slice {need} not evaluated")
    if p.min_samples:
        d.thresholds["slice.min_samples"] = float(p.min_samples)
    values: dict[str, float] = {}
    for name in names:
        e = c.evaluations[name]
        m: dict[str, float] = {}
        ok = True
        value = e.metrics.get(p.primary)
        if value is None:
            d.missing.append(f"slice {name}: no {p.primary}")
            ok = False
        elif not math.isfinite(value):
            ok = False
        else:
            m[p.primary] = value
            values[name] = value
        if e.sample_count:
            m["samples"] = float(e.sample_count)
        if p.min_samples:
            if not e.sample_count:
                d.missing.append(f"slice {name}: sample count not recorded")
                ok = False
            elif e.sample_count < p.min_samples:
                d.failures.append(f"slice {name}: {e.sample_count} samples, fewer than "
                                  f"{p.min_samples}")
                ok = False
        bound = p.slice_bounds.get(name, p.max_deterioration)
        if bound is not None and value is not None and math.isfinite(value):
            d.thresholds[f"slice.{name}.max_deterioration"] = bound
            base_e = inc.evaluations.get(name) if inc is not None else None
            base = base_e.metrics.get(p.primary) if base_e is not None else None
            if inc is not None and base is None:
                d.missing.append(f"slice {name}: the incumbent {inc.run_id} has no "
                                 f"{p.primary} on it")
                ok = False
            elif base is not None and math.isfinite(base):
                det = _signed(p, base) - _signed(p, value)
                m[f"incumbent.{p.primary}"] = base
                m["deterioration"] = det
                d.measured[f"slice.{name}.deterioration"] = det
                if exceeds(det, bound, base, value):
                    d.failures.append(f"slice {name}: {p.primary} {_fmt(value)} vs incumbent "
                                      f"{_fmt(base)}, deteriorated by {_fmt(det)} (bound "
                                      f"{_fmt(bound)})")
                    ok = False
        if value is not None:
            d.measured[f"slice.{name}.{p.primary}"] = value
        d.slices.append(SliceOutcome(name=name, measured=m, passed=ok))
    if p.max_slice_spread is not None:
        d.thresholds["slice_spread"] = p.max_slice_spread
        if len(values) >= 2:
            lo, hi = min(values, key=values.__getitem__), max(values, key=values.__getitem__)
            spread = values[hi] - values[lo]
            d.measured["slice_spread"] = spread
            if exceeds(spread, p.max_slice_spread, values[hi], values[lo]):
                d.failures.append(f"spread of {p.primary} across slices {_fmt(spread)} "
                                  f"({lo} {_fmt(values[lo])} .. {hi} {_fmt(values[hi])}) above "
                                  f"the bound {_fmt(p.max_slice_spread)}")
        else:
            d.missing.append(f"spread across slices needs at least 2 evaluated slices, "
                             f"{len(values)} found")


def _primary_of(p: Policy, r: RunEvidence) -> float | None:
    e = r.evaluations.get(WHOLE)
    v = e.metrics.get(p.primary) if e is not None else None
    return v if v is not None and math.isfinite(v) else None


def _stability(d: Decision, p: Policy, c: RunEvidence, repeats: tuple[RunEvidence, ...]) -> None:
    if p.max_ci_width is not None:
        d.thresholds["ci_width"] = p.max_ci_width
        for name, e in sorted(c.evaluations.items()):
            lo, hi = e.ci_low.get(p.primary), e.ci_high.get(p.primary)
            if lo is None or hi is None:
                continue  # "where recorded"
            width = hi - lo
            where = f"slice {name}" if name else "the whole set"
            d.measured[f"ci_width.{name or 'all'}"] = width
            if not math.isfinite(width) or width < 0 or exceeds(width, p.max_ci_width, lo, hi):
                d.failures.append(f"confidence interval of {p.primary} on {where} "
                                  f"[{_fmt(lo)}, {_fmt(hi)}] wider than {_fmt(p.max_ci_width)}")
    mine = _primary_of(p, c)
    if p.seeds_min:
        by_seed: dict[str, float] = {}
        if mine is not None:
            by_seed[c.lineage or c.run_id] = mine
        for r in repeats:
            v = _primary_of(p, r)
            if v is not None and r.lineage != c.lineage:
                by_seed.setdefault(r.lineage or r.run_id, v)
        d.measured["seeds"] = float(len(by_seed))
        d.thresholds["seeds.min"] = float(p.seeds_min)
        if len(by_seed) < p.seeds_min:
            d.missing.append(f"{len(by_seed)} of the {p.seeds_min} repeats (seeds) of this "
                             "lineage evaluated")
        elif p.max_seed_spread is not None:
            spread = max(by_seed.values()) - min(by_seed.values())
            d.measured[f"seed_spread.{p.primary}"] = spread
            d.thresholds[f"seed_spread.{p.primary}"] = p.max_seed_spread
            if exceeds(spread, p.max_seed_spread, *by_seed.values()):
                d.failures.append(
                    f"spread of {p.primary} across {len(by_seed)} seeds {_fmt(spread)} "
                    f"({_fmt(min(by_seed.values()))} .. {_fmt(max(by_seed.values()))}) above "
                    f"the bound {_fmt(p.max_seed_spread)}")
    if p.rerun_tolerance is not None:
        d.thresholds[f"rerun_tolerance.{p.primary}"] = p.rerun_tolerance
        reruns = [(r.run_id, _primary_of(p, r)) for r in repeats
                  if r.lineage and r.lineage == c.lineage and r.run_id != c.run_id]
        reruns = [(rid, v) for rid, v in reruns if v is not None]
        if not reruns or mine is None:
            d.missing.append("no evaluated rerun under the recorded lineage (same code, data, "
                             "configuration and seed)")
            return
        rid, v = max(reruns, key=lambda x: abs(x[1] - mine))  # type: ignore[operator]
        diff = abs(v - mine)  # type: ignore[operator]
        d.measured[f"rerun_diff.{p.primary}"] = diff
        if exceeds(diff, p.rerun_tolerance, v, mine):  # type: ignore[arg-type]
            d.failures.append(f"rerun {rid} does not reproduce the candidate: {p.primary} "
                              f"{_fmt(v)} vs {_fmt(mine)} (difference {_fmt(diff)}, tolerance "  # type: ignore[arg-type]
                              f"{_fmt(p.rerun_tolerance)})")


def _eval_data(d: Decision, p: Policy, c: RunEvidence, whole: Evaluation,
               as_of_ms: int | None) -> None:
    if p.disjoint_from_training:
        if not whole.dataset:
            d.missing.append("the whole-set evaluation names no dataset")
        else:
            hit = [t for t in c.training if _dataset_match(t, whole.dataset)]
            if hit:
                d.failures.append(f"evaluation dataset {whole.dataset} overlaps the training "
                                  f"data ({', '.join(hit)} in the run's lineage)")
    if p.max_eval_age_ms:
        d.thresholds["eval_age_ms"] = float(p.max_eval_age_ms)
        if as_of_ms is None:
            d.missing.append(f"no data-quality report for the evaluation dataset "
                             f"{whole.dataset or '(unnamed)'}: its age is unknown")
            return
        age = whole.at_ms - as_of_ms
        d.measured["eval_age_ms"] = float(age)
        if age > p.max_eval_age_ms:
            d.failures.append(f"evaluation dataset {whole.dataset} is {age / 86_400_000:.1f} "
                              f"days old (data up to {_utc(as_of_ms)}), over the "
                              f"{p.max_eval_age_ms / 86_400_000:g} days allowed")


def _utc(ms: int) -> str:
    """Return epoch milliseconds as an ISO 8601 UTC time (``2026-12-01T06:00:00Z``)."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _row_keys(d: Decision, c: RunEvidence, eval_ref: str,
              sketches: dict[str, tuple[int, ...]]) -> None:
    """Fail when the evaluation data's row-key sketch shares keys with a training dataset's."""
    mine = sketches.get(eval_ref)
    if not mine:
        return  # no sketch reported: the lineage check above is all there is
    for train in c.training:
        theirs = sketches.get(train)
        if not theirs or _dataset_match(train, eval_ref):
            continue  # the same dataset: the lineage check has named it
        common, estimate = sketch.shared(mine, theirs)
        d.measured[f"shared_row_keys.{train}"] = estimate
        if common:
            d.failures.append(f"evaluation dataset {eval_ref} shares row keys with training "
                              f"dataset {train} ({common} shared hashes in their sketches, "
                              f"about {estimate:.0f} rows)")


def _review(d: Decision, p: Policy, c: RunEvidence, inc: RunEvidence | None) -> None:
    for w in p.review_when:
        if w == "always":
            d.reviews.append(f"policy {p.name} requires a human decision for every release")
        elif w == "dirty_code" and (c.code_dirty or not c.code_revision):
            why = "uncommitted changes" if c.code_dirty else "no code revision recorded"
            d.reviews.append(f"provenance contested: {why}")
        elif w == "new_training_data" and inc is not None:
            mine = {t.partition("@")[0] for t in c.training}
            theirs = {t.partition("@")[0] for t in inc.training}
            if mine != theirs:
                new = sorted(mine - theirs) or sorted(theirs - mine)
                d.reviews.append(f"conditions changed: training data differs from the "
                                 f"incumbent's ({', '.join(new)})")
