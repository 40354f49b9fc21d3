"""Real SIGKILLs at named points and budgets that stop training, then ``--resume``.

The final weights (``model.safetensors`` and ``last.ckpt``), ``metrics.json`` and
``metrics.csv`` must equal an uninterrupted run's bit for bit (``--deterministic``, CPU).
The reference is a CoCa run with a step budget that ends in the middle of an epoch and
an epoch-interval cosine schedule, the case where Lightning's own ``max_steps`` made a
resumed run count an extra step and diverge (issue 14).
"""

import csv
import json

import pytest
import torch
from safetensors.torch import load_file

from selfcaps.cli import main
from selfcaps.methods.io import load_checkpoint
from tests.runs import TINY, run_killed_at

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
    assert {k: v for k, v in ma.items() if k not in TIMING} == {
        k: v for k, v in mb.items() if k not in TIMING
    }
    if csv_too:
        assert csv_rows(ref) == csv_rows(run)
    assert not list(run.rglob("*.tmp"))


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("uninterrupted") / "run"
    assert main([*ARGS, "--out", str(out)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert (m["stopped_by"], m["steps"], m["epochs_trained"], m["epochs_planned"]) == (
        "max_steps",
        20,
        2,
        3,
    )
    assert [r["step"] for r in csv_rows(out) if r["train_loss"]] == ["7", "15", "19"]
    return out


@pytest.mark.slow
def test_killed_mid_epoch_in_validation_and_in_final_evaluation(reference, tmp_path):
    """Three kills in one run, each followed by --resume; the last resume finishes it."""
    run = tmp_path / "run"
    # After the 11th batch: in epoch 1, after last.ckpt of epoch 0 (the case).
    run_killed_at("train_batch", 11, *ARGS, "--out", str(run))
    assert resume_at(run) == [1, 0] and not (run / "metrics.json").exists()
    # In epoch 1's validation (bank: 1 batch, validation split: 2 batches).
    run_killed_at("val_batch", 2, "run", "coca", "--out", str(run), "--resume")
    assert resume_at(run) == [1, 0]
    # Training is over (step 20, in epoch 2): killed as the final evaluation starts.
    run_killed_at("evaluate", 1, "run", "coca", "--out", str(run), "--resume")
    assert resume_at(run) == [2, 4] and not (run / "metrics.json").exists()
    resume(run)
    assert_same_run(reference, run)


@pytest.mark.slow
def test_step_and_time_budgets_stop_mid_epoch_and_resume_exactly(reference, tmp_path, capsys):
    """--max-steps 5, then --max-time that ends after one batch, then the rest."""
    run = tmp_path / "run"
    assert main([*ARGS, "--max-steps", "5", "--out", str(run)]) == 0
    m = json.loads((run / "metrics.json").read_text())
    assert (m["stopped_by"], m["steps"], m["epochs_trained"], m["epochs_planned"]) == (
        "max_steps",
        5,
        0,
        3,
    )
    assert "stopped early by --max-steps" in capsys.readouterr().out
    assert resume_at(run) == [0, 5]
    saved = load_checkpoint(run / "checkpoints" / "last.ckpt")["callbacks"]
    before = next(v["train_seconds"] for k, v in saved.items() if "LastCheckpoint" in k)
    # metrics.json rounds to 0.1 s; rounding is monotone, so compare at that precision.
    assert before > 0 and round(before, 1) <= m["train_time_s"]
    resume(run, "--max-steps", "20", "--max-time", "1e-6")
    m = json.loads((run / "metrics.json").read_text())
    assert (m["stopped_by"], m["steps"]) == ("max_time", 6)
    assert m["train_time_s"] >= round(before, 1)  # the first leg's seconds are counted too
    assert "0 epochs and 6 batches trained of 3 planned" in capsys.readouterr().out
    resume(run, "--max-time", "600")
    # Epoch 0 was trained by three processes; its mean training loss too is exact.
    assert_same_run(reference, run)
