"""Names the command line checks and lists before it imports torch.

The dataset and model registries live with the datasets and networks, which
import torch; importing them costs seconds. :data:`DATASETS` and the model names
of the methods' records (:mod:`selfcaps.records`) let ``selfcaps list`` and the
validation of ``--data`` answer at once. A test checks that they equal
``selfcaps.data.list_datasets()`` and ``selfcaps.list_models()``.
"""

from __future__ import annotations

import fnmatch

from selfcaps._names import unknown_name_error
from selfcaps.data.layouts import IMAGEFOLDER_PREFIX
from selfcaps.records import list_records

__all__ = ["DATASETS", "IMAGEFOLDER_PREFIX", "check_dataset_name", "list_models", "models"]


#: Every name of :func:`selfcaps.data.list_datasets` (``imagefolder:<path>`` is a pattern).
DATASETS: tuple[str, ...] = (
    "affnist",
    "affnist_like",
    "cifar10",
    "cifar100",
    "fashion_mnist",
    "mnist",
    "mnist5k",
    "smallnorb",
    "smallnorb_azimuth",
    "smallnorb_azimuth_union",
    "smallnorb_elevation",
    "smallnorb_elevation_union",
    "svhn",
    f"{IMAGEFOLDER_PREFIX}<path>",
)


def models() -> tuple[str, ...]:
    """Every name of :func:`selfcaps.list_models` (aliases not included), from the records."""
    return tuple(sorted(n for r in list_records() for n in r.models))


def list_models(pattern: str = "*") -> list[str]:
    """Model names matching a shell-style pattern, without importing the networks.

    Examples:
        >>> list_models("encapnet1*")
        ['encapnet18', 'encapnet18_resnet']
    """
    return sorted(n for n in models() if fnmatch.fnmatch(n, pattern))


def check_dataset_name(name: str) -> None:
    """Raise the registry's unknown-dataset error for a name it would refuse.

    Args:
        name: A dataset name (``imagefolder:<path>`` accepted for any path).

    Raises:
        ValueError: Unknown name, with the closest valid one.

    Examples:
        >>> check_dataset_name("cifar")
        Traceback (most recent call last):
        ...
        ValueError: unknown dataset 'cifar'. Did you mean 'cifar10'? Valid choices: ...
    """
    if name.startswith(IMAGEFOLDER_PREFIX) or name in DATASETS:
        return
    raise unknown_name_error("dataset", name, list(DATASETS))
