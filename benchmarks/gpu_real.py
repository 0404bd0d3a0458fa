"""Real-GPU check of the producers: the node agent on live NVML, and the SDK's
Lightning and Hugging Face callbacks in real GPU training loops.

Needs a machine with an NVIDIA GPU, torch, lightning and transformers (CI has
none of these: the unit tests cover the same logic against test doubles and
stand-ins). Each part that cannot run here is reported as skipped, with why.

    python benchmarks/gpu_real.py [--out DIR]

Parts:
  1. agent: NVML readings of GPU 0 while idle and while a child process (with
     ``RUNWATCH_RUN_ID`` in its environment) runs bf16 matrix products; checks
     utilization, SM occupancy (GPM), memory and the attribution of the child's
     GPU process to its run.
  2. agent cost: CPU time per tick (process time) with host figures only and
     with every GPU, records encoded to Avro, median of the ticks.
  3. lightning: two short fits with the runwatch callback, a fast and a slow
     data loader; checks the loader share each reports, the samples per step,
     and every checkpoint event against the file Lightning wrote (size, sha256).
  4. huggingface: a Trainer run with logging every step and saves every 20.
Every record the parts produce is written, Avro-encoded, to
``DIR/records.bin`` (``<u32 topic len><topic><u32 len><value>`` frames) so it can
be replayed through the processor's core elsewhere; a summary goes to
``DIR/summary.json``. Exit status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import runwatch
from runwatch.adapters.host import HostSampler
from runwatch.adapters.nvml import Nvml
from runwatch.adapters.publisher import CaptureTransport, Publisher
from runwatch.agent.service import NodeAgent, RunAttributor
from runwatch.client.callbacks import huggingface_callback, lightning_callback
from runwatch.core.codec import load_codec

LOAD = r"""
import os, sys, time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
(a @ b).sum().item()
open(sys.argv[1], "w").write(str(os.getpid()))
end = time.time() + float(sys.argv[2])
while time.time() < end:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
"""

CHECKS: list[tuple[str, bool, str]] = []


def check(name: str, ok: bool, detail: str) -> None:
    CHECKS.append((name, bool(ok), detail))
    print(f"  [{'ok' if ok else 'FAIL'}] {name}: {detail}", flush=True)


def decoded(t: CaptureTransport) -> list[Any]:
    codec = load_codec()
    return [codec.decode(v) for _, _, v in t.messages]


def ticks(agent: NodeAgent, n: int) -> list[Any]:
    out = []
    for _ in range(n):
        time.sleep(1.0)
        out.append(agent.tick())
    return out


def part_agent(all_msgs: list[tuple[str, Any, bytes]]) -> dict[str, Any]:
    nv = Nvml.open()
    if nv is None:
        return {"skipped": "no NVML driver"}
    out: dict[str, Any] = {"gpus": nv.device_count(), "name": nv.device_name(0),
                           "gpm": bool(nv._gpm_ok and nv._gpm_ok[0])}
    print(f"agent: {out['gpus']} x {out['name']}, GPM {'on' if out['gpm'] else 'off'}", flush=True)
    t = CaptureTransport()
    agent = NodeAgent(Publisher(t, kind="agent"), node="gpu-check", nvml=nv,
                      attributor=RunAttributor())
    idle = ticks(agent, 3)
    with tempfile.TemporaryDirectory() as d:
        ready = Path(d) / "ready"
        env = dict(os.environ, RUNWATCH_RUN_ID="gpu-check-load")
        child = subprocess.Popen([sys.executable, "-c", LOAD, str(ready), "12"], env=env)
        try:
            t0 = time.time()
            while not ready.exists() and child.poll() is None and time.time() - t0 < 120:
                time.sleep(0.2)
            pid = int(ready.read_text()) if ready.exists() else -1
            busy = ticks(agent, 6)
            child.wait(timeout=60)
        finally:
            if child.poll() is None:  # never leave the GPU load running
                child.kill()
                child.wait()
    after = ticks(agent, 2)
    nv.close()
    all_msgs.extend(t.messages)

    def g0(s: Any) -> Any:
        return s.gpus[0]

    for label, ss in (("idle", idle), ("busy", busy), ("after", after)):
        for s in ss:
            g = g0(s)
            procs = [(p.pid, p.run_id, p.used_mem_bytes >> 20) for p in g.processes]
            print(f"  {label:5} util {g.util_pct:5.1f}% sm_occ {g.sm_active_pct} mem "
                  f"{g.mem_used_bytes >> 20} MiB power {g.power_w:.0f} W sm_clk {g.sm_clock_mhz} "
                  f"procs {procs}", flush=True)
    busy_util = statistics.median(g0(s).util_pct for s in busy[1:])
    idle_util = statistics.median(g0(s).util_pct for s in idle)
    occ = [g0(s).sm_active_pct for s in busy[1:] if g0(s).sm_active_pct is not None]
    runs = {p.run_id for s in busy for p in g0(s).processes if p.pid == pid}
    pids = {p.pid for s in busy for p in g0(s).processes}
    out.update(busy_util=busy_util, idle_util=idle_util, sm_occupancy=occ, child_pid=pid,
               pids_seen=sorted(pids), runs_of_child=sorted(r or "" for r in runs),
               sample_run_ids=sorted({s.run_id or "" for s in busy}))
    check("util while busy", busy_util >= 50, f"median {busy_util}% (idle {idle_util}%)")
    check("mem while busy", g0(busy[-1]).mem_used_bytes > g0(idle[0]).mem_used_bytes,
          f"{g0(idle[0]).mem_used_bytes >> 20} -> {g0(busy[-1]).mem_used_bytes >> 20} MiB")
    if out["gpm"]:
        check("SM occupancy (GPM) while busy", bool(occ) and max(occ) > 0, f"{occ}")
    else:
        check("SM occupancy (GPM) reported None without GPM",
              all(g0(s).sm_active_pct is None for s in busy), "GPM off")
    check("child's GPU process listed", pid in pids, f"child pid {pid}, seen {sorted(pids)}")
    check("child's process attributed to its run", runs == {"gpu-check-load"}, f"{runs}")
    return out


def part_agent_cost() -> dict[str, Any]:
    nv = Nvml.open(quiet=True)
    if nv is None:
        return {"skipped": "no NVML driver"}
    res: dict[str, Any] = {}
    for label, nvml in (("host only", None), ("all GPUs", nv)):
        agent = NodeAgent(Publisher(CaptureTransport(), kind="agent"), node="cost",
                          nvml=nvml, host=HostSampler())
        agent.tick()
        per = []
        for _ in range(15):
            c0 = time.process_time()
            agent.tick()
            per.append((time.process_time() - c0) * 1000.0)
            time.sleep(0.2)
        res[label] = statistics.median(per)
    nv.close()
    res["ratio"] = res["all GPUs"] / max(res["host only"], 1e-9)
    print(f"agent cost per tick (median of 15, process CPU): host only "
          f"{res['host only']:.2f} ms, all GPUs {res['all GPUs']:.2f} ms "
          f"(x{res['ratio']:.1f}); at 1 Hz that is {res['all GPUs'] / 10:.2f} % of one core",
          flush=True)
    return res


def _fit_lightning(root: Path, slow_ms: float, all_msgs: list[Any]) -> dict[str, Any]:
    import lightning.pytorch as pl
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Data(Dataset):  # type: ignore[type-arg]
        def __init__(self) -> None:
            g = torch.Generator().manual_seed(0)
            self.x = torch.randn(2048, 64, generator=g)
            self.y = (self.x[:, :8].sum(1) > 0).long()

        def __len__(self) -> int:
            return len(self.x)

        def __getitem__(self, i: int) -> Any:
            if slow_ms:
                time.sleep(slow_ms / 1000.0)
            return self.x[i], self.y[i]

    class Model(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(64, 1024), torch.nn.ReLU(),
                                           torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                                           torch.nn.Linear(1024, 2))

        def training_step(self, batch: Any, i: int) -> Any:
            x, y = batch
            loss = torch.nn.functional.cross_entropy(self.net(x), y)
            self.log("train_acc", (self.net(x).argmax(1) == y).float().mean())
            return loss

        def validation_step(self, batch: Any, i: int) -> None:
            x, y = batch
            self.log("val_loss", torch.nn.functional.cross_entropy(self.net(x), y))

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.05)

    t = CaptureTransport()
    run = runwatch.init("gpu-check", team="ml", transport=t, install_hooks=False,
                        run_id=f"lightning-{'slow' if slow_ms else 'fast'}")
    ckpt = pl.callbacks.ModelCheckpoint(dirpath=str(root), save_top_k=-1,
                                        every_n_epochs=1)
    tr = pl.Trainer(max_epochs=3, limit_train_batches=30, limit_val_batches=16,
                    val_check_interval=0.5,  # a validation mid-epoch, between two batches
                    accelerator="gpu", devices=1, logger=False, enable_progress_bar=False,
                    callbacks=[lightning_callback(run), ckpt], enable_model_summary=False)
    dl = DataLoader(Data(), batch_size=32, shuffle=True)
    t0 = time.perf_counter()
    tr.fit(Model(), dl, DataLoader(Data(), batch_size=64))
    wall = time.perf_counter() - t0
    run.finish("succeeded")
    all_msgs.extend(t.messages)
    recs = decoded(t)
    st = [r for r in recs if type(r).__name__ == "StepTiming"]
    ls = [r for r in recs if type(r).__name__ == "LearningStep"]
    ck = [r for r in recs if type(r).__name__ == "CheckpointEvent"]
    shares = [r.loader_wait_ms / r.step_ms for r in st if r.step_ms > 0]
    files = sorted(root.glob("*.ckpt"))
    return {"wall_s": wall, "steps": len(st), "learning": len(ls),
            "loader_share_median": statistics.median(shares), "loader_share_max": max(shares),
            "step_ms_median": statistics.median(r.step_ms for r in st),
            "samples": sorted({r.samples for r in st}),
            "val": sum(type(r).__name__ == "ValidationResult" for r in recs),
            "losses_finite": all(r.loss == r.loss for r in ls),
            "checkpoints": [(r.uri, r.size_bytes, r.sha256, r.duration_ms, r.outcome) for r in ck],
            "files": {str(f): (f.stat().st_size, hashlib.sha256(f.read_bytes()).hexdigest())
                      for f in files}}


def part_lightning(all_msgs: list[Any]) -> dict[str, Any]:
    try:
        import lightning.pytorch  # noqa: F401
        import torch
    except ImportError as exc:
        return {"skipped": f"{exc}"}
    if not torch.cuda.is_available():
        return {"skipped": "torch sees no GPU"}
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as d:
        for label, slow in (("fast", 0.0), ("slow", 1.5)):
            r = _fit_lightning(Path(d) / label, slow, all_msgs)
            out[label] = r
            print(f"lightning {label} loader: {r['steps']} steps in {r['wall_s']:.1f} s, "
                  f"step median {r['step_ms_median']:.1f} ms, loader share median "
                  f"{r['loader_share_median']:.2f}, samples {r['samples']}, "
                  f"{len(r['checkpoints'])} checkpoint events, {len(r['files'])} files",
                  flush=True)
            check(f"lightning {label}: one step record per batch", r["steps"] == 90
                  and r["learning"] == 90, f"{r['steps']} timings, {r['learning']} learning")
            check(f"lightning {label}: samples per step", r["samples"] == [32], f"{r['samples']}")
            check(f"lightning {label}: validation results", r["val"] >= 6, f"{r['val']}")
            ck = r["checkpoints"]
            on_disk = {u: (s, h) for u, s, h, _, _ in ck}
            check(f"lightning {label}: checkpoint events match the files written",
                  on_disk == r["files"] and all(o == "ok" for *_, o in r["checkpoints"]),
                  f"events {[(Path(u).name, s, (h or '')[:8], o) for u, s, h, _, o in ck]} "
                  f"files {[(Path(f).name, s, h[:8]) for f, (s, h) in r['files'].items()]}")
        check("lightning: validation between batches is not counted as loader wait",
              out["fast"]["loader_share_max"] < 0.8,
              f"fast run's largest loader share {out['fast']['loader_share_max']:.2f}")
        check("lightning: loader share tells a slow loader from a fast one",
              out["slow"]["loader_share_median"] > 0.5 > 0.2 > out["fast"]["loader_share_median"],
              f"fast {out['fast']['loader_share_median']:.2f}, "
              f"slow {out['slow']['loader_share_median']:.2f}")
    return out


def part_huggingface(all_msgs: list[Any]) -> dict[str, Any]:
    try:
        import torch
        import transformers
    except ImportError as exc:
        return {"skipped": f"{exc}"}
    if not torch.cuda.is_available():
        return {"skipped": "torch sees no GPU"}

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(32, 2)

        def forward(self, x: Any, labels: Any = None) -> Any:
            logits = self.net(x)
            return {"loss": torch.nn.functional.cross_entropy(logits, labels), "logits": logits}

    g = torch.Generator().manual_seed(0)
    xs = torch.randn(640, 32, generator=g)
    data = [{"x": xs[i], "labels": int(xs[i, 0] > 0)} for i in range(640)]
    t = CaptureTransport()
    run = runwatch.init("gpu-check", team="ml", transport=t, install_hooks=False,
                        run_id="hf-trainer")
    with tempfile.TemporaryDirectory() as d:
        args = transformers.TrainingArguments(
            output_dir=d, max_steps=40, per_device_train_batch_size=16, logging_steps=1,
            save_steps=20, report_to=[], eval_strategy="steps", eval_steps=20,
            per_device_eval_batch_size=64, disable_tqdm=True)
        trainer = transformers.Trainer(model=Tiny(), args=args, train_dataset=data,
                                       eval_dataset=data[:128],
                                       callbacks=[huggingface_callback(run)])
        trainer.train()
        run.finish("succeeded")
        dirs = {str(p): p for p in Path(d).glob("checkpoint-*")}
        recs = decoded(t)
        from runwatch.client.files import file_digest

        digests = {u: file_digest(u) for u in dirs}
    all_msgs.extend(t.messages)
    ls = [r for r in recs if type(r).__name__ == "LearningStep"]
    ck = [r for r in recs if type(r).__name__ == "CheckpointEvent"]
    vr = [r for r in recs if type(r).__name__ == "ValidationResult"]
    out = {"learning": len(ls), "checkpoints": [(r.uri, r.size_bytes, r.outcome) for r in ck],
           "validation": len(vr), "grad_norm": sum(r.grad_norm is not None for r in ls)}
    print(f"huggingface: {len(ls)} learning steps, {len(vr)} validations, checkpoints "
          f"{[(Path(u).name, s, o) for u, s, o in out['checkpoints']]}", flush=True)
    check("hf: one learning step per optimizer step", [r.step for r in ls] == list(range(1, 41)),
          f"{len(ls)} steps")
    check("hf: grad norm carried", out["grad_norm"] == len(ls), f"{out['grad_norm']}")
    check("hf: validations", len(vr) == 2, f"{len(vr)}")
    check("hf: checkpoint events match the directories saved",
          {r.uri: (r.size_bytes, r.sha256) for r in ck} == digests,
          f"{sorted(Path(u).name for u in digests)}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    msgs: list[tuple[str, Any, bytes]] = []
    summary: dict[str, Any] = {}
    for name, fn in (("agent", lambda: part_agent(msgs)), ("agent_cost", part_agent_cost),
                     ("lightning", lambda: part_lightning(msgs)),
                     ("huggingface", lambda: part_huggingface(msgs))):
        print(f"== {name}", flush=True)
        try:
            summary[name] = fn()
        except Exception as exc:  # report and go on to the next part
            import traceback

            traceback.print_exc()
            summary[name] = {"error": repr(exc)}
            check(f"{name} ran", False, repr(exc))
        if "skipped" in summary[name]:
            print(f"  skipped: {summary[name]['skipped']}", flush=True)
    with (out / "records.bin").open("wb") as f:
        for topic, _, value in msgs:
            tb = topic.encode()
            f.write(struct.pack(">I", len(tb)) + tb + struct.pack(">I", len(value)) + value)
    summary["checks"] = CHECKS
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    failed = [c for c in CHECKS if not c[1]]
    print(f"{len(CHECKS) - len(failed)}/{len(CHECKS)} checks passed; {len(msgs)} records "
          f"in {out / 'records.bin'}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    threading.excepthook = lambda a: print("thread error:", a.exc_value, file=sys.stderr)
    sys.exit(main())
