"""Stage 2's collapse of products of expert capsules, measured.

Why the paper's settings collapse (measured in docs/methods/poe.md): at the initial ``W``
every capsule is off (``|z_j|`` about 2e-3), so Algorithm 1's model term vanishes and the data
term is about ``W_j E[c^2 x x^T]``: a power iteration that turns every capsule's ``W_j``
towards the top eigenvector of the primaries' second moment before any capsule turns on.
After every stage-2 epoch :func:`collapse_stats` logs how far it went (``w_top_share``,
``w_pair_similarity``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from selfcaps.data import EvalTransform
from selfcaps.data.datamodule import TransformDataset
from selfcaps.models.poe import PoECapsNet, RoutedCaps

__all__ = [
    "COLLAPSE_IMAGES",
    "capsule_pair_similarity",
    "capsule_rows",
    "collapse_stats",
    "second_moment_spectrum",
    "spread_images",
    "top_direction_share",
]


#: Training images (spread over the training split) on which stage 2's collapse is measured.
COLLAPSE_IMAGES = 256


def second_moment_spectrum(x: Tensor) -> tuple[Tensor, Tensor]:
    """Eigenvalues and top eigenvector of the primaries' uncentred second moment ``E[x x^T]``.

    ``S = mean_b x_b x_b^T`` over the flattened primary capsules ``x`` ``(B, N, D)``, an
    ``N D``-square matrix (4,608 for the paper's network), through the ``B x B`` Gram matrix
    ``x x^T / B``: it has the same non-zero eigenvalues, and if ``u`` is its top eigenvector,
    ``x^T u`` (normalised) is ``S``'s. In float64.

    Args:
        x: Primary capsules ``(B, N, D)``.

    Returns:
        ``(eigenvalues (B,) in descending order, top eigenvector (N D,) of unit length)``;
        the eigenvector's sign is arbitrary.
    """
    flat = x.flatten(1).double()
    evals, evecs = torch.linalg.eigh(flat @ flat.T / flat.shape[0])
    v = flat.T @ evecs[:, -1]
    return evals.flip(0).clamp_min(0.0), v / v.norm()


def capsule_rows(layer: RoutedCaps) -> Tensor:
    """Each parent's map from all children at once: ``W_j`` as ``(M, D_out, N D_in)``.

    Column ``i D_in + d`` of ``W_j`` multiplies component ``d`` of child ``i``, the order of
    ``x.flatten(1)`` for children ``x`` ``(B, N, D_in)``, so ``z_j = W_j x`` when every
    ``c_ij`` is 1.
    """
    m = layer.matrices  # (N, M, D_out, D_in)
    return m.permute(1, 2, 0, 3).reshape(layer.out_caps, layer.out_dim, -1)


def top_direction_share(layer: RoutedCaps, v: Tensor) -> Tensor:
    """Share of ``W``'s squared norm along the unit direction ``v`` of the flattened children.

    ``sum_j |W_j v|^2 / sum_j |W_j|_F^2`` (:func:`capsule_rows`): ``1 / (N D_in)`` on average
    for random ``W`` (2e-4 for the paper's network) and 1 when every row of every ``W_j`` is a
    multiple of ``v``. With ``v`` the top eigenvector of the primaries' second moment
    (:func:`second_moment_spectrum`) it measures stage 2's collapse: while every capsule is
    off, Algorithm 1's model term vanishes and its data term is ``W_j E[c^2 x x^T]`` (about),
    a power iteration that turns every ``W_j`` towards ``v``.
    """
    w = capsule_rows(layer).detach().double()
    return (w @ v.to(w)).pow(2).sum() / w.pow(2).sum()


def capsule_pair_similarity(layer: RoutedCaps) -> Tensor:
    """Mean over capsule pairs ``j < k`` of the similarity of what the two capsules read.

    The cosine of the Gram matrices ``W_j^T W_j`` and ``W_k^T W_k`` (``N D_in``-square;
    :func:`capsule_rows`) under the Frobenius inner product, computed without forming them:
    ``<W_j^T W_j, W_k^T W_k> = |W_j W_k^T|_F^2``. It lies in ``[0, 1]``, ignores how each
    capsule orients its output, is about ``D_out / (N D_in + D_out)`` for random ``W`` (0.0035
    for the paper's network) and 1 when every capsule reads one and the same direction.
    """
    w = capsule_rows(layer).detach().double()
    m, o = w.shape[0], w.shape[1]
    gram = w.reshape(m * o, -1) @ w.reshape(m * o, -1).T  # (M o, M o): blocks W_j W_k^T
    cross = gram.view(m, o, m, o).pow(2).sum((1, 3))  # (M, M): |W_j W_k^T|_F^2
    norm = cross.diagonal().sqrt()
    cos = cross / (norm[:, None] * norm[None, :]).clamp_min(1e-300)
    j, k = torch.triu_indices(m, m, 1)
    return cos[j, k].mean()


def spread_images(dataset: Any, n: int) -> Tensor:
    """``min(n, len(dataset))`` images spread evenly over a raw split, as the model sees them."""
    data = TransformDataset(dataset, EvalTransform())
    picks = torch.linspace(0, len(data) - 1, min(n, len(data))).long()
    return torch.stack([data[int(i)][0] for i in picks])


@torch.no_grad()
def collapse_stats(net: PoECapsNet, images: Tensor) -> dict[str, Tensor]:
    """Stage 2's collapse on fixed training images: ``W``'s alignment and the data's spectrum.

    Keys: ``w_top_share`` (:func:`top_direction_share` on the top eigenvector of the
    images' primaries' second moment), ``w_pair_similarity``
    (:func:`capsule_pair_similarity`), ``primaries_top_eig_share`` (the top eigenvalue's
    share of the trace) and ``primaries_eig_ratio`` (second eigenvalue over the first).
    """
    evals, v = second_moment_spectrum(net.primary_capsules(images))
    return {
        "w_top_share": top_direction_share(net.encoder, v),
        "w_pair_similarity": capsule_pair_similarity(net.encoder),
        "primaries_top_eig_share": evals[0] / evals.sum(),
        "primaries_eig_ratio": evals[1] / evals[0] if len(evals) > 1 else evals.new_zeros(()),
    }
