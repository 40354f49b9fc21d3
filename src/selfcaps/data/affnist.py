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

**affnist_like** applies affNIST's published distortion ranges
(:mod:`selfcaps.data.affine`) to MNIST digits, deterministically: the test split
distorts the MNIST test set (``.source = "mnist-test"``), the training split the
MNIST training set (``"mnist-train"``). Without MNIST files it falls back, with a
warning, to ``mnist5k`` (``"mnist5k-test"`` / ``"mnist5k-train_full"``).
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from selfcaps.data._io import as_labels, as_uint8_pixels, load_mat, mat_variable
from selfcaps.data.affine import AffNISTLike, affine_digits, ink_box
from selfcaps.data.cache import cached_arrays
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
    """MNIST digits distorted with affNIST's published ranges into 40x40 (deterministic).

    Image ``i`` is ``AffNISTLike(s)`` applied to source digit ``i``, drawing in index
    order, with ``s = 2 * distortion_seed`` for the test split and
    ``2 * distortion_seed + 1`` for the training split; the same seed always gives
    the same images. The result is cached on disk (keyed by a hash of the source
    digits and ``s``). Unlike torchvision datasets, the default split is the test
    split: ``affnist_like`` is an evaluation set.

    Args:
        root: Data root holding ``MNIST/raw/`` (else mnist5k is used, with a warning).
        train: Distort the MNIST training set if true, else the test set.
        transform: Applied to each uint8 ``(1, 40, 40)`` image.
        download: Must be false: selfcaps never downloads.
        distortion_seed: Seed of the distortions.
        cache: Cache the generated images on disk.
        root_source: Where ``root`` came from, for error messages.

    Attributes:
        source: The digits used: ``"mnist-test"``, ``"mnist-train"``,
            ``"mnist5k-test"`` or ``"mnist5k-train_full"``.
    """

    name = "affnist_like"

    def __init__(
        self,
        root: str | Path | None = None,
        train: bool = False,
        transform: Transform | None = None,
        download: bool = False,
        distortion_seed: int = 0,
        cache: bool = True,
        root_source: str | None = None,
    ) -> None:
        self.root, self.root_source = resolve_root(root, root_source)
        self.split = "train" if train else "test"
        self.distortion_seed = distortion_seed
        try:
            digits: ImageDataset = MNIST(
                self.root, train, download=download, root_source=self.root_source
            )
            self.source = f"mnist-{self.split}"
        except DatasetNotFoundError as missing:
            digits = MNIST5k(train=train)
            self.source = f"mnist5k-{'train_full' if train else 'test'}"
            warnings.warn(
                f"affnist_like: MNIST not found ({missing.looked_for[0]} ...), distorting the "
                f"{len(digits)} {self.source} digits instead",
                stacklevel=2,
            )
        key = {
            "digits": hashlib.sha256(digits.data.numpy().tobytes()).hexdigest(),
            "seed": 2 * distortion_seed + int(train),
            "version": 1,
        }
        images = cached_arrays(
            "affnist_like", key, lambda: _distort(digits.data, key["seed"]), cache
        )
        super().__init__(
            torch.from_numpy(images["data"]), digits.targets, digits.classes, transform
        )

    def extra_repr(self) -> str:
        """Adds the source digits and the seed."""
        return f"{super().extra_repr()}, source: {self.source}, seed: {self.distortion_seed}"


def _distort(digits: torch.Tensor, seed: int) -> dict[str, np.ndarray]:
    transform = AffNISTLike(seed)
    params = [transform.draw(box) for box in ink_box(digits).tolist()]
    return {"data": affine_digits(digits, params).numpy()}
