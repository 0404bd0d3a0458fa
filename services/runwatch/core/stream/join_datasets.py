"""The run join's dataset-level rules: a dataset gone silent, versions, failed stages.

* A dataset whose reports stop altogether (the timer, :func:`silent_datasets`): the
  freshness watch judges a report when it arrives, so a pipeline that stopped reporting
  was never judged. While a run that reads it is running, a dataset with a learned
  refresh cadence whose newest row is past its usual delay and ``SILENT_K`` (3) refresh
  intervals, or its longest recent refresh interval and one more when that is longer (a
  business-day feed's weekend;
  :func:`runwatch.core.signals.datachecks.reports_stopped`) and that has not
  been reported for ``SILENT_K`` intervals fires ``watch:freshness_lag`` ("not being
  refreshed"), as of the
  processor's event-time horizon. It resolves at the dataset's next report that brings
  newer rows (:func:`refreshed`).
* A dataset read unversioned whose pipeline writes a new version each time
  (``@2026-12-07T1004``): a report (or stage output) rule of one version
  (``rule:zero_rows``, ``rule:schema_failures``) is cleared by healthy outputs of the
  later versions too (:func:`clear_versions`); none of the version itself ever comes.
* A manifest dataset whose only stage failed is missing its report: the page says the
  stage failed (:func:`stage_failures`), not just that no report came.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from runwatch.core.signals import datachecks
from runwatch.core.signals.rules import Finding
from runwatch.core.stream.rekey import refs_match
from runwatch.core.stream.runstate import (
    Output,
    RunConfig,
    RunState,
    clear,
    emit,
    firing_entry,
    resolve_now,
)

__all__ = ["clear_versions", "refreshed", "silent_datasets", "stage_failures"]

SILENT = "data_silent"
"""``RunState.signals`` key: dataset reference → event time the timer paged it silent."""


def silent_datasets(s: RunState, cfg: RunConfig, now: int, hz: int,
                    waiting: set[str]) -> list[Output]:
    """Page the datasets the running run reads whose reports stopped (the timer's part).

    For each dataset of the run's manifest, the latest reported reference matching it
    (a run reading ``s3://d`` unversioned: the version reported last, so a version
    superseded by the next is not judged) is judged by
    :func:`datachecks.reports_stopped` at the horizon ``hz``. Not once the run ended or
    while it is not running (preempted, queued again), nor for a dataset whose
    subscription the data agent has not answered yet (``waiting``).
    """
    silent: dict[str, int] = s.signals.get(SILENT) or {}
    out: list[Output] = []
    for declared in s.datasets:
        if declared in waiting:
            continue
        refs = [r for r in s.reports if refs_match(declared, r)]
        if not refs:
            continue  # never reported: rule:missing_data_report's case
        ref = max(refs, key=lambda r: int(s.reports[r].get("at_ms") or 0))
        rep: dict[str, Any] = s.reports[ref]
        if firing_entry(s, "watch:freshness_lag", "freshness_lag", ref) is not None:
            continue  # paged already (by the timer or by a report of old rows)
        silent.pop(ref, None)  # (its page resolved otherwise: retired, replaced)
        stopped = datachecks.reports_stopped(rep.get("hist") or {},
                                             int(rep.get("at_ms") or 0), hz)
        if stopped is None:
            continue
        age, bound, usual, quiet = stopped
        f = Finding("watch:freshness_lag", "freshness_lag", "data", "warning", age, bound,
                    min(age / bound / 2.0, 1.0), hz,
                    f"Data of {ref} is not being refreshed: no report for "
                    f"{quiet / 3_600_000:.3g} h, newest row {age / 3_600_000:.3g} h old (it "
                    f"is usually refreshed every {usual / 3_600_000:.3g} h)",
                    f"newest row age {age:.0f} ms at the processor's horizon, no report for "
                    f"{quiet:.0f} ms; bound {bound:.0f} ms (its usual delay and "
                    f"{datachecks.SILENT_K:g} refresh intervals, or its longest recent "
                    "interval and one more)", subject=ref)
        out += emit(s, cfg, f, now, one_shot=False)
        if firing_entry(s, "watch:freshness_lag", "freshness_lag", ref) is not None:
            silent[ref] = hz
    if silent:
        s.signals[SILENT] = silent
    else:
        s.signals.pop(SILENT, None)
    return out


def refreshed(s: RunState, cfg: RunConfig, ref: str, before: dict[str, Any] | None,
              after: dict[str, Any], found: list[Finding], now: int, at: int) -> list[Output]:
    """Resolve a dataset's silence page at a report of it that brings newer rows.

    ``before`` and ``after`` are the dataset's history before and after the report
    (:func:`datachecks.check`). A report that brings newer rows but is itself stale
    hands the alert to the freshness watch (it resolves after healthy reports).
    """
    silent = s.signals.get(SILENT)
    if not silent or ref not in silent:
        return []
    newest_before = ((before or {}).get("refresh") or [None])[0]
    newest = (after.get("refresh") or [None])[0]
    if newest is None or (newest_before is not None
                          and newest <= newest_before + datachecks.FRESH_JITTER_MS):
        return []  # no newer rows: still not refreshed
    del silent[ref]
    if not silent:
        del s.signals[SILENT]
    if any(f.detector == "watch:freshness_lag" for f in found):
        return []
    return resolve_now(s, cfg, "watch:freshness_lag", "freshness_lag", now, at, ref)


def _versions(s: RunState, uri: str, ref: str, detector: str) -> list[str]:
    """Return the other references of ``uri`` a rule of ``detector`` may be firing for."""
    subjects = {k.split("|", 2)[2] for k in s.evidence if k.startswith(detector + "|")}
    known = {*s.reports, *(s.signals.get("stages") or {}), *subjects}
    return sorted(r for r in known if r != ref and r.startswith(uri + "@"))


def clear_versions(s: RunState, cfg: RunConfig, detector: str, indicator: str, uri: str,
                   ref: str, now: int, at: int) -> list[Output]:
    """Count a healthy output of ``ref`` for the rule's alerts of the dataset's older versions.

    Only for a run that reads ``uri`` unversioned (any version is its data): each new
    version of such a dataset is reported once, so an alert of an empty version was
    never followed by a healthy report of that version and stayed firing for hours. An
    alert last seen after ``at`` (a replayed older output) is left alone.
    """
    if uri not in s.datasets:
        return []
    out: list[Output] = []
    for other in _versions(s, uri, ref, detector):
        entry = firing_entry(s, detector, indicator, other)
        if entry is not None and entry["last_seen_ms"] <= at:
            out += clear(s, cfg, detector, indicator, now, other, at)
    return out


def stage_failures(s: RunState, found: list[Finding]) -> list[Finding]:
    """Name the failed stage in a missing-report finding of a version only a failed stage wrote.

    A pipeline instrumented with ``data.stage`` alone reports a version through its
    stage; when the stage failed, the page says so (the stage, its code version, the
    error) instead of "no data-quality report".
    """
    stages: dict[str, dict[str, Any]] = s.signals.get("stages") or {}
    if not stages:
        return found
    out = []
    for f in found:
        failed = [(ref, st) for ref, st in stages.items()
                  if st.get("outcome") == "failed" and refs_match(f.subject, ref)]
        if not failed:
            out.append(f)
            continue
        ref, st = max(failed, key=lambda x: int(x[1].get("at_ms") or 0))
        code = f" ({st['code_version']})" if st.get("code_version") else ""
        error = st.get("error") or "no error given"
        out.append(replace(
            f, title=f"Stage {st.get('stage')}{code} writing {ref} failed: {error}",
            detail=f"{f.detail}; stage {st.get('stage')}{code} writing {ref} failed: {error}",
            labels={**(f.labels or {}), "stage": str(st.get("stage") or "")}))
    return out
