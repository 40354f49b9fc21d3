"""How specific products of expert capsules are on real images: purity of their groups.

The judge's purity (:mod:`selfcaps.methods.poe.judge`) reads what each capsule *generates*.
This module reads the same question on the test images themselves, the encoder's side: every
image goes to its *longest* capsule (the one most likely on, the paper's reading of a length),
which splits the test images into one group per capsule, and a group's purity is the share
of its images in its most frequent true class. Over all groups this is the purity of a
clustering (Manning, Raghavan and Schütze, "Introduction to Information Retrieval", 2008,
section 16.3):

    purity = (1 / N) sum_j max_k |{images in group j with label k}|.

The two read different things: on the recommended preset's runs the samples are purer than
the groups, and per capsule one hardly predicts the other (docs/methods/poe.md, "What turns
the capsules on"). The labels are read only here, as a linear probe reads them.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from selfcaps.methods.poe.reconstruction import capped_batches
from selfcaps.models.poe import PoECapsNet

__all__ = [
    "group_counts",
    "group_purity",
    "loader_group_counts",
    "loader_poses",
    "selectivity_metrics",
]


def group_counts(lengths: Tensor, labels: Tensor, num_classes: int) -> Tensor:
    """Images per (longest capsule, label): ``(M, num_classes)`` integer counts.

    Args:
        lengths: Capsule lengths ``(N, M)`` of ``N`` images.
        labels: Their classes ``(N,)`` in ``[0, num_classes)``.
        num_classes: Number of classes.

    Raises:
        ValueError: ``lengths`` is not 2-D, the sizes differ, or a label is out of range.

    Examples:
        >>> lengths = torch.tensor([[0.9, 0.1], [0.8, 0.3], [0.2, 0.7]])
        >>> group_counts(lengths, torch.tensor([1, 0, 1]), 2)
        tensor([[1, 1],
                [0, 1]])
    """
    if lengths.dim() != 2 or labels.shape != lengths.shape[:1]:
        raise ValueError(
            f"lengths (N, M) and labels (N,) expected, got {tuple(lengths.shape)} and "
            f"{tuple(labels.shape)}"
        )
    if labels.numel() and not bool(((labels >= 0) & (labels < num_classes)).all()):
        raise ValueError(f"labels must lie in [0, {num_classes}), got {labels.unique().tolist()}")
    m = lengths.shape[1]
    cell = lengths.argmax(1) * num_classes + labels.long()
    return torch.bincount(cell, minlength=m * num_classes).view(m, num_classes)


def group_purity(counts: Tensor, suffix: str = "") -> dict[str, float | int | str]:
    """Purity of the capsules' groups of images from :func:`group_counts`' table.

    Keys (``suffix`` appended): ``caps_group_purity`` (percent of the images whose label is
    their group's majority, the clustering purity), ``caps_group_classes`` (distinct
    majority classes over the non-empty groups), ``caps_group_empty`` (capsules that are no
    image's longest), ``caps_group_majority_classes`` (each capsule's majority class, ``-``
    for an empty group) and ``caps_group_images``. A group's majority is its smallest
    label among ties.

    Raises:
        ValueError: The table counts no images (a purity of nothing).

    Examples:
        >>> group_purity(torch.tensor([[3, 1, 0], [0, 0, 0], [0, 2, 2]]))["caps_group_purity"]
        62.5
    """
    sizes = counts.sum(1)
    n = int(sizes.sum())
    if n == 0:
        raise ValueError(f"poe selectivity: the table {tuple(counts.shape)} counts no images")
    top, majority = counts.max(1)
    used = sizes > 0
    labels = [str(int(k)) if u else "-" for k, u in zip(majority, used, strict=True)]
    return {
        f"caps_group_purity{suffix}": 100.0 * float(top.sum()) / n,
        f"caps_group_classes{suffix}": len(set(majority[used].tolist())),
        f"caps_group_empty{suffix}": int((~used).sum()),
        f"caps_group_majority_classes{suffix}": ",".join(labels),
        f"caps_group_images{suffix}": n,
    }


@torch.no_grad()
def loader_poses(net: PoECapsNet, loader: Any, cfg: Any) -> tuple[Tensor, Tensor]:
    """Capsule poses and labels of a labelled loader's first ``eval.max_images`` images.

    Returns:
        Poses ``(N, num_caps, out_dim)`` and labels ``(N,)``, on the CPU.

    Raises:
        ValueError: The loader yields no images.
    """
    device = next(net.parameters()).device
    poses, labels = [], []
    for x, y in capped_batches(loader, cfg):
        caps, _ = net.encode(x.to(device))
        poses.append(caps.cpu())
        labels.append(y)
    if not poses:
        raise ValueError("poe selectivity: the loader yielded no images")
    return torch.cat(poses), torch.cat(labels)


def loader_group_counts(net: PoECapsNet, loader: Any, cfg: Any, num_classes: int) -> Tensor:
    """:func:`group_counts` of the first ``eval.max_images`` images of a labelled loader.

    Raises:
        ValueError: The loader yields no images.
    """
    poses, labels = loader_poses(net, loader, cfg)
    return group_counts(poses.norm(dim=-1), labels, num_classes)


def selectivity_metrics(
    net: PoECapsNet, loader: Any, cfg: Any, num_classes: int, suffix: str = ""
) -> dict[str, float | int | str]:
    """:func:`group_purity` of :func:`loader_group_counts` (the run's test images)."""
    return group_purity(loader_group_counts(net, loader, cfg, num_classes), suffix)
