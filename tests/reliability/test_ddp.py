"""Two CPU processes (gloo DDP): one run directory, and the online kNN equals a single process."""

import csv
import json

import lightning as L
import pytest
from omegaconf import OmegaConf

from selfcaps.config.loading import load_yaml
from selfcaps.data.datamodule import SelfcapsDataModule
from selfcaps.engine.checkpoints import load_checkpoint
from selfcaps.methods import get_method
from tests.runs import TINY, run_cli


@pytest.mark.slow
def test_ddp_two_processes_one_run_dir_and_same_knn(tmp_path):
    out = tmp_path / "ddp"
    done = run_cli(
        "run",
        "coca",
        "--devices",
        "2",
        "--strategy",
        "ddp",
        "--out",
        str(out),
        "--epochs",
        "1",
        *TINY,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ddp"]
    assert not (tmp_path / "runs").exists()
    m = json.loads((out / "metrics.json").read_text())
    assert m["world_size"] == 2
    assert m["steps"] == 256 // 2 // 32  # each process sees half of the images per step
    with open(out / "metrics.csv", newline="") as f:
        ddp_knn = [float(r["val_knn_top1"]) for r in csv.DictReader(f) if r["val_knn_top1"]]
    assert len(ddp_knn) == 1

    # The same weights (best.ckpt is written right after that validation), one process.
    cfg = OmegaConf.create(load_yaml(out / "config.yaml"))
    method = get_method("coca")(cfg)
    method.load_state_dict(load_checkpoint(out / "checkpoints" / "best.ckpt")["state_dict"])
    dm = SelfcapsDataModule(method.cfg, *method.build_transforms())
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        use_distributed_sampler=False,
    )
    single = trainer.validate(method, datamodule=dm, verbose=False)
    assert single[0]["val_knn_top1"] == pytest.approx(ddp_knn[0], abs=1e-6)
