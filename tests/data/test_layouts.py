"""The torch-free presence check agrees with what loading a dataset reports.

The official file names are written out here once more, on purpose: the check and
the dataset classes both take theirs from ``selfcaps.data.layouts``, and these tests
compare both with each other and with the names the datasets are distributed under.
"""

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from selfcaps.data import DatasetNotFoundError, get_dataset, list_datasets
from selfcaps.data.layouts import check_files_present

SRC = str(Path(__file__).resolve().parents[2] / "src")
SOURCE = "--data-root"
NORB_TRAIN = "smallnorb-5x46789x9x18x6x2x96x96-training"
NORB_TEST = "smallnorb-5x01235x9x18x6x2x96x96-testing"


def _idx(folder: str, prefix: str) -> list[str]:
    return [f"{folder}/raw/{prefix}-images-idx3-ubyte", f"{folder}/raw/{prefix}-labels-idx1-ubyte"]


def _norb(folder: str, prefix: str, gz: str = "") -> list[str]:
    return [f"{folder}/{prefix}-{kind}.mat{gz}" for kind in ("dat", "cat", "info")]


#: Per dataset: files of the training split, then the further files of the test split
#: (a trailing "/" marks a folder). Both locations / compressions are mixed in on purpose.
OFFICIAL: dict[str, tuple[list[str], list[str]]] = {
    "mnist": (_idx("MNIST", "train"), _idx("MNIST", "t10k")),
    "fashion_mnist": (_idx("FashionMNIST", "train"), _idx("FashionMNIST", "t10k")),
    "cifar10": (
        [
            *(f"cifar-10-batches-py/data_batch_{i}" for i in range(1, 6)),
            "cifar-10-batches-py/batches.meta",
        ],
        ["cifar-10-batches-py/test_batch"],
    ),
    "cifar100": (["cifar-100-python/train", "cifar-100-python/meta"], ["cifar-100-python/test"]),
    "svhn": (["SVHN/train_32x32.mat"], ["test_32x32.mat"]),
    "affnist": (["affNIST/training_and_validation.mat"], ["affNIST/test_batches/1.mat"]),
    **{
        name: (_norb("smallNORB", NORB_TRAIN), _norb("smallnorb", NORB_TEST, ".gz"))
        for name in ("smallnorb", "smallnorb_azimuth", "smallnorb_elevation")
    },
    **{  # a union pool reads both files for either split
        name: ([*_norb("smallNORB", NORB_TRAIN), *_norb("smallNORB", NORB_TEST)], [])
        for name in ("smallnorb_azimuth_union", "smallnorb_elevation_union")
    },
    "imagefolder:imgs": (["imgs/train/"], ["imgs/val/"]),
}
#: Other complete layouts the loaders accept.
ALTERNATIVES: list[tuple[str, list[str]]] = [
    ("cifar10", ["cifar10/train/", "cifar10/test/"]),
    ("cifar100", ["cifar100/train/", "cifar100/test/"]),
    ("mnist", [f"{p}.gz" for p in _idx("MNIST", "train") + _idx("MNIST", "t10k")]),
    ("svhn", ["train_32x32.mat", "SVHN/test_32x32.mat"]),
    ("affnist", ["affNIST/training_and_validation_batches/1.mat", "affNIST/test.mat"]),
    ("smallnorb", _norb("smallnorb", NORB_TRAIN, ".gz") + _norb("smallNORB", NORB_TEST)),
    ("imagefolder:imgs", ["imgs/train/", "imgs/test/", "imgs/val/"]),
]


def _create(root: Path, paths: list[str]) -> None:
    for p in paths:
        path = root / p
        if p.endswith("/"):
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()


def _errors(name: str, root: Path, split: str) -> tuple[DatasetNotFoundError, DatasetNotFoundError]:
    """The check's error, and the error of loading ``split`` as a run does."""
    with pytest.raises(DatasetNotFoundError) as check:
        check_files_present(name, root, SOURCE)
    with pytest.raises(DatasetNotFoundError) as load:
        get_dataset(name, root=root, split=split, root_source=SOURCE)
    return check.value, load.value


def test_every_dataset_with_files_is_covered():
    without_files = {"mnist5k", "affnist_like", "imagefolder:<path>"}
    assert set(list_datasets()) - without_files == set(OFFICIAL) - {"imagefolder:imgs"}


@pytest.mark.parametrize("name", sorted(OFFICIAL))
def test_missing_training_files_give_the_loaders_error(name, tmp_path):
    check, load = _errors(name, tmp_path, "train")
    assert check.looked_for == load.looked_for
    assert str(check) == str(load)
    assert (check.dataset, check.root, check.root_source) == (load.dataset, load.root, SOURCE)


@pytest.mark.parametrize("name", sorted(n for n, (_, test) in OFFICIAL.items() if test))
def test_missing_test_files_give_the_loaders_error(name, tmp_path):
    _create(tmp_path, OFFICIAL[name][0])
    check, load = _errors(name, tmp_path, "test")
    assert check.looked_for == load.looked_for
    assert str(check) == str(load)


def test_an_empty_affnist_batches_folder_gives_the_loaders_error(tmp_path):
    (tmp_path / "affNIST" / "training_and_validation_batches").mkdir(parents=True)
    check, load = _errors("affnist", tmp_path, "train")
    assert str(check) == str(load)
    assert check.looked_for == [
        str(tmp_path / "affNIST" / "training_and_validation_batches" / "1.mat")
    ]


@pytest.mark.parametrize("name", sorted(OFFICIAL))
def test_passes_when_the_official_files_are_there(name, tmp_path):
    _create(tmp_path, [*OFFICIAL[name][0], *OFFICIAL[name][1]])
    check_files_present(name, tmp_path, SOURCE)  # empty files: only existence is checked


@pytest.mark.parametrize(("name", "paths"), ALTERNATIVES, ids=[n for n, _ in ALTERNATIVES])
def test_passes_with_the_other_accepted_layouts(name, paths, tmp_path):
    _create(tmp_path, paths)
    check_files_present(name, tmp_path, SOURCE)


def test_absolute_image_folder_and_default_root(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DatasetNotFoundError) as e:
        check_files_present(f"imagefolder:{tmp_path / 'abs'}")
    assert e.value.looked_for == [str(tmp_path / "abs" / "train")]
    assert "the root argument" not in str(e.value)  # no root given: the default ./data
    _create(
        tmp_path,
        ["abs/train/", "abs/val/", "data/SVHN/train_32x32.mat", "data/SVHN/test_32x32.mat"],
    )
    check_files_present(f"imagefolder:{tmp_path / 'abs'}")
    check_files_present("svhn")  # ./data


@pytest.mark.parametrize("name", ["mnist5k", "affnist_like", "no_such_dataset"])
def test_names_without_files_pass(name, tmp_path):
    check_files_present(name, tmp_path / "nowhere", SOURCE)


def test_layouts_import_and_check_without_torch(tmp_path):
    code = (
        "import sys\n"
        "from selfcaps.data.errors import DatasetNotFoundError\n"
        "from selfcaps.data.layouts import check_files_present\n"
        "try:\n"
        f"    check_files_present('cifar10', {str(tmp_path)!r}, '--data-root')\n"
        "except DatasetNotFoundError:\n"
        "    pass\n"
        "heavy = {m.split('.')[0] for m in sys.modules} & {'torch', 'numpy', 'torchvision'}\n"
        "assert not heavy, heavy\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC},
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr


def test_the_package_imports_each_exported_name_from_its_module():
    import selfcaps.data as package

    assert sorted(package._HOME) == sorted(package.__all__)
    for name, module in package._HOME.items():
        home = importlib.import_module(f"selfcaps.data.{module}")
        assert getattr(package, name) is getattr(home, name), name
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        package.nothing  # noqa: B018
