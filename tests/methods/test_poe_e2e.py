"""End-to-end PoE runs on a tiny budget: every file, the sample command, resume across stages."""

import csv
import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from PIL import Image
from safetensors.torch import load_file

import selfcaps
from selfcaps.cli import main
from selfcaps.config.loading import load_yaml
from selfcaps.data.datamodule import SelfcapsDataModule
from selfcaps.engine.checkpoints import load_checkpoint
from selfcaps.methods import get_method
from tests.data.formats import write_mnist
from tests.runs import FAST, assert_evaluation_record, assert_run_files, run_killed_at

TINY = [
    *FAST,
    "model.stage_epochs=[1,1,1]",
    "model.channels=16",  # 2 capsule types x 36 positions: a fast network
    "data.train_subset=64",
    "data.eval_batch_size=200",
    "samples.per_capsule=4",
    "judge.epochs=1",
]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("poe") / "run"
    assert main(["run", "poe", "--out", str(out), "--epochs", "3", *TINY]) == 0
    return out


def test_run_directory_has_every_file(run_dir):
    figures = ("samples", "samples_restricted", "reconstructions")
    assert_run_files(run_dir, *(f"figures/{f}.png" for f in figures))
    # 20 numbered columns x 4 rows of 28x28 images, enlarged, with a title (about 1100 x 300)
    w, h = Image.open(run_dir / "figures/samples.png").size
    assert 20 * 30 + 2 <= w <= 1600 and 3.2 < w / h < 4.2


def test_metrics(run_dir):
    m = json.loads((run_dir / "metrics.json").read_text())
    assert all(isinstance(v, int | float | str) for v in m.values())
    for key in (
        "recon_ae_mse",
        "recon_encoder_mse",
        "recon_caps_mse",
        "recon_caps_mse_untrained",
        "recon_caps_spread",
        "recon_caps_spread_untrained",
        "caps_length",
        "caps_length_spread",
        "free_energy_gap",
        "free_energy_gap_untrained",
        "free_energy_data",
        "free_energy_recon",
        "judge_test_top1",
    ):
        assert key in m, key
    for suffix in ("", "_restricted", "_untrained"):
        purities = [m[f"purity_capsule_{j:02d}{suffix}"] for j in range(20)]
        assert all(25.0 <= p <= 100.0 for p in purities)  # 4 samples: at least 1 of 4
        assert m[f"purity_mean{suffix}"] == pytest.approx(sum(purities) / 20)
        assert 1 <= m[f"purity_classes_covered{suffix}"] <= 10
        assert len(m[f"purity_majority_classes{suffix}"].split(",")) == 20
    for suffix in ("", "_untrained"):  # the test images grouped by their longest capsule
        assert 0.0 < m[f"caps_group_purity{suffix}"] <= 100.0
        assert m[f"caps_group_images{suffix}"] == m["recon_test_images"]  # as many as read
        majorities = m[f"caps_group_majority_classes{suffix}"].split(",")
        assert len(majorities) == 20 and m[f"caps_group_empty{suffix}"] == majorities.count("-")
        for layer in ("encoder", "decoder"):  # rank-one shares of W_j and U_j: 16 dims, >= 1/16
            share, least = m[f"{layer}_rank1_share{suffix}"], m[f"{layer}_rank1_share_min{suffix}"]
            assert 1 / 16 <= least <= share <= 1.0
    assert m["epochs_trained"] == 3 and m["steps"] == 3 * (64 // 32)
    assert m["best_checkpoint"] == "min val_select (epoch 3)"  # the stage-3 epoch


def test_metrics_csv_logs_the_stages_and_the_monitor(run_dir):
    rows = (run_dir / "metrics.csv").read_text().strip().splitlines()
    header = rows[0].split(",")
    for key in ("stage", "val_recon_caps_mse", "val_free_energy_gap", "train_ae_mse"):
        assert key in header, key
    stages = {r.split(",")[header.index("stage")] for r in rows[1:]} - {""}
    assert stages == {"1.0", "2.0", "3.0"}


def test_metrics_csv_logs_the_collapse_after_every_stage_2_epoch(run_dir):
    with open(run_dir / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    keys = ("w_top_share", "w_pair_similarity", "primaries_top_eig_share", "primaries_eig_ratio")
    logged = [r for r in rows if r.get("w_top_share")]
    assert [r["epoch"] for r in logged] == ["2"]  # stage 2 is epoch 2 of [1, 1, 1]
    for key in keys:
        assert 0.0 <= float(logged[0][key]) <= 1.0, key


def test_weights_load_without_lightning_and_generate(run_dir):
    cfg = json.loads((run_dir / "config.json").read_text())
    net = selfcaps.create_model(cfg["model"], **cfg["model_kwargs"])
    net.load_state_dict(load_file(run_dir / "model.safetensors"))
    assert (net.hemisphere != 0).any()  # measured in stage 3
    assert net.eval().sample_grid(1).shape == (20, 1, 28, 28)


def test_sample_command_reproduces_the_run_figures(run_dir, tmp_path):
    for restricted, name in ((False, "samples.png"), (True, "samples_restricted.png")):
        out = tmp_path / name
        args = ["sample", str(run_dir), "--out", str(out)] + (
            ["--restricted"] if restricted else []
        )
        assert main(args) == 0
        a = np.asarray(Image.open(out))
        b = np.asarray(Image.open(run_dir / "figures" / name))
        assert np.array_equal(a, b), name
    assert main(["sample", str(run_dir), "--seed", "3", "--rows", "2"]) == 0
    w, h = Image.open(run_dir / "figures/samples.png").size  # 2 rows: wider than 4 (above)
    assert 20 * 30 + 2 <= w <= 1600 and 5.0 < w / h < 6.5


def assert_same_run(a_dir, b_dir):
    a = json.loads((a_dir / "metrics.json").read_text())
    b = json.loads((b_dir / "metrics.json").read_text())
    for key in ("recon_caps_mse", "free_energy_gap", "best_epoch", "steps", "purity_mean"):
        assert a[key] == b[key], key
    wa, wb = load_file(a_dir / "model.safetensors"), load_file(b_dir / "model.safetensors")
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], rtol=0, atol=0)


@pytest.mark.parametrize(("steps", "epochs"), [(4, 2), (5, 2)])
def test_a_budget_stop_resumes_into_the_uninterrupted_run(tmp_path, run_dir, steps, epochs):
    """2 steps an epoch: 4 steps end stage 2; 5 stop in stage 3's first batch (the running
    sum of its capsule poses is in last.ckpt)."""
    out = tmp_path / "resumed"
    args = ["run", "poe", "--out", str(out), "--epochs", "3", "--max-steps", str(steps), *TINY]
    assert main(args) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert (m["epochs_trained"], m["stopped_by"], m["epochs_planned"]) == (epochs, "max_steps", 3)
    assert main(["run", "poe", "--out", str(out), "--resume", "--max-steps", "-1"]) == 0
    assert json.loads((out / "metrics.json").read_text())["stopped_by"] == "epochs"
    assert_same_run(run_dir, out)


@pytest.mark.slow
def test_killed_at_the_change_to_stage_3_then_resumed(tmp_path, run_dir):
    out = tmp_path / "killed"
    run_killed_at("epoch_start", 2, "run", "poe", "--out", str(out), "--epochs", "3", *TINY)
    assert load_checkpoint(out / "checkpoints" / "last.ckpt")["resume_at"] == [2, 0]
    assert main(["run", "poe", "--out", str(out), "--resume"]) == 0
    assert_same_run(run_dir, out)


def test_config_errors_exit_2(tmp_path, capsys):
    out = tmp_path / "bad"
    assert main(["run", "poe", "--out", str(out), "--epochs", "2", *TINY]) == 2
    assert "model.stage_epochs" in capsys.readouterr().err
    assert main(["sample", str(tmp_path)]) == 2


def test_orthogonal_encoder_makes_every_capsule_use_all_its_dimensions(tmp_path, capsys):
    """cd.orthogonal_encoder: W_j equal in all 16 directions after stage 2 (rank-one share
    1/16 in the run's metrics), the untrained layer untouched; a non-boolean is refused."""
    out = tmp_path / "ortho"
    args = ["run", "poe", "--out", str(out), "--epochs", "3", *TINY]
    assert main([*args, "cd.orthogonal_encoder=true", "eval.baselines=true"]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["encoder_rank1_share"] == pytest.approx(1 / 16, abs=1e-4)
    assert m["encoder_rank1_share_min"] == pytest.approx(1 / 16, abs=1e-4)
    assert m["encoder_rank1_share_untrained"] > 1 / 16 + 1e-3
    assert main([*args[:3], str(tmp_path / "bad"), *args[4:], "cd.orthogonal_encoder=2"]) == 2
    assert "cd.orthogonal_encoder" in capsys.readouterr().err


def test_a_diverging_cd_update_stops_the_run_with_a_named_error(tmp_path, capsys):
    """A huge learning rate makes W overflow at the first update: the next step stops the run."""
    tiny = [a for a in TINY if not a.startswith("model.stage_epochs")]
    args = ["run", "poe", "--out", str(tmp_path / "nan"), "--epochs", "1", *tiny]
    assert main([*args, "model.stage_epochs=[0,1,0]", "cd.lr_encoder=1e38"]) == 3
    err = capsys.readouterr().err
    assert "step 1 (epoch 1): loss is nan; stopping" in err  # the free-energy gap: inf - inf


def test_a_budget_that_ends_before_the_last_stage_is_reported(tmp_path, run_dir):
    """--max-steps 1 stops in stage 1: a warning, and ``stages_completed`` says so."""
    out = tmp_path / "short"
    with pytest.warns(UserWarning, match="after 0 of 3 stages"):
        assert (
            main(["run", "poe", "--out", str(out), "--epochs", "3", "--max-steps", "1", *TINY]) == 0
        )
    assert json.loads((out / "metrics.json").read_text())["stages_completed"] == 0
    assert json.loads((run_dir / "metrics.json").read_text())["stages_completed"] == 3


def test_centred_codes_are_centred_on_the_training_set_mean(tmp_path):
    out = tmp_path / "centred"
    args = ["run", "poe", "--out", str(out), "--epochs", "3", *TINY, "model.center=true"]
    assert main([*args, "cd.lr_encoder=1000"]) == 0
    cfg = OmegaConf.create(load_yaml(out / "config.yaml"))
    method = get_method("poe")(cfg)
    method.load_state_dict(load_checkpoint(out / "checkpoints" / "last.ckpt")["state_dict"])
    net = method.poe.eval()
    assert net.center and net.code_count.item() == 64  # every training image, once
    dm = SelfcapsDataModule(method.cfg, *method.build_transforms())
    with torch.no_grad():
        codes = torch.cat([net.ae.encode(x) for x, _ in dm.eval_loader("train")])
    assert codes.shape[0] == 64
    torch.testing.assert_close(net.code_mean, codes.mean(0), rtol=1e-4, atol=1e-5)
    weights = load_file(out / "model.safetensors")
    torch.testing.assert_close(weights["code_mean"], net.code_mean)
    m = json.loads((out / "metrics.json").read_text())
    assert np.isfinite(m["recon_caps_mse"]) and m["stages_completed"] == 3


def test_recommended_preset_on_fashion_mnist_files_end_to_end(tmp_path):
    """center_parents_sparse with --data fashion_mnist on small IDX files written here: W over
    parents, U over children, the sparsity term, and Fig. 2's two grids (complete and
    restricted domain) of the Fashion-MNIST row."""
    write_mnist(tmp_path / "data", folder="FashionMNIST", n_train=120, n_test=20)
    out = tmp_path / "fashion"
    args = ["run", "poe", "--preset", "center_parents_sparse", "--data", "fashion_mnist"]
    args += ["--data-root", str(tmp_path / "data"), "--out", str(out), "--epochs", "3"]
    assert main([*args, *TINY]) == 0
    cfg = OmegaConf.create(load_yaml(out / "config.yaml"))
    assert (cfg.data.name, cfg.preset) == ("fashion_mnist", "center_parents_sparse")
    assert (cfg.model.center, cfg.cd.sparsity, cfg.cd.sparsity_target) == (True, 50.0, 0.075)
    assert (cfg.cd.decoder_rule, cfg.model.generation) == ("reconstruction", "alone")
    method = get_method("poe")(cfg)
    net = method.poe
    assert (net.encoder.normalize, net.decoder.normalize) == ("parents", "children")
    rows = (out / "metrics.csv").read_text().strip().splitlines()
    header = rows[0].split(",")
    on = [r.split(",")[header.index("train_caps_on")] for r in rows[1:]]
    assert [float(v) for v in on if v], "stage 2 logs how often the capsules are on"
    m = json.loads((out / "metrics.json").read_text())
    assert m["stages_completed"] == 3 and np.isfinite(m["recon_caps_mse"])
    assert m["purity_classes_covered_restricted"] >= 1
    for name in ("samples", "samples_restricted"):
        w, h = Image.open(out / "figures" / f"{name}.png").size
        assert 20 * 30 + 2 <= w <= 1600 and 3.2 < w / h < 4.2, name


def test_competitive_is_the_former_name_of_center_parents_sparse():
    from selfcaps.config.loading import load_config

    old, new = load_config("poe", "competitive"), load_config("poe", "center_parents_sparse")
    assert old.preset == "competitive"
    old.preset = new.preset
    assert OmegaConf.to_container(old) == OmegaConf.to_container(new)


def test_stages_are_counted_from_the_training_not_from_the_best_checkpoint():
    """best.ckpt may be stage 3's next-to-last epoch: all 3 stages still ran (no warning)."""
    from selfcaps.config.loading import load_config

    cfg = load_config("poe", "quick", [("model.stage_epochs", [2, 8, 4]), ("trainer.epochs", 14)])
    resumed = get_method("poe")(cfg)
    resumed.on_load_checkpoint({"state_dict": {"epochs_finished": torch.tensor(14)}})
    resumed.epochs_finished.fill_(13)  # then best.ckpt's weights, from epoch 13, are loaded
    assert resumed.stages_trained() == 3
    cold = get_method("poe")(cfg)  # weights alone: the checkpoint's count is all there is
    cold.epochs_finished.fill_(13)
    assert cold.stages_trained() == 2
    trained = get_method("poe")(cfg)  # trained here: the last batch of the 14th epoch counts
    trained._trainer = SimpleNamespace(num_training_batches=4, current_epoch=13)
    trained.on_train_batch_end(None, None, 3)
    trained._trainer = None
    trained.epochs_finished.fill_(13)
    assert trained.stages_trained() == 3


def test_the_evaluation_records_the_trained_and_the_untrained_weights(run_dir):
    m = assert_evaluation_record(run_dir, "eval_test")
    assert m["eval_untrained_weights"] != m["eval_test_weights"]  # eval.baselines is on
    assert m["eval_untrained_query_n"] == m["eval_test_query_n"]


def test_bf16_mixed_trains_every_stage(tmp_path):
    """Under ``--precision bf16-mixed`` stage 1 runs in autocast and the CD stages in float32:
    stage 2 once failed when it assigned a bfloat16 update to a float32 parameter's grad."""
    out = tmp_path / "run"
    argv = ["run", "poe", "--out", str(out), "--epochs", "3", "--precision", "bf16-mixed"]
    assert main([*argv, *TINY, "eval.baselines=false"]) == 0
    with open(out / "metrics.csv") as f:
        stages = {float(r["stage"]) for r in csv.DictReader(f) if r.get("stage")}
    assert stages == {1.0, 2.0, 3.0}
    m = json.loads((out / "metrics.json").read_text())
    assert np.isfinite(m["recon_caps_mse"]) and np.isfinite(m["recon_encoder_mse"])


def test_rejudge_reproduces_the_run_with_its_own_judge_and_keeps_metrics(run_dir, tmp_path):
    """experiments/poe_rejudge.py: the run's own judge length gives the run's own purities (the
    judge and the samples are seeded as in the run); another length adds an entry of its own."""
    import shutil

    from tests.scripts import load_script

    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    before = (copy / "metrics.json").read_text()
    rejudge = load_script("poe_rejudge")
    result = rejudge.rejudge(copy, [1, 2], None)
    m = json.loads(before)
    own = result["1"]  # TINY trains the judge for 1 epoch
    for key in ("judge_test_top1", "purity_mean", "purity_classes_covered",
                "purity_majority_classes", "purity_mean_restricted",
                "purity_majority_classes_restricted"):  # fmt: skip
        assert own[key] == m[key], key
    assert result["2"]["judge_epochs"] == 2 and 0 <= result["2"]["judge_test_top1"] <= 100
    assert (copy / "metrics.json").read_text() == before
    with pytest.raises(ValueError, match="expected poe"):
        (copy / "config.yaml").write_text((copy / "config.yaml").read_text().replace(
            "method: poe", "method: coca"))  # fmt: skip
        rejudge.rejudge(copy, [1], None)


def test_rejudge_with_a_longer_judge_equals_a_run_that_trained_it(run_dir, tmp_path):
    """experiments/poe_rejudge.py --judge-epochs E on a finished run gives the purities of the
    same run trained with judge.epochs=E: the judge only reads the trained network, so a
    preset's judge length can be measured on runs made before it changed."""
    from tests.scripts import load_script

    out = tmp_path / "judge2"
    args = ["run", "poe", "--out", str(out), "--epochs", "3", *TINY, "judge.epochs=2"]
    assert main(args) == 0
    assert load_yaml(out / "config.yaml")["judge"]["epochs"] == 2  # TINY's 1 overridden
    longer = load_script("poe_rejudge").rejudge(run_dir, [2], None)["2"]
    m = json.loads((out / "metrics.json").read_text())
    for key in ("judge_test_top1", "purity_mean", "purity_classes_covered",
                "purity_majority_classes", "purity_mean_restricted",
                "purity_majority_classes_restricted"):  # fmt: skip
        assert longer[key] == m[key], key


def test_rejudge_with_another_runs_judge(run_dir, tmp_path):
    """experiments/poe_rejudge.py --judge-from: the samples stay the scored run's (its own run
    as the judge's source reproduces its metrics) and the judge is the other run's (trained on
    the other run's subset and seed: the other run's own judge accuracy, which differs here)."""
    import shutil

    from tests.scripts import load_script

    rejudge = load_script("poe_rejudge")
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(run_dir, a)
    shutil.copytree(run_dir, b)
    cfg_b = (b / "config.yaml").read_text()
    assert "\nseed: 0\n" in cfg_b
    (b / "config.yaml").write_text(cfg_b.replace("\nseed: 0\n", "\nseed: 5\n"))  # another subset
    own_b = rejudge.rejudge(b, [1], None)["1"]
    m_a = json.loads((a / "metrics.json").read_text())
    self_judged = rejudge.rejudge(a, [1], None, rejudge.Judges.of_run(a, None))[f"1 from {a}"]
    b_judged = rejudge.rejudge(a, [1], None, rejudge.Judges.of_run(b, None))[f"1 from {b}"]
    for key in ("judge_test_top1", "purity_mean", "purity_majority_classes"):
        assert self_judged[key] == m_a[key], key
    assert b_judged["judge_test_top1"] == own_b["judge_test_top1"] != m_a["judge_test_top1"]
    assert b_judged["judge_from"] == str(b) and b_judged["judge_epochs"] == 1
    with pytest.raises(ValueError, match="expected poe"):
        (b / "config.yaml").write_text(cfg_b.replace("method: poe", "method: coca"))
        rejudge.Judges.of_run(b, None)


def test_rejudge_shares_one_judge_between_runs(run_dir, tmp_path, monkeypatch):
    """experiments/poe_rejudge.py --judge-from with several runs: the other run's judge is
    trained once per number of epochs, and each run's scores equal a call of its own."""
    import shutil

    from tests.scripts import load_script

    rejudge = load_script("poe_rejudge")
    a, b, judge_run = tmp_path / "a", tmp_path / "b", tmp_path / "j"
    for d in (a, b, judge_run):
        shutil.copytree(run_dir, d)
    alone = {
        d: rejudge.rejudge(d, [1], None, rejudge.Judges.of_run(judge_run, None)) for d in (a, b)
    }
    trained = []
    train = rejudge.train_judge
    monkeypatch.setattr(rejudge, "train_judge", lambda *x: trained.append(1) or train(*x))
    judges = rejudge.Judges.of_run(judge_run, None)
    shared = {d: rejudge.rejudge(d, [1, 1], None, judges) for d in (a, b)}
    assert len(trained) == 1
    assert shared == alone


def test_rejudge_with_judge_seeds(run_dir, tmp_path, monkeypatch):
    """experiments/poe_rejudge.py --judge-seeds: the run's own seed gives the run's own judge
    (its metrics, to the digit); another seed reaches the judge's training, nothing else, and
    leaves the loaded run's configuration as it was."""
    import shutil

    from tests.scripts import load_script

    rejudge = load_script("poe_rejudge")
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    m = json.loads((copy / "metrics.json").read_text())
    seen = []
    train = rejudge.train_judge

    def spy(dm, cfg, info, device):
        seen.append((int(cfg.seed), int(cfg.judge.epochs), int(cfg.samples.seed)))
        return train(dm, cfg, info, device)

    monkeypatch.setattr(rejudge, "train_judge", spy)
    method, dm = rejudge.load_run_dir(copy, None, method="poe")
    judges = rejudge.Judges(method, dm)
    result = rejudge.rejudge(copy, [1], None, judges, [0, 7])
    assert sorted(result) == ["1 seed 0", "1 seed 7"]
    for key in ("judge_test_top1", "purity_mean", "purity_majority_classes",
                "purity_mean_restricted", "purity_majority_classes_restricted"):  # fmt: skip
        assert result["1 seed 0"][key] == m[key], key
    samples_seed = int(method.cfg.samples.seed)
    assert seen == [(0, 1, samples_seed), (7, 1, samples_seed)]
    assert result["1 seed 7"]["judge_seed"] == 7 and result["1 seed 7"]["judge_epochs"] == 1
    assert int(method.cfg.seed) == 0 and int(method.cfg.judge.epochs) == 1  # not mutated
    assert rejudge.rejudge(copy, [1], None, judges, [7]) == {"1 seed 7": result["1 seed 7"]}
    assert len(seen) == 2  # each (epochs, seed) judge trained once


def test_selectivity_script_reproduces_the_runs_group_metrics(run_dir, tmp_path):
    """experiments/poe_selectivity.py on a finished run gives the group metrics its evaluation
    wrote, per capsule the same groups, and leaves metrics.json alone."""
    import shutil

    from tests.scripts import load_script

    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    before = (copy / "metrics.json").read_text()
    script = load_script("poe_selectivity")
    row = script.selectivity(copy, None)
    m = json.loads(before)
    for key in ("caps_group_purity", "caps_group_classes", "caps_group_empty",
                "caps_group_majority_classes", "caps_group_images"):  # fmt: skip
        assert row[key] == m[key], key
        assert row[f"{key}_untrained"] == m[f"{key}_untrained"], key
    sizes = [c["group_images"] for c in row["capsules"]]
    assert sum(sizes) == m["caps_group_images"] and len(sizes) == 20
    assert [c["sample_purity_restricted"] for c in row["capsules"]] == [
        m[f"purity_capsule_{j:02d}_restricted"] for j in range(20)
    ]
    assert 0.0 < row["kmeans_group_purity"] <= 100.0
    pooled = script.pooled([row, row])
    assert pooled["capsules"] == 2 * (20 - m["caps_group_empty"])
    assert (copy / "metrics.json").read_text() == before


def test_pose_geometry_script_reproduces_the_runs_purity_and_ranks(run_dir, tmp_path):
    """experiments/poe_pose_geometry.py retrains the run's judge, reads the run's restricted
    purity exactly, splits the same draws by angle, and leaves metrics.json alone."""
    import shutil

    from tests.scripts import load_script

    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    before = (copy / "metrics.json").read_text()
    row = load_script("poe_pose_geometry").pose_geometry(copy, [0.1, 0.2, 0.3], None)
    m = json.loads(before)
    assert row["purity_mean_restricted"] == pytest.approx(m["purity_mean_restricted"])
    assert row["judge_test_top1"] == m["judge_test_top1"]
    for key in ("encoder_rank1_share", "decoder_rank1_share_min", "decoder_rank1_share_untrained"):
        assert row[key] == pytest.approx(m[key]), key
    shares, agreement = row["angle_draw_share"], row["angle_agreement"]
    assert len(shares) == len(agreement) == 4 and sum(shares) == pytest.approx(1.0)
    # the bins' agreements, weighted by their shares, are the restricted purity
    total = sum(a * w for a, w in zip(agreement, shares, strict=True) if a is not None)
    assert total == pytest.approx(row["purity_mean_restricted"], abs=1e-3)
    near = row["agreement_near_equator"]
    assert near is None or near == pytest.approx(agreement[0])
    assert 0.0 <= row["pose_far_side_share"] <= 1.0 and row["test_images"] == m["recon_test_images"]
    assert (
        len(row["pole_majority_near"].split(",")) == 20 and 0 <= row["pole_majorities_differ"] <= 20
    )
    assert 0.0 <= row["decoder_axis_cos_min"] <= row["decoder_axis_cos"] <= 1.0
    assert (copy / "metrics.json").read_text() == before
