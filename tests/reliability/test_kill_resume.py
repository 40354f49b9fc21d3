"""A real SIGKILL mid-training, then --resume: the result equals an uninterrupted run."""

import json
import signal
import subprocess
import time

import pytest
import torch
from safetensors.torch import load_file

from selfcaps.methods.io import load_checkpoint
from tests.runs import TINY, run_cli, selfcaps_cmd, subprocess_env

ARGS = ["run", "coca", "--epochs", "3", *TINY, "data.train_subset=512"]


@pytest.mark.slow
def test_sigkill_mid_epoch_then_resume_matches_uninterrupted(tmp_path):
    ref, killed = tmp_path / "ref", tmp_path / "killed"
    done = run_cli(*ARGS, "--out", str(ref))
    assert done.returncode == 0, done.stderr

    proc = subprocess.Popen(
        selfcaps_cmd(*ARGS, "--out", str(killed)),
        env=subprocess_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    last = killed / "checkpoints" / "last.ckpt"
    deadline = time.time() + 240
    while not last.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert last.exists(), "the run never wrote its first checkpoint"
    time.sleep(0.5)  # into the next epoch (16 steps of over 100 ms each)
    assert proc.poll() is None, "the run finished before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert not (killed / "metrics.json").exists()
    at_kill = load_checkpoint(last)["global_step"]
    assert 0 < at_kill < 3 * 16, "the kill must land during training"
    assert not list(killed.rglob("*.tmp")), "a half-written temporary file was left behind"

    resumed = run_cli("run", "coca", "--out", str(killed), "--resume")
    assert resumed.returncode == 0, resumed.stderr

    a = json.loads((ref / "metrics.json").read_text())
    b = json.loads((killed / "metrics.json").read_text())
    for key in (
        "knn_top1_backbone",
        "knn_top1_capsule",
        "best_val_knn_top1",
        "steps",
        "best_epoch",
    ):
        assert a[key] == b[key], key
    wa, wb = load_file(ref / "model.safetensors"), load_file(killed / "model.safetensors")
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k
    # The per-epoch log has each epoch once, though epoch 1 started twice.
    rows = (killed / "metrics.csv").read_text().strip().splitlines()
    header = rows[0].split(",")
    train_rows = [r.split(",") for r in rows[1:] if r.split(",")[header.index("train_loss")]]
    assert [r[header.index("epoch")] for r in train_rows] == ["0", "1", "2"]
