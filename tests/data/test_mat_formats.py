import numpy as np
import pytest
import torch
from scipy.io import savemat

from selfcaps.data import SVHN, AffNIST, CorruptDatasetError, DatasetNotFoundError, get_dataset
from tests.data.formats import write_affnist, write_svhn


def test_svhn_decodes_exactly_and_maps_10_to_0(tmp_path):
    X, y = write_svhn(tmp_path, "test", n=12)
    ds = SVHN(tmp_path, train=False)
    assert ds.data.shape == (12, 3, 32, 32) and ds.data.dtype == torch.uint8
    # X is (row, col, channel, image)
    assert int(ds.data[5, 2, 7, 30]) == int(X[7, 30, 2, 5])
    assert torch.equal(ds.data, torch.from_numpy(X.transpose(3, 2, 0, 1)))
    assert ds.targets.tolist() == [v % 10 for v in y[:, 0].tolist()]
    assert 0 in ds.targets.tolist() and 10 not in ds.targets.tolist()


def test_svhn_torchvision_layout_and_registry(tmp_path):
    write_svhn(tmp_path, "train", n=20)
    (tmp_path / "SVHN" / "train_32x32.mat").rename(tmp_path / "train_32x32.mat")
    assert len(get_dataset("svhn", tmp_path, split="train_full")) == 20


def test_svhn_missing_lists_both_places(tmp_path):
    with pytest.raises(DatasetNotFoundError) as err:
        SVHN(tmp_path)
    assert str(tmp_path / "SVHN" / "train_32x32.mat") in str(err.value)
    assert f"{tmp_path / 'train_32x32.mat'}\n" in str(err.value)


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"X": np.zeros((32, 32, 3, 2), np.uint8)}, "no variable 'y'"),
        ({"X": np.zeros((32, 32, 2), np.uint8), "y": np.ones((2, 1))}, "(32, 32, 3, N)"),
        ({"X": np.zeros((32, 32, 3, 2), np.uint8), "y": np.ones((3, 1))}, "expected 2 labels"),
        ({"X": np.zeros((32, 32, 3, 2), np.uint8), "y": np.array([[0], [1]])}, "1..10"),
        (
            {"X": np.full((32, 32, 3, 1), np.nan), "y": np.ones((1, 1))},
            "integers in 0..255, found nan",
        ),
        ({"X": np.full((32, 32, 3, 1), 256.0), "y": np.ones((1, 1))}, "found 256.0"),
    ],
)
def test_svhn_bad_contents(tmp_path, variables, message):
    (tmp_path / "SVHN").mkdir()
    savemat(tmp_path / "SVHN" / "train_32x32.mat", variables)
    with pytest.raises(CorruptDatasetError, match=r"train_32x32\.mat") as err:
        SVHN(tmp_path)
    assert message in str(err.value)


def test_svhn_float_pixels_that_are_integers_are_accepted(tmp_path):
    (tmp_path / "SVHN").mkdir()
    X = np.arange(32 * 32 * 3, dtype=np.float64).reshape(32, 32, 3, 1) % 256
    savemat(tmp_path / "SVHN" / "train_32x32.mat", {"X": X, "y": np.array([[10.0]])})
    ds = SVHN(tmp_path)
    assert ds.data.dtype == torch.uint8 and ds.targets.tolist() == [0]


@pytest.mark.parametrize("cut", [10, 128, 300, -1])
def test_truncated_mat_names_file(tmp_path, cut):
    write_svhn(tmp_path, "train", n=2)
    path = tmp_path / "SVHN" / "train_32x32.mat"
    path.write_bytes(path.read_bytes()[:cut])
    with pytest.raises(CorruptDatasetError, match=r"train_32x32\.mat"):
        SVHN(tmp_path)


def _digits40(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, 40, 40), dtype=np.uint8), (np.arange(n) % 10).astype(np.uint8)


def test_affnist_single_file_orientation(tmp_path):
    images, labels = _digits40(5)
    images[2] = 0
    images[2, 3, 17] = 255  # row 3, column 17: must stay there
    write_affnist(tmp_path / "affNIST" / "test.mat", images, labels)
    ds = AffNIST(tmp_path, train=False)
    assert ds.data.shape == (5, 1, 40, 40)
    assert torch.equal(ds.data[:, 0], torch.from_numpy(images))
    assert torch.nonzero(ds.data[2, 0]).tolist() == [[3, 17]]
    assert ds.targets.tolist() == labels.tolist()


def test_affnist_batches_in_numeric_order(tmp_path):
    parts = {}
    for k in (1, 2, 10):
        parts[k] = _digits40(3, seed=k)
        write_affnist(
            tmp_path / "affNIST" / "training_and_validation_batches" / f"{k}.mat", *parts[k]
        )
    (tmp_path / "affNIST" / "training_and_validation_batches" / "readme.mat").write_bytes(b"x")
    ds = AffNIST(tmp_path, train=True)
    expected = np.concatenate([parts[k][0] for k in (1, 2, 10)])  # not 1, 10, 2
    assert torch.equal(ds.data[:, 0], torch.from_numpy(expected))


def test_affnist_single_image_file(tmp_path):
    images, labels = _digits40(1)
    write_affnist(tmp_path / "affNIST" / "test.mat", images, labels)
    assert AffNIST(tmp_path, train=False).data.shape == (1, 1, 40, 40)


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"other": np.zeros(3)}, "no variable 'affNISTdata'"),
        ({"affNISTdata": {"image": np.zeros((1600, 2), np.uint8)}}, "fields image and label_int"),
        (
            {"affNISTdata": {"image": np.zeros((1599, 2), np.uint8), "label_int": [1, 2]}},
            "1600 x N",
        ),
        (
            {"affNISTdata": {"image": np.zeros((1600, 2), np.uint8), "label_int": [1]}},
            "2 images but 1",
        ),
        ({"affNISTdata": {"image": np.zeros((1600, 1), np.uint8), "label_int": [11]}}, "0..9"),
    ],
)
def test_affnist_bad_contents(tmp_path, variables, message):
    (tmp_path / "affNIST").mkdir()
    savemat(tmp_path / "affNIST" / "test.mat", variables)
    with pytest.raises(CorruptDatasetError, match=r"test\.mat") as err:
        AffNIST(tmp_path, train=False)
    assert message in str(err.value)


def test_affnist_missing(tmp_path):
    (tmp_path / "affNIST" / "test_batches").mkdir(parents=True)
    with pytest.raises(DatasetNotFoundError, match=r"test_batches/1\.mat"):
        AffNIST(tmp_path, train=False)
    with pytest.raises(DatasetNotFoundError) as err:
        AffNIST(tmp_path, train=True)
    assert "training_and_validation.mat" in str(err.value)
    assert "training_and_validation_batches" in str(err.value)


def test_truncated_affnist_names_file(tmp_path):
    write_affnist(tmp_path / "affNIST" / "test.mat", *_digits40(4))
    path = tmp_path / "affNIST" / "test.mat"
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(CorruptDatasetError, match=r"affNIST/test\.mat"):
        AffNIST(tmp_path, train=False)


def _element_offsets(raw: bytes) -> list[int]:
    """Byte offsets of the sub-element tags of the first matrix in an uncompressed v5 file."""
    import struct

    offsets, pos = [], 128 + 8
    end = 128 + 8 + struct.unpack("<I", raw[132:136])[0]
    while pos < end:
        word, count = struct.unpack("<II", raw[pos : pos + 8])
        offsets.append(pos)
        pos += 8 if word >> 16 else 8 + count + (-count % 8)
    return offsets


@pytest.mark.parametrize("code", [0, 8, 14, 15, 19, 97, 0x5202])
def test_invalid_element_type_is_refused_before_scipy_crashes(tmp_path, code):
    # scipy 1.17 segfaults on these (it indexes a C array with the type code)
    write_svhn(tmp_path, "train", n=2)
    path = tmp_path / "SVHN" / "train_32x32.mat"
    raw = bytearray(path.read_bytes())
    data_tag = _element_offsets(bytes(raw))[3]  # flags, dims, name, then the pixel data
    raw[data_tag : data_tag + 4] = code.to_bytes(4, "little")
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptDatasetError, match=f"element type {code} where numeric data"):
        SVHN(tmp_path)


@pytest.mark.parametrize("compress", [False, True])
def test_mat_structure_check_accepts_valid_and_catches_damage(tmp_path, compress):
    X, _ = write_svhn(tmp_path, "train", n=3, compress=compress)
    assert torch.equal(SVHN(tmp_path).data, torch.from_numpy(X.transpose(3, 2, 0, 1)))
    path = tmp_path / "SVHN" / "train_32x32.mat"
    raw = path.read_bytes()
    path.write_bytes(raw[:200] + bytes(len(raw) - 200))  # zeroed tail
    with pytest.raises(CorruptDatasetError, match=r"train_32x32\.mat"):
        SVHN(tmp_path)
