"""End-to-end ``selfcaps run encapnet`` on a tiny budget: run directory, metrics, flags, SVHN."""

import json

import pytest
import torch
from safetensors.torch import load_file

import selfcaps
from selfcaps.cli import main
from tests.data.formats import write_svhn
from tests.runs import FAST, assert_evaluation_record, assert_run_files

SMALL = [
    *FAST,
    "data.eval_batch_size=256",
    "model.num_caps=8",
    "model.dims=[2,4]",
    "model.strides=[2,2]",
    "model.num_type2=1",
    "model.aide_modules=[2]",
    "loss.units=[[1,1,-1],[2,0,2]]",
]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("encapnet") / "run"
    args = ["run", "encapnet", "--out", str(out), "--epochs", "2", "--data", "mnist5k"]
    assert main([*args, *SMALL, "data.train_subset=128"]) == 0
    return out


def test_run_directory_has_every_file(run_dir):
    assert_run_files(run_dir, "figures/retrieval.png")


def test_metrics_report_test_accuracy_and_setting(run_dir):
    m = json.loads((run_dir / "metrics.json").read_text())
    assert 0.0 <= m["test_top1"] <= m["test_top5"] <= 100.0
    assert m["test_error"] == pytest.approx(100.0 - m["test_top1"])
    assert m["test_images"] == 1000  # mnist5k's test split, once
    assert (m["variant"], m["ot"]) == ("master_aide", "on")
    assert m["best_checkpoint"].startswith("max val_top1")
    assert m["epochs_trained"] == 2 and m["steps"] == 2 * (128 // 32)
    header = (run_dir / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"val_top1", "train_ot_loss", "train_cls_loss", "train_top1"} <= set(header)
    assert "val_knn_top1" not in header  # no kNN bank is computed


def test_saved_weights_are_the_network_alone(run_dir):
    cfg = json.loads((run_dir / "config.json").read_text())
    net = selfcaps.create_model(cfg["model"], **cfg["model_kwargs"])
    weights = load_file(run_dir / "model.safetensors")
    assert not any("feedback" in k for k in weights)
    net.load_state_dict(weights)
    m = json.loads((run_dir / "metrics.json").read_text())
    assert m["params"] == sum(p.numel() for p in net.parameters())
    out = net.eval()(torch.zeros(2, 1, 28, 28))
    assert out.shape == (2, 10, 4)
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)
    assert any(k.startswith("feedback.") for k in ckpt["state_dict"])  # resumable


def test_flags_on_svhn_files(tmp_path, monkeypatch):
    monkeypatch.setenv("SELFCAPS_CACHE", str(tmp_path / "cache"))
    write_svhn(tmp_path / "data", "train", n=100)
    write_svhn(tmp_path / "data", "test", n=20, seed=1)
    out = tmp_path / "svhn"
    args = ["run", "encapnet", "--out", str(out), "--epochs", "1", "--data", "svhn"]
    args += ["--data-root", str(tmp_path / "data"), "--variant", "master", "--ot", "off"]
    args += ["model.strides=[4,2]"]
    assert main([*args, *SMALL]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert (m["variant"], m["ot"], m["test_images"]) == ("master", "off", 20)


def test_the_test_accuracy_is_recorded_as_the_test_split_of_the_saved_weights(run_dir):
    m = assert_evaluation_record(run_dir, "eval_test")
    assert m["eval_test_query_n"] == m["test_images"] and m["eval_test_bank_split"] == "train"
