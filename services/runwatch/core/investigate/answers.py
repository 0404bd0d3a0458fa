"""The answers of ``runwatch investigate RUN_ID``, from the evidence rows the store gave.

Size: the seven answers (what changed, affected runs, deterministic, trustworthy
artifacts, resume point, release, owner) share one evidence bundle and one onset;
splitting them would pass the same half-dozen values between modules.

The adapter (:mod:`runwatch.adapters.evidence`) reads rows; this module decides.
Rows are plain mappings with epoch-millisecond times (``ts_ms``). The result
is the JSON shape ``version 1`` documented in ``docs/investigation.md``.

Rules:

* **onset**: the earliest alert the run fired (firing or resolved since) about its computation (not
  a policy, gate, registry, record or queue finding: :data:`POLICY_DETECTORS`), at the
  earliest of its first sighting and its evidence times;
* **reference** (what changed is measured against): the latest run of the same
  family whose manifest is older, that succeeded and fired no warning or
  critical alert;
* **quality problem** of an input: a data-quality report of the dataset
  version with drifted features, schema failures or zero rows, or a label
  balance shifted from the version's first report by more than the
  processor's ``label_shift`` (total-variation distance 0.15);
* **trustworthy** checkpoint: outcome ok, its sha256 equals the expected one
  (when one is given), written before the onset and before any quality
  problem of the run's inputs; an artifact: the same with its serialization
  check. A finding about one checkpoint file (:data:`FILE_DETECTORS`) of an
  earlier attempt does not count for what a later attempt wrote when that
  attempt resumed, after the finding's onset, from a trustworthy checkpoint
  (its manifest's ``resumed_from_checkpoint``): it did not use the bad file.
  Every other finding (bad data, a NaN that recurs) still counts;
* **resume point**: the latest trustworthy checkpoint; resuming from it loses
  the GPU time from it to the run's last activity (running hours × each
  attempt's GPUs; the wait between attempts is not lost);
* **deterministic**: the same detector fired at the same step (within 1 %) in
  two attempts of the run, or in another run of the same lineage without the
  seed (:func:`~runwatch.core.investigate.lineage.repeat_key`); not
  deterministic only on evidence that the failure did not recur at its step
  (an attempt or a run of the same lineage went past it without the failure:
  :func:`_not_recurred`); else unknown (an alert still firing across a
  restart is not seen again);
* **release**: blocked when the latest decision of a gate of the run is
  ``fail`` or ``review``, or when the processor found its model registered before its
  gates allowed it (:data:`REGISTRY_DETECTORS`) and they still do not;
* **owner**: the owner the processor stamped on each alert the run fired
  (``Alert.owner``), else the ownership file's, and the pager receivers its
  routes send it to.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from runwatch.core.cost.prices import Prices
from runwatch.core.cost.running import running_intervals
from runwatch.core.gates.registry import release_allowed
from runwatch.core.investigate import lineage as lin
from runwatch.core.investigate.cost import CostRow, cost_answer
from runwatch.core.paging.ownership import Owner, Ownership
from runwatch.core.signals.indicators import label_balance_shift
from runwatch.core.signals.rules import digests_agree
from runwatch.core.stream.runstate import RunConfig

VERSION = 1
#: Findings about where a run stands (policy, gates, the registry, the record, the
#: scheduler's queue), not about its computation: they set no onset, are no failure to
#: repeat and do not name the owner while a computing alert does (see
#: runwatch.core.signals.cause, where they explain no symptom).
POLICY_DETECTORS = frozenset({
    "rule:image_allow_list", "rule:image_missing", "rule:failed_gate", "rule:missing_gate",
    "rule:registry_without_gate", "rule:registry_status", "rule:lineage_mutated",
    "rule:missing_data_report", "rule:queue_deadline", "alerting",
})
#: Findings about one checkpoint file (its bytes, its write), not the model's state: an
#: attempt that resumed from an earlier trustworthy checkpoint did not inherit them.
FILE_DETECTORS = frozenset({"rule:checkpoint_checksum", "rule:checkpoint_serialization"})
#: The processor's findings of a model registered before its gates allowed it: they block
#: the release until the run's gate decisions allow it.
REGISTRY_DETECTORS = frozenset({"rule:registry_without_gate", "rule:missing_gate"})
#: How ``rules.missing_gates`` names the gates not passed in its title.
_MISSING_GATES = re.compile(r"before gate\(s\) (.+) passed")
BAD_SEVERITIES = frozenset({"warning", "critical"})
GOOD_STATES = frozenset({"succeeded"})
#: The label-balance distance the processor counts as a shift (RunConfig.label_shift).
LABEL_SHIFT = float(RunConfig.__dataclass_fields__["label_shift"].default)  # type: ignore[arg-type]
Row = dict[str, Any]


def computing(alerts: Iterable[Row]) -> list[Row]:
    """The alerts of computing failures (policy, gate, registry, record, queue left out)."""
    return [a for a in alerts if a.get("detector") not in POLICY_DETECTORS]


@dataclass(slots=True)
class Evidence:
    """What the store holds about a run (rows as mappings, times in epoch ms).

    Attributes:
        run_id: The run asked about.
        database: The database read.
        now_ms: When the question was asked.
        manifests: The run's manifest rows, oldest first (the first is its lineage).
        jobs: Job events (ts_ms, state, attempt, nodes, gpu_count, team, experiment_family).
        outcome: The run's state as every reader of the store reads it
            (``runwatch.core.storage.outcome.OUTCOME_SQL``: the SDK's own end over a
            scheduler hook's later one); None: not read, the latest job event's state.
        alerts: Alert rows (every status row; the latest per alert_id counts).
        checkpoints: Checkpoint rows (ts_ms, step, sha256, expected_sha256, outcome, uri).
        artifacts: Artifact rows (ts_ms, uri, kind, sha256, serialization_ok, registry_status).
        gates: The run's gate decisions (ts_ms, gate, decision, reasons).
        family_gates: Gate decisions of the family's other runs (with run_id).
        quality: Data-quality reports of the run's input dataset versions.
        stages: Stage events producing the run's inputs (None: no stage table).
        infra: GPU fault samples on the run's nodes in its span (ts_ms, node, gpu_index,
            xid, ecc_uncorrected).
        family_runs: Earlier runs of the family: run_id, ts_ms (manifest), state,
            bad_alerts, manifest (row).
        sharing: Other runs sharing an input: run_id, experiment_family, team, state,
            manifest (row), alerts (firing alert rows).
        repeats: Alerts of other runs with the same repeat key (run_id, detector,
            indicator, first_seen_ms, step).
        lineage_runs: Every other run with the same repeat key, alerts or not: run id →
            the first and last steps it logged (None: no learning step), so that a run of
            the lineage that went past the failing step without the failure is seen.
        steps_at: (ts_ms, step) pairs of the run, ascending, to place alerts at a step.
        series: Indicator name → [(ts_ms, value)] for the page.
        cost_rows: The run's summary and its family's of the last 30 days from the
            ``run_costs`` view (None: no such view), for the cost answer.
        missing: What the adapter could not read (tables absent, errors).
    """

    run_id: str
    database: str
    now_ms: int
    manifests: list[Row] = field(default_factory=list)
    jobs: list[Row] = field(default_factory=list)
    outcome: str | None = None
    alerts: list[Row] = field(default_factory=list)
    checkpoints: list[Row] = field(default_factory=list)
    artifacts: list[Row] = field(default_factory=list)
    gates: list[Row] = field(default_factory=list)
    family_gates: list[Row] = field(default_factory=list)
    quality: list[Row] = field(default_factory=list)
    stages: list[Row] | None = None
    infra: list[Row] = field(default_factory=list)
    family_runs: list[Row] = field(default_factory=list)
    sharing: list[Row] = field(default_factory=list)
    repeats: list[Row] = field(default_factory=list)
    lineage_runs: dict[str, tuple[int, int] | None] = field(default_factory=dict)
    steps_at: list[tuple[int, int]] = field(default_factory=list)
    series: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    cost_rows: list[CostRow] | None = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


#: (alert attributes) -> receiver names the pager routes it to.
Router = Callable[[Mapping[str, str]], list[str]]


def latest_alerts(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """Return one row per alert id (its latest), ordered by first sighting."""
    by_id: dict[str, Row] = {}
    for r in sorted(rows, key=lambda r: int(r.get("ts_ms") or 0)):
        by_id[str(r["alert_id"])] = r
    out = [dict(r) for r in by_id.values()]
    out.sort(key=lambda r: (int(r.get("first_seen_ms") or 0), str(r.get("detector"))))
    return out


def onset_of(alert: Row) -> int:
    """Return an alert's onset: the earliest of its first sighting and its evidence.

    A policy finding's (:data:`POLICY_DETECTORS`) is its first sighting: its evidence (a
    registry push's failed gate) is where the run stood, not when something went wrong,
    and put a registry alert before the model was registered.
    """
    if alert.get("detector") in POLICY_DETECTORS:
        return int(alert.get("first_seen_ms") or 0)
    times = [int(t) for t in alert.get("evidence_at_ms") or () if t]
    return min([int(alert.get("first_seen_ms") or 0), *times])


def quality_problems(row: Row, first_labels: Mapping[str, float] | None = None) -> list[str]:
    """Return what is wrong in one data-quality report (empty: it passed).

    Args:
        row: The report (drifted_features, schema_failures, row_count, label_distribution).
        first_labels: The label distribution of the dataset version's first report.
    """
    out = []
    labels = dict(row.get("label_distribution") or {})
    if first_labels and labels:
        shift = label_balance_shift(labels, dict(first_labels))
        if shift == shift and shift > LABEL_SHIFT:
            out.append(f"label balance shifted by {shift:.2f}")
    drifted = list(row.get("drifted_features") or ())
    if drifted:
        out.append(f"drift in {', '.join(map(str, drifted))}")
    if int(row.get("schema_failures") or 0) > 0:
        out.append(f"{int(row['schema_failures'])} schema failures")
    if row.get("row_count") is not None and int(row["row_count"]) == 0:
        out.append("zero rows")
    return out


def step_at(steps_at: Sequence[tuple[int, int]], ts_ms: int) -> int | None:
    """Return the run's step at a time (the last step at or before it)."""
    best = None
    for t, s in steps_at:
        if t > ts_ms:
            break
        best = s
    return best


def _same_step(a: int | None, b: int | None) -> bool:
    if a is None or b is None:
        return False
    return abs(a - b) <= max(1, 0.01 * max(a, b))


def _state(jobs: Sequence[Row]) -> str:
    if not jobs:
        return ""
    return str(max(jobs, key=lambda j: int(j.get("ts_ms") or 0)).get("state") or "")


def _reference(ev: Evidence, family: str) -> tuple[Row | None, str]:
    if not family:
        return None, "the run names no experiment family: nothing to compare with"
    good = [r for r in ev.family_runs
            if r.get("state") in GOOD_STATES and not int(r.get("bad_alerts") or 0)]
    if not good:
        return None, (f"no previous good run in family {family!r} (an earlier run that "
                      "succeeded without warning or critical alerts)")
    ref = max(good, key=lambda r: int(r.get("ts_ms") or 0))
    return ref, f"the last good run of family {family!r}"


def _what_changed(ev: Evidence, me: dict[str, Any] | None, family: str) -> dict[str, Any]:
    out: dict[str, Any] = {"reference_run_id": None, "reference": "", "changes": [],
                           "input_quality": [], "stages": [], "infrastructure": []}
    if me is None:
        out["reference"] = "no manifest recorded for this run: no lineage to compare"
    else:
        ref, why = _reference(ev, family)
        out["reference"] = why
        if ref is not None:
            out["reference_run_id"] = str(ref["run_id"])
            changes = lin.diff(lin.normalize(ref["manifest"]), me)
            out["changes"] = [c.to_json() for c in changes]
    first: dict[tuple[str, str], Mapping[str, float]] = {}
    for q in sorted(ev.quality, key=lambda r: int(r.get("ts_ms") or 0)):
        version = (str(q.get("dataset_uri") or ""), str(q.get("dataset_version") or ""))
        problems = quality_problems(q, first.get(version))
        if q.get("label_distribution"):
            first.setdefault(version, q["label_distribution"])
        if problems:
            out["input_quality"].append({
                "ts_ms": int(q["ts_ms"]), "dataset_uri": str(q.get("dataset_uri") or ""),
                "dataset_version": str(q.get("dataset_version") or ""), "problems": problems,
                "max_psi": q.get("max_psi")})
    if ev.stages is None:
        out["stages"] = None
        out["stages_note"] = "no stage events recorded (no stage_events table)"
    else:
        for s in sorted(ev.stages, key=lambda r: int(r.get("ts_ms") or 0)):
            out["stages"].append({k: s.get(k) for k in (
                "ts_ms", "stage", "code_version", "dataset_uri", "dataset_version", "outcome",
                "rows_in", "rows_out", "drifted_features")})
        if not ev.stages:
            out["stages_note"] = "no stage events recorded for the run's inputs"
    groups: dict[tuple[str, int, int | None], dict[str, Any]] = {}
    for r in ev.infra:
        key = (str(r.get("node")), int(r.get("gpu_index") or 0), r.get("xid"))
        g = groups.setdefault(key, {"node": key[0], "gpu_index": key[1], "xid": key[2],
                                    "ecc_uncorrected": 0, "first_ms": int(r["ts_ms"]),
                                    "samples": 0})
        g["samples"] += 1
        g["first_ms"] = min(g["first_ms"], int(r["ts_ms"]))
        g["ecc_uncorrected"] = max(g["ecc_uncorrected"], int(r.get("ecc_uncorrected") or 0))
    out["infrastructure"] = sorted(groups.values(), key=lambda g: g["first_ms"])
    return out


def _suspects(me: dict[str, Any] | None, changed: dict[str, Any]) -> list[dict[str, str]]:
    if me is None:
        return []
    out: list[dict[str, str]] = []
    seen: set[tuple[str, str]] = set()

    def add(kind: str, value: str, why: str) -> None:
        if value and (kind, value) not in seen:
            seen.add((kind, value))
            out.append({"kind": kind, "value": value, "why": why})

    for c in changed["changes"]:
        if c["intentional"] or not c["new"]:
            continue
        if c["kind"] == "dataset":
            add("dataset", f"{c['key']}@{c['new']}", "new since the reference run")
        elif c["kind"] == "image":
            add("image", c["new"], "new since the reference run")
        elif c["kind"] == "code":
            old_rev = c["old"].removesuffix(" (dirty)")
            if me["code_revision"].strip().lower() != old_rev.strip().lower():
                add("code", me["code_revision"], "new since the reference run")
            elif me["code_dirty"]:  # the same revision: new is what no other run shares
                add("code", c["new"], "uncommitted changes since the reference run")
    for q in changed["input_quality"]:
        add("dataset", f"{q['dataset_uri']}@{q['dataset_version']}",
            "data-quality problem: " + "; ".join(q["problems"]))
    for s in changed["stages"] or ():
        if s.get("outcome") not in (None, "", "ok", "succeeded"):
            add("dataset", f"{s['dataset_uri']}@{s['dataset_version']}",
                f"stage {s['stage']} ended {s['outcome']}")
    for g in changed["infrastructure"]:
        add("node", g["node"], "GPU faults on the node during the run")
    return out


def _shares(suspects: Sequence[Mapping[str, str]], other: dict[str, Any]) -> list[str]:
    mine = {f"{u}@{v}" for u, v in other["datasets"].items()}
    out = []
    for s in suspects:
        kind, value = s["kind"], s["value"]
        hit = ((kind == "dataset" and value in mine)
               or (kind == "image" and value == other["image_digest"])
               or (kind == "code" and value == other["code_revision"])
               or (kind == "node" and value in other["hardware"]["nodes"]))
        if hit:
            out.append(f"{kind} {value}")
    return out


def _affected(ev: Evidence, suspects: list[dict[str, str]]) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    for r in ev.sharing:
        if str(r["run_id"]) == ev.run_id:
            continue
        other = lin.normalize(r.get("manifest") or {})
        shared = _shares(suspects, other)
        if not shared:
            continue
        alerts = latest_alerts(r.get("alerts") or ())
        firing = [a for a in alerts if a.get("status") == "firing"]
        runs.append({"run_id": str(r["run_id"]),
                     "experiment_family": str(r.get("experiment_family") or ""),
                     "team": str(r.get("team") or ""), "state": str(r.get("state") or ""),
                     "alerts": len(firing),
                     "detectors": sorted({str(a.get("detector")) for a in firing}),
                     "shared": shared})
    runs.sort(key=lambda r: r["run_id"])
    note = "" if suspects else "no suspect input (no change against a reference, no quality " \
                               "problem, no GPU fault): no run is affected through one"
    return {"suspects": suspects, "runs": runs, "note": note}


def _deterministic(ev: Evidence, firing: list[dict[str, Any]]) -> dict[str, Any]:
    attempts = sorted({int(j.get("attempt") or 0) for j in ev.jobs})
    others = sorted({str(r["run_id"]) for r in ev.repeats} | set(ev.lineage_runs))
    if not firing:
        return {"deterministic": None, "reason": "no alert fired for this run",
                "attempts": attempts, "same_lineage_runs": others, "evidence": []}
    # a policy, registry, record or queue finding is no failure to repeat (a queue wait
    # past the deadline in each attempt is not a failure at the same step)
    firing = computing(firing)
    if not firing:
        return {"deterministic": None, "reason": "no alert about the run's computation fired "
                "(policy, gate, registry, record and queue findings only)",
                "attempts": attempts, "same_lineage_runs": others, "evidence": []}
    evidence: list[dict[str, Any]] = []
    # across attempts: the same detector again, at the same step, in a later attempt
    by_det: dict[tuple[str, str], list[tuple[int, int | None]]] = {}
    for a in firing:
        first = int(a.get("first_seen_ms") or 0)
        by_det.setdefault((str(a["detector"]), str(a["indicator"])), []).append(
            (_attempt_at(ev.jobs, first), step_at(ev.steps_at, first)))
    for (det, ind), seen in by_det.items():
        for i, (att_a, step_a) in enumerate(seen):
            for att_b, step_b in seen[i + 1:]:
                if att_a != att_b and _same_step(step_a, step_b):
                    evidence.append({"detector": det, "indicator": ind, "step": step_b,
                                     "where": f"attempts {att_a} and {att_b}"})
    for a in firing:
        mine = step_at(ev.steps_at, int(a.get("first_seen_ms") or 0))
        for r in ev.repeats:
            if r.get("detector") == a["detector"] and _same_step(mine, r.get("step")):
                evidence.append({"detector": str(a["detector"]), "indicator": str(a["indicator"]),
                                 "step": mine, "where": f"run {r['run_id']} (same lineage)"})
    if evidence:
        return {"deterministic": True, "reason": "the same failure at the same step "
                + ("across attempts" if any("attempts" in e["where"] for e in evidence)
                   else "in another run of the same lineage"),
                "attempts": attempts, "same_lineage_runs": others, "evidence": evidence}
    if len(attempts) <= 1 and not others:
        return {"deterministic": None, "reason": "one attempt and no other run with "
                "the same lineage (without the seed) to compare with",
                "attempts": attempts, "same_lineage_runs": others, "evidence": []}
    failures = _failures(ev, firing)
    checked = [(f"{det} at step {'?' if step is None else step}",
                _not_recurred(ev, firing, det, step, first)) for det, step, first in failures]
    unknown = [what for what, why in checked if not why]
    if unknown:
        return {"deterministic": None, "reason": "nothing shows a later attempt or a "
                "run of the same lineage going past the failing step without the failure ("
                + ", ".join(unknown) + "; an alert still firing across a restart is not seen "
                "again)", "attempts": attempts, "same_lineage_runs": others, "evidence": []}
    return {"deterministic": False, "reason": "the failure did not recur at the same step: "
            + "; ".join(f"{what} ({why})" for what, why in checked),
            "attempts": attempts, "same_lineage_runs": others, "evidence": []}


def _failures(ev: Evidence, firing: list[dict[str, Any]]) -> list[tuple[str, int | None, int]]:
    """Each detector's first failure: (detector, its step, its first sighting)."""
    first: dict[str, int] = {}
    for a in firing:
        det, at = str(a["detector"]), int(a.get("first_seen_ms") or 0)
        first[det] = min(first.get(det, at), at)
    return [(det, step_at(ev.steps_at, at), at) for det, at in sorted(first.items())]


def _firing_at(alert: Row, ts_ms: int) -> bool:
    """Whether an alert (its latest row) was firing at a time (resolved: until its row's time)."""
    if int(alert.get("first_seen_ms") or 0) > ts_ms:
        return False
    return alert.get("status") != "resolved" or int(alert.get("ts_ms") or 0) > ts_ms


def _not_recurred(ev: Evidence, firing: list[dict[str, Any]], det: str, step: int | None,
                  first_ms: int) -> str:
    """Say what shows that a failure first seen at ``step`` did not recur there ("": nothing).

    Each piece of evidence is one attempt or run going past the other's failing step
    without the failure: a run of the same lineage fired the detector at another step, or
    ran the step and went past it without firing it; a later attempt fired it at an
    earlier step; a later attempt, started at or before the
    step, went past it while no alert of the detector was firing.
    """
    if step is None:
        return ""
    for r in ev.repeats:
        s = r.get("step")
        if r.get("detector") == det and s is not None and not _same_step(int(s), step):
            return f"run {r['run_id']} of the same lineage fired it at step {s}"
    fired = {str(r["run_id"]) for r in ev.repeats if r.get("detector") == det}
    for rid, span in sorted(ev.lineage_runs.items()):
        # a run of the lineage that never fired the detector ran the step and went past it
        # (one that started past it, resumed from a later checkpoint, did not run it)
        if rid in fired or span is None:
            continue
        lo, hi = span
        if lo <= step < hi and not _same_step(hi, step):
            return f"run {rid} of the same lineage went past it to step {hi} without it"
    failed_in = _attempt_at(ev.jobs, first_ms)
    for a in firing:
        at = int(a.get("first_seen_ms") or 0)
        s, att = step_at(ev.steps_at, at), _attempt_at(ev.jobs, at)
        if a["detector"] == det and att > failed_in and s is not None and s < step \
                and not _same_step(s, step):
            return f"attempt {att} fired it at step {s}"
    later: dict[int, list[tuple[int, int]]] = {}
    for t, s in ev.steps_at:
        att = _attempt_at(ev.jobs, t)
        if t > first_ms and att > failed_in:
            later.setdefault(att, []).append((t, s))
    for att, steps in sorted(later.items()):
        if min(s for _t, s in steps) > step:
            continue  # resumed past the failing step: it did not run it again
        for t, s in steps:
            if s > step and not _same_step(s, step) and not any(
                    a["detector"] == det and _firing_at(a, t) for a in firing):
                return f"attempt {att} went past it to step {s} without it"
    return ""


def _attempt_at(jobs: Sequence[Row], ts_ms: int) -> int:
    att = 0
    for j in sorted(jobs, key=lambda j: int(j.get("ts_ms") or 0)):
        if int(j.get("ts_ms") or 0) > ts_ms:
            break
        att = int(j.get("attempt") or 0)
    return att


def _resumes(ev: Evidence) -> list[tuple[int, int, str]]:
    """Each manifest naming the checkpoint its attempt resumed from: (ts, attempt, uri)."""
    return [(int(m["ts_ms"]), _attempt_at(ev.jobs, int(m["ts_ms"])),
             str(m["resumed_from_checkpoint"]))
            for m in ev.manifests if m.get("resumed_from_checkpoint")]


def _onset_for(ev: Evidence, computing: Sequence[Row], resumes: Sequence[tuple[int, int, str]],
               trusted: Mapping[str, bool], ts: int) -> int | None:
    """The onset that applies to what the run wrote at ``ts`` (None: none before it).

    Every alert about the computation applies, except a finding about one checkpoint file
    (:data:`FILE_DETECTORS`) of an earlier attempt when the writing attempt resumed, after
    that finding's onset, from a checkpoint judged trustworthy: it did not use the bad file.
    """
    att = _attempt_at(ev.jobs, ts)
    resume = max(((t, uri) for t, a, uri in resumes if a == att and t <= ts), default=None)
    onsets = []
    for a in computing:
        o = onset_of(a)
        if o > ts:
            continue
        if (a["detector"] in FILE_DETECTORS and resume is not None and resume[0] > o
                and _attempt_at(ev.jobs, o) < att and trusted.get(resume[1]) is True):
            continue
        onsets.append(o)
    return min(onsets, default=None)


def _trust(ev: Evidence, fired: Sequence[Row], onset: int | None,
           bad_input_ms: int | None) -> dict[str, Any]:
    failures = computing(fired)
    resumes = _resumes(ev)
    # checkpoint uri -> every row of it judged trustworthy so far; a file any row of which
    # (a re-read too) failed its check is no state to resume from
    trusted: dict[str, bool] = {
        str(c.get("uri") or ""): False for c in ev.checkpoints
        if str(c.get("outcome") or "") != "ok" or _digest_ok(c) is False}

    def judge(ts: int, checksum_ok: bool | None, serial_ok: bool) -> list[str]:
        why = []
        if checksum_ok is False:
            why.append("checksum mismatch")
        if not serial_ok:
            why.append("serialization failed")
        if _onset_for(ev, failures, resumes, trusted, ts) is not None:
            why.append("written at or after the onset")
        if bad_input_ms is not None and ts >= bad_input_ms:
            why.append("written after an input failed quality")
        return why

    cks = []
    for c in sorted(ev.checkpoints, key=lambda r: (int(r.get("ts_ms") or 0), int(r["step"]))):
        outcome = str(c.get("outcome") or "")
        checksum_ok = _digest_ok(c)
        if outcome == "corrupt":
            checksum_ok = False
        why = judge(int(c["ts_ms"]), checksum_ok, outcome not in ("failed", "timeout"))
        if outcome not in ("ok", "corrupt", "failed", "timeout"):
            why.append(f"outcome {outcome or 'unknown'}")
        uri = str(c.get("uri") or "")
        trusted[uri] = trusted.get(uri, True) and not why
        cks.append({"step": int(c["step"]), "uri": uri,
                    "ts_ms": int(c["ts_ms"]), "outcome": outcome, "checksum_ok": checksum_ok,
                    "trustworthy": not why, "reasons": why})
    arts = []
    for a in sorted(ev.artifacts, key=lambda r: int(r.get("ts_ms") or 0)):
        why = judge(int(a["ts_ms"]), None, bool(a.get("serialization_ok", True)))
        arts.append({"uri": str(a.get("uri") or ""), "kind": str(a.get("kind") or ""),
                     "ts_ms": int(a["ts_ms"]), "registry_status": str(a.get("registry_status")
                                                                       or ""),
                     "trustworthy": not why, "reasons": why})
    return {"checkpoints": cks, "artifacts": arts,
            "onset_ms": onset, "first_bad_input_ms": bad_input_ms}


def _digest_ok(row: Mapping[str, Any]) -> bool | None:
    """Whether a checkpoint row's sha256 is its expected one (None without both).

    Compared as the processor compares them (``rules.digests_agree``): a restore
    check sent with ``runwatch emit`` as ``sha256:<hex>`` or S3's base64 is the same
    digest, and was called a checksum mismatch here while the processor paged nothing.
    """
    return digests_agree(str(row.get("expected_sha256") or ""), str(row.get("sha256") or ""))


def _gpu_count(ev: Evidence, me: dict[str, Any] | None) -> int:
    counts = [int(j.get("gpu_count") or 0) for j in ev.jobs]
    best = max(counts, default=0)
    if not best and me is not None:
        best = int(me["hardware"]["gpu_count"] or 0)
    return best


def _last_activity(ev: Evidence) -> int | None:
    times = [t for t, _s in ev.steps_at] + [int(j["ts_ms"]) for j in ev.jobs]
    return max(times, default=None)


def _gpu_hours_after(ev: Evidence, since_ms: int, gpus: int, last: int) -> float:
    """GPU-hours of the run's running time from ``since_ms`` to its last activity.

    Time between attempts (preempted, queued again) is not lost work; without any
    ``running`` job event, the whole stretch counts at ``gpus``.
    """
    spans = running_intervals(((int(j["ts_ms"]), str(j.get("state") or ""),
                                int(j.get("gpu_count") or 0)) for j in ev.jobs), last, gpus)
    if not spans:
        return max(last - since_ms, 0) / 3_600_000 * gpus
    return sum(max(min(t1, last) - max(t0, since_ms), 0) * n
               for t0, t1, n in spans) / 3_600_000


def _resume(ev: Evidence, trust: dict[str, Any], me: dict[str, Any] | None) -> dict[str, Any]:
    good = [c for c in trust["checkpoints"] if c["trustworthy"]]
    if not good:
        why = ("no checkpoint recorded" if not trust["checkpoints"]
               else "no trustworthy checkpoint: start over")
        return {"step": None, "uri": None, "ts_ms": None, "gpu_hours_lost": None,
                "gpu_count": _gpu_count(ev, me), "reason": why}
    best = max(good, key=lambda c: (c["ts_ms"], c["step"]))
    gpus, last = _gpu_count(ev, me), _last_activity(ev)
    lost = None
    reason = f"latest trustworthy checkpoint (step {best['step']})"
    if last is not None and gpus:
        lost = round(_gpu_hours_after(ev, int(best["ts_ms"]), gpus, last), 3)
    elif not gpus:
        reason += "; GPU count unknown (no allocation or hardware recorded)"
    return {"step": best["step"], "uri": best["uri"], "ts_ms": best["ts_ms"],
            "gpu_hours_lost": lost, "gpu_count": gpus, "reason": reason}


def _latest_per_gate(rows: Sequence[Row]) -> dict[tuple[str, str], Row]:
    out: dict[tuple[str, str], Row] = {}
    for r in sorted(rows, key=lambda r: int(r.get("ts_ms") or 0)):
        out[(str(r.get("run_id") or ""), str(r["gate"]))] = r
    return out


def _unsettled_registration(alert: Row, latest: Mapping[str, str]) -> bool:
    """Whether the processor's registry finding still holds against the run's gates now.

    ``rule:registry_without_gate``: until a gate's latest decision is ``pass`` (the
    processor's own test, :func:`~runwatch.core.gates.registry.release_allowed`);
    ``rule:missing_gate``: until every gate its title names (``before gate(s) A, B
    passed``) has ``pass`` as its latest decision; a title naming none holds.
    """
    if alert.get("detector") == "rule:registry_without_gate":
        return not release_allowed(latest)
    named = _MISSING_GATES.search(str(alert.get("title") or ""))
    gates = [g.strip() for g in named.group(1).split(",")] if named else []
    return not gates or any(latest.get(g) != "pass" for g in gates)


def _release(ev: Evidence, fired: Sequence[Row] = ()) -> dict[str, Any]:
    gates = []
    reasons: list[str] = []
    latest: dict[str, str] = {}
    for (_rid, gate), r in sorted(_latest_per_gate(ev.gates).items()):
        decision = str(r.get("decision") or "")
        latest[gate] = decision
        why = [str(x) for x in r.get("reasons") or ()]
        gates.append({"gate": gate, "decision": decision, "ts_ms": int(r["ts_ms"]),
                      "reasons": why})
        if decision in ("fail", "review"):
            verb = "failed" if decision == "fail" else "awaits review"
            reasons.append(f"gate {gate} {verb}" + (f": {'; '.join(why)}" if why else ""))
    # a model registered before its gates allowed it (the processor's registry control or
    # required gates): blocked until the gates allow it, firing or resolved since (a run's
    # alerts resolve when it is retired, which settles nothing)
    for a in fired:
        if a.get("detector") in REGISTRY_DETECTORS and _unsettled_registration(a, latest):
            reasons.append(f"{a['detector']}: {a.get('title') or 'model registered early'}")
    family = [{"run_id": rid, "gate": gate, "decision": str(r.get("decision") or ""),
               "ts_ms": int(r["ts_ms"])}
              for (rid, gate), r in sorted(_latest_per_gate(ev.family_gates).items())
              if rid != ev.run_id]
    note = "" if gates else "no gate decision recorded for this run"
    return {"blocked": bool(reasons), "reasons": reasons, "gates": gates, "family": family,
            "note": note}


def _owner(ev: Evidence, firing: list[dict[str, Any]], ownership: Ownership | None,
           route: Router | None, me: dict[str, Any] | None) -> dict[str, Any]:
    if ownership is None:
        return {"team": "", "receiver": "", "owns": "", "why": "no ownership file",
                "paged": []}
    paged: list[dict[str, Any]] = []
    for a in firing:
        o = ownership.owner_for(str(a.get("probable_cause") or "unknown"),
                                team=a.get("team") or None,
                                experiment_family=a.get("experiment_family") or None)
        stored = str(a.get("owner") or "")
        if stored and stored != o.team:  # the owner the processor stamped when it fired wins
            receiver, owns = ownership.teams.get(stored, ("", ""))
            o = Owner(team=stored, receiver=receiver, owns=owns,
                      why=f"stamped on the alert by the processor (this file says {o.team}: "
                          f"{o.why})")
        attrs = {k: str(a.get(k) or "") for k in ("severity", "probable_cause", "team",
                                                   "experiment_family", "detector",
                                                   "indicator", "run_id", "node", "status")}
        attrs["owner"] = o.team
        attrs.update({f"labels.{k}": str(v) for k, v in (a.get("labels") or {}).items()})
        paged.append({"alert_id": str(a["alert_id"]), "detector": str(a["detector"]),
                      "probable_cause": str(a.get("probable_cause") or ""), "team": o.team,
                      "receiver": o.receiver, "receivers": route(attrs) if route else [],
                      "why": o.why})
    if paged:
        failures = computing(paged)
        first = (failures or paged)[0]
        return {"team": first["team"], "receiver": first["receiver"],
                "owns": ownership.teams.get(first["team"], ("", ""))[1],
                "why": f"the first alert ({first['detector']}, probable cause "
                       f"{first['probable_cause']}): {first['why']}", "paged": paged}
    family = me["experiment_family"] if me else ""
    team = me["team"] if me else ""
    o = ownership.owner_for("unknown", team=team or None, experiment_family=family or None)
    return {"team": o.team, "receiver": o.receiver, "owns": o.owns,
            "why": f"no alert fired for this run; nobody is paged (the owner of an alert "
                   f"without a cause would be {o.team or 'nobody'}: {o.why})", "paged": []}


def _run_facts(ev: Evidence, me: dict[str, Any] | None) -> dict[str, Any]:
    jobs = sorted(ev.jobs, key=lambda j: int(j.get("ts_ms") or 0))
    nodes = sorted({str(n) for j in jobs for n in j.get("nodes") or ()}
                   or set(me["hardware"]["nodes"] if me else ()))
    fam = (me or {}).get("experiment_family") or next(
        (str(j["experiment_family"]) for j in jobs if j.get("experiment_family")), "")
    team = (me or {}).get("team") or next((str(j["team"]) for j in jobs if j.get("team")), "")
    starts = [int(jobs[0]["ts_ms"])] if jobs else []
    state = ev.outcome if ev.outcome is not None else _state(jobs)
    return {"experiment_family": fam, "team": team, "state": state,
            "attempts": len({int(j.get("attempt") or 0) for j in jobs}),
            "started_ms": min(starts + [t for t, _s in ev.steps_at[:1]], default=None),
            "ended_ms": _last_activity(ev), "nodes": nodes, "gpu_count": _gpu_count(ev, me),
            "manifest_versions": len({str(m.get("lineage_hash") or m.get("event_id"))
                                      for m in ev.manifests})}


def suspects(ev: Evidence) -> list[dict[str, str]]:
    """Return the run's suspect inputs (what the runs sharing them are looked up by).

    Args:
        ev: What the store holds (``sharing`` not needed).

    Returns:
        ``{"kind": dataset|image|code|node, "value": ..., "why": ...}`` items.
    """
    me = lin.normalize(ev.manifests[0]) if ev.manifests else None
    family = _run_facts(ev, me)["experiment_family"]
    return _suspects(me, _what_changed(ev, me, family))


def investigate(ev: Evidence, ownership: Ownership | None = None,
                route: Router | None = None, prices: Prices | None = None) -> dict[str, Any]:
    """Answer the incident questions about one run.

    Args:
        ev: What the store holds.
        ownership: The ownership file (None: no owner answer).
        route: Pager routing (alert attributes → receiver names), when known.
        prices: The prices file (None: the cost answer says every run is unpriced).

    Returns:
        The JSON shape ``version 1`` (docs/investigation.md).
    """
    me = lin.normalize(ev.manifests[0]) if ev.manifests else None
    found = bool(ev.manifests or ev.jobs or ev.alerts or ev.steps_at or ev.checkpoints)
    missing = list(ev.missing)
    if not found:
        missing.insert(0, f"nothing recorded for run {ev.run_id!r} in database {ev.database!r} "
                          "(no manifest, job events, learning steps, checkpoints or alerts)")
    else:
        for what, rows in (("manifest (lineage)", ev.manifests), ("job events", ev.jobs),
                           ("learning steps", ev.steps_at), ("checkpoints", ev.checkpoints)):
            if not rows:
                missing.append(f"no {what} recorded for this run")
        for name in ("loss", "gpu_util"):
            if not ev.series.get(name):
                missing.append(f"no {name.replace('_', ' ')} telemetry recorded for this run")
    facts = _run_facts(ev, me)
    alerts = latest_alerts(ev.alerts)
    # alerts that fired, also those resolved since (a finished run's alerts resolve with it,
    # and an investigation after the fact still needs their onset, failure and owner)
    fired = [a for a in alerts if a.get("status") in ("firing", "resolved")]
    onset = min((onset_of(a) for a in computing(fired)), default=None)
    changed = _what_changed(ev, me, facts["experiment_family"])
    if me is not None and changed["reference_run_id"] is None:
        missing.append(changed["reference"])
    if found and not changed["stages"]:  # nothing recorded says it all for an unknown run
        missing.append(changed.get("stages_note", "no stage events recorded"))
    bad_inputs = [q["ts_ms"] for q in changed["input_quality"]]
    trust = _trust(ev, fired, onset, min(bad_inputs, default=None))
    suspects = _suspects(me, changed)
    resume = _resume(ev, trust, me)
    cost = cost_answer(ev.run_id, facts["experiment_family"], ev.cost_rows, prices, resume,
                       ev.now_ms)
    if found and cost["run"] is None:
        missing.append(cost["note"])
    return {
        "version": VERSION, "kind": "run", "run_id": ev.run_id, "database": ev.database,
        "generated_at_ms": ev.now_ms, "found": found, "run": facts,
        "lineage": me, "missing": missing, "onset_ms": onset,
        "alerts": [{k: a.get(k) for k in ("alert_id", "status", "severity", "detector",
                                           "indicator", "probable_cause", "first_seen_ms",
                                           "title")} | {"onset_ms": onset_of(a)}
                   for a in alerts],
        "what_changed": changed,
        "affected_runs": _affected(ev, suspects),
        "deterministic": _deterministic(ev, fired),
        "trustworthy": trust,
        "resume_point": resume,
        "release": _release(ev, fired),
        "owner": _owner(ev, fired, ownership, route, me),
        "cost": cost,
    }


def hurting(rows: Sequence[Row], since_ms: int, now_ms: int, family: str | None,
            ownership: Ownership | None, database: str) -> dict[str, Any]:
    """Answer "which runs are hurting right now": runs with firing alerts since a time.

    Args:
        rows: Latest alert rows (one per alert id) since ``since_ms``, with the run's state.
        since_ms: Start of the window.
        now_ms: Now.
        family: The family asked about (None: all).
        ownership: The ownership file.
        database: The database read.

    Returns:
        The JSON shape ``version 1``, kind ``since`` (docs/investigation.md).
    """
    runs: dict[str, dict[str, Any]] = {}
    without_run = 0
    for a in sorted(rows, key=lambda r: int(r.get("first_seen_ms") or 0)):
        if a.get("status") != "firing":
            continue
        rid = str(a.get("run_id") or "")
        if not rid:  # an SLO's or the fleet's alert: about no single run
            without_run += 1
            continue
        r = runs.setdefault(rid, {
            "run_id": rid, "experiment_family": str(a.get("experiment_family") or ""),
            "team": str(a.get("team") or ""), "state": str(a.get("state") or ""),
            "alerts": 0, "critical": 0, "detectors": [], "causes": [],
            "first_onset_ms": onset_of(a), "owner": "", "by_computing": False})
        r["alerts"] += 1
        r["critical"] += a.get("severity") == "critical"
        # the earliest onset of its alerts: a later-seen alert's evidence may come first
        r["first_onset_ms"] = min(r["first_onset_ms"], onset_of(a))
        for key, value in (("detectors", a.get("detector")), ("causes", a.get("probable_cause"))):
            if value and value not in r[key]:
                r[key].append(str(value))
        is_computing = a.get("detector") not in POLICY_DETECTORS
        if a.get("owner") and (not r["owner"] or (is_computing and not r["by_computing"])):
            r["by_computing"] = is_computing
            r["owner"] = str(a["owner"])  # stamped by the processor
        elif ownership is not None and (not r["owner"] or (is_computing and not r["by_computing"])):
            r["by_computing"] = is_computing
            r["owner"] = ownership.owner_for(
                str(a.get("probable_cause") or "unknown"), team=a.get("team") or None,
                experiment_family=a.get("experiment_family") or None).team
    for r in runs.values():
        del r["by_computing"]
    ordered = sorted(runs.values(), key=lambda r: (-r["critical"], -r["alerts"],
                                                   r["first_onset_ms"]))
    return {"version": VERSION, "kind": "since", "database": database, "since_ms": since_ms,
            "generated_at_ms": now_ms, "experiment_family": family, "runs": ordered,
            "alerts_without_run": without_run,
            "missing": [] if ordered else ["no firing alert of a run in the window"]}
