"""SVHN (Street View House Numbers, cropped digits) from the official ``*_32x32.mat`` files.

``train_32x32.mat`` (73,257 images) and ``test_32x32.mat`` (26,032) hold ``X``
of shape ``(32, 32, 3, N)`` (height, width, RGB, image) and ``y`` of shape
``(N, 1)`` with labels 1..10, where 10 is the digit 0; selfcaps maps 10 to 0 so
that label ``k`` is digit ``k``. The ``extra`` set is not used.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from selfcaps.data._io import as_labels, as_uint8_pixels, load_mat, mat_variable
from selfcaps.data.dataset import FileDataset
from selfcaps.data.errors import CorruptDatasetError
from selfcaps.data.layouts import svhn_files

__all__ = ["SVHN"]


class SVHN(FileDataset):
    """SVHN cropped digits (73,257 train / 26,032 test, 3x32x32, label k = digit k).

    Args:
        root: Data root; the file is read from ``root/SVHN/`` or, as torchvision
            stores it, directly from ``root/``.
        train: ``train_32x32.mat`` if true, else ``test_32x32.mat``.
        transform: Applied to each uint8 ``(3, 32, 32)`` image.
        download: Must be false: selfcaps never downloads.
        root_source: Where ``root`` came from, for error messages.
    """

    name = "svhn"

    def wanted_files(self) -> dict[str, list[Path]]:
        """``<split>_32x32.mat`` in ``root/SVHN/`` or ``root/``."""
        return svhn_files(self.root, self.split)

    def read(self, files: dict[str, Path]) -> tuple[Tensor, Tensor, Sequence[str]]:
        """Decode ``X`` and ``y``, mapping label 10 to digit 0."""
        path = files["mat"]
        mat = load_mat(path)
        X = as_uint8_pixels(mat_variable(mat, "X", path), path, "X")
        if X.ndim != 4 or X.shape[:3] != (32, 32, 3):
            raise CorruptDatasetError(path, f"expected X of shape (32, 32, 3, N), got {X.shape}")
        y = np.asarray(mat_variable(mat, "y", path)).reshape(-1)
        if y.shape != (X.shape[3],):
            raise CorruptDatasetError(path, f"expected {X.shape[3]} labels in y, got {y.size}")
        if y.size and (y.dtype.kind not in "iuf" or not np.isin(y, np.arange(1, 11)).all()):
            raise CorruptDatasetError(path, "labels in y must be 1..10 (10 meaning digit 0)")
        targets = as_labels(np.where(y == 10, 0, y), path, 10, "y")
        data = torch.from_numpy(np.ascontiguousarray(X.transpose(3, 2, 0, 1)))
        return data, targets, [str(d) for d in range(10)]
