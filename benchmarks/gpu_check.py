"""A check of every method on a GPU: finite training, exact resume, float64 agreement, speed.

For each method's ``paper`` preset and each precision (``bf16-mixed``, ``32-true``):

1. ``selfcaps pretrain`` for ``--steps`` steps (``--deterministic``, no validation): the
   loss must stay finite (the command stops with exit code 3 otherwise); images/s, peak
   device memory;
2. the same for ``--steps // 2`` steps, then ``--resume`` to ``--steps``: the weights,
   buffers and step counters in ``last.ckpt`` must equal step 1's bit for bit (the largest
   difference is printed otherwise);
3. the trained network's features of 4 validation images on the device in
   float32 against the same network on the CPU in float64 (largest difference relative to
   the largest float64 value; TF32 is off unless the user's code turns it on);
4. the share of the device's matrix-product peak of that precision (a square GEMM measured in
   the same run) that the training reaches: matmul/conv FLOPs of one training step
   (``torch.utils.flop_counter``) x steps/s.

PoE trains in three stages of epochs: its copy has ``stage_epochs=[1,1,1]`` and a training
subset of ``steps/3`` batches, so that every stage runs.

    python benchmarks/gpu_check.py --data-root DIR [--steps 200] [--methods ...]
    python benchmarks/gpu_check.py --accelerator cpu --steps 3 --tiny   # the CI smoke test

``--tiny``: networks of each paper preset's structure with small widths, on mnist5k (no
data root needed), batch 8. Exit code 1 if any check failed.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from _common import gemm_peak_flops
from _method_steps import METHODS, TINY_MODEL, fit_steps, method_from_config, quiet_lightning
from selfcaps.cli import main as selfcaps
from selfcaps.cli.config import load_config, load_yaml
from selfcaps.eval.profile import flop_counter
from selfcaps.methods.io import load_checkpoint

PRECISIONS = {"bf16-mixed": torch.bfloat16, "32-true": torch.float32}

TINY_DATA = [
    "--data",
    "mnist5k",
    "--batch-size",
    "8",
    "data.eval_batch_size=16",
    "data.train_subset=64",
]


def method_args(name: str, precision: str, args: argparse.Namespace) -> list[str]:
    """The ``selfcaps pretrain`` arguments every run of ``name`` at ``precision`` shares."""
    out = ["--preset", "paper", "--accelerator", args.accelerator, "--precision", precision]
    out += ["--threads", str(args.threads), "--no-progress", "--deterministic"]
    out += ["monitor.knn_every_n_epochs=0"]
    if args.data_root:
        out += ["--data-root", args.data_root]
    if args.tiny:
        out += [*TINY_DATA, "monitor.knn_k=4", "eval.knn_k=4"]
        out += [f"model.{k}={v}" for k, v in TINY_MODEL[name].items()]
    if name == "poe":  # every stage: one epoch each of steps/3 batches
        batch = 8 if args.tiny else int(load_config(name, "paper").data.batch_size)
        per_stage = max(1, math.ceil(args.steps / 3))
        out += ["--epochs", "3", "model.stage_epochs=[1,1,1]"]
        out += [f"data.train_subset={per_stage * batch}"]
    else:
        out += ["--epochs", str(10**6)]
    return out


def pretrain(name: str, out: Path, steps: int, shared: list[str], resume: bool = False) -> int:
    """``selfcaps pretrain`` in this process (its console output swallowed); the exit code."""
    argv = ["pretrain", name, "--out", str(out), "--max-steps", str(steps)]
    argv += ["--resume"] if resume else shared
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return selfcaps(argv)


def largest_difference(a: Path, b: Path) -> float:
    """Largest difference between the weights and buffers of two runs' ``last.ckpt``."""
    wa, wb = (load_checkpoint(r / "checkpoints" / "last.ckpt")["state_dict"] for r in (a, b))
    if wa.keys() != wb.keys():
        return math.inf
    return max((wa[k].double() - wb[k].double()).abs().max().item() for k in wa)


def float64_agreement(run: Path, device: str) -> float:
    """Largest |device fp32 - CPU fp64| of the run's features, relative to the largest value."""
    method, dm = method_from_config(load_yaml(run / "config.yaml"))
    method.load_state_dict(load_checkpoint(run / "checkpoints" / "last.ckpt")["state_dict"])
    val = dm.split("val")
    x = torch.stack([dm.eval_transform(val[i][0]) for i in range(min(4, len(val)))])
    ref = copy.deepcopy(method).double().eval()
    method = method.to(device).eval()
    with torch.no_grad():
        got = method.features(x.to(device))
        want = ref.features(x.double())
    worst = 0.0
    for k, w in want.items():
        scale = w.abs().max().item() or 1.0
        worst = max(worst, (got[k].double().cpu() - w).abs().max().item() / scale)
    return worst


def step_flops(run: Path, precision: str, accelerator: str) -> float:
    """Matmul/conv FLOPs of one training step of the run's configuration, per image."""
    cfg = load_yaml(run / "config.yaml")
    method, dm = method_from_config(cfg)
    with flop_counter() as fc:
        fit_steps(method, dm, 1, precision, accelerator=accelerator)
    return fc.get_total_flops() / int(cfg["data"]["batch_size"])


def check_method(name: str, args: argparse.Namespace, root: Path, peaks: dict) -> list[dict]:
    rows = []
    cuda = args.accelerator != "cpu"
    device = "cuda" if cuda else "cpu"
    for precision in args.precisions:
        shared = method_args(name, precision, args)
        full, split = root / f"{name}-{precision}-full", root / f"{name}-{precision}-split"
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        code = pretrain(name, full, args.steps, shared)
        seconds = time.perf_counter() - t0
        row: dict[str, Any] = {"method": name, "precision": precision, "finite": code == 0}
        row["peak_mem_gib"] = torch.cuda.max_memory_allocated() / 2**30 if cuda else math.nan
        if code != 0:
            row.update(resume=math.nan, images_s=math.nan, share=math.nan, fp64=math.nan)
            rows.append(row)
            continue
        metrics = json.loads((full / "metrics.json").read_text())
        row["images_s"] = float(metrics["train_images_per_s"])
        row["seconds"] = seconds
        half = max(1, args.steps // 2)
        ok = pretrain(name, split, half, shared) == 0
        ok = ok and pretrain(name, split, args.steps, shared, resume=True) == 0
        row["resume"] = largest_difference(full, split) if ok else math.nan
        flops = step_flops(full, precision, args.accelerator)
        row["share"] = row["images_s"] * flops / peaks[precision]
        row["fp64"] = float64_agreement(full, device)
        rows.append(row)
    return rows


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``None``: ``sys.argv``)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    p.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=list(PRECISIONS))
    p.add_argument("--accelerator", default="gpu", help="gpu (CUDA) | cpu")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--tiny", action="store_true", help="small widths, mnist5k, batch 8")
    p.add_argument("--data-root", help="dataset root of the paper presets' data")
    p.add_argument("--threads", type=int, default=1, help="CPU threads")
    p.add_argument("--tolerance", type=float, default=1e-3, help="float64 agreement, relative")
    p.add_argument("--out", type=Path, help="keep the runs here (default: a temporary folder)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    quiet_lightning()
    cuda = args.accelerator != "cpu"
    if cuda and not torch.cuda.is_available():
        print("gpu_check: no CUDA device; use --accelerator cpu for the smoke test")
        return 2
    device = "cuda" if cuda else "cpu"
    n = 4096 if cuda else 256
    peaks = {k: gemm_peak_flops(n, 3, dt, device) for k, dt in PRECISIONS.items()}
    name = torch.cuda.get_device_name() if cuda else f"CPU ({args.threads} thread(s))"
    with tempfile.TemporaryDirectory() as tmp:
        root = args.out or Path(tmp)
        rows = [r for m in args.methods for r in check_method(m, args, root, peaks)]
    print(
        f"{name}: {n}^3 GEMM peak bf16 {peaks['bf16-mixed'] / 1e12:.3f} TFLOP/s, "
        f"fp32 {peaks['32-true'] / 1e12:.3f} TFLOP/s; {args.steps} steps per run"
    )
    print(
        f"{'method':<11}{'precision':<11}{'finite':>7}{'resume':>9}{'fp64 rel':>10}"
        f"{'images/s':>10}{'peak GiB':>9}{'% peak':>8}  ok"
    )
    failed = False
    for r in rows:
        ok = r["finite"] and r["resume"] == 0.0 and r["fp64"] <= args.tolerance
        failed |= not ok
        print(
            f"{r['method']:<11}{r['precision']:<11}{'yes' if r['finite'] else 'NO':>7}"
            f"{'exact' if r['resume'] == 0.0 else format(r['resume'], '.1e'):>9}"
            f"{r['fp64']:>10.1e}{r['images_s']:>10.1f}{r['peak_mem_gib']:>9.2f}"
            f"{100 * r['share']:>7.1f}%  {'yes' if ok else 'NO'}"
        )
    print(
        "(resume: largest weight difference of a run resumed at half way vs uninterrupted; "
        f"fp64 rel: device float32 features vs CPU float64, tolerance {args.tolerance:g})"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
