"""SparseCaps' figures (Rawlinson et al. 2018, Figs. 2-5), returned as plain data.

:func:`sparsecaps_figures` builds all four from the network, a few test images and
the routing statistics of :meth:`SparseCaps.routing_statistics
<selfcaps.methods.sparsecaps.SparseCaps.routing_statistics>`, which it is given:
nothing here depends on whether the final evaluation ran.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from selfcaps.caps import caps_length
from selfcaps.models.sparsecaps import SparseCapsNet
from selfcaps.viz.figures import Figure, ImageGrid, LinePlot

__all__ = [
    "RoutingStatistics",
    "equivariance_sweep",
    "rank_frequency",
    "rank_frequency_plot",
    "ranked_support",
    "reconstructions_figure",
    "sparsecaps_figures",
    "support_plot",
]


class RoutingStatistics(NamedTuple):
    """What Figs. 3 and 4 show, over test images.

    Attributes:
        support: ``(N, L)`` routing support of ``N`` MNIST test images (Fig. 3).
        ranks: ``(N', L)`` ranks of the images of Fig. 4.
        where: What the images of Fig. 4 are ("affNIST test images").
    """

    support: Tensor
    ranks: Tensor
    where: str


def ranked_support(support: Tensor) -> Tensor:
    r"""Paper Fig. 3: each image's routing support :math:`\psi` sorted, relative to its rank 0.

    "We rank latent capsules by their aggregate routing coefficients
    :math:`\psi_j` ... The ranked values are scaled by :math:`\psi_j` of the
    capsule with rank 0", averaged over images. Unboosted support, so that a
    sparse and a dense network are compared on the routing alone.

    Args:
        support: ``(N, L)`` routing support of ``N`` images.

    Returns:
        ``(L,)``: the mean over images of the ``r``-th largest support divided by the largest.

    Examples:
        >>> ranked_support(torch.tensor([[1.0, 4.0, 2.0], [3.0, 3.0, 3.0]]))
        tensor([1.0000, 0.7500, 0.6250])
    """
    ranked = support.sort(dim=1, descending=True).values
    return (ranked / ranked[:, :1].clamp_min(1e-12)).mean(0)


def rank_frequency(ranks: Tensor) -> Tensor:
    """Paper Fig. 4: how often each capsule achieves each rank.

    Args:
        ranks: ``(N, L)`` ranks (a permutation of ``0 .. L-1`` per image).

    Returns:
        ``(L, L)``: entry ``[j, r]`` is the fraction of images in which capsule ``j``
        has rank ``r``; rows and columns sum to 1.

    Examples:
        >>> rank_frequency(torch.tensor([[0, 1], [0, 1], [1, 0]]))
        tensor([[0.6667, 0.3333],
                [0.3333, 0.6667]])
    """
    L = ranks.shape[1]
    return F.one_hot(ranks.long(), L).float().mean(0)


def support_plot(curves: dict[str, Tensor], images: int) -> LinePlot:
    """Fig. 3 as a line plot: one :func:`ranked_support` curve per network, and uniform."""
    L = next(iter(curves.values())).numel()
    xs = [float(r) for r in range(L)]
    series = {name: (xs, [float(v) for v in c]) for name, c in curves.items()}
    series["all capsules equal"] = (xs, [1.0] * L)
    return LinePlot(
        series,
        xlabel="rank of the latent capsule (0 = most routing support)",
        ylabel="support / support of rank 0",
        title=f"ranked routing support, mean over {images} test images (paper Fig. 3)",
    )


def rank_frequency_plot(freq: Tensor, what: str) -> LinePlot:
    """Fig. 4 as a line plot: one line per capsule over the ranks (:func:`rank_frequency`)."""
    L = freq.shape[0]
    xs = [float(r) for r in range(L)]
    return LinePlot(
        {f"capsule {j}": (xs, [100.0 * float(f) for f in freq[j]]) for j in range(L)},
        xlabel="rank (0 = most boosted support)",
        ylabel="% of images with this rank",
        title=f"rank frequency of each latent capsule ({what}; paper Fig. 4)",
    )


def equivariance_sweep(net: SparseCapsNet, x: Tensor, label: int) -> ImageGrid:
    """Paper Fig. 5: each parameter of the most active capsule set to -1, -0.8, ..., 1.

    The other capsules keep their values and the decoder's mask (eq. 3 for
    ``sparse``, all ones for ``dense``); the most active capsule is the one of
    rank 0 (the longest for ``supervised``) and is passed unmasked.

    Args:
        net: The network (eval mode).
        x: One image ``(C, H, W)``.
        label: Its class, for the title.
    """
    v, psi = net.encode(x.unsqueeze(0))
    ranks = net.rank(psi)
    lengths = caps_length(v)[0]
    top = int(lengths.argmax() if net.variant == "supervised" else ranks[0].argmin())
    mask = net.decoder_mask(v, ranks, None)
    mask[:, top] = 1.0
    values = torch.linspace(-1.0, 1.0, 11, device=v.device)
    D = v.shape[2]
    swept = (v * mask.unsqueeze(-1)).repeat(D * len(values), 1, 1)
    for d in range(D):
        swept[d * len(values) : (d + 1) * len(values), top, d] = values
    return ImageGrid(
        net.decode(swept).cpu(),
        nrow=len(values),
        title=(
            f"{net.variant}: capsule {top} (most active) of a test '{label}', "
            "one parameter per row set to -1.0 ... 1.0 in steps of 0.2"
        ),
        row_labels=[f"dim {d}" for d in range(D)],
    )


def reconstructions_figure(net: SparseCapsNet, x: Tensor) -> ImageGrid:
    """Paper Fig. 2: input, all capsules, each capsule alone; input, all, each left out.

    Args:
        net: The network (eval mode).
        x: Test images ``(B, C, H, W)``.
    """
    v, psi = net.encode(x)
    mask = net.decoder_mask(v, net.rank(psi), None)
    L = v.shape[1]
    eye = torch.eye(L, device=v.device)
    rows, labels = [], []
    for k in range(x.shape[0]):
        vk, mk = v[k], mask[k]
        full = net.decode((vk * mk.unsqueeze(-1)).unsqueeze(0))
        alone = net.decode(eye.unsqueeze(-1) * vk.unsqueeze(0))
        out = net.decode((1 - eye).unsqueeze(-1) * (vk * mk.unsqueeze(-1)).unsqueeze(0))
        for name, recon in (("alone", alone), ("leave-one-out", out)):
            rows.append(torch.cat([x[k : k + 1], full, recon]))
            labels.append(f"{k}: {name}")
    return ImageGrid(
        torch.cat(rows).cpu(),
        nrow=L + 2,
        title=f"{net.variant}: input | all capsules | capsule 0..{L - 1} alone (or left out)",
        row_labels=labels,
    )


@torch.no_grad()
def sparsecaps_figures(
    net: SparseCapsNet, images: Tensor, labels: Tensor, stats: RoutingStatistics
) -> dict[str, Figure]:
    """Paper Figs. 2-5 (reconstructions, routing support, rank frequency, equivariance).

    Args:
        net: The network (eval mode).
        images: A few test images through the evaluation transform (Figs. 2 and 5).
        labels: Their classes.
        stats: The routing statistics of Figs. 3 and 4.
    """
    support, ranks = stats.support, stats.ranks
    return {
        "fig2_reconstructions": reconstructions_figure(net, images),
        "fig3_routing_support": support_plot(
            {net.variant: ranked_support(support)}, support.shape[0]
        ),
        "fig4_rank_frequency": rank_frequency_plot(
            rank_frequency(ranks), f"{net.variant}, {ranks.shape[0]} {stats.where}"
        ),
        "fig5_equivariance": equivariance_sweep(net, images[0], int(labels[0])),
    }
