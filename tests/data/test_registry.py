import dataclasses
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

from selfcaps.data import (
    DatasetInfo,
    DatasetSubset,
    ImageDataset,
    dataset_info,
    get_dataset,
    list_datasets,
)
from selfcaps.data.paths import resolve_root

NAMES = [
    "affnist", "affnist_like", "cifar10", "cifar100", "fashion_mnist", "mnist", "mnist5k",
    "smallnorb", "smallnorb_azimuth", "smallnorb_azimuth_union", "smallnorb_elevation",
    "smallnorb_elevation_union", "svhn",
]  # fmt: skip


def test_list_datasets():
    assert list_datasets() == [*NAMES, "imagefolder:<path>"]
    assert list_datasets("cifar*") == ["cifar10", "cifar100"]


@pytest.mark.parametrize("name", NAMES)
def test_dataset_info_is_frozen_and_consistent(name):
    info = dataset_info(name)
    assert isinstance(info, DatasetInfo) and info.name == name
    assert len(info.mean) == len(info.std) == info.channels and all(s > 0 for s in info.std)
    assert info.stats_note and info.description
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.num_classes = 3  # type: ignore[misc]


def test_unknown_name_lists_choices_and_closest():
    with pytest.raises(
        ValueError, match=r"unknown dataset 'cifar-10'\. Did you mean 'cifar10'\?"
    ) as err:
        get_dataset("cifar-10")
    assert "mnist5k" in str(err.value) and "imagefolder:<path>" in str(err.value)
    with pytest.raises(ValueError, match="Did you mean 'smallnorb'"):
        dataset_info("smalnorb")


def test_unknown_split():
    with pytest.raises(ValueError, match="train, val, test, train_full"):
        get_dataset("mnist5k", split="validation")


def test_root_resolution_and_sources(tmp_path, monkeypatch):
    assert resolve_root(tmp_path) == (tmp_path, "the root argument")
    assert resolve_root(str(tmp_path), "--data-root") == (tmp_path, "--data-root")
    monkeypatch.setenv("SELFCAPS_DATA", str(tmp_path / "env"))
    root, source = resolve_root()
    assert root == tmp_path / "env" and "SELFCAPS_DATA" in source
    monkeypatch.delenv("SELFCAPS_DATA")
    monkeypatch.chdir(tmp_path)
    root, source = resolve_root()
    assert root == Path(tmp_path / "data") and "default ./data" in source


def test_subset_views_share_the_parent():
    val = get_dataset("mnist5k", split="val", transform=lambda x: x.float())
    assert (
        isinstance(val, DatasetSubset)
        and val.transform is not None
        and val.dataset.transform is None
    )
    img, target = val[0]
    parent_idx = int(val.indices[0])
    assert img.dtype == torch.float32 and torch.equal(img, val.dataset.data[parent_idx].float())
    assert target == int(val.dataset.targets[parent_idx])
    assert "data" not in vars(val)  # nothing gathered yet
    assert val.data.shape == (400, 1, 28, 28) and torch.equal(
        val.data[0], val.dataset.data[parent_idx]
    )
    assert val.classes == val.dataset.classes and "subset of MNIST5k" in repr(val)


def test_full_splits_carry_the_transform_and_load_in_a_dataloader():
    test = get_dataset("mnist5k", split="test", transform=lambda x: x.float() / 255)
    assert isinstance(test, ImageDataset) and not isinstance(test, DatasetSubset)
    images, labels = next(iter(DataLoader(test, batch_size=16, shuffle=True)))
    assert images.shape == (16, 1, 28, 28) and images.dtype == torch.float32
    assert labels.dtype == torch.long and "split: test" in repr(test)


def test_image_dataset_validates_its_tensors():
    with pytest.raises(ValueError, match="uint8"):
        ImageDataset(torch.zeros(2, 1, 3, 3), torch.zeros(2), ["a"])
    with pytest.raises(ValueError, match="shape"):
        ImageDataset(torch.zeros(2, 1, 3, 3, dtype=torch.uint8), torch.zeros(3), ["a"])
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        ImageDataset(torch.zeros(2, 1, 3, 3, dtype=torch.uint8), torch.tensor([0, 1]), ["a"])


def test_errors_survive_pickling():
    import pickle

    from selfcaps.data import (
        CorruptDatasetError,
        DatasetNotFoundError,
        DownloadNotSupportedError,
        UnsafePickleError,
    )

    errors = [
        DatasetNotFoundError("mnist", ["/a/b"], "/a", "--data-root"),
        CorruptDatasetError("/a/f", "bad magic"),
        UnsafePickleError("/a/p", "refusing"),
        DownloadNotSupportedError("svhn", ["/a/SVHN"]),
    ]
    for err in errors:
        back = pickle.loads(pickle.dumps(err))
        assert type(back) is type(err) and str(back) == str(err)


def test_get_splits_decodes_train_once(tmp_path):
    from selfcaps.data import get_splits
    from tests.data.formats import write_cifar_pickles

    write_cifar_pickles(tmp_path, per_batch=10)
    parts = get_splits(
        "cifar10", ("train", "val", "test", "train_full"), tmp_path, {"val": str}, 0.2
    )
    assert len(parts["train"]) + len(parts["val"]) == len(parts["train_full"]) == 50
    assert len(parts["test"]) == 10
    assert parts["train"].dataset is parts["val"].dataset and parts["val"].transform is str
    assert torch.equal(
        parts["val"].indices, get_dataset("cifar10", tmp_path, "val", None, 0.2).indices
    )
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        get_splits("cifar10", ("train", "dev"), tmp_path)
