"""Datasets in their official formats, decoded once into memory, and augmentation transforms.

Start with :func:`get_dataset` (by name and split) or :func:`get_splits`, and
:func:`default_transforms`.
Every dataset holds ``data`` (uint8 ``(N, C, H, W)``), ``targets`` (long ``(N,)``)
and ``classes``, and returns ``(transform(image), label)``. Nothing is ever
downloaded: missing files raise :class:`DatasetNotFoundError` listing where they
were looked for.
"""

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
