"""Shared by the kill, budget and signal tests: the reference run's arguments and comparisons.

The reference is a CoCa run with a step budget that ends in the middle of an epoch and
an epoch-interval cosine schedule, the case where Lightning's own ``max_steps`` made a
resumed run count an extra step and diverge (issue 14).
"""

import csv
import json

import torch
from safetensors.torch import load_file

from selfcaps.cli import main
from selfcaps.engine.checkpoints import load_checkpoint
from tests.runs import TINY

#: 256 images at batch 32: 8 steps an epoch; 20 steps end in the middle of epoch 2 (of 3).
ARGS = [
    "run",
    "coca",
    "--epochs",
    "3",
    "--max-steps",
    "20",
    *TINY,
    "optim.scheduler=cosine",
    "eval.knn_k=5",
]
#: metrics.json values that measure the machine, not the run.
TIMING = {"train_time_s", "train_images_per_s", "finetune_time_s"}
#: metrics.csv's column that measures the machine: wall-clock minutes at each validation.
ELAPSED = "elapsed_min"


def resume(run_dir, *flags: str) -> None:
    assert main(["run", "coca", "--out", str(run_dir), "--resume", *flags]) == 0


def resume_at(run_dir):
    return load_checkpoint(run_dir / "checkpoints" / "last.ckpt")["resume_at"]


def csv_rows(run_dir):
    """metrics.csv's rows without the wall-clock minutes (checked to grow, then dropped)."""
    with open(run_dir / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    minutes = [float(r[ELAPSED]) for r in rows if r.get(ELAPSED)]
    assert len(minutes) == sum(1 for r in rows if r.get("val_knn_top1"))  # one per validation
    assert minutes == sorted(minutes) and all(m >= 0 for m in minutes)  # resumes count on
    return [{k: v for k, v in r.items() if k != ELAPSED} for r in rows]


def assert_same_run(ref, run, csv_too: bool = True) -> None:
    """Weights, last.ckpt's weights and optimiser, metrics (and the per-epoch log) equal."""
    wa, wb = load_file(ref / "model.safetensors"), load_file(run / "model.safetensors")
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k
    la = load_checkpoint(ref / "checkpoints" / "last.ckpt")
    lb = load_checkpoint(run / "checkpoints" / "last.ckpt")
    for k in la["state_dict"]:
        assert torch.equal(la["state_dict"][k], lb["state_dict"][k]), k
    for sa, sb in zip(
        la["optimizer_states"][0]["state"].values(),
        lb["optimizer_states"][0]["state"].values(),
        strict=True,
    ):
        assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert la["lr_schedulers"] == lb["lr_schedulers"]
    ma = json.loads((ref / "metrics.json").read_text())
    mb = json.loads((run / "metrics.json").read_text())
    differ = {
        k: (ma.get(k), mb.get(k))
        for k in (ma.keys() | mb.keys()) - TIMING
        if ma.get(k) != mb.get(k) or (k in ma) != (k in mb)
    }
    assert not differ, f"metrics.json differs (reference, resumed): {differ}"
    if csv_too:
        assert csv_rows(ref) == csv_rows(run)
    assert not list(run.rglob("*.tmp"))
