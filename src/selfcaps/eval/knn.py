"""Weighted k-nearest-neighbour classification on frozen features (Wu et al. 2018).

:func:`knn_predict` has the signature and semantics of ``lightly``'s
``knn_predict`` (the protocol of CoCa and most self-supervised papers): cosine
similarity to a bank of L2-normalised training features, the ``k`` most similar
neighbours, each voting for its class with weight ``exp(sim / t)``, classes
ranked by their summed votes. :class:`KNNEvaluator` and :func:`knn_evaluate`
normalise the features for you and score the queries in batches, so memory
holds a ``batch_size x N`` block of similarities, never ``queries x N``.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor

from selfcaps.eval._checks import check_features, check_labels, check_positive
from selfcaps.eval.metrics import topk_correct

__all__ = ["KNNEvaluator", "knn_evaluate", "knn_predict"]


def _check_k_t(k: int, t: float, bank_size: int, k_name: str, t_name: str) -> None:
    if not 1 <= k <= bank_size:
        raise ValueError(f"{k_name} must be in [1, bank size {bank_size}], got {k}")
    check_positive(t_name, t)


def knn_predict(
    feature: Tensor,
    feature_bank: Tensor,
    feature_labels: Tensor,
    num_classes: int,
    knn_k: int = 200,
    knn_t: float = 0.1,
) -> Tensor:
    r"""Classes ranked by similarity-weighted votes of the ``knn_k`` nearest bank features.

    For a query ``q`` with neighbours ``i`` (the ``knn_k`` largest cosine
    similarities :math:`s_i = q \cdot b_i`) the score of class ``c`` is
    :math:`\sum_{i: y_i = c} \exp(s_i / t)`. The weights are computed as
    :math:`\exp((s_i - s_{max}) / t)`, the same up to a positive factor per query,
    so the ranking is unchanged and small temperatures cannot overflow to inf.
    Ties rank the smaller class index first (in particular, classes without a
    vote follow in index order).

    Args:
        feature: Queries ``(B, D)``, L2-normalised.
        feature_bank: Bank ``(D, N)`` (dimension first, as in lightly), L2-normalised columns.
        feature_labels: Class indices of the bank ``(N,)``.
        num_classes: Number of classes ``C``.
        knn_k: Number of neighbours, ``1 <= knn_k <= N``.
        knn_t: Temperature, ``> 0``.

    Returns:
        Class indices ``(B, C)`` sorted by score, best first: ``[:, 0]`` is the prediction.

    Examples:
        >>> bank = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]]).t()
        >>> labels = torch.tensor([0, 1, 1])
        >>> query = torch.tensor([[0.8, 0.6]])
        >>> knn_predict(query, bank, labels, num_classes=3, knn_k=2, knn_t=0.1)
        tensor([[1, 0, 2]])
    """
    if feature.dim() != 2 or feature_bank.dim() != 2 or feature_bank.shape[0] != feature.shape[1]:
        raise ValueError(
            f"feature must be (B, D) and feature_bank (D, N); got {tuple(feature.shape)} "
            f"and {tuple(feature_bank.shape)} (a bank of shape (N, D) needs .t())"
        )
    _check_k_t(knn_k, knn_t, feature_bank.shape[1], "knn_k", "knn_t")
    sim, idx = (feature @ feature_bank).topk(knn_k, dim=1)
    weights = ((sim - sim[:, :1]) / knn_t).exp()
    votes = feature_labels.to(idx.device)[idx]
    scores = weights.new_zeros(feature.shape[0], num_classes).scatter_add_(1, votes, weights)
    return scores.argsort(dim=1, descending=True, stable=True)


class KNNEvaluator:
    """A bank of training features that classifies queries with :func:`knn_predict`.

    Build it once (e.g. per validation epoch) and call :meth:`evaluate` or
    :meth:`predict` on any number of query sets. Features are L2-normalised
    here; the bank stays on the device of ``train_features`` and queries are
    moved there ``batch_size`` at a time.

    Args:
        train_features: Bank features ``(N, D)`` (samples first, unlike ``knn_predict``).
        train_labels: Their class indices ``(N,)``.
        num_classes: Number of classes.
        k: Number of neighbours, ``1 <= k <= N``.
        t: Temperature, ``> 0``.
        batch_size: Queries scored at once; the similarity block is ``batch_size x N``.

    Examples:
        >>> train = torch.tensor([[1.0, 0.1], [0.9, -0.1], [-1.0, 0.2], [-0.8, 0.0]])
        >>> knn = KNNEvaluator(train, torch.tensor([0, 0, 1, 1]), num_classes=2, k=3)
        >>> knn.evaluate(torch.tensor([[2.0, 0.0], [-3.0, 1.0]]), torch.tensor([0, 1]))
        {'top1': 100.0, 'top5': 100.0}
    """

    def __init__(
        self,
        train_features: Tensor,
        train_labels: Tensor,
        num_classes: int,
        k: int = 200,
        t: float = 0.1,
        batch_size: int = 256,
    ) -> None:
        check_features(train_features, train_labels, ("train_features", "train_labels"))
        check_labels(train_labels, num_classes, "train_labels")
        _check_k_t(k, t, train_features.shape[0], "k", "t")
        check_positive("batch_size", batch_size)
        dtype = torch.promote_types(train_features.dtype, torch.float32)
        self.bank = F.normalize(train_features.to(dtype), dim=1).t()
        self.labels = train_labels.to(self.bank.device).long()
        self.num_classes, self.k, self.t, self.batch_size = num_classes, k, t, batch_size

    def _ranked_batches(self, features: Tensor) -> Iterator[tuple[int, Tensor]]:
        if features.dim() != 2 or features.shape[1] != self.bank.shape[0]:
            raise ValueError(
                f"features must be (M, {self.bank.shape[0]}), got {tuple(features.shape)}"
            )
        for start in range(0, features.shape[0], self.batch_size):
            query = F.normalize(features[start : start + self.batch_size].to(self.bank), dim=1)
            ranked = knn_predict(query, self.bank, self.labels, self.num_classes, self.k, self.t)
            yield start, ranked

    def predict(self, features: Tensor) -> Tensor:
        """Ranked classes ``(M, num_classes)`` of query features ``(M, D)``."""
        return torch.cat([ranked for _, ranked in self._ranked_batches(features)])

    def evaluate(self, features: Tensor, labels: Tensor) -> dict[str, float]:
        """Top-1 and top-5 accuracy in percent (top-5 means top-``min(5, num_classes)``).

        Args:
            features: Query features ``(M, D)``.
            labels: Their class indices ``(M,)``.

        Returns:
            ``{"top1": ..., "top5": ...}``.
        """
        check_features(features, labels, ("test_features", "test_labels"), self.bank.shape[0])
        check_labels(labels, self.num_classes, "test_labels")
        labels = labels.to(self.bank.device)
        correct = {"top1": 0, "top5": 0}
        for start, ranked in self._ranked_batches(features):
            counts = topk_correct(ranked, labels[start : start + ranked.shape[0]], ks=(1, 5))
            correct = {key: correct[key] + counts[key] for key in correct}
        return {key: 100.0 * count / features.shape[0] for key, count in correct.items()}


def knn_evaluate(
    train_features: Tensor,
    train_labels: Tensor,
    test_features: Tensor,
    test_labels: Tensor,
    num_classes: int,
    k: int = 200,
    t: float = 0.1,
    batch_size: int = 256,
) -> dict[str, float]:
    """Weighted kNN top-1/top-5 accuracy (percent) of test features against a training bank.

    Shorthand for ``KNNEvaluator(train_features, train_labels, num_classes, k, t,
    batch_size).evaluate(test_features, test_labels)``.

    Args:
        train_features: Bank features ``(N, D)``, any scale (normalised here).
        train_labels: Their class indices ``(N,)``.
        test_features: Query features ``(M, D)``.
        test_labels: Their class indices ``(M,)``.
        num_classes: Number of classes.
        k: Number of neighbours, ``1 <= k <= N``.
        t: Temperature, ``> 0``.
        batch_size: Queries scored at once.

    Returns:
        ``{"top1": ..., "top5": ...}`` in percent; top-5 is top-``min(5, num_classes)``.

    Examples:
        >>> g = torch.Generator().manual_seed(0)
        >>> centers = 5 * torch.eye(3)
        >>> y = torch.arange(60) % 3
        >>> x = centers[y] + torch.randn(60, 3, generator=g)
        >>> knn_evaluate(x[:45], y[:45], x[45:], y[45:], num_classes=3, k=10)
        {'top1': 100.0, 'top5': 100.0}
    """
    evaluator = KNNEvaluator(train_features, train_labels, num_classes, k, t, batch_size)
    return evaluator.evaluate(test_features, test_labels)
