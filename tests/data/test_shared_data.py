"""Real datasets from ../shared/data (or SELFCAPS_SHARED_DATA); skipped where absent."""

import pytest
import torch

from selfcaps.data import MNIST, get_dataset
from tests.data.conftest import shared_data_dir
from tests.repo_paths import from_repo

DATA = shared_data_dir()
pytestmark = pytest.mark.shared_data


def _need(*parts: str) -> None:
    if not DATA.joinpath(*parts).exists():
        pytest.skip(f"real data not available: {from_repo(DATA.joinpath(*parts))} is missing")


def test_mnist_official_files():
    _need("MNIST", "raw", "t10k-images-idx3-ubyte")
    test = MNIST(DATA, train=False)
    assert test.data.shape == (10000, 1, 28, 28) and len(test.classes) == 10
    assert torch.bincount(test.targets).tolist() == [
        980,
        1135,
        1032,
        1010,
        982,
        892,
        958,
        1028,
        974,
        1009,
    ]
    train = get_dataset("mnist", DATA, split="train_full")
    assert len(train) == 60000 and torch.bincount(train.targets).tolist() == [
        5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949,
    ]  # fmt: skip
    x = train.data.float() / 255
    assert round(x.mean().item(), 4) == 0.1307 and round(x.std().item(), 4) == 0.3081


def test_cifar10_png_test_split_decodes_and_caches(tmp_path, monkeypatch):
    _need("cifar10", "test")
    monkeypatch.setenv("SELFCAPS_CACHE", str(tmp_path / "cache"))
    test = get_dataset("cifar10", DATA, split="test")
    assert test.data.shape == (10000, 3, 32, 32) and test.data.dtype == torch.uint8
    assert torch.bincount(test.targets).tolist() == [1000] * 10
    assert test.classes[0] == "airplane" and test.classes[-1] == "truck"
    assert len(list((tmp_path / "cache").glob("imagefolder-*.npz"))) == 1

    def no_decoding(*args):
        raise AssertionError("decoded although cached")

    monkeypatch.setattr("selfcaps.data.imagefolder.decode_image", no_decoding)
    again = get_dataset("cifar10", DATA, split="test")
    assert torch.equal(again.data, test.data) and torch.equal(again.targets, test.targets)
