"""Objectives as ``nn.Module``s."""

from selfcaps.losses.margin import MarginLoss
from selfcaps.losses.ntxent import NTXentLoss, gather_with_grad

__all__ = ["MarginLoss", "NTXentLoss", "gather_with_grad"]
