"""The figures of products of expert capsules: samples per capsule (Fig. 2), reconstructions."""

from __future__ import annotations

from typing import Any

import torch

from selfcaps.methods.poe.reconstruction import reconstructions
from selfcaps.models.poe import PoECapsNet
from selfcaps.viz.figures import Figure, ImageGrid, capsule_columns

__all__ = ["poe_figures"]


@torch.no_grad()
def poe_figures(
    net: PoECapsNet, samples: Any, test: Any, device: torch.device
) -> dict[str, Figure]:
    """Samples per capsule (Fig. 2), restricted-domain samples, reconstructions.

    Args:
        net: The trained network.
        samples: The ``samples`` section (``rows``, ``seed``).
        test: The test split through the evaluation transform (10 images spread over it
            are reconstructed).
        device: Where ``net`` is.
    """
    figs: dict[str, Figure] = {
        "samples": capsule_columns(
            net.sample_grid(int(samples.rows), int(samples.seed)), net.num_caps, "samples"
        )
    }
    if net.hemisphere_measured:
        grid = net.sample_grid(int(samples.rows), int(samples.seed), restricted=True)
        figs["samples_restricted"] = capsule_columns(
            grid, net.num_caps, "restricted-domain samples"
        )
    picks = torch.linspace(0, len(test) - 1, min(10, len(test))).long().tolist()
    x = torch.stack([test[i][0] for i in picks]).to(device)
    rows = [x, *reconstructions(net, x)[0]]
    figs["reconstructions"] = ImageGrid(
        torch.cat(rows).cpu(),
        nrow=x.shape[0],
        title="test images | autoencoder | through W and W^T | through W and U",
        row_labels=["data", "AE", "W, W^T", "W, U"],
    )
    return figs
