"""Experiment reports (EncapNet ablation, MCAE mask ratios) on hand-made rows, hand-computed."""

import json
from pathlib import Path

from tests.scripts import fake_run, load_script


def load_report():
    return load_script("encapnet_feedback_report")


def test_arm_table_pairs_each_arm_with_off_by_seed():
    rows = [
        {"run": "off_s0", "test top-1": "40.00"},
        {"run": "off_s1", "test top-1": "44.00"},
        {"run": "lambda1_s0", "test top-1": "39.00"},
        {"run": "lambda1_s1", "test top-1": "42.00"},
        {"run": "eps01_s1", "test top-1": "41.00"},  # one seed: paired with off's seed 1 only
        {"run": "off_beta99_s0", "test top-1": "45.00"},
        {"run": "lambda1_beta99_s0", "test top-1": "44.50"},  # paired with off_beta99
    ]
    table = load_report().arm_table(rows)
    by_arm = {line.split(" | ")[0].lstrip("| "): line for line in table[2:]}
    assert "42.00 +- 2.83" in by_arm["off"]  # sd of 40, 44 = sqrt(8)
    # differences -1 and -2: mean -1.5, sd sqrt(0.5), t(0.975, 1) = 12.706 -> +-6.35
    assert "-1.50 (-1.00, -2.00) [-7.85, +4.85], not resolved (too few seeds)" in by_arm["lambda1"]
    assert by_arm["eps01"].endswith("| 41.00 | -3.00 (-3.00) |")
    assert by_arm["lambda1_beta99"].endswith("| 44.50 | -0.50 (-0.50) vs off_beta99 |")
    assert by_arm["off_beta99"].endswith("| 45.00 | - |")


def _write_run(root: Path, name: str, probe: float, mse: float = 0.05, seconds: float = 300.0):
    run = root / name
    run.mkdir()
    metrics = {"linear_top1_capsule_lf10": probe, "pretrain_val_mse": mse, "train_time_s": seconds}
    (run / "metrics.json").write_text(json.dumps(metrics))


def test_mask_ratio_table_pairs_each_ratio_with_the_untrained_seed(tmp_path):
    module = load_script("mcae_mask_ratio_report")
    _write_run(tmp_path, "untrained_s0", 30.0)
    _write_run(tmp_path, "untrained_s1", 32.0)
    _write_run(tmp_path, "mask0.5_s0", 31.0, mse=0.04, seconds=240.0)
    _write_run(tmp_path, "mask0.5_s1", 35.0, mse=0.06, seconds=360.0)
    _write_run(tmp_path, "mask0.75_s1", 31.5)
    (tmp_path / "mask0.25_s0").mkdir()  # not finished: no metrics.json, no row
    lines = module.ratio_table(tmp_path)
    assert lines[0] == "untrained network: seed 0 30.00, seed 1 32.00"
    rows = {line.split(" | ")[0].lstrip("| "): line for line in lines[3:]}
    assert set(rows) == {"0.5", "0.75"}
    # 31, 35: mean 33, sd 2*sqrt(2) = 2.83; differences +1, +3: mean +2, sd sqrt(2),
    # t(0.975, 1) = 12.706 -> +-12.706 * sqrt(2) / sqrt(2) = +-12.71
    assert "| 31.00, 35.00 | 33.00 +- 2.83 | 0.0500 | +2.00 [-10.71, +14.71] |" in rows["0.5"]
    assert rows["0.5"].endswith("| 5.0 |")
    assert "| 31.50 | 31.50 +- 0.00 | 0.0500 | -0.50 | one seed |" in rows["0.75"]


def test_label_efficiency_table_pairs_subsets_and_ignores_log_files(tmp_path, monkeypatch, capsys):
    module = load_script("mcae_label_efficiency_report")
    pre = {"pretrain_epochs": 20, "pretrain_val_mse": 0.015, "train_time_s": 600.0}
    pre |= {"finetune_top1_lf1_ft100": 29.0, "finetune_top1_lf1_ls1_ft100": 28.0}
    pre |= {"finetune_top1_lf1_ls2_ft100": 27.0}
    (tmp_path / "pretrained_s0").mkdir()
    (tmp_path / "pretrained_s0" / "metrics.json").write_text(json.dumps(pre))
    for seed, top1 in ((0, 33.0), (1, 32.0)):
        run = tmp_path / f"scratch_ft100_s{seed}"
        run.mkdir()
        metrics = {"finetune_top1_lf1": top1, "finetune_time_s_lf1": 360.0}
        (run / "metrics.json").write_text(json.dumps(metrics))
        (tmp_path / f"scratch_ft100_s{seed}.log").write_text("a run's console log\n")
    fake_run(tmp_path / "scratch_ft100_s2", {"stopped_by": "signal"})  # SIGTERM'd: no row
    (tmp_path / "pretrained_s0.log").write_text("")
    argv = ["report", str(tmp_path), "--fraction", "0.01", "--finetune-epochs", "100"]
    monkeypatch.setattr("sys.argv", argv)
    module.main()
    out = capsys.readouterr().out
    assert "| 0 | 29.00 | 33.00 | -4.00 |" in out and "| 1 | 28.00 | 32.00 | -4.00 |" in out
    assert "| 2 |" not in out
    # differences -4, -4: sd 0, so the interval is the point
    assert "| 28.50 +- 0.71 | 32.50 +- 0.71 | -4.00 [-4.00, -4.00] |" in out


def test_label_efficiency_table_with_every_label_pairs_finetuning_seeds(
    tmp_path, monkeypatch, capsys
):
    """FRACTION=1 (the paper's protocol): the pretrained arm's other rows are `eval --seed`
    keys (``finetune_top1_seed1``), the scratch runs' key is ``finetune_top1``."""
    module = load_script("mcae_label_efficiency_report")
    pre = {"pretrain_epochs": 20, "pretrain_val_mse": 0.015, "train_time_s": 600.0}
    pre |= {"finetune_epochs": 8, "finetune_top1": 60.0, "finetune_top1_seed1": 62.0}
    (tmp_path / "pretrained_s0").mkdir()
    (tmp_path / "pretrained_s0" / "metrics.json").write_text(json.dumps(pre))
    for seed, top1 in ((0, 58.0), (1, 61.0), (2, 57.0)):  # seed 2 has no pretrained row yet
        run = tmp_path / f"scratch_s{seed}"
        run.mkdir()
        (run / "metrics.json").write_text(json.dumps({"finetune_top1": top1}))
    monkeypatch.setattr("sys.argv", ["report", str(tmp_path), "--fraction", "1"])
    module.main()
    out = capsys.readouterr().out
    assert "| 0 | 60.00 | 58.00 | +2.00 |" in out and "| 1 | 62.00 | 61.00 | +1.00 |" in out
    assert "| 2 |" not in out
    # differences 2, 1: mean 1.5, sd 0.7071; t(0.975, 1) = 12.706 -> 1.5 +- 6.35
    assert "| 61.00 +- 1.41 | 59.50 +- 2.12 | +1.50 [-4.85, +7.85] |" in out


def test_sparsecaps_ladder_reads_both_metrics_layouts(tmp_path):
    """A run from before the headline read v (svm_* = v', *_unmasked = v) and one after
    (svm_* = v, *_masked = v') land in the same columns; paired differences by hand."""
    module = load_script("sparsecaps_ladder")
    runs = {  # (variant, seed): metrics.json
        ("sparse", 0): {"svm_affnist_a": 36.0, "svm_affnist_a_masked": 36.0,
                        "svm_affnist_a_unmasked": 62.0, "feature_kind": "masked"},
        ("dense", 0): {"svm_affnist_a": 55.0, "svm_affnist_a_masked": 30.0,
                       "svm_affnist_a_unmasked": 55.0, "feature_kind": "unmasked"},
        ("sparse", 1): {"svm_affnist_a": 64.0, "svm_affnist_a_masked": 38.0},
        ("dense", 1): {"svm_affnist_a": 56.0, "svm_affnist_a_masked": 31.0},
    }  # fmt: skip
    for (variant, seed), metrics in runs.items():
        run = module.run_dir(tmp_path, 5061, variant, seed)
        run.mkdir(parents=True)
        (run / "metrics.json").write_text(json.dumps(metrics))
    rows = {(r["variant"], r["seed"]): r for r in module.collect(tmp_path)}
    assert rows["sparse", 0]["svm_affnist_a"] == 62.0  # v, from the old layout's _unmasked
    assert rows["sparse", 0]["svm_affnist_a_masked"] == 36.0
    assert rows["sparse", 1]["svm_affnist_a"] == 64.0
    rung = module.summarise(list(rows.values()))["5061"]
    assert rung["sparse v - dense, paired"]["mean"] == 7.5  # (62 - 55 + 64 - 56) / 2
    assert rung["sparse v' - dense, paired"]["mean"] == -18.5  # (36 - 55 + 38 - 56) / 2
    assert rung["sparse, v (headline: section 2.3, reference code)"]["mean"] == 63.0


def test_sparsecaps_ladder_resumes_a_stopped_run_and_leaves_it_out_of_the_table(
    tmp_path, monkeypatch
):
    """A SIGTERM'd run (metrics.json with stopped_by: signal) is continued, not skipped, and
    its empty SVM columns never reach ladder.csv; a finished run is not trained again."""
    module = load_script("sparsecaps_ladder")
    fake_run(module.run_dir(tmp_path, 300, "sparse", 0), {"svm_affnist_a": 40.0})
    stopped = fake_run(module.run_dir(tmp_path, 300, "dense", 0), {"stopped_by": "signal"})
    assert [(r["variant"], r["svm_affnist_a"]) for r in module.collect(tmp_path)] == [
        ("sparse", 40.0)
    ]
    (tmp_path / "steps300" / "dense_seed0.log").write_text("the first leg's log\n")
    calls = []
    monkeypatch.setattr(module.subprocess, "run", lambda cmd, **kw: calls.append(cmd[1:]))
    monkeypatch.setattr(module, "write_outputs", lambda out, figure: None)
    module.main(["--out", str(tmp_path), "--data-root", str(tmp_path), "--steps", "300",
                 "--seeds", "0", "1"])  # fmt: skip
    assert calls[0] == ["-m", "selfcaps", "run", "sparsecaps", "--out", str(stopped),
                        "--resume", "--no-progress"]  # fmt: skip
    fresh = [c for c in calls[1:] if c[:4] == ["-m", "selfcaps", "run", "sparsecaps"]]
    assert [c[c.index("--out") + 1] for c in fresh] == [
        str(module.run_dir(tmp_path, 300, v, 1)) for v in ("sparse", "dense")
    ]
    assert len(calls) == 3  # sparse seed 0 is finished: not run again
    assert "--resume" not in calls[1] and "eval.baselines=false" in calls[1]
    log = (tmp_path / "steps300" / "dense_seed0.log").read_text()
    assert log.startswith("the first leg's log\n") and "--resume" in log  # appended to


def test_encapnet_feedback_report_leaves_out_a_run_a_signal_stopped(tmp_path, monkeypatch, capsys):
    cfg = "seed: 0\nloss:\n  probe_every: 0\n  ot: false\n"
    metrics = {"variant": "master", "steps": 200, "train_time_s": 60.0}
    metrics |= {"best_val_top1": 41.0, "test_top1": 40.5}
    for name, m in (("off_s0", metrics), ("off_s1", {"stopped_by": "signal", "steps": 90})):
        run = fake_run(tmp_path / name, m)
        (run / "config.yaml").write_text(cfg)
    monkeypatch.setattr("sys.argv", ["report", str(tmp_path)])
    load_report().main()
    out = capsys.readouterr().out
    assert "| off_s0 | 0 | master | off | 200 | 60 | 41.00 | 40.50 | - |" in out
    assert "off_s1" not in out  # the old report raised a KeyError on it
