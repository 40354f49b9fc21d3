"""Accepting a ``Dataset`` or a ``DataLoader`` and reading ``(images, targets)`` batches."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

__all__ = ["as_loader", "images_and_targets"]

Data = Dataset | DataLoader


def as_loader(data: Data, batch_size: int, shuffle: bool = False, seed: int = 0) -> DataLoader:
    """``data`` itself if it is a ``DataLoader``, else a single-process loader over it.

    Args:
        data: A map-style or iterable dataset of ``(image, target, ...)`` samples, or a loader.
        batch_size: Batch size of the new loader (a given loader keeps its own).
        shuffle: Shuffle the new loader, with a generator seeded by ``seed``.
        seed: Seed of the shuffling generator.

    Returns:
        A loader.
    """
    if isinstance(data, DataLoader):
        return data
    generator = torch.Generator().manual_seed(seed) if shuffle else None
    return DataLoader(data, batch_size=batch_size, shuffle=shuffle, generator=generator)


def images_and_targets(batch: Any) -> tuple[Tensor, Tensor]:
    """Split a batch ``(images, targets, ...)`` as torchvision-style datasets give it.

    Args:
        batch: A list or tuple whose first two entries are the inputs and the class indices.

    Returns:
        ``(images, targets)`` with targets as a ``long`` tensor.
    """
    if not isinstance(batch, list | tuple) or len(batch) < 2:
        raise ValueError(
            "expected batches (images, targets, ...) as torchvision-style datasets give, "
            f"got {type(batch).__name__}"
        )
    return batch[0], torch.as_tensor(batch[1]).long()
