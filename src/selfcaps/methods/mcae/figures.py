"""MCAE's reconstruction figure: masked input, reconstruction, original."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from selfcaps.data.datamodule import mix_seed
from selfcaps.viz.figures import ImageGrid

__all__ = ["displayable", "reconstruction_figure"]


@torch.no_grad()
def reconstruction_figure(method: Any, dm: Any, n: int = 8) -> ImageGrid:
    """Validation images: masked input, reconstruction (visible patches pasted), original.

    Args:
        method: An :class:`~selfcaps.methods.mcae.MCAE` (put in eval mode for the figure).
        dm: The run's data module.
        n: How many validation images (spread over the split).
    """
    _, eval_tf = method.build_transforms()
    val = dm.split("val")
    idx = torch.linspace(0, len(val) - 1, min(n, len(val))).long().tolist()
    x = torch.stack([eval_tf(val[i][0]) for i in idx]).to(method.device)
    was = method.training
    method.eval()
    try:
        g = torch.Generator(device=x.device).manual_seed(mix_seed(method.cfg.seed, 0xF16))
        masked, recon = method.mcae.reconstruct(method.mcae.forward_pretrain(x, generator=g))
    finally:
        method.train(was)
    # Reconstructions are in the target's space: the input's (normalised, or smallNORB's
    # standardised) or pixel values.
    smallnorb = str(method.cfg.data.name).startswith("smallnorb")
    input_space = method.mcae.target == "normalized" or smallnorb
    info = method.info
    rows = [displayable(t, x, input_space, smallnorb, info.mean, info.std) for t in (masked, recon)]
    rows.append(displayable(x, x, True, smallnorb, info.mean, info.std))
    return ImageGrid(
        torch.cat(rows).cpu(),
        nrow=len(idx),
        title=f"MCAE, {method.cfg.model.mask_ratio:.0%} of patches masked (validation images)",
        row_labels=["masked input", "reconstruction", "original"],
    )


def displayable(
    t: Tensor,
    original: Tensor,
    normalized: bool,
    smallnorb: bool,
    mean: tuple[float, ...],
    std: tuple[float, ...],
) -> Tensor:
    """Images in ``[0, 1]``: undo the input's normalisation, or clamp pixel values.

    With ``normalized`` the normalisation (``mean``, ``std``) is undone (``smallnorb``:
    standardised per image, so mapped to the original's range); otherwise ``t`` holds
    pixel values and is clamped.
    """
    if not normalized:
        return t.clamp(0, 1)
    if smallnorb:
        lo = original.amin(dim=(1, 2, 3), keepdim=True)
        hi = original.amax(dim=(1, 2, 3), keepdim=True)
        return ((t - lo) / (hi - lo).clamp_min(1e-8)).clamp(0, 1)
    m = torch.tensor(mean, device=t.device).view(1, -1, 1, 1)
    s = torch.tensor(std, device=t.device).view(1, -1, 1, 1)
    return (t * s + m).clamp(0, 1)
