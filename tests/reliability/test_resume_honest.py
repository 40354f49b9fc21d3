"""``--resume`` says what it does: the epoch and batch it continues from, or why it cannot.

A checkpoint that cannot be loaded is named, and a corrupt file is told apart from one
crafted to run code; torch's advice to load with ``weights_only=False`` never reaches
the user.
"""

import json
import os
import pickle

import pytest
import torch
from omegaconf import OmegaConf

from selfcaps.cli import main
from selfcaps.config.loading import load_config
from selfcaps.engine.checkpoints import CheckpointError, atomic_write_yaml, load_checkpoint
from tests.runs import TINY


class _Exploit:
    def __reduce__(self):
        return (os.system, ("true",))


def _saved_run(run, *files: str) -> None:
    """A run directory with a config.yaml (and the named files, empty) but no last.ckpt."""
    (run / "checkpoints").mkdir(parents=True)
    # tiny, so that a --resume that wrongly starts afresh fails fast instead of training long
    tiny = [("trainer.epochs", 1), ("data.train_subset", 64), ("data.batch_size", 32),
            ("monitor.knn_every_n_epochs", 0), ("eval.baselines", False), ("eval.knn_k", 5),
            ("trainer.progress_bar", False), ("trainer.threads", 1)]  # fmt: skip
    cfg = OmegaConf.to_container(load_config("coca", "quick", tiny), resolve=True)
    atomic_write_yaml(run / "config.yaml", cfg)
    for name in files:
        (run / name).write_text("")


def test_resume_without_checkpoint_of_a_run_that_trained_is_an_error(tmp_path, capsys):
    run = tmp_path / "run"
    _saved_run(run, "metrics.csv")
    assert main(["run", "coca", "--out", str(run), "--resume"]) == 2
    err = capsys.readouterr().err
    assert f"no checkpoint {run / 'checkpoints' / 'last.ckpt'}" in err
    assert "metrics.csv" in err
    assert (run / "config.yaml").is_file() and not (run / "checkpoints" / "last.ckpt").exists()


@pytest.mark.slow
def test_resume_of_a_directory_without_progress_starts_fresh(tmp_path, capsys):
    run = tmp_path / "never-ran"
    args = ["run", "coca", "--epochs", "1", *TINY, "--out", str(run), "--resume"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"--resume: {run} holds no run yet" in out and "starting a fresh run" in out
    assert (run / "metrics.json").is_file()


@pytest.mark.parametrize(
    "content",
    [os.urandom(4096), b"", b"hello world\n" * 100, pickle.dumps({"a": 1}, protocol=4)],
    ids=["random", "empty", "text", "foreign-pickle"],
)
def test_a_corrupt_checkpoint_is_not_called_unsafe(tmp_path, content):
    path = tmp_path / "last.ckpt"
    path.write_bytes(content)
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(path)
    text = str(e.value)
    assert text.startswith(f"{path} is not a valid checkpoint"), text
    assert "execute code" not in text and "weights_only" not in text


@pytest.mark.parametrize("how", ["torch.save", "pickle"])
def test_only_a_well_formed_pickle_with_disallowed_globals_is_unsafe(tmp_path, how):
    path = tmp_path / "evil.ckpt"
    payload = {"state_dict": {}, "x": _Exploit()}
    if how == "torch.save":
        torch.save(payload, path)
    else:
        path.write_bytes(pickle.dumps(payload, protocol=4))
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(path)
    text = str(e.value)
    assert text.startswith(f"refusing to load {path}") and "system" in text, text
    assert "weights_only" not in text
    # the same archive, truncated, is corrupt, not unsafe
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(CheckpointError, match="is not a valid checkpoint"):
        load_checkpoint(path)


@pytest.mark.slow
def test_a_resumed_run_without_validation_keeps_the_weights_it_trained_last(tmp_path):
    # Without a validation monitor, best.ckpt is a copy of last.ckpt. The first leg's copy
    # must not be what a resumed leg evaluates and exports: the second leg trained further.
    from safetensors.torch import load_file

    run = tmp_path / "run"
    args = ["run", "coca", *TINY, "monitor.knn_every_n_epochs=0", "--out", str(run)]
    assert main([*args, "--epochs", "1"]) == 0
    first = load_checkpoint(run / "checkpoints" / "best.ckpt")["state_dict"]
    assert main([*args, "--epochs", "2", "--resume"]) == 0
    last = load_checkpoint(run / "checkpoints" / "last.ckpt")
    assert int(last["epoch"]) == 1  # the second leg trained epoch 2
    exported = load_file(str(run / "model.safetensors"))
    name = next(k for k in exported if k.endswith("weight"))
    trained = last["state_dict"][f"net.{name}"]
    assert torch.equal(exported[name], trained)
    assert not torch.equal(first[f"net.{name}"], trained)
    best = load_checkpoint(run / "checkpoints" / "best.ckpt")
    assert int(best["epoch"]) == 1


def _resume_args(run, *extra: str):
    from selfcaps.cli.main import build_parser

    argv = ["run", "coca", "--out", str(run), "--resume", *extra]
    args, rest = build_parser(argv).parse_known_args(argv)
    args.overrides = rest
    return args


def test_resume_refuses_settings_that_would_change_the_run(tmp_path, capsys):
    run = tmp_path / "run"
    _saved_run(run, "checkpoints/last.ckpt")  # saved with the quick preset
    argv = ["run", "coca", "--out", str(run), "--resume", "--preset", "paper", "optim.lr=0.1"]
    assert main([*argv, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "--preset paper (saved: quick)" in err, err
    assert "optim.lr=0.1 (saved: 0.003)" in err, err
    assert "another --out" in err


def test_resume_applies_budget_progress_and_threads_and_says_so(tmp_path, capsys):
    from selfcaps.cli.run import spec_from_args
    from selfcaps.run.train import prepare_run

    run = tmp_path / "run"
    _saved_run(run, "checkpoints/last.ckpt")  # saved: no progress bar, 1 thread, 1 epoch
    args = _resume_args(run, "--max-steps", "10", "--threads", "2", "trainer.progress_bar=true")
    cfg, _, ckpt, _ = prepare_run(spec_from_args(args))
    assert (cfg.trainer.max_steps, cfg.trainer.threads, cfg.trainer.progress_bar) == (10, 2, True)
    assert ckpt == run / "checkpoints" / "last.ckpt"
    lines = [x for x in capsys.readouterr().out.splitlines() if "applying" in x]
    assert len(lines) == 1, lines
    for change in ("trainer.max_steps -1 -> 10", "trainer.threads 1 -> 2",
                   "trainer.progress_bar false -> true"):  # fmt: skip
        assert change in lines[0], lines[0]


def test_resume_with_the_saved_settings_says_nothing_of_them(tmp_path, capsys):
    from selfcaps.cli.run import spec_from_args
    from selfcaps.run.train import prepare_run

    run = tmp_path / "run"
    _saved_run(run, "checkpoints/last.ckpt")
    prepare_run(
        spec_from_args(_resume_args(run, "--preset", "quick", "--no-progress", "--threads", "1"))
    )
    assert "applying" not in capsys.readouterr().out


@pytest.mark.slow
def test_a_short_resume_evaluates_the_weights_it_trained(tmp_path, capsys):
    # 256 images less the validation carve at batch 32: 7 steps an epoch, validation after
    # step 7; 3 then 6 steps never validate, so the first leg's best.ckpt is no choice.
    from safetensors.torch import load_file

    run = tmp_path / "run"
    args = ["run", "coca", *TINY, "--epochs", "2", "--out", str(run)]
    assert main([*args, "--max-steps", "3"]) == 0
    capsys.readouterr()
    assert main([*args, "--max-steps", "6", "--resume"]) == 0
    out = capsys.readouterr().out
    m = json.loads((run / "metrics.json").read_text())
    assert m["steps"] == 6 and m["best_checkpoint"].startswith("last"), m["best_checkpoint"]
    assert "evaluated checkpoint: last (no validation ran)" in out, out
    last = load_checkpoint(run / "checkpoints" / "last.ckpt")["state_dict"]
    best = load_checkpoint(run / "checkpoints" / "best.ckpt")["state_dict"]
    exported = load_file(str(run / "model.safetensors"))
    for name, value in exported.items():
        assert torch.equal(value, last[f"net.{name}"]) and torch.equal(value, best[f"net.{name}"])
