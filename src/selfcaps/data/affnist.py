"""affNIST: the official ``.mat`` files, and ``affnist_like``, generated from MNIST.

**Official files** (Tieleman, 2013), under ``root/affNIST/``: ``training_and_validation.mat``
and ``test.mat``, or the batched layout ``training_and_validation_batches/1.mat .. 32.mat``
and ``test_batches/1.mat .. 32.mat`` (read in numeric order). Each holds a MATLAB
struct ``affNISTdata`` whose field ``image`` is ``1600 x N`` uint8, one column per
image, and ``label_int`` (``N``) the digit.

*Orientation.* Within a column, pixel ``(row, col)`` of the 40x40 image is element
``row * 40 + col``: in numpy, ``image.T.reshape(N, 40, 40)``; in MATLAB,
``reshape(image(:, i), 40, 40)'`` (MATLAB's column-major ``reshape`` needs the
transpose). This is how the public affNIST readers we found read the files
(``image.T.reshape(-1, 40, 40)``); the real files are not available on our
machines, so the convention is not verified against them here: the tests check
it on files they write.

**affnist_like** is built as the official files are, from MNIST, with the transformation
ranges affNIST's page lists (:mod:`selfcaps.data.affine`, which names every remaining
difference): the test split holds 32 randomly transformed versions of each of the 10,000
MNIST test digits (320,000 images, ``.source = "mnist-test"``), the training split 32 of
each of the 60,000 MNIST training digits (1,920,000 images, affNIST's training and
validation sets together, ``"mnist-train"``). Without MNIST files it falls back, with a
warning, to ``mnist5k`` (``"mnist5k-test"`` / ``"mnist5k-train_full"``).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from selfcaps.data._io import as_labels, as_uint8_pixels, load_mat, mat_variable
from selfcaps.data.affine import (
    AFFNIST_VERSIONS,
    AffNISTDraws,
    draw_affnist,
    ink_box,
    warp_digits,
)
from selfcaps.data.dataset import FileDataset, ImageDataset, Transform
from selfcaps.data.errors import CorruptDatasetError, DatasetNotFoundError
from selfcaps.data.layouts import affnist_files, affnist_mat_files
from selfcaps.data.mnist import MNIST, MNIST_CLASSES
from selfcaps.data.mnist5k import MNIST5k
from selfcaps.data.paths import resolve_root

__all__ = ["AffNIST", "AffNISTLikeDataset", "read_affnist_mat"]


def read_affnist_mat(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Read one affNIST ``.mat`` file.

    Args:
        path: A file holding the struct ``affNISTdata`` (fields ``image``, ``label_int``).

    Returns:
        ``(images uint8 (N, 40, 40), labels int64 (N,))``.

    Raises:
        CorruptDatasetError: The file is unreadable or the struct is not affNIST's.
    """
    data = mat_variable(
        load_mat(path, squeeze_me=True, struct_as_record=False), "affNISTdata", path
    )
    fields = getattr(data, "_fieldnames", None) or []
    if "image" not in fields or "label_int" not in fields:
        raise CorruptDatasetError(
            path, f"affNISTdata must have fields image and label_int, has {fields}"
        )
    image = as_uint8_pixels(data.image, path, "affNISTdata.image")
    image = image[:, None] if image.ndim == 1 else image  # squeeze_me drops N = 1
    if image.ndim != 2 or image.shape[0] != 1600:
        raise CorruptDatasetError(
            path, f"expected affNISTdata.image of 1600 x N, got {image.shape}"
        )
    labels = as_labels(np.atleast_1d(data.label_int), path, 10, "affNISTdata.label_int").numpy()
    if len(labels) != image.shape[1]:
        raise CorruptDatasetError(path, f"{image.shape[1]} images but {len(labels)} labels")
    return image.T.reshape(-1, 40, 40), labels


class AffNIST(FileDataset):
    """affNIST from the official files (1x40x40, 10 classes).

    Args:
        root: Data root; files are read from ``root/affNIST/``.
        train: ``training_and_validation`` (1,920,000 images) if true, else
            ``test`` (320,000); single file or batches (see the module docstring).
        transform: Applied to each uint8 ``(1, 40, 40)`` image.
        download: Must be false: selfcaps never downloads.
        root_source: Where ``root`` came from, for error messages.
    """

    name = "affnist"

    def wanted_files(self) -> dict[str, list[Path]]:
        """The split's single ``.mat`` file, or its folder of numbered batches."""
        return affnist_files(self.root, self.split)

    def read(self, files: dict[str, Path]) -> tuple[Tensor, Tensor, Sequence[str]]:
        """Read the file, or every batch in numeric order, and concatenate."""
        batches = affnist_mat_files(self.name, files["data"], self.root, self.root_source)
        parts = [read_affnist_mat(f) for f in batches]
        data = torch.from_numpy(np.concatenate([p[0] for p in parts])).unsqueeze(1)
        return data, torch.from_numpy(np.concatenate([p[1] for p in parts])), MNIST_CLASSES


class AffNISTLikeDataset(ImageDataset):
    """MNIST digits under 32 random affNIST transformations each, 40x40, rendered on demand.

    Image ``i`` is version ``i // N`` of source digit ``i % N`` (``N`` digits,
    transformation-major: the first ``N`` images hold one version of every digit). The
    transformations are drawn once, vectorised (:func:`~selfcaps.data.affine.draw_affnist`),
    from a generator seeded with ``2 * distortion_seed`` for the test split and
    ``2 * distortion_seed + 1`` for the training split: the same seed always gives the same
    images. Images are rendered when read (:meth:`image`, :meth:`images`, and :meth:`select`
    for many at once), so nothing is stored on disk; reading ``data`` renders the whole split
    once (the test split's 320,000 images: about 20 s of one core and 512 MB). Unlike
    torchvision datasets, the default split is the test split: ``affnist_like`` is an
    evaluation set.

    Args:
        root: Data root holding ``MNIST/raw/`` (else mnist5k is used, with a warning).
        train: Transform the MNIST training set if true, else the test set.
        transform: Applied to each uint8 ``(1, 40, 40)`` image.
        download: Must be false: selfcaps never downloads.
        distortion_seed: Seed of the transformations.
        versions: Transformed versions of each digit (affNIST: 32).
        root_source: Where ``root`` came from, for error messages.

    Attributes:
        source: The digits used: ``"mnist-test"``, ``"mnist-train"``,
            ``"mnist5k-test"`` or ``"mnist5k-train_full"``.
        digits: The source digits, uint8 ``(N, 1, 28, 28)``.
        draws: The transformation of every image (parameters and offsets).
        versions: Transformed versions of each digit.
    """

    name = "affnist_like"

    def __init__(
        self,
        root: str | Path | None = None,
        train: bool = False,
        transform: Transform | None = None,
        download: bool = False,
        distortion_seed: int = 0,
        versions: int = AFFNIST_VERSIONS,
        root_source: str | None = None,
    ) -> None:
        if versions < 1:
            raise ValueError(f"affnist_like: versions must be >= 1, got {versions}")
        self.root, self.root_source = resolve_root(root, root_source)
        self.split = "train" if train else "test"
        self.distortion_seed, self.versions = distortion_seed, versions
        try:
            source: ImageDataset = MNIST(
                self.root, train, download=download, root_source=self.root_source
            )
            self.source = f"mnist-{self.split}"
        except DatasetNotFoundError as missing:
            source = MNIST5k(train=train)
            self.source = f"mnist5k-{'train_full' if train else 'test'}"
            warnings.warn(
                f"affnist_like: MNIST not found ({missing.looked_for[0]} ...), distorting the "
                f"{len(source)} {self.source} digits instead",
                stacklevel=2,
            )
        self.digits = source.data
        generator = torch.Generator().manual_seed(2 * distortion_seed + int(train))
        self.draws: AffNISTDraws = draw_affnist(ink_box(self.digits), versions, generator)
        self.targets = source.targets.repeat(versions)
        self.classes = list(source.classes)
        self.transform = transform

    @cached_property
    def data(self) -> Tensor:  # type: ignore[override]
        """Every image of the split, uint8 ``(N * versions, 1, 40, 40)`` (rendered once)."""
        return self.images(torch.arange(len(self)))

    def image(self, index: int) -> Tensor:
        """Image ``index``, rendered (or read from ``data`` once that exists)."""
        if "data" in self.__dict__:
            return self.data[index]
        return self.images(torch.tensor([index]))[0]

    def images(self, indices: Tensor) -> Tensor:
        """Images ``indices``, rendered in one vectorised call (uint8 ``(n, 1, 40, 40)``)."""
        idx = torch.as_tensor(indices, dtype=torch.long).reshape(-1)
        if idx.numel() and not (int(idx.min()) >= 0 and int(idx.max()) < len(self)):
            raise IndexError(
                f"affnist_like {self.split}: indices must lie in [0, {len(self)}), "
                f"got {int(idx.min())}..{int(idx.max())}"
            )
        digits = self.digits[self.draws.digit(idx)]
        return warp_digits(digits, self.draws.matrices[idx], self.draws.offsets[idx])

    def select(self, indices: Tensor | Sequence[int]) -> ImageDataset:
        """Images ``indices`` rendered at once, as an in-memory dataset with this transform."""
        idx = torch.as_tensor(indices, dtype=torch.long)
        return ImageDataset(self.images(idx), self.targets[idx], self.classes, self.transform)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """``(1, 40, 40)``."""
        return 1, 40, 40

    def extra_repr(self) -> str:
        """Adds the source digits, the versions per digit and the seed."""
        return (
            f"{super().extra_repr()}, source: {self.source} x {self.versions} versions, "
            f"seed: {self.distortion_seed}"
        )
