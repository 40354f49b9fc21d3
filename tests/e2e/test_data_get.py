"""``selfcaps data get`` against a local server: each dataset lands where its loader reads it.

Every download goes to a server on 127.0.0.1 (:mod:`tests.e2e.local_server`) serving small
files in the official formats, written by the test; torchvision's own classes download them,
check their md5s and extract them, as they would from the real mirrors.
"""

from __future__ import annotations

import pickle
import tarfile
from pathlib import Path

import pytest
import torch
import torchvision.datasets as tvd

from selfcaps.cli import main
from selfcaps.data import get_dataset
from tests.data.formats import write_cifar_pickles, write_mnist, write_svhn
from tests.e2e.local_server import md5_of, point_mnist_at, serve


def test_fashion_mnist_lands_in_its_own_folder(tmp_path, monkeypatch, capsys):
    served = tmp_path / "served"
    made = write_mnist(tmp_path / "made", "FashionMNIST", n_train=12, n_test=6, gz=True, seed=3)
    (tmp_path / "made" / "FashionMNIST" / "raw").rename(served)
    root = tmp_path / "data"
    with serve(served, monkeypatch) as url:
        point_mnist_at(monkeypatch, tvd.FashionMNIST, url, served)
        assert main(["data", "get", "fashion_mnist", "--root", str(root)]) == 0
    test = get_dataset("fashion_mnist", root=root, split="test")
    assert torch.equal(test.data, torch.from_numpy(made["test"][0]).unsqueeze(1))
    assert test.targets.tolist() == made["test"][1].tolist()
    assert (root / "FashionMNIST" / "raw" / "t10k-images-idx3-ubyte").is_file()
    assert not (root / "MNIST").exists()


def _with_str_keys(folder: Path) -> None:
    """Rewrite pickles with ``str`` keys, as the official (Python 2) files load in Python 3."""
    for path in folder.iterdir():
        batch = pickle.loads(path.read_bytes())  # the test's own file
        path.write_bytes(pickle.dumps({k.decode(): v for k, v in batch.items()}, protocol=2))


@pytest.mark.parametrize("hundred", [False, True], ids=["cifar10", "cifar100"])
def test_cifar_archive_is_extracted_where_the_loader_reads_it(
    tmp_path, monkeypatch, capsys, hundred
):
    name, cls = ("cifar100", tvd.CIFAR100) if hundred else ("cifar10", tvd.CIFAR10)
    made = write_cifar_pickles(tmp_path / "made", hundred=hundred, per_batch=3)
    _with_str_keys(tmp_path / "made" / cls.base_folder)
    served = tmp_path / "served"
    served.mkdir()
    archive = served / cls.filename
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tmp_path / "made" / cls.base_folder, arcname=cls.base_folder)
    files = tmp_path / "made" / cls.base_folder
    for attr in ("train_list", "test_list"):
        monkeypatch.setattr(cls, attr, [[n, md5_of(files / n)] for n, _ in getattr(cls, attr)])
    meta = {**cls.meta, "md5": md5_of(files / cls.meta["filename"])}
    monkeypatch.setattr(cls, "meta", meta)
    monkeypatch.setattr(cls, "tgz_md5", md5_of(archive))
    root = tmp_path / "data"
    with serve(served, monkeypatch) as url:
        monkeypatch.setattr(cls, "url", url + cls.filename)
        assert main(["data", "get", name, "--root", str(root)]) == 0
    train = get_dataset(name, root=root, split="train_full")
    expected = torch.from_numpy(made["train"][0]).reshape(-1, 3, 32, 32)
    assert torch.equal(train.data, expected)
    assert train.targets.tolist() == made["train"][1].tolist()
    assert not list(root.glob("*.tar.gz"))  # the extracted archive is not kept


def test_svhn_fetches_both_splits(tmp_path, monkeypatch, capsys):
    served = tmp_path / "served"
    made = {
        split: write_svhn(tmp_path / "made", split, n=4 + i)
        for i, split in enumerate(("train", "test"))
    }
    (tmp_path / "made" / "SVHN").rename(served)
    root = tmp_path / "data"
    with serve(served, monkeypatch) as url:
        split_list = {
            split: [
                url + f"{split}_32x32.mat",
                f"{split}_32x32.mat",
                md5_of(served / f"{split}_32x32.mat"),
            ]
            for split in made
        }
        monkeypatch.setattr(tvd.SVHN, "split_list", split_list)
        assert main(["data", "get", "svhn", "--root", str(root)]) == 0
    for split, (images, labels) in made.items():
        ds = get_dataset("svhn", root=root, split=split)
        assert torch.equal(ds.data, torch.from_numpy(images.transpose(3, 2, 0, 1).copy()))
        assert ds.targets.tolist() == (labels.ravel() % 10).tolist()  # label 10 is the digit 0


def test_a_failed_download_leaves_nothing_and_names_the_url(tmp_path, monkeypatch, capsys):
    """The first file arrives, the second is missing on the server (404): exit 2, the message
    names the URL, and the root the command created is gone again."""
    served = tmp_path / "served"
    write_mnist(tmp_path / "made", gz=True)
    (tmp_path / "made" / "MNIST" / "raw").rename(served)
    root = tmp_path / "new" / "data"
    with serve(served, monkeypatch) as url:
        point_mnist_at(monkeypatch, tvd.MNIST, url, served)
        (served / "train-labels-idx1-ubyte.gz").unlink()
        assert main(["data", "get", "mnist", "--root", str(root)]) == 2
    err = capsys.readouterr().err
    assert f"{url}train-labels-idx1-ubyte.gz" in err
    assert "Nothing was written under" in err
    assert not (tmp_path / "new").exists()  # the folders it created are removed again


def test_a_file_failing_its_checksum_leaves_nothing(tmp_path, monkeypatch, capsys):
    served = tmp_path / "served"
    write_mnist(tmp_path / "made", gz=True)
    (tmp_path / "made" / "MNIST" / "raw").rename(served)
    root = tmp_path / "data"
    root.mkdir()
    (root / "mine.txt").write_text("kept")
    with serve(served, monkeypatch) as url:
        point_mnist_at(monkeypatch, tvd.MNIST, url, served)
        wrong = [(n, "0" * 32 if "t10k" in n else md5) for n, md5 in tvd.MNIST.resources]
        monkeypatch.setattr(tvd.MNIST, "resources", wrong)
        assert main(["data", "get", "mnist", "--root", str(root)]) == 2
    assert "corrupted" in capsys.readouterr().err  # torchvision's word for a bad md5
    assert sorted(p.name for p in root.iterdir()) == ["mine.txt"]


def test_files_already_there_are_not_fetched_again(tmp_path, monkeypatch, capsys):
    write_mnist(tmp_path)
    monkeypatch.setattr(tvd.MNIST, "mirrors", ["http://127.0.0.1:9/never/"])  # would fail
    assert main(["data", "get", "mnist", "--root", str(tmp_path)]) == 0
    assert "already under" in capsys.readouterr().out


def test_unknown_name_lists_the_fetchable_ones(capsys):
    assert main(["data", "get", "cifar", "--root", "/nonexistent"]) == 2
    err = capsys.readouterr().err
    assert "Did you mean 'cifar10'?" in err
    assert "cifar10, cifar100, fashion_mnist, mnist, svhn" in err
