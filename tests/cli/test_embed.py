"""A trained run in one call: ``selfcaps embed``, ``load_run``, ``create_model(checkpoint_path=)``.

One tiny CoCa pretraining (64 mnist5k images, 2 steps, one thread) serves every test.
Features are checked against the network's own ``forward_features`` on images put
through the evaluation transform by hand, labels against the dataset's targets.
"""

import json
import shutil

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.numpy import load_file

import selfcaps
from selfcaps.cli import main
from selfcaps.data import get_dataset
from selfcaps.models.weights import CheckpointError
from tests.data.conftest import shared_data_dir
from tests.runs import FAST


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("embed") / "run"
    args = ["pretrain", "coca", "--out", str(out), "--epochs", "1", *FAST]
    assert main([*args, "data.train_subset=64", "data.eval_batch_size=200"]) == 0
    return out


@pytest.fixture(scope="module")
def embedded(run_dir, tmp_path_factory):
    """The ``val`` split embedded in each format."""
    out = tmp_path_factory.mktemp("features")
    files = {}
    for suffix in ("npz", "npy", "safetensors"):
        files[suffix] = out / f"features.{suffix}"
        argv = ["embed", str(run_dir), "--split", "val", "--out", str(files[suffix])]
        assert main([*argv, "--threads", "1", "--no-progress"]) == 0
    return files


def _val_images(n):
    """The first ``n`` mnist5k validation images through CoCa's evaluation transform, by hand."""
    ds = get_dataset("mnist5k", split="val")
    mean, std = 0.1312, 0.3084  # mnist5k's statistics (selfcaps list datasets)
    return torch.stack([(ds[i][0].float() / 255 - mean) / std for i in range(n)]), ds


def test_embed_npz_holds_every_feature_kind_and_the_labels(embedded, run_dir):
    f = np.load(embedded["npz"])
    assert set(f.files) == {"backbone", "capsule", "embedding", "labels"}
    x, ds = _val_images(5)
    assert f["labels"].tolist() == [int(ds[i][1]) for i in range(len(ds))]
    assert f["backbone"].shape == (len(ds), 2048) and f["backbone"].dtype == np.float32
    net = selfcaps.load_run(run_dir).network
    with torch.no_grad():
        expected = net.forward_features(x).numpy()
    np.testing.assert_allclose(f["backbone"][:5], expected, rtol=1e-4, atol=1e-5)  # batch sizes


def test_embed_formats_hold_the_same_arrays(embedded):
    ref = np.load(embedded["npz"])
    records = np.load(embedded["npy"], allow_pickle=False)
    tensors = load_file(embedded["safetensors"])
    for k in ref.files:
        np.testing.assert_array_equal(records[k], ref[k])
        np.testing.assert_array_equal(tensors[k], ref[k])
    with safe_open(embedded["safetensors"], "np") as fh:
        meta = fh.metadata()
    assert meta["method"] == "coca" and meta["split"] == "val" and meta["dataset"] == "mnist5k"


def test_embed_keeps_the_requested_kinds(run_dir, tmp_path):
    out = tmp_path / "f.npz"
    argv = ["embed", str(run_dir), "--out", str(out), "--feature", "capsule", "--threads", "1"]
    assert main([*argv, "--no-progress"]) == 0
    f = np.load(out)
    assert set(f.files) == {"capsule", "labels"} and f["capsule"].shape == (1000, 160)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--out", "f.csv"], "expected a file ending in .npz, .safetensors, .npy, got .csv"),
        (["--out", "f.npz", "--feature", "caps"], "'caps' is not a feature of coca; valid:"),
        (["--out", "f.npz", "--data", "cifar"], "unknown dataset 'cifar'"),
    ],
)
def test_embed_bad_input_is_named(run_dir, tmp_path, capsys, extra, message):
    extra = [str(tmp_path / a) if a.startswith("f.") else a for a in extra]
    assert main(["embed", str(run_dir), *extra, "--no-progress"]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.shared_data
@pytest.mark.skipif(
    not (shared_data_dir() / "cifar10").is_dir(),
    reason="needs the CIFAR-10 files of ../shared/data (or SELFCAPS_SHARED_DATA)",
)
def test_embed_refuses_images_of_another_shape(run_dir, tmp_path, capsys):
    argv = ["embed", str(run_dir), "--out", str(tmp_path / "f.npz"), "--data", "cifar10"]
    assert main([*argv, "--data-root", str(shared_data_dir()), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "(3, 32, 32)" in err and "takes (1, 28, 28)" in err


def test_load_run_reads_the_best_checkpoint_in_eval_mode(run_dir):
    run = selfcaps.load_run(run_dir)
    assert not run.network.training
    assert run.weights == run_dir / "checkpoints" / "best.ckpt"
    assert run.config["method"] == "coca" and run.model_config["model"] == "coca"
    saved = load_file(run_dir / "model.safetensors")
    state = run.network.state_dict()
    assert saved.keys() == state.keys()
    assert all(torch.equal(torch.from_numpy(saved[k]), state[k]) for k in saved)


def test_load_run_without_config_json_derives_the_network_from_the_method(run_dir, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("config.json", "*.safetensors"))
    run = selfcaps.load_run(copy, checkpoint="last")
    expected = json.loads((run_dir / "config.json").read_text())
    assert run.model_config["model_kwargs"] == expected["model_kwargs"]
    ref = selfcaps.load_run(run_dir, checkpoint="last").network.state_dict()
    assert all(torch.equal(v, ref[k]) for k, v in run.network.state_dict().items())


@pytest.mark.parametrize("where", ["dir", "safetensors", "ckpt"])
def test_create_model_loads_each_kind_of_checkpoint(run_dir, where):
    path = {
        "dir": run_dir,
        "safetensors": run_dir / "model.safetensors",
        "ckpt": run_dir / "checkpoints" / "last.ckpt",
    }[where]
    net = selfcaps.create_model("coca", checkpoint_path=path)
    saved = load_file(run_dir / "model.safetensors")
    assert all(torch.equal(v, torch.from_numpy(saved[k])) for k, v in net.state_dict().items())


def test_load_run_refuses_another_method_and_missing_files(run_dir, tmp_path):
    with pytest.raises(CheckpointError, match="is a 'coca' run, not a 'mcae' run"):
        selfcaps.load_run(run_dir, method="mcae")
    with pytest.raises(CheckpointError, match="holds the weights of model 'coca' of a coca run"):
        selfcaps.create_model("mcae", checkpoint_path=run_dir)
    with pytest.raises(CheckpointError, match=r"holds no last weights: .*last\.ckpt does not"):
        selfcaps.load_run(tmp_path, checkpoint="last")
    with pytest.raises(CheckpointError, match=r"run directory .*nowhere does not exist"):
        selfcaps.load_run(tmp_path / "nowhere")


def test_load_run_is_callable_on_uint8_images_and_gives_embeds_features(embedded, run_dir):
    """``run(images)``: the dataset's own uint8 images in, the run's evaluation transform
    applied, ``selfcaps embed``'s features out (its first batch of 200: the same batch)."""
    written = np.load(embedded["npz"])
    images = get_dataset("mnist5k", split="val").data[:200]
    assert images.dtype == torch.uint8
    run = selfcaps.load_run(run_dir)
    features = run(images)
    assert set(features) == set(written.files) - {"labels"}
    for kind, value in features.items():
        np.testing.assert_allclose(value.numpy(), written[kind][:200], atol=1e-6, err_msg=kind)
    one = run(images[7])  # a single (C, H, W) image: another batch size, float32 rounding
    np.testing.assert_allclose(one["backbone"][0].numpy(), written["backbone"][7], atol=1e-5)
    assert not run.network.training


def test_load_run_transform_is_the_runs_normalisation(run_dir):
    run = selfcaps.load_run(run_dir)
    image = get_dataset("mnist5k", split="test").data[0]
    expected = (image.float() / 255 - 0.1312) / 0.3084  # mnist5k's mean and std, by hand
    transformed = run.transform(image)
    assert torch.allclose(transformed, expected, atol=1e-6)
    # ``run`` is that transform, then the network: the same floats. (The features of the hand
    # formula's input, 2.4e-7 away, differed by 1.4e-6 to 1.5e-6 on torch 2.11 and 2.14: how
    # far depends on the trained weights, so they are not the comparison.)
    with torch.no_grad():
        direct = run.network.forward_features(transformed.unsqueeze(0))
    assert torch.equal(run(image)["backbone"], direct.flatten(1))
    with pytest.raises(ValueError, match=r"expected uint8 images .* got torch.float32"):
        run(image.float() / 255)  # already scaled: refused, not transformed twice


def test_load_run_is_in_eval_mode_create_model_in_training_mode(run_dir):
    assert not selfcaps.load_run(run_dir).network.training
    assert selfcaps.create_model("coca", checkpoint_path=run_dir).training
