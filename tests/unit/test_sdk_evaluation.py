"""run.evaluation: what a release evaluation publishes, and its bad input."""

from __future__ import annotations

import math

import pytest

import runwatch
from runwatch.adapters.publisher import CaptureTransport, Publisher
from runwatch.client import data
from runwatch.core.codec import load_codec
from runwatch.core.gates import sketch
from runwatch.core.records import DataQualityReport, DatasetRef, ValidationResult

T0 = 1_800_000_000_000


def _published(t: CaptureTransport, kind: type) -> list:
    codec = load_codec()
    return [r for r in (codec.decode(m[2]) for m in t.messages) if isinstance(r, kind)]


def test_an_evaluation_per_slice_with_samples_intervals_and_the_incumbent() -> None:
    t = CaptureTransport()
    run = runwatch.init("fam", run_id="cand", transport=t, install_hooks=False,
                        capture_lineage=False, clock=lambda: T0)
    ev = DatasetRef(uri="s3://eval", version="v3")
    run.evaluation({"auc": 0.81}, dataset=ev, samples=5000, ci={"auc": (0.80, 0.82)},
                   incumbent="inc", now_ms=T0 + 1)
    run.evaluation({"auc": math.nan}, dataset="s3://eval", slice="age_65_plus", samples=-3,
                   ci={"auc": "wide", "f1": (0.1, 0.2)}, now_ms=T0 + 2)
    run.validation(10, {"val_loss": 1.0}, now_ms=T0 + 3)
    counts = run.finish(now_ms=T0 + 4)
    whole, sl, val = _published(t, ValidationResult)
    assert (whole.kind, whole.slice, whole.sample_count, whole.ci_low, whole.ci_high,
            whole.incumbent_run_id, whole.dataset) == (
        "evaluation", None, 5000, {"auc": 0.80}, {"auc": 0.82}, "inc", ev)
    assert (sl.slice, sl.sample_count, sl.ci_low, sl.incumbent_run_id) == (
        "age_65_plus", 0, {"f1": 0.1}, None)
    assert math.isnan(sl.metrics["auc"])  # published as it is: the gate fails on it
    assert val.kind == "validation"
    assert counts["dropped_wrong_type"] == 1  # the interval that is not a pair of numbers


def test_a_strict_run_raises_on_a_bad_interval() -> None:
    run = runwatch.init("fam", run_id="s", transport=CaptureTransport(), install_hooks=False,
                        capture_lineage=False, strict=True, clock=lambda: T0)
    with pytest.raises(TypeError, match="confidence interval 'auc'"):
        run.evaluation({"auc": 0.8}, dataset="s3://eval", ci={"auc": (1,)})
    run.finish(now_ms=T0)


def test_a_data_report_with_a_key_column_carries_its_row_key_sketch(tmp_path) -> None:
    t = CaptureTransport()
    pub = Publisher(t, kind="sdk")
    rows = {"account": [3, 1, 2, 2, None], "x": [1.0] * 5}
    data.report("s3://eval", "v3", "all", rows, key="account", publisher=pub,
                baseline_directory=tmp_path, now_ms=T0)
    data.report("s3://eval", "v3", "all", rows, key="missing", publisher=pub,
                baseline_directory=tmp_path, now_ms=T0)
    with_key, without = _published(t, DataQualityReport)
    assert with_key.key_sketch == sketch.sketch([1, 2, 3])
    assert without.key_sketch == ()


def test_release_evaluations_of_weaker_slices_do_not_look_like_a_validation_decline() -> None:
    from runwatch.core.records import Alert
    from runwatch.processor.memory import MemoryProcessor
    from runwatch.processor.settings import ProcessorSettings

    t = CaptureTransport()
    run = runwatch.init("fam", run_id="cand", transport=t, install_hooks=False,
                        capture_lineage=False, clock=lambda: T0)
    for i, (name, auc) in enumerate([(None, 0.9), ("a", 0.5), ("b", 0.4), ("c", 0.3)] * 3):
        run.evaluation({"auc": auc}, dataset="s3://eval", slice=name, now_ms=T0 + i)
    run.finish(now_ms=T0 + 100)
    m = MemoryProcessor(ProcessorSettings(save_interval_s=0), clock=lambda: T0 + 1_000)
    m.feed(t.messages)
    m.tick(T0 + 120_000)
    assert [a.detector for a in m.alerts if isinstance(a, Alert)] == []
