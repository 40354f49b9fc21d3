"""In-memory image datasets: decoded once, indexed as tensors.

Every selfcaps dataset holds its whole split in memory as

* ``data``: a ``torch.uint8`` tensor ``(N, C, H, W)``,
* ``targets``: a ``torch.long`` tensor ``(N,)``,
* ``classes``: the class names, ``classes[targets[i]]`` naming image ``i``,

and ``dataset[i]`` returns ``(transform(data[i]) if transform else data[i], int(targets[i]))``.
Transforms therefore receive uint8 CHW tensors (``torchvision.transforms.v2`` handles them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import Dataset

from selfcaps.data.paths import locate_files, resolve_root

__all__ = ["DatasetSubset", "FileDataset", "ImageDataset", "Transform"]

Transform = Callable[[Tensor], Any]


class ImageDataset(Dataset[tuple[Any, int]]):
    """A labelled image dataset held in memory as a uint8 tensor.

    Args:
        data: Images ``(N, C, H, W)``, ``torch.uint8``.
        targets: Labels ``(N,)``, integers in ``[0, len(classes))``.
        classes: Class names.
        transform: Applied to each uint8 image on access.

    Examples:
        >>> images = torch.zeros(2, 1, 4, 4, dtype=torch.uint8)
        >>> ds = ImageDataset(images, torch.tensor([0, 1]), ["a", "b"])
        >>> img, target = ds[1]
        >>> img.shape, img.dtype, target
        (torch.Size([1, 4, 4]), torch.uint8, 1)
    """

    #: Registry name of the dataset ("mnist", "cifar10", ...); set by subclasses.
    name: str = ""
    #: Which part of the dataset this is ("train", "test", ...); set by subclasses.
    split: str = ""
    #: The data root the files were read from; set by subclasses that read files.
    root: Path | None = None
    #: Where ``root`` came from (argument, ``--data-root``, ``SELFCAPS_DATA``, default).
    root_source: str = ""

    def __init__(
        self,
        data: Tensor,
        targets: Tensor,
        classes: Sequence[str],
        transform: Transform | None = None,
    ) -> None:
        if data.dtype != torch.uint8 or data.dim() != 4:
            raise ValueError(
                f"data must be uint8 (N, C, H, W), got {data.dtype} {tuple(data.shape)}"
            )
        targets = torch.as_tensor(targets, dtype=torch.long)
        if targets.shape != (data.shape[0],):
            raise ValueError(
                f"targets must have shape ({data.shape[0]},), got {tuple(targets.shape)}"
            )
        if targets.numel() and not (int(targets.min()) >= 0 and int(targets.max()) < len(classes)):
            raise ValueError(
                f"targets must lie in [0, {len(classes)}), got {targets.min()}..{targets.max()}"
            )
        self.data = data
        self.targets = targets
        self.classes = list(classes)
        self.transform = transform

    def __len__(self) -> int:
        return int(self.targets.shape[0])

    def __getitem__(self, index: int) -> tuple[Any, int]:
        img = self.image(index)
        return (self.transform(img) if self.transform else img), int(self.targets[index])

    def image(self, index: int) -> Tensor:
        """Image ``index`` as stored (uint8 ``(C, H, W)``), without the transform."""
        return self.data[index]

    def images(self, indices: Tensor) -> Tensor:
        """Images ``indices`` as stored (uint8 ``(len(indices), C, H, W)``)."""
        return self.data[indices]

    def select(self, indices: Tensor | Sequence[int]) -> ImageDataset:
        """Some images of this dataset, with its transform (a view: nothing is copied)."""
        return DatasetSubset(self, torch.as_tensor(indices, dtype=torch.long), self.transform)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """``(C, H, W)`` of every image."""
        C, H, W = self.data.shape[1:]
        return C, H, W

    def extra_repr(self) -> str:
        """A line added to the ``repr``: split and root, where known."""
        parts = [
            f"split: {self.split}" if self.split else "",
            f"root: {self.root}" if self.root else "",
        ]
        return ", ".join(p for p in parts if p)

    def __repr__(self) -> str:
        shape = "x".join(str(s) for s in self.image_shape)
        lines = [
            f"{type(self).__name__}: {len(self)} images of {shape} (C x H x W), "
            f"{len(self.classes)} classes",
            self.extra_repr(),
            f"transform: {self.transform!r}" if self.transform else "",
        ]
        return "\n    ".join(line for line in lines if line)


class FileDataset(ImageDataset):
    """An :class:`ImageDataset` read from files under a data root (torchvision's signature).

    Subclasses say which files they need (:meth:`wanted_files`) and how to decode
    them (:meth:`read`); this class resolves the root, refuses ``download=True``,
    and reports missing files with every path it tried.

    Args:
        root: Data root (see :func:`~selfcaps.data.paths.resolve_root`).
        train: Official training split if true, else the test split.
        transform: Applied to each uint8 ``(C, H, W)`` image.
        download: Must be false: selfcaps never downloads.
        root_source: Where ``root`` came from, for error messages (e.g. ``"--data-root"``).

    Raises:
        DownloadNotSupportedError: If ``download`` is true.
        DatasetNotFoundError: If files are missing (lists every path tried, the root
            and where it came from).
        CorruptDatasetError: If a file is damaged (names the file and the problem).
    """

    def __init__(
        self,
        root: str | Path | None = None,
        train: bool = True,
        transform: Transform | None = None,
        download: bool = False,
        root_source: str | None = None,
    ) -> None:
        self.root, self.root_source = resolve_root(root, root_source)
        self.split = "train" if train else "test"
        files = locate_files(self.name, self.root, self.root_source, self.wanted_files(), download)
        data, targets, classes = self.read(files)
        super().__init__(data, targets, classes, transform)

    def wanted_files(self) -> dict[str, list[Path]]:
        """For each file this split needs, its candidate paths (``self.root``/``split`` are set)."""
        raise NotImplementedError

    def read(self, files: dict[str, Path]) -> tuple[Tensor, Tensor, Sequence[str]]:
        """Decode the located files into ``(data, targets, classes)``."""
        raise NotImplementedError


class DatasetSubset(ImageDataset):
    """A view of some images of an :class:`ImageDataset`, with its own transform.

    ``targets`` is indexed once at construction (small); ``data`` is gathered only if
    someone reads the attribute (then once, and cached). ``subset[i]`` reads straight
    from the parent's tensor, so iterating over epochs never copies the dataset.

    Args:
        dataset: The parent dataset.
        indices: Indices into ``dataset``.
        transform: Applied on access (the parent's transform is not used).

    Examples:
        >>> parent = ImageDataset(torch.arange(4, dtype=torch.uint8).view(4, 1, 1, 1),
        ...                       torch.tensor([0, 1, 0, 1]), ["a", "b"])
        >>> sub = DatasetSubset(parent, torch.tensor([3, 0]))
        >>> len(sub), sub.targets.tolist(), int(sub[0][0])
        (2, [1, 0], 3)
    """

    def __init__(
        self, dataset: ImageDataset, indices: Tensor, transform: Transform | None = None
    ) -> None:
        self.dataset = dataset
        self.indices = torch.as_tensor(indices, dtype=torch.long)
        self.targets = dataset.targets[self.indices]
        self.classes = dataset.classes
        self.transform = transform

    @cached_property
    def data(self) -> Tensor:  # type: ignore[override]
        """The subset's images ``(len(self), C, H, W)`` (gathered on first access)."""
        return self.dataset.images(self.indices)

    def image(self, index: int) -> Tensor:
        """Image ``index`` of the subset, read from the parent."""
        return self.dataset.image(int(self.indices[index]))

    def images(self, indices: Tensor) -> Tensor:
        """Images ``indices`` of the subset, read from the parent."""
        return self.dataset.images(self.indices[indices])

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """``(C, H, W)`` of every image (the parent's)."""
        return self.dataset.image_shape

    def extra_repr(self) -> str:
        """Names the parent."""
        return f"subset of {self.dataset!r}".replace("\n", "\n    ")
