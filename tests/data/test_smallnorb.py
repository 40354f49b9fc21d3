import struct

import numpy as np
import pytest
import torch

from selfcaps.data import (
    CorruptDatasetError,
    DatasetNotFoundError,
    SmallNORB,
    get_dataset,
    read_norb_matrix,
)
from selfcaps.data.layouts import SMALLNORB_PREFIXES as PREFIXES
from tests.data.formats import norb_bytes, norb_info, write, write_smallnorb

ALL_AZIMUTHS = range(0, 36, 2)


def test_binary_matrix_exact(tmp_path):
    dat = np.arange(2 * 2 * 3 * 4, dtype=np.uint8).reshape(2, 2, 3, 4)
    assert np.array_equal(read_norb_matrix(write(tmp_path / "d.mat", norb_bytes(dat))), dat)
    info = np.array([[1, -2, 3, 4]], dtype="<i4")
    out = read_norb_matrix(write(tmp_path / "i.mat", norb_bytes(info), gz=True))
    assert out.dtype == np.int32 and out.tolist() == [[1, -2, 3, 4]]
    mapped = read_norb_matrix(tmp_path / "d.mat", mmap=True)
    assert np.array_equal(mapped, dat)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (struct.pack("<5i", 0x1E3D4C50, 1, 1, 1, 1) + b"\0" * 4, "bad magic number 0x1E3D4C50"),
        (struct.pack("<5i", 0x1E3D4C54, 0, 1, 1, 1), "bad number of dimensions 0"),
        (struct.pack("<5i", 0x1E3D4C54, 1, -3, 1, 1), "negative dimension"),
        (
            struct.pack("<5i", 0x1E3D4C54, 1, 2, 1, 1) + b"\0" * 7,
            "need 20 + 8 = 28 bytes, the file has 27",
        ),
        (struct.pack("<5i", 0x1E3D4C54, 1, 2, 1, 1) + b"\0" * 9, "the file has 29"),
        (struct.pack("<3i", 0x1E3D4C54, 1, 2), "expected 12 bytes of the matrix dimensions"),
        (b"\x55\x4c", "expected 8 bytes of the matrix header"),
    ],
)
def test_corrupt_matrix_names_file(tmp_path, data, message):
    path = write(tmp_path / "cat.mat", data)
    with pytest.raises(CorruptDatasetError, match=r"cat\.mat") as err:
        read_norb_matrix(path)
    assert message in str(err.value)


def test_truncated_gzip_matrix(tmp_path):
    path = write(tmp_path / "dat.mat", norb_bytes(np.zeros((4, 2, 8, 8), np.uint8)), gz=True)
    path.write_bytes(path.read_bytes()[:-12])
    with pytest.raises(CorruptDatasetError, match=r"dat\.mat\.gz"):
        read_norb_matrix(path)


@pytest.mark.parametrize("gz", [False, True])
def test_official_split_left_view_at_96(tmp_path, gz):
    info = norb_info([0, 10], [0, 4])
    dat, cat = write_smallnorb(tmp_path, "test", info, gz=gz)
    ds = SmallNORB(tmp_path, train=False, size=96)
    assert ds.data.shape == (4, 1, 96, 96)
    assert torch.equal(ds.data[:, 0], torch.from_numpy(dat[:, 0]))  # left view, untouched
    assert ds.targets.tolist() == cat.tolist() and ds.classes[0] == "animal"
    assert ds.info.tolist() == info.tolist()


def test_default_size_48_is_an_antialiased_downsample(tmp_path):
    info = norb_info([0], [0])
    write_smallnorb(tmp_path, "train", info)
    dat = np.zeros((1, 2, 96, 96), np.uint8)
    dat[0, 0, :, :48] = 200  # left half bright in the left view
    dat[0, 1] = 255  # right view must be ignored
    write(tmp_path / "smallNORB" / f"{PREFIXES['train']}-dat.mat", norb_bytes(dat))
    ds = SmallNORB(tmp_path)
    assert ds.data.shape == (1, 1, 48, 48) and ds.data.dtype == torch.uint8
    assert int(ds.data[0, 0, :, :23].min()) == 200 and int(ds.data[0, 0, :, 25:].max()) == 0


def _both_parts(tmp_path):
    write_smallnorb(tmp_path, "train", norb_info(ALL_AZIMUTHS, range(9), instance=4), size=8)
    write_smallnorb(tmp_path, "test", norb_info(ALL_AZIMUTHS, range(9), instance=0), size=8, seed=1)


def test_azimuth_viewpoint_split_union(tmp_path):
    _both_parts(tmp_path)
    train = SmallNORB(tmp_path, train=True, size=8, viewpoint="azimuth", pool="union")
    test = SmallNORB(tmp_path, train=False, size=8, viewpoint="azimuth", pool="union")
    deg = lambda ds: set((ds.info[:, 2] * 10).tolist())  # noqa: E731
    assert deg(train) == {300, 320, 340, 0, 20, 40}
    assert deg(test) == set(range(60, 281, 20))
    assert len(train) + len(test) == 2 * 9 * 18
    assert set(train.info[:, 0].tolist()) == {0, 4} == set(test.info[:, 0].tolist())  # union


def test_elevation_viewpoint_split_official_pool(tmp_path):
    _both_parts(tmp_path)
    train = SmallNORB(tmp_path, train=True, size=8, viewpoint="elevation", pool="official")
    test = SmallNORB(tmp_path, train=False, size=8, viewpoint="elevation", pool="official")
    assert set((30 + 5 * train.info[:, 1]).tolist()) == {30, 35, 40}
    assert set((30 + 5 * test.info[:, 1]).tolist()) == {45, 50, 55, 60, 65, 70}
    assert set(train.info[:, 0].tolist()) == {4} and set(test.info[:, 0].tolist()) == {0}


def test_registry_variants(tmp_path):
    _both_parts(tmp_path)
    val = get_dataset("smallnorb_azimuth", tmp_path, split="val", size=8)
    train = get_dataset("smallnorb_azimuth", tmp_path, split="train", size=8)
    assert len(val) + len(train) == 9 * 6  # the training file's familiar azimuths only
    union = get_dataset("smallnorb_azimuth_union", tmp_path, split="train", size=8)
    union_val = get_dataset("smallnorb_azimuth_union", tmp_path, split="val", size=8)
    assert len(union) + len(union_val) == 2 * 9 * 6
    assert get_dataset("smallnorb_elevation", tmp_path, split="test", size=8).data.shape[1:] == (
        1,
        8,
        8,
    )


def test_union_needs_all_six_files(tmp_path):
    write_smallnorb(tmp_path, "train", norb_info([0], [0]), size=8)
    with pytest.raises(DatasetNotFoundError) as err:
        SmallNORB(tmp_path, viewpoint="azimuth", size=8, pool="union")
    msg = str(err.value)
    assert "smallnorb_azimuth_union" in msg
    assert "smallnorb-5x01235x9x18x6x2x96x96-testing-dat.mat" in msg
    assert "training-dat.mat" not in msg


@pytest.mark.parametrize(
    ("kind", "array", "message"),
    [
        ("cat", np.zeros(3, "<i4"), "expected 2 labels"),
        ("cat", np.array([0, 5], "<i4"), "0..4"),
        ("info", np.zeros((2, 3), "<i4"), "(N=2, 4) info"),
        ("info", np.array([[0, 9, 0, 0]] * 2, "<i4"), "elevation column must lie in 0..8"),
        ("info", np.array([[0, 0, 3, 0]] * 2, "<i4"), "must be even"),
        ("dat", np.zeros((2, 1, 8, 8), np.uint8), "stereo pairs"),
    ],
)
def test_inconsistent_files(tmp_path, kind, array, message):
    write_smallnorb(tmp_path, "train", norb_info([0, 2], [0]), size=8)
    write(tmp_path / "smallNORB" / f"{PREFIXES['train']}-{kind}.mat", norb_bytes(array))
    with pytest.raises(CorruptDatasetError, match=f"training-{kind}.mat") as err:
        SmallNORB(tmp_path, size=8)
    assert message in str(err.value)


def test_bad_viewpoint_argument():
    with pytest.raises(ValueError, match="viewpoint"):
        SmallNORB(viewpoint="tilt")
