"""The canonical lineage hash and repeat group (core), as the SDK, emit and the sink fill them."""

from __future__ import annotations

import copy
import json

import pytest
from sdk_kit import Clock, ListTransport

from runwatch import init
from runwatch.adapters.publisher import Publisher
from runwatch.client.emit import emit_lines
from runwatch.core import lineage
from runwatch.core.codec import load_codec
from runwatch.core.storage.columns import COLUMNS
from runwatch.core.storage.rows import Origin, rows_for

BASE = {
    "event_id": "e1", "run_id": "r1", "emitted_at_ms": 1, "seq": 1,
    "source": {"kind": "sdk", "host": "h", "runwatch_version": "0"},
    "datasets": [{"uri": "s3://a", "version": "v1", "content_hash": "sha256:AB"},
                 {"uri": "s3://b", "version": None, "content_hash": None}],
    "transforms": [{"name": "dedup", "version": "1.2"}, {"name": "tok", "version": "3"}],
    "code_revision": "ABC123", "code_dirty": False, "image_digest": "sha256:FF",
    "config_hash": "sha256:c0ffee", "config": {"lr": "0.1", "batch": "64"},
    "hardware": {"nodes": ["n1"], "gpu_count": 8, "gpu_model": "H100"},
    "seed_policy": "fixed:42", "framework_versions": {"torch": "2.5"},
    "experiment_family": "fam", "team": "t", "parent_run_id": None,
    "resumed_from_checkpoint": None, "labels": {"x": "y"},
}


def m(**changes: object) -> dict:
    d = copy.deepcopy(BASE)
    d.update(changes)
    return d


def test_the_hash_is_sha256_hex_of_the_documented_form() -> None:
    h = lineage.lineage_hash(BASE)
    assert len(h) == 64 and int(h, 16) >= 0
    canon = lineage.canonical(BASE)
    assert canon["datasets"][0] == {"uri": "s3://a", "version": "v1", "content_hash": "sha256:ab"}
    assert canon["code_revision"] == "abc123" and canon["gpu_count"] == 8
    assert h != lineage.repeat_group(BASE)


def test_order_and_duplicates_do_not_change_it() -> None:
    shuffled = m(datasets=list(reversed(BASE["datasets"])) + [BASE["datasets"][0]],
                 transforms=list(reversed(BASE["transforms"])),
                 config=dict(reversed(list(BASE["config"].items()))))
    assert lineage.lineage_hash(shuffled) == lineage.lineage_hash(BASE)
    assert lineage.repeat_group(shuffled) == lineage.repeat_group(BASE)


@pytest.mark.parametrize(("field", "value", "changed"), [
    ("datasets", [{"uri": "s3://a", "version": "v2", "content_hash": "sha256:ab"}], "datasets"),
    ("transforms", [{"name": "dedup", "version": "1.3"}], "transforms"),
    ("code_revision", "def456", "code_revision"),
    ("code_dirty", True, "code_dirty"),
    ("image_digest", "sha256:ee", "image_digest"),
    ("config_hash", "sha256:beef", "config_hash"),
    ("hardware", {"nodes": ["n1"], "gpu_count": 4, "gpu_model": "H100"}, "gpu_count"),
    ("hardware", {"nodes": ["n1"], "gpu_count": 8, "gpu_model": "A100"}, "gpu_model"),
    ("seed_policy", "per-rank", "seed_policy"),
])
def test_each_lineage_field_changes_both_hashes(field: str, value: object, changed: str) -> None:
    other = m(**{field: value})
    assert lineage.lineage_hash(other) != lineage.lineage_hash(BASE)
    assert lineage.repeat_group(other) != lineage.repeat_group(BASE)
    diff = lineage.diff(lineage.canonical(BASE), lineage.canonical(other))
    assert [f for f, _, _ in diff] == [changed]


@pytest.mark.parametrize(("field", "value"), [
    ("labels", {"other": "label"}), ("team", "t2"), ("experiment_family", "f2"),
    ("resumed_from_checkpoint", "s3://ck/1"), ("framework_versions", {"torch": "2.6"}),
    ("event_id", "e2"), ("emitted_at_ms", 99), ("parent_run_id", "r0"),
    ("hardware", {"nodes": ["n7", "n8"], "gpu_count": 8, "gpu_model": "H100"}),
])
def test_what_is_not_lineage_leaves_it_alone(field: str, value: object) -> None:
    """A resumed run on other nodes, relabelled, keeps its lineage."""
    assert lineage.lineage_hash(m(**{field: value})) == lineage.lineage_hash(BASE)


def test_the_seed_is_left_out_of_the_repeat_group() -> None:
    other_seed = m(seed_policy="fixed:43")
    assert lineage.lineage_hash(other_seed) != lineage.lineage_hash(BASE)
    assert lineage.repeat_group(other_seed) == lineage.repeat_group(BASE)
    # a seed in the config: the producer's config hash covers it, the repeat group does not
    seven = m(config={"lr": "0.1", "train.seed": "7"}, config_hash="sha256:one")
    eight = m(config={"lr": "0.1", "train.seed": "8"}, config_hash="sha256:other")
    assert lineage.lineage_hash(eight) != lineage.lineage_hash(seven)
    assert lineage.repeat_group(eight) == lineage.repeat_group(seven)
    # ... but any other config change still separates the groups
    other_lr = m(config={"lr": "0.2", "train.seed": "7"}, config_hash="sha256:third")
    assert lineage.repeat_group(other_lr) != lineage.repeat_group(seven)


@pytest.mark.parametrize(("policy", "kind"), [("fixed:42", "fixed"), ("42", "fixed"),
                                              ("per-rank", "per-rank"), (None, None),
                                              ("  ", None), ("hash:run_id:3", "hash")])
def test_seed_kind(policy: str | None, kind: str | None) -> None:
    assert lineage.seed_kind(policy) == kind


def test_blank_and_case_are_normalised() -> None:
    assert lineage.lineage_hash(m(image_digest="  sha256:ff ")) == lineage.lineage_hash(BASE)
    assert lineage.lineage_hash(m(code_revision="")) == lineage.lineage_hash(
        m(code_revision=None))


def test_without_a_config_hash_the_config_map_counts() -> None:
    a = m(config_hash=None, config={"lr": "0.1"})
    assert lineage.lineage_hash(a) != lineage.lineage_hash(m(config_hash=None, config={"lr": "1"}))


def test_diff_says_old_and_new() -> None:
    new = m(datasets=[{"uri": "s3://a", "version": "v2"}], code_dirty=True)
    got = lineage.diff(lineage.canonical(BASE), lineage.canonical(new))
    assert got == [("datasets", "s3://a@v1#sha256:ab, s3://b", "s3://a@v2"),
                   ("code_dirty", "false", "true")]


def test_the_sdk_publishes_the_hashes_of_its_manifest() -> None:
    t = ListTransport()
    run = init(experiment_family="fam", config={"lr": 0.1, "seed": 1}, datasets=["s3://a"],
               seed_policy="fixed:1", transport=t, capture_lineage=False, install_hooks=False,
               clock=Clock(1_700_000_000_000), lineage={"image_digest": "sha256:aa"})
    run.finish()
    man = t.records("RunManifest")[0]
    assert man.lineage_hash == lineage.lineage_hash(man.to_dict())
    assert man.repeat_group == lineage.repeat_group(man.to_dict())
    t2 = ListTransport()
    run = init(experiment_family="fam", config={"lr": 0.1, "seed": 2}, datasets=["s3://a"],
               seed_policy="fixed:2", transport=t2, capture_lineage=False, install_hooks=False,
               clock=Clock(1_700_000_000_000), lineage={"image_digest": "sha256:aa"})
    run.finish()
    again = t2.records("RunManifest")[0]
    assert again.lineage_hash != man.lineage_hash
    assert again.repeat_group == man.repeat_group


def test_the_sdk_refuses_to_take_the_hash_from_the_caller() -> None:
    t = ListTransport()
    run = init(run_id="r", transport=t, capture_lineage=False, install_hooks=False,
               clock=Clock(1_700_000_000_000), lineage={"lineage_hash": "forged"})
    counters = run.finish()
    assert counters["lineage_dropped"] == 1
    man = t.records("RunManifest")[0]
    assert man.lineage_hash == lineage.lineage_hash(man.to_dict()) != "forged"


def test_emit_fills_the_hashes_a_hook_left_out() -> None:
    t = ListTransport()
    line = json.dumps({"type": "manifest", "run_id": "r", "code_revision": "abc",
                       "seed_policy": "fixed:3"})
    res = emit_lines(Publisher(t, kind="hook"), [line])
    assert res.errors == [] and res.published == 1
    man = load_codec().decode(t.out[0][2])
    assert man.lineage_hash == lineage.lineage_hash(man.to_dict())
    assert man.repeat_group == lineage.repeat_group(man.to_dict())


def test_the_sink_row_computes_what_a_producer_left_empty() -> None:
    rows = rows_for("runwatch.v1.RunManifest", m(lineage_hash="", repeat_group=""),
                    Origin("rw.lineage", 0, 5))
    row = dict(zip(COLUMNS["run_manifests"], rows[0][1], strict=True))
    assert row["lineage_hash"] == lineage.lineage_hash(BASE)
    assert row["repeat_group"] == lineage.repeat_group(BASE)
    assert list(row)[-3:] == ["kafka_topic", "kafka_partition", "kafka_offset"]


def test_text_is_hashed_as_the_record_carries_it() -> None:
    """A lone surrogate or bytes: the producer repairs them to U+FFFD, so does the hash."""
    assert lineage.lineage_hash(m(datasets=[{"uri": "s3://a\udcff"}])) == lineage.lineage_hash(
        m(datasets=[{"uri": "s3://a\ufffd"}])) == lineage.lineage_hash(
        m(datasets=[{"uri": b"s3://a\xff"}]))
