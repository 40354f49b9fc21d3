"""Margin loss of capsule classifiers (Sabour et al. 2017, eq. 4)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["MarginLoss"]


class MarginLoss(nn.Module):
    r"""Margin loss on class-capsule lengths (Sabour et al. 2017, eq. 4).

    .. math::
        L_k = T_k \max(0, m^+ - \|v_k\|)^2 + \lambda (1 - T_k) \max(0, \|v_k\| - m^-)^2

    summed over classes :math:`k` and averaged over the batch; :math:`T_k = 1`
    for the target class. Used by SparseCaps' supervised baseline and EncapNet.

    Args:
        m_pos: :math:`m^+` (0.9).
        m_neg: :math:`m^-` (0.1).
        lambda_: Down-weighting of absent classes :math:`\lambda` (0.5).

    Examples:
        >>> loss = MarginLoss()(torch.tensor([[0.95, 0.05]]), torch.tensor([0]))
        >>> float(loss)
        0.0
    """

    def __init__(self, m_pos: float = 0.9, m_neg: float = 0.1, lambda_: float = 0.5) -> None:
        super().__init__()
        if not 0.0 <= m_neg < m_pos <= 1.0:
            raise ValueError(f"need 0 <= m_neg < m_pos <= 1, got m_neg={m_neg}, m_pos={m_pos}")
        self.m_pos, self.m_neg, self.lambda_ = m_pos, m_neg, lambda_

    def forward(self, lengths: Tensor, targets: Tensor) -> Tensor:
        """Loss for capsule lengths ``(B, K)`` in [0, 1] and integer targets ``(B,)``.

        Args:
            lengths: Class-capsule lengths.
            targets: Class indices.
        """
        if lengths.dim() != 2 or targets.shape != lengths.shape[:1]:
            raise ValueError(
                f"expected lengths (B, K) and targets (B,), got {tuple(lengths.shape)} "
                f"and {tuple(targets.shape)}"
            )
        # One-hot by scatter: F.one_hot reads the targets' range on the host (a sync).
        t = torch.zeros_like(lengths).scatter_(1, targets.long().unsqueeze(1), 1.0)
        present = t * torch.clamp(self.m_pos - lengths, min=0).pow(2)
        absent = self.lambda_ * (1 - t) * torch.clamp(lengths - self.m_neg, min=0).pow(2)
        return (present + absent).sum(dim=1).mean()
