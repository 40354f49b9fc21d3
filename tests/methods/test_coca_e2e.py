"""End-to-end CoCa runs on a tiny budget: every file of the run directory, resume."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

import selfcaps
from selfcaps.cli import main
from tests.runs import TINY as RUN_TINY
from tests.runs import assert_run_files

# The shared tiny run, with the baselines on and 128 training images. A constant learning
# rate: the resume test extends a 1-epoch run to 2 epochs, and the quick preset's cosine
# schedule is laid out over the epochs a run is started with.
TINY = [a for a in RUN_TINY if a != "eval.baselines=false"] + [
    "data.train_subset=128",
    "optim.scheduler=none",
    "optim.warmup=0",
]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("coca") / "run"
    assert main(["run", "coca", "--out", str(out), "--epochs", "2", *TINY]) == 0
    return out


def test_run_directory_has_every_file(run_dir):
    assert_run_files(run_dir, "hparams.yaml", "figures/retrieval.png")


def test_metrics_are_flat_and_complete(run_dir):
    m = json.loads((run_dir / "metrics.json").read_text())
    for key in (
        "knn_top1_backbone",
        "knn_top5_backbone",
        "knn_top1_capsule",
        "knn_top5_capsule",
        "knn_top1_pixels",
        "knn_top1_random_init",
        "best_epoch",
        "train_images_per_s",
    ):
        assert key in m, key
    assert all(isinstance(v, int | float | str) for v in m.values())
    for key in ("knn_top1_backbone", "knn_top1_capsule", "knn_top1_pixels"):
        assert 0.0 <= m[key] <= 100.0
    assert m["epochs_trained"] == 2 and m["steps"] == 2 * (128 // 32)


def test_metrics_csv_has_one_row_per_epoch_and_monitor(run_dir):
    rows = (run_dir / "metrics.csv").read_text().strip().splitlines()
    header = rows[0].split(",")
    assert {"epoch", "train_loss", "val_knn_top1"} <= set(header)
    epochs = {r.split(",")[header.index("epoch")] for r in rows[1:]}
    assert epochs == {"1", "2"}  # counted from 1, as the console and best_epoch count
    # time to accuracy: wall-clock minutes beside each validation, and their figure
    val = [r.split(",") for r in rows[1:] if r.split(",")[header.index("val_knn_top1")]]
    minutes = [float(r[header.index("elapsed_min")]) for r in val]
    assert len(minutes) == len(val) >= 1 and minutes == sorted(minutes) and minutes[0] > 0
    assert (run_dir / "figures" / "time_to_accuracy.png").is_file()


def test_weights_load_without_lightning(run_dir):
    cfg = json.loads((run_dir / "config.json").read_text())
    net = selfcaps.create_model(cfg["model"], **cfg["model_kwargs"])
    net.load_state_dict(load_file(run_dir / "model.safetensors"))
    net.eval()
    z = net(torch.zeros(2, 1, 28, 28))
    assert z.shape == (2, 10)


def test_eval_command_adds_protocol_metrics(run_dir):
    from selfcaps.data import get_dataset
    from selfcaps.eval.method_metrics import weights_digest
    from selfcaps.run.trained import load_method

    assert main(["eval", str(run_dir), "--protocol", "linear"]) == 0
    m = json.loads((run_dir / "metrics.json").read_text())
    assert 0.0 <= m["linear_top1_backbone"] <= 100.0
    assert "knn_top1_backbone" in m  # earlier metrics are kept
    # what the probe measured: the whole test split, trained on the train split, these weights
    assert m["eval_linear_backbone_query_split"] == "test"
    assert m["eval_linear_backbone_query_n"] == len(get_dataset("mnist5k", split="test"))
    assert m["eval_linear_backbone_bank_split"] == "train"
    assert m["eval_linear_backbone_weights"] == weights_digest(load_method(run_dir, "best"))


def test_eval_protocol_method_repeats_the_runs_own_evaluation(run_dir, capsys):
    before = json.loads((run_dir / "metrics.json").read_text())
    assert main(["eval", str(run_dir), "--protocol", "method", "--no-progress"]) == 0
    m = json.loads((run_dir / "metrics.json").read_text())
    for key in ("knn_top1_backbone", "knn_top1_capsule", "knn_top1_pixels", "knn_top1_random_init"):
        assert m[key] == before[key], key  # a deterministic run: the same numbers again
    assert m["evaluated_by"].startswith("selfcaps eval --protocol method")
    assert main(["eval", str(run_dir), "--protocol", "method", "--feature", "capsule"]) == 2
    assert "--feature" in capsys.readouterr().err


def test_eval_no_progress_keeps_stderr_quiet_and_the_result(run_dir, capsys):
    assert main(["eval", str(run_dir), "--protocol", "knn"]) == 0
    loud = capsys.readouterr()
    assert "features of" in loud.err  # the bars of the feature passes, by default
    assert main(["eval", str(run_dir), "--protocol", "knn", "--no-progress"]) == 0
    quiet = capsys.readouterr()
    assert "features of" not in quiet.err and "[" not in quiet.err
    assert quiet.out == loud.out  # the same printed metrics


def test_eval_knn_with_the_whole_training_split_as_bank(run_dir):
    before = json.loads((run_dir / "metrics.json").read_text())
    assert main(["eval", str(run_dir), "--protocol", "knn", "--bank", "train_full"]) == 0
    m = json.loads((run_dir / "metrics.json").read_text())
    assert 0.0 <= m["knn_top1_backbone_train_full"] <= 100.0
    assert m["knn_top1_backbone"] == before["knn_top1_backbone"]  # the train-bank result stays
    assert main(["eval", str(run_dir), "--protocol", "linear", "--bank", "train_full"]) == 2


def test_resume_reproduces_uninterrupted_run(tmp_path, run_dir):
    out = tmp_path / "resumed"
    assert main(["run", "coca", "--out", str(out), "--epochs", "1", *TINY]) == 0
    assert main(["run", "coca", "--out", str(out), "--resume", "--epochs", "2"]) == 0
    a = json.loads((run_dir / "metrics.json").read_text())
    b = json.loads((out / "metrics.json").read_text())
    keys = ("knn_top1_backbone", "knn_top1_capsule", "best_val_knn_top1", "best_epoch", "steps")
    for key in keys:
        assert a[key] == b[key], key
    wa, wb = load_file(run_dir / "model.safetensors"), load_file(out / "model.safetensors")
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], rtol=0, atol=0)


def test_refuses_to_overwrite_a_run(run_dir, capsys):
    assert main(["run", "coca", "--out", str(run_dir), "--epochs", "1", *TINY]) == 2
    assert "already holds a run" in capsys.readouterr().err


def test_evaluation_records_the_split_it_scored_and_the_weights_it_used(run_dir):
    """The wiring behind the headline: test split, whole; untrained = a fresh seeded init."""
    from omegaconf import OmegaConf

    from selfcaps.data import get_dataset
    from selfcaps.data.datamodule import mix_seed
    from selfcaps.eval.method_metrics import weights_digest
    from selfcaps.methods.coca import CoCa
    from selfcaps.run.trained import load_method

    m = json.loads((run_dir / "metrics.json").read_text())
    test_images = len(get_dataset("mnist5k", split="test"))  # the official split, not the run's
    for prefix in ("eval_knn", "eval_knn_pixels", "eval_knn_random_init"):
        assert m[f"{prefix}_query_split"] == "test", prefix  # never the validation split
        assert m[f"{prefix}_query_n"] == test_images, prefix
        assert m[f"{prefix}_bank_split"] == "train" and m[f"{prefix}_bank_n"] > 0, prefix
    assert "eval_knn_pixels_weights" not in m  # pixels use no weights
    # The trained number is the evaluated checkpoint's; the untrained one is a fresh network
    # seeded with the baseline's seed, built here independently of the method's code path.
    trained = load_method(run_dir, "best")
    assert m["eval_knn_weights"] == weights_digest(trained)
    cfg = OmegaConf.load(run_dir / "config.yaml")
    torch.manual_seed(mix_seed(int(cfg.seed), 0x0417))
    fresh = CoCa(cfg)
    assert m["eval_knn_random_init_weights"] == weights_digest(fresh)
    assert m["eval_knn_random_init_weights"] != m["eval_knn_weights"]


def test_weights_digest_tells_weights_apart_and_ignores_nothing():
    from selfcaps.eval.method_metrics import weights_digest

    a, b = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    b.load_state_dict(a.state_dict())
    assert weights_digest(a) == weights_digest(b)
    with torch.no_grad():
        b.bias[1] += 1e-7  # one float's last bits
    assert weights_digest(a) != weights_digest(b)
    bn = torch.nn.BatchNorm1d(2)
    before = weights_digest(bn)
    bn.running_mean += 1  # buffers count: the statistics are part of what is evaluated
    assert weights_digest(bn) != before


def test_eval_of_a_run_a_signal_stopped_says_it_is_unfinished(run_dir, tmp_path, capsys):
    stopped = tmp_path / "stopped"
    shutil.copytree(run_dir, stopped)
    m = json.loads((stopped / "metrics.json").read_text())
    m |= {"stopped_by": "signal", "epochs_trained": 0, "epochs_planned": 1}
    (stopped / "metrics.json").write_text(json.dumps(m))
    assert main(["eval", str(stopped), "--protocol", "knn", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert f"{stopped} was stopped by a signal after 0 of 1 epochs" in err
    assert f"selfcaps run coca --out {stopped} --resume" in err
    assert main(["eval", str(run_dir), "--protocol", "knn", "--no-progress"]) == 0
    assert "stopped by a signal" not in capsys.readouterr().err  # a finished run: no warning
