"""Top-k accuracy in percent, from class scores or from classes already ranked.

Keys are ``"top{k}"`` for each requested ``k``. ``k`` is clamped to the number of
classes (columns), so ``top5`` on a 3-class problem is top-3 accuracy, 100%.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

__all__ = ["accuracy_from_predictions", "topk_accuracy", "topk_correct"]

ArrayLike = Tensor | np.ndarray | Sequence


def topk_correct(
    scores_or_ranked: ArrayLike, targets: ArrayLike, ks: Sequence[int] = (1, 5)
) -> dict[str, int]:
    """Number of samples whose target is among their ``k`` best classes, for each ``k``.

    Args:
        scores_or_ranked: Either class scores ``(N, C)`` with a floating dtype
            (logits, probabilities, capsule lengths: larger is better; ties are
            broken as ``torch.topk`` breaks them), or class indices ranked best
            first ``(N, R)`` with an integer dtype (e.g. the output of
            :func:`~selfcaps.eval.knn_predict`; ``R`` may be less than the number
            of classes).
        targets: True class indices ``(N,)``.
        ks: The ``k`` values; each is clamped to the number of columns.

    Returns:
        ``{"top{k}": count}``.

    Examples:
        >>> ranked = torch.tensor([[2, 0, 1], [1, 2, 0]])
        >>> topk_correct(ranked, torch.tensor([0, 1]), ks=(1, 2))
        {'top1': 1, 'top2': 2}
    """
    x = torch.as_tensor(scores_or_ranked)
    y = torch.as_tensor(targets, device=x.device)
    if x.dim() != 2:
        raise ValueError(f"scores_or_ranked must be (N, C), got shape {tuple(x.shape)}")
    if y.shape != (x.shape[0],):
        raise ValueError(f"targets must be ({x.shape[0]},), got shape {tuple(y.shape)}")
    if not ks or min(ks) < 1:
        raise ValueError(f"ks must be positive integers, got {tuple(ks)}")
    k_max = min(max(ks), x.shape[1])
    ranked = x.topk(k_max, dim=1).indices if x.is_floating_point() else x[:, :k_max]
    hits = ranked == y.unsqueeze(1)
    return {f"top{k}": int(hits[:, : min(k, k_max)].any(dim=1).sum()) for k in ks}


def topk_accuracy(
    scores_or_ranked: ArrayLike, targets: ArrayLike, ks: Sequence[int] = (1, 5)
) -> dict[str, float]:
    """Top-k accuracy in percent for each ``k`` (see :func:`topk_correct` for the inputs).

    Args:
        scores_or_ranked: Class scores ``(N, C)`` (float) or ranked class indices ``(N, R)`` (int).
        targets: True class indices ``(N,)``, ``N >= 1``.
        ks: The ``k`` values; each is clamped to the number of columns.

    Returns:
        ``{"top{k}": percent}``.

    Examples:
        >>> logits = torch.tensor([[0.1, 0.7, 0.2], [0.8, 0.1, 0.1]])
        >>> topk_accuracy(logits, torch.tensor([2, 0]), ks=(1, 2, 5))
        {'top1': 50.0, 'top2': 100.0, 'top5': 100.0}
    """
    counts = topk_correct(scores_or_ranked, targets, ks)
    n = len(targets)
    if n == 0:
        raise ValueError("targets is empty")
    return {key: 100.0 * count / n for key, count in counts.items()}


def accuracy_from_predictions(predictions: ArrayLike, targets: ArrayLike) -> float:
    """Accuracy in percent of predicted class indices.

    Args:
        predictions: Predicted class indices ``(N,)`` (tensor, array or sequence).
        targets: True class indices ``(N,)``, ``N >= 1``.

    Returns:
        The percentage of equal entries.

    Examples:
        >>> accuracy_from_predictions([0, 1, 2, 2], [0, 1, 1, 2])
        75.0
    """
    ranked = torch.as_tensor(predictions).long().reshape(-1, 1)
    return topk_accuracy(ranked, targets, ks=(1,))["top1"]
