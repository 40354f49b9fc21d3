"""End-to-end MCAE runs on a tiny budget: every file, consistent selections, the baseline."""

import csv
import json
import shutil

import pytest
import torch
import yaml
from omegaconf import OmegaConf
from safetensors.torch import load_file

import selfcaps
from selfcaps.cli import main
from selfcaps.data import get_dataset
from selfcaps.data.datamodule import SelfcapsDataModule
from selfcaps.engine.checkpoints import load_checkpoint
from selfcaps.methods.mcae.method import MCAE
from tests.runs import FAST, assert_evaluation_record, assert_run_files, run_killed_at

TINY = [
    *FAST,
    "--data",
    "mnist5k",
    "data.train_subset=64",
    "data.eval_batch_size=500",
    "model.dim=16",
    "model.kernel_size=3",
    "model.primary_caps=4",
    "model.caps_dim=4",
    "model.encoder_caps=4",
    "model.decoder_caps=1",
    "model.decoder_dim=4",
]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("mcae") / "run"
    args = ["run", "mcae", "--out", str(out), "--pretrain-epochs", "2", "--finetune-epochs", "2"]
    assert main([*args, *TINY]) == 0
    return out


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_run_directory_has_every_file(run_dir):
    finetune = ("metrics.csv", "model.safetensors", "config.json", "checkpoints/last.ckpt")
    assert_run_files(
        run_dir,
        "figures/retrieval.png",
        "figures/reconstruction.png",
        "finetune/checkpoints/best.ckpt",
        *(f"finetune/{name}" for name in finetune),
    )


def test_metrics_and_selections_are_consistent(run_dir):
    m = json.loads((run_dir / "metrics.json").read_text())
    assert all(isinstance(v, int | float | str) for v in m.values())
    assert m["pretrain_epochs"] == m["epochs_trained"] == 2 and m["finetune_epochs"] == 2
    assert 0.0 <= m["finetune_top1"] <= m["finetune_top5"] <= 100.0
    # pretraining: best.ckpt is the epoch of lowest val_mse, and evaluate() recomputes it
    val_mse = [float(r["val_mse"]) for r in rows(run_dir / "metrics.csv") if r.get("val_mse")]
    assert len(val_mse) == 2
    assert m["best_epoch"] == val_mse.index(min(val_mse)) + 1
    assert m["pretrain_val_mse"] == pytest.approx(min(val_mse), rel=1e-4)
    # finetuning: the selected epoch has the lowest validation loss of finetune/metrics.csv
    ft = [r for r in rows(run_dir / "finetune" / "metrics.csv") if r.get("val_loss")]
    losses = [float(r["val_loss"]) for r in ft]
    assert len(losses) == 2
    assert m["best_finetune_epoch"] == losses.index(min(losses)) + 1
    assert m["finetune_best_val_loss"] == pytest.approx(min(losses), rel=1e-4)
    best = load_checkpoint(run_dir / "finetune" / "checkpoints" / "best.ckpt")
    assert best["epoch"] + 1 == m["best_finetune_epoch"]


def test_finetune_checkpoints_hold_the_tested_classifier(run_dir):
    """finetune/checkpoints: best.ckpt is the tested classifier (model.safetensors) with
    how it was selected; last.ckpt is the end of the last finetuning epoch."""
    m = json.loads((run_dir / "metrics.json").read_text())
    best = load_checkpoint(run_dir / "finetune" / "checkpoints" / "best.ckpt")
    assert best["selected_on"] == "min val_loss"
    tested = load_file(run_dir / "finetune" / "model.safetensors")
    assert sorted(best["state_dict"]) == sorted(f"backbone.{k}" for k in tested)
    assert all(torch.equal(best["state_dict"][f"backbone.{k}"], v) for k, v in tested.items())
    last = load_checkpoint(run_dir / "finetune" / "checkpoints" / "last.ckpt")
    assert last["epoch"] == m["finetune_epochs"]
    assert "optimizer_states" in last and last["state_dict"].keys() == best["state_dict"].keys()


def test_weights_load_without_lightning_and_reproduce_the_test_accuracy(run_dir):
    cfg = json.loads((run_dir / "config.json").read_text())
    net = selfcaps.create_model(cfg["model"], **cfg["model_kwargs"]).eval()
    net.load_state_dict(load_file(run_dir / "model.safetensors"))
    assert net.forward_pretrain(torch.zeros(2, 1, 28, 28)).pred.shape == (2, 49, 16)
    cfg = json.loads((run_dir / "finetune" / "config.json").read_text())
    assert cfg["model_kwargs"]["decoder"] is False
    clf = selfcaps.create_model(cfg["model"], **cfg["model_kwargs"]).eval()
    clf.load_state_dict(load_file(run_dir / "finetune" / "model.safetensors"))
    test = get_dataset("mnist5k", split="test")
    x = (test.data.float() / 255 - 0.1312) / 0.3084  # the evaluation transform, by hand
    with torch.no_grad():
        top1 = (clf(x).argmax(1) == test.targets).float().mean().item() * 100
    m = json.loads((run_dir / "metrics.json").read_text())
    assert top1 == pytest.approx(m["finetune_top1"], abs=1e-3)


def test_no_pretraining_baseline(tmp_path):
    out = tmp_path / "baseline"
    args = ["run", "mcae", "--out", str(out), "--pretrain-epochs", "0", "--finetune-epochs", "1"]
    assert main([*args, *TINY]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["pretrain_epochs"] == m["epochs_trained"] == 0 and m["steps"] == 0
    assert m["finetune_epochs"] == 1 and m["best_finetune_epoch"] == 1
    assert (out / "figures" / "reconstruction.png").is_file()
    assert (out / "finetune" / "model.safetensors").is_file()


@pytest.mark.slow
def test_killed_during_finetuning_resumes_and_finetunes_again(tmp_path, run_dir):
    """A real SIGKILL in finetuning's second epoch (phase 2): --resume keeps the complete
    pretraining (last.ckpt), takes no extra pretraining step and redoes finetuning; every
    weight of both phases equals the uninterrupted run's."""
    out = tmp_path / "killed"
    args = ["run", "mcae", "--out", str(out), "--pretrain-epochs", "2", "--finetune-epochs", "2"]
    run_killed_at("finetune_batch", 3, *args, *TINY)
    assert not (out / "metrics.json").exists()
    assert load_checkpoint(out / "checkpoints" / "last.ckpt")["resume_at"] == [2, 0]
    assert (out / "finetune" / "metrics.csv").is_file()  # phase 2 had begun
    assert main(["run", "mcae", "--out", str(out), "--resume", "--no-progress"]) == 0
    before = json.loads((run_dir / "metrics.json").read_text())
    after = json.loads((out / "metrics.json").read_text())
    assert after["steps"] == before["steps"]  # no extra pretraining step
    assert after["finetune_top1"] == before["finetune_top1"]
    for name in ("model.safetensors", "finetune/model.safetensors"):
        wa, wb = load_file(run_dir / name), load_file(out / name)
        for k in wa:
            assert torch.equal(wa[k], wb[k]), f"{name}: {k}"


def test_eval_label_subsets_for_mcae_own_finetuning_and_a_linear_probe(tmp_path, run_dir):
    """`selfcaps eval --labels-per-class`: MCAE finetunes its class capsules on the subset;
    the linear probe fits on the subset's features; keys name the subset."""
    out = tmp_path / "run"
    shutil.copytree(run_dir, out)
    assert main(["eval", str(out), "--protocol", "finetune", "--labels-per-class", "2"]) == 0
    assert main(["eval", str(out), "--protocol", "linear", "--label-fraction", "0.5"]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["labelled_images_lpc2"] == 20 and 0 <= m["finetune_top1_lpc2"] <= 100
    assert m["labelled_images_lf50"] == 32 and "linear_top1_capsule_lf50" in m  # 50% of 64
    before = json.loads((run_dir / "metrics.json").read_text())
    assert m["finetune_top1"] == before["finetune_top1"]  # the full-label result is kept
    seed = int(yaml.safe_load((out / "config.yaml").read_text())["seed"])
    other = ["--protocol", "linear", "--label-fraction", "0.5", "--label-seed", str(seed + 7)]
    assert main(["eval", str(out), *other]) == 0
    m2 = json.loads((out / "metrics.json").read_text())
    assert m2["linear_top1_capsule_lf50"] == m["linear_top1_capsule_lf50"]  # another subset
    assert f"linear_top1_capsule_lf50_ls{seed + 7}" in m2  # ... is kept under its own key
    with pytest.raises(SystemExit):
        main(["eval", str(out), "--label-fraction", "0.1", "--labels-per-class", "2"])
    # another finetuning length than the run's: its own keys, the run's result kept
    epochs = int(yaml.safe_load((out / "config.yaml").read_text())["eval"]["finetune_epochs"])
    longer = ["--protocol", "finetune", "--labels-per-class", "2", "--finetune-epochs"]
    assert main(["eval", str(out), *longer, str(epochs + 1)]) == 0
    m3 = json.loads((out / "metrics.json").read_text())
    assert m3["finetune_top1_lpc2"] == m["finetune_top1_lpc2"]
    assert 0 <= m3[f"finetune_top1_lpc2_ft{epochs + 1}"] <= 100
    assert main(["eval", str(out), "--protocol", "knn", "--finetune-epochs", "3"]) == 2


@pytest.mark.slow
def test_scratch_and_pretrained_runs_finetune_on_the_same_labelled_images(tmp_path):
    """eval.labels_per_class in a run: the --pretrain-epochs 0 baseline sees the same images."""
    runs = {}
    for name, epochs in (("scratch", "0"), ("pretrained", "1")):
        out = tmp_path / name
        args = ["run", "mcae", "--out", str(out), "--pretrain-epochs", epochs]
        assert main([*args, "--finetune-epochs", "1", *TINY, "eval.labels_per_class=2"]) == 0
        runs[name] = json.loads((out / "metrics.json").read_text())
    for m in runs.values():
        assert m["labelled_images_lpc2"] == 20 and "finetune_top1_lpc2" in m
        assert "finetune_top1" not in m  # never mistaken for a full-label result
    chosen = []
    for name in runs:  # the subset each run's configuration selects from its training split
        cfg = OmegaConf.load(tmp_path / name / "config.yaml")
        method = MCAE(cfg)
        chosen.append(method.labelled_indices(SelfcapsDataModule(cfg, *method.build_transforms())))
    assert chosen[0] == chosen[1] and len(chosen[0]) == 20


def test_pretrained_lr_scale_zero_keeps_the_pretrained_weights(tmp_path, run_dir):
    """eval.finetune_pretrained_lr_scale=0: finetuning moves the class capsules only; the
    backbone's and encoder's weights stay the pretrained ones (BatchNorm statistics may adapt).
    `selfcaps eval --pretrained-lr-scale` sets it and writes keys of its own."""
    cfg = OmegaConf.load(run_dir / "config.yaml")
    cfg.eval.finetune_pretrained_lr_scale = 0.0
    method = MCAE(cfg)
    method.load_state_dict(load_checkpoint(run_dir / "checkpoints" / "best.ckpt")["state_dict"])
    pretrained = {k: v.clone() for k, v in method.mcae.state_dict().items()}
    dm = SelfcapsDataModule(method.cfg, *method.build_transforms())
    dm.setup("fit")
    net, _ = method.finetune_classifier(dm, labelled=list(range(20)))
    stats = ("running_mean", "running_var", "num_batches_tracked")
    finetuned = net.state_dict()
    moved = {k for k in finetuned if not torch.equal(finetuned[k], pretrained[k])}
    assert all(k.endswith(stats) or k.startswith("class_caps.") for k in moved), sorted(moved)
    assert any(k.startswith("class_caps.") for k in moved)  # the head did learn
    assert any(k.startswith("backbone.") and k.endswith(stats) for k in moved)
    out = tmp_path / "run"
    shutil.copytree(run_dir, out)
    args = ["eval", str(out), "--protocol", "finetune", "--labels-per-class", "2"]
    assert main([*args, "--pretrained-lr-scale", "0.1"]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert 0 <= m["finetune_top1_lpc2_plr0.1"] <= 100 and m["labelled_images_lpc2_plr0.1"] == 20
    # the flag needs the method's own finetuning and a factor >= 0
    assert main(["eval", str(out), "--protocol", "knn", "--pretrained-lr-scale", "0.1"]) == 2
    assert main([*args, "--pretrained-lr-scale", "-1"]) == 2


def test_eval_threads_flag_sets_torch_threads_and_rejects_zero(tmp_path, run_dir):
    """`selfcaps eval --threads N` runs the protocol on N intra-op threads (two one-thread
    evaluations then share 2 cores without oversubscribing them); N < 1 is refused by name."""
    out = tmp_path / "run"
    shutil.copytree(run_dir, out)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert main(["eval", str(out), "--protocol", "knn", "--threads", "1"]) == 0
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    assert main(["eval", str(out), "--protocol", "knn", "--threads", "0"]) == 2


def test_eval_seed_changes_the_finetuning_and_keeps_the_runs_images(tmp_path, run_dir):
    """`selfcaps eval --seed S`: another finetuning draw (order, augmentation) of the same
    pretrained weights on the run's own training subset (``data.train_subset`` is drawn with
    the run's seed, not S); keys end in ``_seedS``; the probes, which have no randomness,
    refuse the flag."""
    cfg = OmegaConf.load(run_dir / "config.yaml")
    run_seed = int(cfg.seed)
    state = load_checkpoint(run_dir / "checkpoints" / "best.ckpt")["state_dict"]

    def finetuned(seed):
        c = cfg.copy()
        c.seed = seed
        method = MCAE(c)
        method.load_state_dict(state)
        dm = SelfcapsDataModule(c, *method.build_transforms(), subset_seed=run_seed)
        dm.setup("fit")
        net, _ = method.finetune_classifier(dm)
        return dm.split("train").indices, net.state_dict()["class_caps.weight_route"]

    own = SelfcapsDataModule(cfg, *MCAE(cfg).build_transforms()).split("train").indices
    images_a, w_a = finetuned(run_seed + 1)
    _, w_b = finetuned(run_seed + 1)
    images_c, w_c = finetuned(run_seed + 2)
    assert images_a == images_c == own and len(own) == 64  # the run's 64 images every time
    assert torch.equal(w_a, w_b)  # one seed, one result
    assert not torch.equal(w_a, w_c)  # another seed, another draw
    out = tmp_path / "run"
    shutil.copytree(run_dir, out)
    assert main(["eval", str(out), "--protocol", "finetune", "--seed", str(run_seed + 1)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    before = json.loads((run_dir / "metrics.json").read_text())
    assert 0 <= m[f"finetune_top1_seed{run_seed + 1}"] <= 100
    assert m["finetune_top1"] == before["finetune_top1"]  # the run's own result is kept
    assert main(["eval", str(out), "--protocol", "knn", "--seed", "3"]) == 2


@pytest.mark.slow
def test_epochs_0_trains_nothing_not_even_the_finetuning(tmp_path):
    """`--epochs` counts pretraining epochs; 0 also skips finetuning (untrained class capsules)."""
    out = tmp_path / "run"
    assert main(["run", "mcae", "--out", str(out), "--epochs", "0", *TINY]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert (m["steps"], m["pretrain_epochs"], m["finetune_epochs"]) == (0, 0, 0)
    assert m["best_finetune_epoch"] == 0  # the untrained state: no finetuning epoch
    untrained = load_file(out / "model.safetensors")
    tested = load_file(out / "finetune" / "model.safetensors")
    assert tested and all(torch.equal(v, untrained[k]) for k, v in tested.items())
    assert not any(r.get("train_loss") for r in rows(out / "finetune" / "metrics.csv"))


def test_the_finetuning_is_recorded_with_the_pretrained_weights_it_started_from(run_dir):
    m = assert_evaluation_record(run_dir, "eval_finetune")
    assert m["eval_finetune_bank_split"] == "train" and m["eval_finetune_bank_n"] > 0


@pytest.mark.slow
def test_finetuning_again_after_the_fact_equals_the_runs_own_finetuning(tmp_path):
    """A run finetuned for 1 epoch, then `selfcaps eval --finetune-epochs 2` on its labelled
    subset, gives exactly the result of the same run finetuned for 2 epochs within the run, and
    both record the same digest of the pretrained weights they start from: a registry row may
    mix the two paths (one pretraining finetuned again by `eval`, other seeds finetuned by
    `run`). Another finetuning seed (`--seed`) gives another result, so the equality is not
    that of a finetuning that ignores its randomness."""
    lf = ["eval.label_fraction=0.5", "data.train_subset=256", "eval.finetune_lr=0.05"]
    within, later = tmp_path / "within", tmp_path / "later"
    for out, epochs in ((within, "2"), (later, "1")):
        args = ["run", "mcae", "--out", str(out), "--pretrain-epochs", "1"]
        assert main([*args, "--finetune-epochs", epochs, *TINY, *lf]) == 0
    again = ["eval", str(later), "--protocol", "finetune", "--label-fraction", "0.5", "--threads"]
    assert main([*again, "1", "--finetune-epochs", "2"]) == 0
    assert main([*again, "1", "--finetune-epochs", "2", "--seed", "7"]) == 0
    a = json.loads((within / "metrics.json").read_text())
    b = json.loads((later / "metrics.json").read_text())
    assert b["labelled_images_lf50_ft2"] == a["labelled_images_lf50"] == 128
    assert a["finetune_top1_lf50"] > 12  # it learnt something: chance is 10
    for key in ("finetune_top1", "finetune_top5"):
        assert b[f"{key}_lf50_ft2"] == a[f"{key}_lf50"], key
    assert b["finetune_top1_lf50_ft2_seed7"] != b["finetune_top1_lf50_ft2"]
    assert b["eval_finetune_lf50_weights_ft2"] == b["eval_finetune_lf50_weights"]
    assert a["eval_finetune_lf50_weights"] == b["eval_finetune_lf50_weights"]
