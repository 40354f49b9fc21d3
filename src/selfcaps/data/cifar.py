"""CIFAR-10 and CIFAR-100, from torchvision's pickled batches or from PNG folders.

Two layouts are read, in this order of preference (under the data root):

* the official python pickles, as torchvision unpacks them:
  ``cifar-10-batches-py/{data_batch_1..5,test_batch,batches.meta}`` and
  ``cifar-100-python/{train,test,meta}`` (CIFAR-100 uses the 100 ``fine_labels``).
  They are opened with :func:`~selfcaps.data.safe_pickle.load_dataset_pickle`,
  never with ``pickle.load``;
* an ImageFolder tree of PNGs ``cifar10/{train,test}/<class>/*.png`` (or
  ``cifar100/...``), decoded with Pillow and cached (:mod:`selfcaps.data.cache`).
  The class folders must be the dataset's class names; sorted, they give the
  official label order (both datasets number their classes alphabetically).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from selfcaps.data._io import as_labels
from selfcaps.data.dataset import FileDataset, Transform
from selfcaps.data.errors import CorruptDatasetError
from selfcaps.data.imagefolder import decode_image_folder, list_classes
from selfcaps.data.layouts import CIFAR_LAYOUTS, cifar_files
from selfcaps.data.safe_pickle import load_dataset_pickle

__all__ = ["CIFAR10", "CIFAR10_CLASSES", "CIFAR100"]

CIFAR10_CLASSES = (
    "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck",
)  # fmt: skip


def _field(record: Any, key: bytes, path: Path) -> Any:
    """``record[key]`` for a pickled dict with bytes (Python 2) or str keys."""
    if not isinstance(record, dict):
        raise CorruptDatasetError(path, f"expected a pickled dict, got {type(record).__name__}")
    for k in (key, key.decode()):
        if k in record:
            return record[k]
    raise CorruptDatasetError(
        path, f"missing key {key!r} (the dict has {sorted(map(str, record))})"
    )


class CIFAR10(FileDataset):
    """CIFAR-10 (50,000 train / 10,000 test, 3x32x32, 10 classes).

    Args:
        root: Data root holding ``cifar-10-batches-py/`` or ``cifar10/{train,test}/``.
        train: Official training split if true, else the test split.
        transform: Applied to each uint8 ``(3, 32, 32)`` image.
        download: Must be false: selfcaps never downloads.
        cache: For the PNG layout, cache the decoded arrays on disk.
        root_source: Where ``root`` came from, for error messages.

    Raises:
        DatasetNotFoundError: Neither layout is there (lists both).
        CorruptDatasetError: A batch or PNG is damaged, or a pickle is unsafe.
    """

    name = "cifar10"
    layout = CIFAR_LAYOUTS["cifar10"]
    label_key = b"labels"
    names_key = b"label_names"
    num_classes = 10

    def __init__(
        self,
        root: str | Path | None = None,
        train: bool = True,
        transform: Transform | None = None,
        download: bool = False,
        cache: bool = True,
        root_source: str | None = None,
    ) -> None:
        self.cache = cache
        super().__init__(root, train, transform, download, root_source)

    def wanted_files(self) -> dict[str, list[Path]]:
        """The pickled batches and meta file if their folder exists, else the PNG folder.

        When neither layout is there, the single ``"layout"`` entry lists both, so the
        error shows every path that would have worked
        (:func:`~selfcaps.data.layouts.cifar_files`).
        """
        return cifar_files(self.root, self.split, self.layout)

    def read(self, files: dict[str, Path]) -> tuple[Tensor, Tensor, Sequence[str]]:
        """Decode the pickles, or the PNG folder (with the on-disk cache)."""
        if "layout" in files:
            return self._read_pngs(files["layout"], self.cache)
        *batches, meta = (files[name] for name in self.layout.pickle_names(self.split))
        return self._read_pickles(batches, meta)

    def _read_pickles(self, batches: list[Path], meta: Path) -> tuple[Tensor, Tensor, list[str]]:
        images, labels = [], []
        for path in batches:
            batch = load_dataset_pickle(path)
            data = _field(batch, b"data", path)
            if not (isinstance(data, np.ndarray) and data.dtype == np.uint8 and data.ndim == 2):
                got = (
                    f"{data.dtype} {data.shape}"
                    if isinstance(data, np.ndarray)
                    else type(data).__name__
                )
                raise CorruptDatasetError(
                    path, f"expected b'data' to be a uint8 array (N, 3072), got {got}"
                )
            if data.shape[1] != 3 * 32 * 32:
                raise CorruptDatasetError(
                    path, f"expected 3072 values per image, got {data.shape[1]}"
                )
            y = as_labels(
                _field(batch, self.label_key, path), path, self.num_classes, str(self.label_key)
            )
            if len(y) != len(data):
                raise CorruptDatasetError(path, f"{len(data)} images but {len(y)} labels")
            images.append(data.reshape(-1, 3, 32, 32))  # rows are R, G, B planes of 32x32
            labels.append(y)
        names = _field(load_dataset_pickle(meta), self.names_key, meta)
        if not isinstance(names, list) or len(names) != self.num_classes:
            raise CorruptDatasetError(
                meta, f"expected {self.num_classes} class names under {self.names_key!r}"
            )
        classes = [n.decode() if isinstance(n, bytes) else str(n) for n in names]
        return torch.from_numpy(np.concatenate(images)), torch.cat(labels), classes

    def _read_pngs(self, folder: Path, cache: bool) -> tuple[Tensor, Tensor, list[str]]:
        classes = list_classes(folder)
        if len(classes) != self.num_classes or (
            self.num_classes == 10 and classes != list(CIFAR10_CLASSES)
        ):
            raise CorruptDatasetError(
                folder,
                f"expected the {self.num_classes} CIFAR class folders, found {len(classes)}: "
                f"{classes[:12]}",
            )
        data, targets, classes = decode_image_folder(folder, classes, None, cache)
        if data.shape[1:] != (3, 32, 32):
            raise CorruptDatasetError(
                folder, f"expected 32x32 RGB images, got {tuple(data.shape[1:])}"
            )
        return data, targets, classes


class CIFAR100(CIFAR10):
    """CIFAR-100 (50,000 train / 10,000 test, 3x32x32, 100 fine classes).

    Reads ``cifar-100-python/{train,test,meta}`` (``fine_labels``) or
    ``cifar100/{train,test}/<class>/*.png``. Same arguments as :class:`CIFAR10`.
    """

    name = "cifar100"
    layout = CIFAR_LAYOUTS["cifar100"]
    label_key = b"fine_labels"
    names_key = b"fine_label_names"
    num_classes = 100
