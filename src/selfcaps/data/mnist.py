"""MNIST and Fashion-MNIST from their official IDX files, laid out as torchvision does.

Files (uncompressed or ``.gz``), under the data root::

    MNIST/raw/train-images-idx3-ubyte        FashionMNIST/raw/train-images-idx3-ubyte
    MNIST/raw/train-labels-idx1-ubyte        FashionMNIST/raw/train-labels-idx1-ubyte
    MNIST/raw/t10k-images-idx3-ubyte         FashionMNIST/raw/t10k-images-idx3-ubyte
    MNIST/raw/t10k-labels-idx1-ubyte         FashionMNIST/raw/t10k-labels-idx1-ubyte
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from selfcaps.data._io import as_labels
from selfcaps.data.dataset import FileDataset
from selfcaps.data.errors import CorruptDatasetError
from selfcaps.data.idx import read_idx
from selfcaps.data.layouts import IDX_FOLDERS, idx_files

__all__ = ["MNIST", "MNIST_CLASSES", "FashionMNIST"]

MNIST_CLASSES = (
    "0 - zero", "1 - one", "2 - two", "3 - three", "4 - four",
    "5 - five", "6 - six", "7 - seven", "8 - eight", "9 - nine",
)  # fmt: skip


class MNIST(FileDataset):
    """MNIST handwritten digits (60,000 train / 10,000 test, 1x28x28).

    Args:
        root: Data root (see :func:`~selfcaps.data.paths.resolve_root`); the files are
            read from ``root/MNIST/raw/``.
        train: Official training split if true, else the test split.
        transform: Applied to each uint8 ``(1, 28, 28)`` image.
        download: Must be false: selfcaps never downloads.
        root_source: Where ``root`` came from, for error messages (e.g. ``"--data-root"``).

    Raises:
        DatasetNotFoundError: If the files are missing (lists every path tried).
        CorruptDatasetError: If a file is truncated, has a bad header or the images
            and labels disagree.
    """

    name = "mnist"
    folder = IDX_FOLDERS["mnist"]
    class_names = MNIST_CLASSES

    def wanted_files(self) -> dict[str, list[Path]]:
        """The images and labels IDX files of the split, plain or ``.gz``."""
        return idx_files(self.root, self.split, self.folder)

    def read(self, files: dict[str, Path]) -> tuple[Tensor, Tensor, Sequence[str]]:
        """Parse both IDX files and check that they agree."""
        images, labels = read_idx(files["images"]), read_idx(files["labels"])
        if images.dtype != "uint8" or images.ndim != 3:
            raise CorruptDatasetError(
                files["images"],
                f"expected uint8 images (N, H, W), got {images.dtype} {images.shape}",
            )
        if labels.ndim != 1 or len(labels) != len(images):
            raise CorruptDatasetError(
                files["labels"],
                f"expected {len(images)} labels (one per image), got shape {labels.shape}",
            )
        targets = as_labels(labels, files["labels"], len(self.class_names))
        return torch.from_numpy(images).unsqueeze(1), targets, self.class_names


class FashionMNIST(MNIST):
    """Fashion-MNIST (60,000 train / 10,000 test, 1x28x28) from ``root/FashionMNIST/raw/``.

    Same arguments and file names as :class:`MNIST`.
    """

    name = "fashion_mnist"
    folder = IDX_FOLDERS["fashion_mnist"]
    class_names = (
        "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
        "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
    )  # fmt: skip
