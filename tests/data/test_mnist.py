import struct

import numpy as np
import pytest
import torch

from selfcaps.data import (
    MNIST,
    CorruptDatasetError,
    DatasetNotFoundError,
    DownloadNotSupportedError,
    FashionMNIST,
    get_dataset,
    read_idx,
)
from tests.data.formats import idx_bytes, write, write_mnist


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("cls", [MNIST, FashionMNIST])
def test_reads_official_layout_exactly(tmp_path, cls, gz):
    written = write_mnist(tmp_path, cls.folder, gz=gz)
    for train, split in ((True, "train"), (False, "test")):
        ds = cls(tmp_path, train=train)
        images, labels = written[split]
        assert ds.data.dtype == torch.uint8 and ds.data.shape == (len(images), 1, 28, 28)
        assert torch.equal(ds.data[:, 0], torch.from_numpy(images))
        assert ds.targets.dtype == torch.long and ds.targets.tolist() == labels.tolist()
        img, target = ds[3]
        assert torch.equal(img[0], torch.from_numpy(images[3])) and target == int(labels[3])
        assert len(ds.classes) == 10 and ds.split == split


@pytest.mark.parametrize(
    ("dtype", "values"),
    [
        ("uint8", [0, 255]),
        ("int8", [-128, 127]),
        (">i2", [-30000, 300]),
        (">i4", [-(2**31), 2**31 - 1]),
    ],
)
def test_read_idx_dtypes_and_big_endian(tmp_path, dtype, values):
    array = np.array(values * 3, dtype=dtype).reshape(2, 3)
    path = write(tmp_path / "a-idx2", idx_bytes(array))
    out = read_idx(path)
    assert out.dtype.isnative and out.shape == (2, 3) and out.tolist() == array.tolist()


def test_read_idx_float(tmp_path):
    body = np.array([1.5, -2.25], dtype=">f4").tobytes()
    path = write(tmp_path / "f", bytes([0, 0, 0x0D, 1]) + struct.pack(">I", 2) + body)
    assert read_idx(path).tolist() == [1.5, -2.25]


def _valid_labels(tmp_path):
    return write(tmp_path / "labels-idx1-ubyte", idx_bytes(np.arange(10, dtype=np.uint8)))


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda b: b"\x01" + b[1:], "bad IDX magic number 0x01000801"),
        (lambda b: b[:2] + b"\x07" + b[3:], "bad IDX magic number"),
        (lambda b: b[:3] + b"\x00" + b[4:], "bad IDX magic number"),
        (lambda b: b[:-1], "need 8 + 10 = 18 bytes, the file has 17"),
        (lambda b: b + b"\x00", "the file has 19"),
        (lambda b: b[:3], "expected 4 bytes of the IDX magic number, the file ends after 3"),
        (lambda b: b[:6], "expected 4 bytes of the IDX dimensions"),
    ],
)
def test_corrupt_idx_names_file_and_problem(tmp_path, mutate, message):
    good = _valid_labels(tmp_path).read_bytes()
    path = write(tmp_path / "bad-idx1-ubyte", mutate(good))
    with pytest.raises(CorruptDatasetError, match="bad-idx1-ubyte") as err:
        read_idx(path)
    assert message in str(err.value)
    assert err.value.path == str(path)


@pytest.mark.parametrize("cut", [5, 12, 20])
def test_truncated_gzip_idx_is_corrupt(tmp_path, cut):
    path = write(tmp_path / "labels-idx1-ubyte", idx_bytes(np.arange(10, dtype=np.uint8)), gz=True)
    path.write_bytes(path.read_bytes()[:cut])
    with pytest.raises(CorruptDatasetError, match=r"labels-idx1-ubyte\.gz"):
        read_idx(path)


def test_gzip_with_extra_data_is_corrupt(tmp_path):
    data = idx_bytes(np.arange(10, dtype=np.uint8)) + b"junk"
    path = write(tmp_path / "labels-idx1-ubyte", data, gz=True)
    with pytest.raises(CorruptDatasetError, match="do not match the file"):
        read_idx(path)


def test_images_labels_mismatch_and_bad_labels(tmp_path):
    write_mnist(tmp_path, n_train=12)
    raw = tmp_path / "MNIST" / "raw"
    write(raw / "train-labels-idx1-ubyte", idx_bytes(np.zeros(11, dtype=np.uint8)))
    with pytest.raises(CorruptDatasetError, match="expected 12 labels"):
        MNIST(tmp_path)
    write(raw / "train-labels-idx1-ubyte", idx_bytes(np.full(12, 10, dtype=np.uint8)))
    with pytest.raises(CorruptDatasetError, match=r"0\.\.9, found 10"):
        MNIST(tmp_path)
    write(raw / "train-images-idx3-ubyte", idx_bytes(np.zeros((12, 28, 28), dtype=">i2")))
    with pytest.raises(CorruptDatasetError, match="expected uint8 images"):
        MNIST(tmp_path)


def test_missing_dataset_message_names_everything(tmp_path, monkeypatch):
    monkeypatch.setenv("SELFCAPS_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(DatasetNotFoundError) as err:
        get_dataset("mnist", split="test")
    msg = str(err.value)
    assert isinstance(err.value, FileNotFoundError)
    assert "'mnist'" in msg and str(tmp_path / "nowhere") in msg and "SELFCAPS_DATA" in msg
    for name in ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        assert f"{tmp_path / 'nowhere' / 'MNIST' / 'raw' / name}\n" in msg
        assert f"{name}.gz" in msg
    assert err.value.looked_for and err.value.dataset == "mnist"


def test_missing_dataset_message_names_cli_flag_and_default(tmp_path, monkeypatch):
    with pytest.raises(DatasetNotFoundError, match=r"root from --data-root"):
        get_dataset("fashion_mnist", root=tmp_path, root_source="--data-root")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DatasetNotFoundError, match=r"default \./data") as err:
        FashionMNIST()
    assert str(tmp_path / "data" / "FashionMNIST" / "raw") in str(err.value)


def test_only_the_missing_file_is_listed(tmp_path):
    write_mnist(tmp_path)
    (tmp_path / "MNIST" / "raw" / "train-labels-idx1-ubyte").unlink()
    with pytest.raises(DatasetNotFoundError) as err:
        MNIST(tmp_path)
    assert "train-labels-idx1-ubyte" in str(err.value)
    assert "train-images-idx3-ubyte" not in str(err.value)


def test_download_true_is_refused_with_paths(tmp_path):
    with pytest.raises(DownloadNotSupportedError, match="loading never downloads") as err:
        MNIST(tmp_path, download=True)
    assert str(tmp_path / "MNIST" / "raw" / "train-images-idx3-ubyte") in str(err.value)
    assert "`selfcaps data get mnist --root DIR`" in str(err.value)
