"""Classification objectives on class probabilities (MCAE's finetuning)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["class_nll"]


def class_nll(probs: Tensor, target: Tensor, eps: float = 1e-8) -> Tensor:
    r"""Cross-entropy of class probabilities ``(B, K)``: ``mean_b -log(probs[b, y_b])``.

    MCAE's finetuning loss (Everett et al. 2025, eq. 5):
    :math:`CE = -\sum_i \sum_c y_{ic} \log \hat y_{ic}` with :math:`\hat y_{ic}` the
    position-averaged activation of class capsule ``c``, here averaged over the batch
    (not summed) and with the probabilities floored at ``eps``.

    Examples:
        >>> float(class_nll(torch.tensor([[0.5, 0.5]]), torch.tensor([0])))
        0.6931471824645996
    """
    return F.nll_loss(torch.log(probs.clamp_min(eps)), target)
