"""Label-efficiency protocol: a stratified labelled subset of the training split, fixed by seed.

Self-supervised methods are usually compared with a supervised baseline when only a few
labels exist: pretrain on every training image without labels, then finetune (or fit a
linear probe) with 1% or 10% of the labels, against the same network trained from scratch
on the same labelled images. This module chooses those images.

Procedure of :func:`stratified_label_indices` (no library random generator, so the same on
every machine and every numpy/torch version, as the validation carving in
:mod:`selfcaps.data.splits`):

1. Quotas. ``labels_per_class=N``: ``N`` images of every class. ``fraction=F``: ``T =
   round(F * n)`` images in all (halves round up), shared out by the largest remainder:
   class ``c`` with ``n_c`` images gets ``floor(F * n_c)``, and the ``T - sum floor`` classes
   with the largest ``F * n_c - floor(F * n_c)`` get one more (ties: the smaller class index).
   So every class holds within one image of its proportional share and the total is exact.
2. Every index ``i`` of the split gets the key ``splitmix64(splitmix64(seed XOR s) XOR i)``
   (``s`` a fixed salt);
   within each class the indices with the smallest keys are labelled. A smaller quota
   with the same seed gives a subset of a larger one (the 1% images are among the 10%).
3. The indices are returned sorted ascending.

The indices point into the *training* split (official train minus the carved validation
split), so the labelled images are disjoint from validation and test by construction.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset, Subset

from selfcaps.config.checks.labels import check_label_request, label_suffix
from selfcaps.data.splits import splitmix64

__all__ = ["dataset_targets", "label_suffix", "labelled_subset", "stratified_label_indices"]

_SALT = 0x1ABE11ED


def _quotas(counts: np.ndarray, fraction: float | None, per_class: int | None) -> np.ndarray:
    if per_class is not None:
        short = np.flatnonzero(counts < per_class)
        if short.size:
            c = int(short[0])
            raise ValueError(
                f"labels per class: {per_class} requested but class {c} has only "
                f"{int(counts[c])} training images"
            )
        return np.full_like(counts, per_class)
    assert fraction is not None
    share = fraction * counts.astype(np.float64)
    quota = np.floor(share).astype(np.int64)
    total = int(np.floor(fraction * counts.sum() + 0.5))
    if total < 1:
        raise ValueError(
            f"label fraction {fraction} of {int(counts.sum())} training images is no image"
        )
    order = sorted(range(len(counts)), key=lambda c: (-(share[c] - quota[c]), c))
    for c in order[: total - int(quota.sum())]:
        quota[c] += 1
    return quota


def stratified_label_indices(
    targets: Tensor | np.ndarray,
    *,
    fraction: float | None = None,
    per_class: int | None = None,
    seed: int = 0,
) -> Tensor:
    """Indices of a stratified labelled subset (see the module docstring for the procedure).

    Args:
        targets: Class labels ``(N,)`` of the training split.
        fraction: Share of the images to label, in ``(0, 1]``.
        per_class: Images to label in every class (instead of ``fraction``).
        seed: Any integer; the same seed always gives the same subset.

    Returns:
        Sorted ``long`` indices into ``targets``.

    Examples:
        >>> y = torch.tensor([0, 1] * 10)
        >>> idx = stratified_label_indices(y, fraction=0.2, seed=0)
        >>> len(idx), torch.bincount(y[idx]).tolist()
        (4, [2, 2])
    """
    check_label_request(fraction, per_class)
    y = np.asarray(torch.as_tensor(targets).cpu(), dtype=np.int64)
    if y.ndim != 1 or y.size == 0:
        raise ValueError(f"targets must be a non-empty 1-D array, got shape {tuple(y.shape)}")
    counts = np.bincount(y)
    quota = _quotas(counts, fraction, per_class)
    # Salted, so that no key is shared with the validation carving's for the same seed.
    mixed = splitmix64(np.array([(seed ^ _SALT) % 2**64], dtype=np.uint64))
    keys = splitmix64(mixed ^ np.arange(y.size, dtype=np.uint64))
    chosen = []
    for c, k in enumerate(quota):
        members = np.flatnonzero(y == c)
        chosen.append(members[np.argsort(keys[members], kind="stable")[:k]])
    return torch.from_numpy(np.sort(np.concatenate(chosen)))


def dataset_targets(dataset: Any) -> Tensor:
    """The class labels of a dataset: its ``targets``, through ``Subset`` views, else by reading.

    Args:
        dataset: A selfcaps dataset (``targets`` attribute), a ``torch.utils.data.Subset`` of
            one, or any map-style dataset of ``(image, target)``.
    """
    if hasattr(dataset, "targets"):
        return torch.as_tensor(dataset.targets, dtype=torch.long)
    if isinstance(dataset, Subset):
        return dataset_targets(dataset.dataset)[torch.as_tensor(dataset.indices, dtype=torch.long)]
    return torch.tensor([int(dataset[i][1]) for i in range(len(dataset))], dtype=torch.long)


def labelled_subset(
    dataset: Dataset,
    *,
    fraction: float | None = None,
    per_class: int | None = None,
    seed: int = 0,
) -> Subset:
    """The stratified labelled subset of a training split, as a ``Subset`` view.

    Args:
        dataset: The training split (raw images and labels).
        fraction: Share of the images to label.
        per_class: Images to label per class (instead of ``fraction``).
        seed: Seed of the choice.
    """
    idx = stratified_label_indices(
        dataset_targets(dataset), fraction=fraction, per_class=per_class, seed=seed
    )
    return Subset(dataset, idx.tolist())
