"""Bad input gets one clear line naming the problem (and the valid choices), exit code 2."""

import os
import pickle

import pytest
import torch
from PIL import Image

from selfcaps.cli import main
from selfcaps.engine.checkpoints import CheckpointError, atomic_write_bytes, load_checkpoint
from tests.runs import TINY


def _error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("selfcaps: error:") or "error:" in err, err
    return err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["run", "cocaa"], ["unknown method 'cocaa'", "Did you mean 'coca'", "Valid"]),
        (["run", "coca", "--preset", "papr"], ["unknown preset 'papr'", "'paper'", "quick"]),
        (["run", "coca", "--data", "cifar11"], ["cifar11", "cifar10"]),
        (["run", "coca", "optim.lrr=1"], ["unknown config key 'optim.lrr'", "'optim.lr'"]),
        (["run", "coca", "optim.lr=-1"], ["optim.lr", "> 0", "-1"]),
        (["run", "coca", "optim.lr=fast"], ["optim.lr", "expected float"]),
        (["run", "coca", "data.val_fraction=1.5"], ["data.val_fraction", "(0, 1)"]),
        (["run", "coca", "eval.svm_c=0"], ["eval.svm_c", "> 0"]),
        (["run", "coca", "eval.knn_k=99999"], ["eval.knn_k", "larger than the kNN bank"]),
        (["run", "coca", "--batch-size", "100000"], ["data.batch_size", "training images"]),
        (["eval", "/nonexistent-run", "--protocol", "knn"], ["not a run directory"]),
    ],
)
def test_cli_errors_name_the_problem(argv, expected, capsys, tmp_path):
    code = main([*argv, "--out", str(tmp_path / "o")] if argv[0] == "run" else argv)
    assert code == 2
    err = _error(capsys)
    for piece in expected:
        assert piece in err, (piece, err)


def test_unknown_protocol_lists_choices(capsys):
    with pytest.raises(SystemExit) as e:
        main(["eval", "somewhere", "--protocol", "knnn"])
    assert e.value.code == 2
    assert "knn" in capsys.readouterr().err and "finetune" in capsys.readouterr().err + "finetune"


def test_missing_dataset_names_files_root_and_source(tmp_path, capsys):
    root = tmp_path / "empty"
    code = main(
        ["run", "coca", "--data", "mnist", "--data-root", str(root), "--out", str(tmp_path / "o")]
    )
    assert code == 2
    err = _error(capsys)
    assert "mnist" in err and str(root) in err and "--data-root" in err
    assert "train-images-idx3-ubyte" in err


def test_missing_dataset_from_env_names_the_variable(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SELFCAPS_DATA", str(tmp_path / "nowhere"))
    assert main(["run", "coca", "--data", "mnist", "--out", str(tmp_path / "o")]) == 2
    assert "SELFCAPS_DATA" in _error(capsys)


def test_images_the_model_cannot_take(tmp_path, capsys):
    root = tmp_path / "big"
    for split in ("train", "test"):
        for cls in ("a", "b"):
            d = root / split / cls
            d.mkdir(parents=True)
            for i in range(12):
                Image.new("RGB", (64, 64), (i * 20, 0, 0)).save(d / f"{i}.png")
    argv = [
        "run",
        "coca",
        "--data",
        f"imagefolder:{root}",
        "--out",
        str(tmp_path / "o"),
        "--batch-size",
        "4",
        "monitor.knn_k=2",
        "eval.knn_k=2",
    ]
    assert main(argv) == 2
    assert "data.image_size" in _error(capsys)
    assert main([*argv, "data.image_size=64"]) == 2
    err = _error(capsys)
    assert "(3, 64, 64)" in err and "expects 4x4" in err
    assert not (tmp_path / "o" / "checkpoints").exists()


def test_unwritable_output_directory(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert main(["run", "coca", "--out", str(blocker / "run"), *TINY]) == 2
    assert "cannot write the output directory" in _error(capsys)


class _Exploit:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_checkpoint_that_executes_code_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.ckpt"
    torch.save({"state_dict": {}, "payload": _Exploit(str(marker))}, path)
    with pytest.raises(CheckpointError, match="refusing to load"):
        load_checkpoint(path)
    assert not marker.exists()


def test_eval_refuses_crafted_checkpoint_in_a_run(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["run", "coca", "--out", str(run), "--epochs", "1", *TINY]) == 0
    capsys.readouterr()
    marker = tmp_path / "pwned"
    torch.save({"state_dict": {}, "x": _Exploit(str(marker))}, run / "checkpoints" / "best.ckpt")
    assert main(["eval", str(run)]) == 2
    assert "refusing to load" in _error(capsys)
    assert not marker.exists()
    # a truncated checkpoint is named too
    last = run / "checkpoints" / "last.ckpt"
    last.write_bytes(last.read_bytes()[:1000])
    assert main(["eval", str(run), "--checkpoint", "last"]) == 2
    assert "truncated or corrupt" in _error(capsys)


def test_config_yaml_cannot_construct_objects(tmp_path, capsys):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text("method: !!python/object/apply:os.system ['touch pwned']\n")
    assert main(["run", "coca", "--out", str(run), "--resume"]) == 2
    assert "not valid YAML" in _error(capsys)


def test_atomic_write_on_full_disk_keeps_previous_file(tmp_path, monkeypatch):
    import errno

    import selfcaps.engine.atomic as io_mod

    target = tmp_path / "metrics.json"
    target.write_text("good")

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(io_mod.os, "fsync", full)
    with pytest.raises(OSError, match=f"could not write {target}"):
        atomic_write_bytes(target, b"new content" * 1000)
    assert target.read_text() == "good"
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]


def test_pickle_of_exploit_really_would_run(tmp_path):
    """Guard for the tests above: the crafted payload does execute under plain pickle."""
    marker = tmp_path / "ran"
    pickle.loads(pickle.dumps(_Exploit(str(marker))))
    assert marker.exists()
