"""Objectives as ``nn.Module``s."""

from selfcaps.losses.ntxent import NTXentLoss, gather_with_grad

__all__ = ["NTXentLoss", "gather_with_grad"]
