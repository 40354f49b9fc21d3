"""What products of expert capsules reconstruct: pixel errors, free energies, spread.

Validation (``val_select``) and the final evaluation read these on batches of the
validation and test splits, at most ``eval.max_images`` images each.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

from selfcaps.losses.contrastive_divergence import CDChain, cd_chain, free_energies
from selfcaps.models.poe import PoECapsNet

__all__ = [
    "capped_batches",
    "first_images",
    "mean_reconstruction_stats",
    "reconstruction_stats",
    "reconstructions",
]


@torch.no_grad()
def reconstruction_stats(net: PoECapsNet, x: Tensor) -> dict[str, Tensor]:
    """Batch means: pixel MSEs of the three reconstructions, free energies and their gap.

    Keys: ``recon_ae_mse``, ``recon_encoder_mse`` (through W and its transpose with the
    data's ``c``), ``recon_caps_mse`` (through W and U: the generative path),
    ``free_energy_data``, ``free_energy_recon`` and ``free_energy_gap`` (Algorithm 1's
    one-step reconstruction), and ``recon_caps_spread``: how much the reconstructions
    through W and U vary across the batch's images, relative to the images themselves
    (per-pixel standard deviation over the batch, averaged over pixels, as a ratio). 0
    means every input gets the same reconstruction: the capsules carry nothing of the
    input, whatever ``recon_caps_mse`` says. ``caps_length``: the mean length of the 20
    capsules (the probability that a capsule is on); ``caps_length_spread``: the standard
    deviation of each capsule's length over the batch's images, averaged over capsules
    (0: every capsule is as much on for every input, so none can stand for one object).
    """
    images, chain = reconstructions(net, x)
    data_spread = x.std(0, unbiased=False).mean()  # 0 for one image (no NaN: unbiased=False)
    lengths = chain.y.norm(dim=-1)  # (B, M)
    return {
        "recon_ae_mse": (images[0] - x).pow(2).mean(),
        "recon_encoder_mse": (images[1] - x).pow(2).mean(),
        "recon_caps_mse": (images[2] - x).pow(2).mean(),
        "recon_caps_spread": images[2].std(0, unbiased=False).mean() / data_spread.clamp_min(1e-12),
        "caps_length": lengths.mean(),
        "caps_length_spread": lengths.std(0, unbiased=False).mean(),
        **free_energies(chain),
    }


def reconstructions(net: PoECapsNet, x: Tensor) -> tuple[tuple[Tensor, Tensor, Tensor], CDChain]:
    """Images by the autoencoder, through ``W`` and ``W^T``, through ``W`` and ``U``; the chain."""
    code = net.ae.encode(x)
    chain = cd_chain(net.encoder, net.code_to_capsules(code))
    images = (
        net.ae.decode(code),
        net.ae.decode(net.capsules_to_code(chain.x_rec)),
        net.decode_capsules(chain.y),
    )
    return images, chain


def first_images(x: Tensor, start: int, cfg: Any) -> Tensor | None:
    """The part of a batch starting at image ``start`` that lies within ``eval.max_images``."""
    limit = cfg.eval.max_images
    if limit is None:
        return x
    keep = int(limit) - start
    return x[:keep] if keep > 0 else None


def capped_batches(loader: Any, cfg: Any) -> Iterator[tuple[Tensor, Tensor]]:
    """A labelled loader's batches ``(x, y)`` cut to its first ``eval.max_images`` images."""
    n = 0
    for batch, y in loader:
        x = first_images(batch, n, cfg)
        if x is None:
            return
        yield x, y[: x.shape[0]]
        n += x.shape[0]


def mean_reconstruction_stats(net: PoECapsNet, loader: Any, cfg: Any) -> dict[str, float]:
    """:func:`reconstruction_stats` averaged over a loader's first ``eval.max_images`` images."""
    device = next(net.parameters()).device
    sums: dict[str, float] = {}
    n = 0
    for x, _ in capped_batches(loader, cfg):
        stats = reconstruction_stats(net, x.to(device))
        for k, v in stats.items():
            sums[k] = sums.get(k, 0.0) + float(v) * x.shape[0]
        n += x.shape[0]
    return {k: v / max(n, 1) for k, v in sums.items()}
