"""Reconstruction objectives: SparseCaps' summed pixel error, MCAE's masked-patch MSE."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import Tensor

from selfcaps.caps.chunking import cpu_path

if TYPE_CHECKING:
    from selfcaps.models.mcae import MaskedReconstruction

__all__ = ["masked_patch_mse", "reconstruction_loss", "squared_error_per_image"]


def squared_error_per_image(recon: Tensor, target: Tensor) -> Tensor:
    r"""Each image's sum of squared pixel errors :math:`\lVert \hat x_b - x_b \rVert^2`, ``(B,)``.

    The term :func:`reconstruction_loss` averages; SparseCaps' evaluation reports it per image.

    Examples:
        >>> import torch
        >>> squared_error_per_image(torch.zeros(2, 1, 2, 2), torch.ones(2, 1, 2, 2))
        tensor([4., 4.])
    """
    return (recon - target).pow(2).flatten(1).sum(1)


def reconstruction_loss(recon: Tensor, target: Tensor) -> Tensor:
    r"""Sum of squared pixel errors per image, averaged over the batch (SparseCaps' loss).

    .. math::
        \mathcal L = \frac{1}{B} \sum_{b=1}^{B} \lVert \hat x_b - x_b \rVert^2

    Rawlinson et al. 2018 number no equation for it (their eqs. 1-7 are the mask and the
    boosting); it is SUPCAPS' reconstruction loss (Sabour et al. 2017) without the
    0.0005 weight, and the scale of the paper's "batch mean square error is 7.75 and
    18.49 on MNIST and affNIST" (section 3.5) is that of a per-image sum.

    Examples:
        >>> import torch
        >>> reconstruction_loss(torch.zeros(2, 1, 2, 2), torch.ones(2, 1, 2, 2))
        tensor(4.)
    """
    return squared_error_per_image(recon, target).mean()


def masked_patch_mse(out: MaskedReconstruction, masked_only: bool = True) -> Tensor:
    r"""Mean squared error per pixel over the masked patches (MCAE, eq. 4), or all patches.

    .. math::
        \mathcal L = \frac{1}{|M|\,P} \sum_{(b,l) \in M} \lVert \hat x_{b,l} - x_{b,l} \rVert^2

    with ``M`` the masked positions of the batch (every position when
    ``masked_only`` is False: the ablation of the paper's Table 3) and ``P``
    pixels per patch. Visible patches then take no part in the loss: neither
    their predictions nor their pixels receive a gradient from it.

    Args:
        out: Predictions, targets and mask from
            :meth:`selfcaps.models.mcae.MCAENet.forward_pretrain`.
        masked_only: Average over the masked patches only.
    """
    err = (out.pred - out.target).pow(2).mean(dim=-1)  # (B, L)
    if not masked_only:
        return err.mean()
    if not cpu_path(err):  # no boolean indexing (a host read) on an accelerator
        return (err * out.mask).sum() / out.mask.sum().clamp_min(1)
    return err[out.mask].sum() / out.mask.sum().clamp_min(1)
