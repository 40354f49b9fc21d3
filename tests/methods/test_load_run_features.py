"""``load_run(RUN)(images)``: a dataset's own uint8 images in, ``selfcaps embed``'s features out."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import selfcaps
from selfcaps.cli import main
from selfcaps.data import get_dataset
from tests.runs import FAST

MNIST5K_MEAN, MNIST5K_STD = 0.1312, 0.3084  # `selfcaps list datasets`


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A two-step CoCa run whose evaluation batch holds the whole validation split (400)."""
    out = tmp_path_factory.mktemp("load_run") / "run"
    args = ["pretrain", "coca", "--out", str(out), "--max-steps", "2", *FAST]
    assert main([*args, "data.train_subset=64", "data.eval_batch_size=512"]) == 0
    return out


def test_features_of_uint8_images_equal_embeds(run_dir, tmp_path):
    out = tmp_path / "f.npz"
    assert main(["embed", str(run_dir), "--split", "val", "--out", str(out), *FAST[:1]]) == 0
    written = np.load(out)
    images = get_dataset("mnist5k", split="val").data  # uint8 (400, 1, 28, 28)
    assert images.dtype == torch.uint8
    run = selfcaps.load_run(run_dir)
    features = run(images)
    assert set(features) == set(written.files) - {"labels"}
    for kind, value in features.items():
        np.testing.assert_allclose(value.numpy(), written[kind], rtol=0, atol=1e-6, err_msg=kind)
    one = run(images[7])  # a single (C, H, W) image: another batch size, float32 rounding
    np.testing.assert_allclose(one["backbone"][0].numpy(), written["backbone"][7], atol=1e-5)
    assert not run.network.training


def test_the_transform_is_the_runs_normalisation(run_dir):
    run = selfcaps.load_run(run_dir)
    image = get_dataset("mnist5k", split="test").data[0]
    expected = (image.float() / 255 - MNIST5K_MEAN) / MNIST5K_STD  # by hand
    assert torch.allclose(run.transform(image), expected, atol=1e-6)
    with torch.no_grad():
        direct = run.network.forward_features(expected.unsqueeze(0))
    assert torch.allclose(run(image)["backbone"], direct.flatten(1), atol=1e-6)


def test_transformed_images_are_refused_with_the_reason(run_dir):
    run = selfcaps.load_run(run_dir)
    images = get_dataset("mnist5k", split="test").data[:2]
    with pytest.raises(ValueError, match=r"expected uint8 images .* got torch.float32"):
        run(images.float() / 255)


def test_train_and_eval_mode_as_documented(run_dir):
    assert not selfcaps.load_run(run_dir).network.training
    assert selfcaps.create_model("coca", checkpoint_path=run_dir).training
