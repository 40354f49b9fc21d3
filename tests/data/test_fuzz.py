"""Damaged files must load or raise CorruptDatasetError: never hang, crash or yield NaN."""

import signal
import tempfile
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from selfcaps.data import (
    CIFAR10,
    MNIST,
    SVHN,
    AffNIST,
    CorruptDatasetError,
    ImageDataset,
    SmallNORB,
    decode_image_folder,
)
from selfcaps.data.layouts import SMALLNORB_PREFIXES as PREFIXES
from tests.data.formats import (
    norb_info,
    write_affnist,
    write_cifar_pickles,
    write_mnist,
    write_png_tree,
    write_smallnorb,
    write_svhn,
)

FUZZ = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@contextmanager
def time_limit(seconds: float):
    def fail(*_):
        raise TimeoutError(f"loader did not finish within {seconds} s")

    previous = signal.signal(signal.SIGALRM, fail)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _mnist(root: Path) -> tuple[Path, Callable[[], object]]:
    write_mnist(root, n_train=3, n_test=2)
    return root / "MNIST" / "raw" / "train-images-idx3-ubyte", lambda: MNIST(root)


def _mnist_gz(root: Path) -> tuple[Path, Callable[[], object]]:
    write_mnist(root, n_train=3, n_test=2, gz=True)
    return root / "MNIST" / "raw" / "train-labels-idx1-ubyte.gz", lambda: MNIST(root)


def _cifar_pickle(root: Path) -> tuple[Path, Callable[[], object]]:
    write_cifar_pickles(root, per_batch=2)
    return root / "cifar-10-batches-py" / "data_batch_1", lambda: CIFAR10(root)


def _png(root: Path) -> tuple[Path, Callable[[], object]]:
    write_png_tree(root / "t", ["a"], per_class=2, size=(6, 5))
    return root / "t" / "a" / "001.png", lambda: decode_image_folder(root / "t", cache=False)


def _svhn(root: Path, compress: bool = False) -> tuple[Path, Callable[[], object]]:
    write_svhn(root, "train", n=2, compress=compress)
    return root / "SVHN" / "train_32x32.mat", lambda: SVHN(root)


def _affnist(root: Path) -> tuple[Path, Callable[[], object]]:
    images = np.random.default_rng(0).integers(0, 256, (2, 40, 40), dtype=np.uint8)
    write_affnist(root / "affNIST" / "test.mat", images, np.array([1, 2]))
    return root / "affNIST" / "test.mat", lambda: AffNIST(root, train=False)


def _norb(kind: str) -> Callable[[Path], tuple[Path, Callable[[], object]]]:
    def make(root: Path) -> tuple[Path, Callable[[], object]]:
        write_smallnorb(root, "train", norb_info([0, 2], [0]), size=4)
        path = root / "smallNORB" / f"{PREFIXES['train']}-{kind}.mat"
        return path, lambda: SmallNORB(root, size=4)

    return make


FORMATS = {
    "idx": _mnist,
    "idx.gz": _mnist_gz,
    "cifar-pickle": _cifar_pickle,
    "png": _png,
    "svhn-mat": _svhn,
    "svhn-mat-zlib": lambda root: _svhn(root, compress=True),
    "affnist-mat": _affnist,
    "norb-dat": _norb("dat"),
    "norb-info": _norb("info"),
}


def _check(load: Callable[[], object]) -> None:
    try:
        with time_limit(20):
            out = load()
    except CorruptDatasetError as err:
        assert err.path and str(err)
        return
    data = out.data if isinstance(out, ImageDataset) else out[0]
    assert data.dtype == torch.uint8  # uint8 cannot hold NaN: decoded values are real pixels
    if isinstance(out, ImageDataset):
        assert out.targets.dtype == torch.long and len(out.targets) == len(data)


@st.composite
def damage(draw, original: bytes) -> bytes:
    """Overwrite a few bytes, insert some, and/or truncate a valid file."""
    data = bytearray(original)
    for _ in range(draw(st.integers(0, 6))):
        pos = draw(st.integers(0, max(len(data) - 1, 0)))
        if data and draw(st.booleans()):
            data[pos] = draw(st.integers(0, 255))
        else:
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
    if draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data)))]
    return bytes(data)


@pytest.mark.parametrize("fmt", list(FORMATS))
@FUZZ
@given(data=st.data())
def test_damaged_files(fmt, data):
    with tempfile.TemporaryDirectory() as tmp:
        path, load = FORMATS[fmt](Path(tmp))
        path.write_bytes(data.draw(damage(path.read_bytes()), label="file"))
        _check(load)


@pytest.mark.parametrize("fmt", list(FORMATS))
@FUZZ
@given(noise=st.binary(max_size=400))
def test_random_bytes(fmt, noise):
    with tempfile.TemporaryDirectory() as tmp:
        path, load = FORMATS[fmt](Path(tmp))
        path.write_bytes(noise)
        _check(load)
