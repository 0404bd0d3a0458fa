"""The SDK as training scripts call it (a "stranger round", 2026-12-07).

What a new user passes costs that value only: an ``argparse.Namespace`` or a dataclass as
``config=`` (what ``parse_args()`` and config classes give) and a label left ``None`` lost
the whole RunManifest; ``datasets=`` given one string became one dataset per character; an
int past a float's or a record's range (a loss of ``10**400``, ``samples=2**64``) lost the
whole step; per-layer metrics over the 1 MB record limit lost the step's NaN loss. A Ctrl-C
that ends the script ends the run ``cancelled`` (it said ``failed``); ``finish`` after a
checkpoint of tens of GB still publishes the run's end; a Lightning job on a GPU publishes
its losses and metrics (a CUDA tensor refuses ``numpy()``); a job that reuses one metrics
dict for every step publishes each step's values (the thread read the dict later, as the
job had changed it: 1,999 of 2,000 steps carried the last step's accuracy).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sdk_kit import child_script, read_records

import runwatch
from runwatch.adapters.publisher import CaptureTransport
from runwatch.core.codec import load_codec


def job(**init: Any) -> tuple[Any, CaptureTransport]:
    t = CaptureTransport()
    run = runwatch.init("r17-family", run_id="r17-job", team="ml", transport=t,
                        install_hooks=False, capture_lineage=False, **init)
    return run, t


def records(t: CaptureTransport, name: str) -> list[Any]:
    codec = load_codec()
    return [r for r in (codec.decode(v) for _, _, v in t.messages) if type(r).__name__ == name]


def manifest(**init: Any) -> tuple[Any, dict[str, int]]:
    run, t = job(**init)
    run.step(1, loss=1.0)
    counters = run.finish()
    found = records(t, "RunManifest")
    assert len(found) == 1, f"the run published {len(found)} manifests ({counters})"
    return found[0], counters


@dataclasses.dataclass
class TrainConfig:
    lr: float = 3e-4
    layers: int = 12
    data: Path = Path("/data/corpus")


def test_an_argparse_namespace_config_is_read_as_its_fields() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--batch", type=int, default=256)
    args = parser.parse_args([])
    m, counters = manifest(config=args)
    assert m.config == {"lr": "0.1", "batch": "256"}
    assert m.config_hash == manifest(config={"lr": 0.1, "batch": 256})[0].config_hash
    assert not counters.get("manifest_errors")


def test_a_dataclass_config_is_read_as_its_fields() -> None:
    m, counters = manifest(config=TrainConfig())
    assert m.config == {"lr": "0.0003", "layers": "12", "data": "/data/corpus"}
    assert m.config_hash is not None
    assert not counters.get("manifest_errors")


def test_a_config_of_another_kind_is_left_out_and_counted() -> None:
    m, counters = manifest(config=[("lr", 0.1)])
    assert m.config == {}
    assert m.config_hash is None
    assert counters["dropped_wrong_type"] == 1


def test_a_config_whose_keys_do_not_sort_together_keeps_the_manifest() -> None:
    m, counters = manifest(config={"milestones": {1: 0.1, "final": 0.01}, "lr": 0.1})
    assert m.config == {"milestones.1": "0.1", "milestones.final": "0.01", "lr": "0.1"}
    assert m.config_hash is not None
    assert not counters.get("manifest_errors")


def test_one_dataset_given_as_a_string_is_that_dataset() -> None:
    m, _ = manifest(datasets="s3://corpus@v7")
    assert [(d.uri, d.version) for d in m.datasets] == [("s3://corpus", "v7")]
    m, _ = manifest(datasets={"uri": "s3://corpus", "version": "v8"})
    assert [(d.uri, d.version) for d in m.datasets] == [("s3://corpus", "v8")]


def test_a_label_left_none_costs_that_label_only() -> None:
    m, counters = manifest(labels={"owner": "ana", "ticket": None, "gpus": 8})
    assert m.labels == {"owner": "ana", "gpus": "8"}
    assert counters["dropped_wrong_type"] == 1
    assert not counters.get("encode_errors")


def test_an_int_past_a_float_or_a_record_costs_that_argument_only() -> None:
    run, t = job()
    run.step(1, loss=10**400, metrics={"acc": 0.5}, samples=32)
    run.step(2, loss=2.0, metrics={"big": 10**400, "acc": 0.25}, samples=32)
    run.step(3, loss=3.0, samples=2**64, tokens=2**70, epoch=2**64)
    run.step(4, loss=4.0, lr=10**400, grad_norm=-(10**400))
    run.validation(5, {"val_loss": 10**400, "val_acc": 0.75}, epoch=2**64)
    run.checkpoint("s3://ckpt/step-6", step=2**64)
    run.step(2**64, loss=7.0)  # a step no record holds: the call is dropped
    counters = run.finish()
    learning = {r.step: r for r in records(t, "LearningStep")}
    timing = {r.step: r for r in records(t, "StepTiming")}
    assert sorted(timing) == [1, 2, 3, 4], counters
    assert math.isnan(learning[1].loss) and learning[1].metrics == {"acc": 0.5}
    assert learning[2].loss == 2.0 and learning[2].metrics == {"acc": 0.25}
    assert learning[3].loss == 3.0 and learning[3].epoch == 0
    assert (timing[3].samples, timing[3].tokens) == (0, None)
    assert learning[4].loss == 4.0 and learning[4].lr is None and learning[4].grad_norm is None
    [val] = records(t, "ValidationResult")
    assert val.metrics == {"val_acc": 0.75} and val.epoch == 0
    [ckpt] = records(t, "CheckpointEvent")
    assert ckpt.step == 0
    # loss 1, metric big, samples, tokens, epoch 3, lr, grad norm, val_loss, val epoch,
    # checkpoint step, step 2**64
    assert counters["dropped_wrong_type"] == 11, counters
    assert not counters.get("build_errors") and not counters.get("encode_errors"), counters


CTRL_C = child_script(
    """
    import sys
    import runwatch
    OUT = sys.argv[2]
    # <file transport>
    if sys.argv[1] == "hook":
        run = runwatch.init("x", run_id="r17-ctrl-c", transport=T(), capture_lineage=False)
        run.step(1, loss=1.0)
        raise KeyboardInterrupt
    with runwatch.init("x", run_id="r17-ctrl-c", transport=T(), capture_lineage=False) as run:
        run.step(1, loss=1.0)
        raise KeyboardInterrupt
    """
)


@pytest.mark.parametrize(("mode", "reason"), [("hook", "uncaught KeyboardInterrupt"),
                                              ("with", "KeyboardInterrupt")])
def test_a_ctrl_c_that_ends_the_script_cancels_the_run(tmp_path: Path, mode: str,
                                                        reason: str) -> None:
    out, script = tmp_path / "out.bin", tmp_path / "job.py"
    script.write_text(CTRL_C)
    p = subprocess.run([sys.executable, str(script), mode, str(out)], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode in (-2, 130), p.stderr  # the interpreter's own Ctrl-C exit, kept
    assert "KeyboardInterrupt" in p.stderr  # the traceback is still printed
    jobs = [r for r in read_records(out) if type(r).__name__ == "JobEvent"]
    assert [(j.state, j.reason) for j in jobs] == [("running", None), ("cancelled", reason)]


def test_finish_after_a_large_checkpoint_still_ends_the_run(tmp_path: Path) -> None:
    """The SDK hashes a checkpoint on its publishing thread: a file of tens of GB (an LLM's
    last save, then ``run.finish()``) held the thread past finish's wait, and the final
    JobEvent, queued behind it, was dropped with the checkpoint and the last steps: the run
    never ended (paged as stalled later). Now the hashing stops when the wait runs out."""
    ckpt = tmp_path / "final.ckpt"
    with ckpt.open("wb") as f:  # sparse: 64 GiB that take no disk, and tens of s to hash
        f.truncate(64 << 30)
    run, t = job()
    run.step(1, loss=1.0)
    run.checkpoint(str(ckpt), step=1, duration_ms=2_000.0)
    run.step(2, loss=0.9)
    counters = run.finish(timeout=1.0)
    jobs = [(j.state, j.reason) for j in records(t, "JobEvent")]
    assert jobs == [("running", None), ("succeeded", None)], counters
    [saved] = records(t, "CheckpointEvent")
    assert (saved.outcome, saved.size_bytes, saved.sha256) == ("ok", 64 << 30, None)
    assert sorted(r.step for r in records(t, "LearningStep")) == [1, 2]
    assert counters["checkpoint_unhashed"] == 1 and not counters.get("dropped_unsent"), counters


class GpuScalar:
    """A one-element torch tensor on a GPU, as torch documents it: ``item()`` copies it to the
    host; ``numpy()`` refuses (TypeError), as it does (RuntimeError) for one that needs grad."""

    def __init__(self, value: float, requires_grad: bool = False) -> None:
        self.value, self.requires_grad = value, requires_grad
        self.shape = ()

    def item(self) -> float:
        return self.value

    def numpy(self) -> Any:
        if self.requires_grad:
            msg = "Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy()"
            raise RuntimeError(msg)
        msg = ("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the "
               "tensor to host memory first.")
        raise TypeError(msg)


class LightningBase:  # stand-in for lightning.pytorch.Callback
    pass


class _Obj:
    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)


def test_a_lightning_job_on_a_gpu_publishes_its_loss_and_metrics() -> None:
    from runwatch.client.callbacks import lightning_callback

    run, t = job()
    cb = lightning_callback(run, base=LightningBase)
    opt = _Obj(param_groups=[{"lr": 1e-3}])
    trainer = _Obj(global_step=0, current_epoch=0, optimizers=[opt], sanity_checking=False,
                   callback_metrics={"train_acc": GpuScalar(0.75)}, checkpoint_callback=None)
    for i in range(3):
        cb.on_train_batch_start(trainer, None, None, i)
        trainer.global_step += 1
        cb.on_train_batch_end(trainer, None, {"loss": GpuScalar(2.0 - i, requires_grad=i == 2)},
                              None, i)
    trainer.callback_metrics = {"val_loss": GpuScalar(1.5), "val_acc": GpuScalar(0.5)}
    cb.on_validation_end(trainer, None)
    run.finish()
    steps = records(t, "LearningStep")
    assert [(s.step, s.loss, s.metrics) for s in steps] == [
        (1, 2.0, {"train_acc": 0.75}), (2, 1.0, {"train_acc": 0.75}),
        (3, 0.0, {"train_acc": 0.75})]
    [val] = records(t, "ValidationResult")
    assert (val.step, val.metrics) == (3, {"val_loss": 1.5, "val_acc": 0.5})


def test_a_step_whose_metrics_pass_the_record_limit_keeps_its_nan_loss() -> None:
    """Per-layer gradient norms (40,000 metrics, about 2 MB) made the LearningStep too large
    to publish, and the NaN loss it carried, which pages, went with it."""
    run, t = job()
    per_layer = {f"grad_norm/model.layers.{i // 10}.mlp.proj_{i % 10}.weight": 0.1
                 for i in range(40_000)}
    run.step(1, loss=float("nan"), metrics=per_layer, lr=1e-3)
    run.step(2, loss=1.0, metrics={"acc": 0.5})
    counters = run.finish()
    steps = {s.step: s for s in records(t, "LearningStep")}
    assert sorted(steps) == [1, 2], counters
    assert math.isnan(steps[1].loss) and steps[1].nonfinite_count == 1
    assert steps[1].metrics == {} and steps[1].lr == 1e-3
    assert steps[2].metrics == {"acc": 0.5}
    assert counters["metrics_oversize"] == 1 and not counters.get("oversize"), counters


def test_a_metrics_dict_reused_for_every_step_publishes_each_steps_values() -> None:
    run, t = job()
    logs: dict[str, float] = {}
    for i in range(2_000):
        logs["acc"] = float(i)
        if i == 1_000:
            logs["top5"] = 1.0  # a key added later: the dict changes size as well
        run.step(i, loss=1.0, metrics=logs)
    counters = run.finish()
    steps = records(t, "LearningStep")
    assert len(steps) == 2_000, counters
    wrong = [(s.step, s.metrics) for s in steps
             if s.metrics != ({"acc": float(s.step)} if s.step < 1_000
                              else {"acc": float(s.step), "top5": 1.0})]
    assert wrong == [], f"{len(wrong)} steps carry another step's metrics: {wrong[:3]}"
