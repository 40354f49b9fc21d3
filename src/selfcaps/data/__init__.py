"""Datasets in their official formats, decoded once into memory, and augmentation transforms.

Start with :func:`get_dataset` (by name and split) or :func:`get_splits`, and
:func:`default_transforms`.
Every dataset holds ``data`` (uint8 ``(N, C, H, W)``), ``targets`` (long ``(N,)``)
and ``classes``, and returns ``(transform(image), label)``. Loading never
downloads: missing files raise :class:`DatasetNotFoundError` listing where they
were looked for and how to get them; ``selfcaps data get NAME`` (:mod:`~selfcaps.data.fetch`)
fetches MNIST, Fashion-MNIST, CIFAR-10/100 and SVHN when asked.

The package imports its modules on first use of a name, so that the torch-free
ones (:mod:`~selfcaps.data.layouts`, :mod:`~selfcaps.data.errors`,
:mod:`~selfcaps.data.paths`) load in milliseconds: the command line checks that
a dataset's files are there before it imports torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from selfcaps.data.affine import (
        AFFNIST_RANGES,
        AffineParams,
        AffNISTLike,
        RandomCanvasTranslate,
        affine_digit,
        affine_digits,
        pad_to_canvas,
        sample_affnist_params,
    )
    from selfcaps.data.affnist import AffNIST, AffNISTLikeDataset
    from selfcaps.data.batch_transforms import BatchSimCLRTransform
    from selfcaps.data.cifar import CIFAR10, CIFAR100
    from selfcaps.data.dataset import DatasetSubset, FileDataset, ImageDataset
    from selfcaps.data.errors import (
        CorruptDatasetError,
        DatasetNotFoundError,
        DownloadNotSupportedError,
        UnsafePickleError,
    )
    from selfcaps.data.idx import read_idx
    from selfcaps.data.imagefolder import ImageFolderDataset, decode_image_folder
    from selfcaps.data.mnist import MNIST, FashionMNIST
    from selfcaps.data.mnist5k import MNIST5k
    from selfcaps.data.registry import (
        SPLITS,
        DatasetInfo,
        dataset_info,
        get_dataset,
        get_splits,
        list_datasets,
    )
    from selfcaps.data.safe_pickle import load_dataset_pickle
    from selfcaps.data.smallnorb import SmallNORB, read_norb_matrix
    from selfcaps.data.splits import carve_validation
    from selfcaps.data.svhn import SVHN
    from selfcaps.data.transforms import (
        BatchEvalTransform,
        DatasetTransforms,
        EvalTransform,
        MultiViewTransform,
        SimCLRTransform,
        default_transforms,
    )

__all__ = [
    "AFFNIST_RANGES",
    "CIFAR10",
    "CIFAR100",
    "MNIST",
    "SPLITS",
    "SVHN",
    "AffNIST",
    "AffNISTLike",
    "AffNISTLikeDataset",
    "AffineParams",
    "BatchEvalTransform",
    "BatchSimCLRTransform",
    "CorruptDatasetError",
    "DatasetInfo",
    "DatasetNotFoundError",
    "DatasetSubset",
    "DatasetTransforms",
    "DownloadNotSupportedError",
    "EvalTransform",
    "FashionMNIST",
    "FileDataset",
    "ImageDataset",
    "ImageFolderDataset",
    "MNIST5k",
    "MultiViewTransform",
    "RandomCanvasTranslate",
    "SimCLRTransform",
    "SmallNORB",
    "UnsafePickleError",
    "affine_digit",
    "affine_digits",
    "carve_validation",
    "dataset_info",
    "decode_image_folder",
    "default_transforms",
    "get_dataset",
    "get_splits",
    "list_datasets",
    "load_dataset_pickle",
    "pad_to_canvas",
    "read_idx",
    "read_norb_matrix",
    "sample_affnist_params",
]

#: The module that defines each name of ``__all__``, imported when the name is first used.
_HOMES: dict[str, tuple[str, ...]] = {
    "affine": (
        "AFFNIST_RANGES",
        "AffineParams",
        "AffNISTLike",
        "RandomCanvasTranslate",
        "affine_digit",
        "affine_digits",
        "pad_to_canvas",
        "sample_affnist_params",
    ),
    "affnist": ("AffNIST", "AffNISTLikeDataset"),
    "batch_transforms": ("BatchSimCLRTransform",),
    "cifar": ("CIFAR10", "CIFAR100"),
    "dataset": ("DatasetSubset", "FileDataset", "ImageDataset"),
    "errors": (
        "CorruptDatasetError",
        "DatasetNotFoundError",
        "DownloadNotSupportedError",
        "UnsafePickleError",
    ),
    "idx": ("read_idx",),
    "imagefolder": ("ImageFolderDataset", "decode_image_folder"),
    "mnist": ("MNIST", "FashionMNIST"),
    "mnist5k": ("MNIST5k",),
    "registry": (
        "SPLITS",
        "DatasetInfo",
        "dataset_info",
        "get_dataset",
        "get_splits",
        "list_datasets",
    ),
    "safe_pickle": ("load_dataset_pickle",),
    "smallnorb": ("SmallNORB", "read_norb_matrix"),
    "splits": ("carve_validation",),
    "svhn": ("SVHN",),
    "transforms": (
        "BatchEvalTransform",
        "DatasetTransforms",
        "EvalTransform",
        "MultiViewTransform",
        "SimCLRTransform",
        "default_transforms",
    ),
}
_HOME = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    globals()[name] = value  # later uses skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
