"""Writers of small files in the official dataset formats (the tests' fixtures)."""

from __future__ import annotations

import gzip
import pickle
import struct
from pathlib import Path

import numpy as np
from PIL import Image
from scipy.io import savemat

from selfcaps.data.layouts import SMALLNORB_PREFIXES as PREFIXES

IDX_CODES = {
    np.dtype("uint8"): 0x08,
    np.dtype("int8"): 0x09,
    np.dtype(">i2"): 0x0B,
    np.dtype(">i4"): 0x0C,
}


def idx_bytes(array: np.ndarray) -> bytes:
    """An IDX file holding ``array`` (uint8, int8, or big-endian int16/int32)."""
    header = struct.pack(">BBBB", 0, 0, IDX_CODES[array.dtype], array.ndim)
    return header + struct.pack(f">{array.ndim}I", *array.shape) + array.tobytes()


def write(path: Path, data: bytes, gz: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if gz:
        path = path.with_name(path.name + ".gz")
        data = gzip.compress(data)
    path.write_bytes(data)
    return path


def random_images(rng: np.random.Generator, n: int, *shape: int) -> np.ndarray:
    return rng.integers(0, 256, size=(n, *shape), dtype=np.uint8)


def write_mnist(
    root: Path,
    folder: str = "MNIST",
    n_train: int = 20,
    n_test: int = 10,
    gz: bool = False,
    seed: int = 0,
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """MNIST-layout IDX files; returns ``{"train": (images, labels), "test": ...}``."""
    rng = np.random.default_rng(seed)
    out = {}
    for split, prefix, n in (("train", "train", n_train), ("test", "t10k", n_test)):
        images = random_images(rng, n, 28, 28)
        labels = (np.arange(n) % 10).astype(np.uint8)
        raw = root / folder / "raw"
        write(raw / f"{prefix}-images-idx3-ubyte", idx_bytes(images), gz)
        write(raw / f"{prefix}-labels-idx1-ubyte", idx_bytes(labels), gz)
        out[split] = (images, labels)
    return out


def write_cifar_pickles(root: Path, hundred: bool = False, per_batch: int = 4, seed: int = 0):
    """torchvision's cifar-10-batches-py (5 train batches) or cifar-100-python layout.

    Returns ``{"train": (data (N, 3072), labels), "test": ..., "classes": [...]}``.
    """
    rng = np.random.default_rng(seed)
    num_classes = 100 if hundred else 10
    classes = [f"class{c:03d}" for c in range(num_classes)]
    label_key = b"fine_labels" if hundred else b"labels"
    folder = root / ("cifar-100-python" if hundred else "cifar-10-batches-py")
    folder.mkdir(parents=True, exist_ok=True)
    files = (
        {"train": ["train"], "test": ["test"]}
        if hundred
        else {"train": [f"data_batch_{i}" for i in range(1, 6)], "test": ["test_batch"]}
    )
    out = {"classes": classes}
    for split, names in files.items():
        datas, labels = [], []
        for name in names:
            data = random_images(rng, per_batch, 3072)
            y = [int(v) for v in rng.integers(0, num_classes, per_batch)]
            batch = {
                b"batch_label": name.encode(),
                label_key: y,
                b"data": data,
                b"filenames": [f"{name}_{i}.png".encode() for i in range(per_batch)],
            }
            if hundred:
                batch[b"coarse_labels"] = [v // 5 for v in y]
            (folder / name).write_bytes(pickle.dumps(batch, protocol=2))
            datas.append(data)
            labels += y
        out[split] = (np.concatenate(datas), np.array(labels))
    meta_name, names_key = (
        ("meta", b"fine_label_names") if hundred else ("batches.meta", b"label_names")
    )
    (folder / meta_name).write_bytes(
        pickle.dumps({names_key: [c.encode() for c in classes]}, protocol=2)
    )
    return out


def write_png_tree(
    directory: Path,
    classes: list[str],
    per_class: int = 2,
    size: tuple[int, int] = (32, 32),
    seed: int = 0,
    ext: str = ".png",
) -> tuple[np.ndarray, np.ndarray]:
    """``directory/<class>/<i>.png`` RGB images; returns (NCHW uint8 in load order, labels)."""
    rng = np.random.default_rng(seed)
    images, labels = [], []
    for label, name in enumerate(classes):
        (directory / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            img = rng.integers(0, 256, size=(*size, 3), dtype=np.uint8)
            Image.fromarray(img).save(directory / name / f"{i:03d}{ext}")
            images.append(img.transpose(2, 0, 1))
            labels.append(label)
    return np.stack(images), np.array(labels)


def write_svhn(
    root: Path, split: str = "train", n: int = 6, seed: int = 0, compress: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """``root/SVHN/<split>_32x32.mat``; returns (X (32, 32, 3, N), y (N, 1) in 1..10)."""
    rng = np.random.default_rng(seed)
    X = rng.integers(0, 256, size=(32, 32, 3, n), dtype=np.uint8)
    y = (np.arange(n) % 10 + 1).astype(np.uint8).reshape(n, 1)
    (root / "SVHN").mkdir(parents=True, exist_ok=True)
    savemat(root / "SVHN" / f"{split}_32x32.mat", {"X": X, "y": y}, do_compression=compress)
    return X, y


def write_affnist(path: Path, images40: np.ndarray, labels: np.ndarray) -> None:
    """An affNIST .mat: struct affNISTdata with image 1600 x N (row-major 40x40 per column)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    n = len(images40)
    onehot = np.eye(10, dtype=np.uint8)[labels].T
    savemat(
        path,
        {
            "affNISTdata": {
                "image": images40.reshape(n, 1600).T.copy(),
                "label_int": labels.astype(np.uint8),
                "label_one_of_n": onehot,
                "index": np.arange(1, n + 1, dtype=np.float64),
            }
        },
    )


def norb_bytes(array: np.ndarray) -> bytes:
    """A NORB binary matrix (uint8 or int32), with max(3, ndim) dimension fields."""
    magic = {np.dtype("uint8"): 0x1E3D4C55, np.dtype("<i4"): 0x1E3D4C54}[array.dtype]
    dims = list(array.shape) + [1] * (3 - array.ndim)
    return struct.pack(f"<2i{len(dims)}i", magic, array.ndim, *dims) + array.tobytes()


def write_smallnorb(
    root: Path, part: str, info: np.ndarray, size: int = 96, seed: int = 0, gz: bool = False
):
    """``root/smallNORB/<prefix>-{dat,cat,info}.mat`` for the given info rows.

    Returns ``(dat (N, 2, size, size), cat (N,))``.
    """
    rng = np.random.default_rng(seed)
    n = len(info)
    dat = rng.integers(0, 256, size=(n, 2, size, size), dtype=np.uint8)
    cat = (np.arange(n) % 5).astype("<i4")
    folder = root / "smallNORB"
    for kind, array in (("dat", dat), ("cat", cat), ("info", info.astype("<i4"))):
        write(folder / f"{PREFIXES[part]}-{kind}.mat", norb_bytes(array), gz)
    return dat, cat


def norb_info(azimuths, elevations, instance: int = 4, lighting: int = 0) -> np.ndarray:
    """Info rows (instance, elevation index, azimuth index, lighting) for every (e, a) pair."""
    rows = [(instance, e, a, lighting) for e in elevations for a in azimuths]
    return np.array(rows, dtype="<i4")
