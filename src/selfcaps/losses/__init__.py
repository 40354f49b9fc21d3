"""Objectives as ``nn.Module``s."""

from selfcaps.losses.feedback import CapsuleDeconv2d, FeedbackAgreement, feature_extractor
from selfcaps.losses.margin import MarginLoss
from selfcaps.losses.ntxent import NTXentLoss, gather_with_grad
from selfcaps.losses.sinkhorn import (
    KLDivergence,
    SinkhornDivergence,
    ground_cost,
    sinkhorn_cost,
    sinkhorn_log_plan,
)

__all__ = [
    "CapsuleDeconv2d",
    "FeedbackAgreement",
    "KLDivergence",
    "MarginLoss",
    "NTXentLoss",
    "SinkhornDivergence",
    "feature_extractor",
    "gather_with_grad",
    "ground_cost",
    "sinkhorn_cost",
    "sinkhorn_log_plan",
]
