"""Names the command line checks and lists before it imports torch.

The dataset and model registries live with the datasets and networks, which
import torch; importing them costs seconds. These tuples let ``selfcaps list``
and the validation of ``--data`` answer at once. A test checks that they equal
``selfcaps.data.list_datasets()`` and ``selfcaps.list_models()``.
"""

from __future__ import annotations

import fnmatch

from selfcaps._names import unknown_name_error
from selfcaps.data.layouts import IMAGEFOLDER_PREFIX

__all__ = ["DATASETS", "IMAGEFOLDER_PREFIX", "MODELS", "check_dataset_name", "list_models"]


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

#: Every name of :func:`selfcaps.list_models` (aliases not included).
MODELS: tuple[str, ...] = (
    "coca",
    "encapnet",
    "encapnet18",
    "encapnet18_resnet",
    "mcae",
    "poe",
    "sparsecaps",
    "table1_capnet_dynamic",
    "table1_capnet_em",
    "table1_capnet_em_procedure1",
    "table1_cnn",
    "table1_encapnet_master",
    "table1_encapnet_master_aide",
)


def list_models(pattern: str = "*") -> list[str]:
    """Model names matching a shell-style pattern, without importing the networks.

    Examples:
        >>> list_models("encapnet1*")
        ['encapnet18', 'encapnet18_resnet']
    """
    return sorted(n for n in MODELS if fnmatch.fnmatch(n, pattern))


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
