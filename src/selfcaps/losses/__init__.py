"""Objectives as ``nn.Module``s and functions, importable without Lightning.

Each cites the paper's equation it implements: NT-Xent (CoCa), the margin loss
(SparseCaps' supervised baseline, EncapNet), the feedback agreement units and the
Sinkhorn divergence (EncapNet), the reconstruction losses (SparseCaps, MCAE), the
class-probability cross-entropy (MCAE's finetuning) and the contrastive-divergence
updates of products of expert capsules (PoE).
"""

from selfcaps.losses.classification import class_nll
from selfcaps.losses.contrastive_divergence import (
    CDChain,
    cd_chain,
    data_term,
    decoder_cd_update,
    decoder_reconstruction_update,
    encoder_cd_terms,
    encoder_cd_update,
    free_energies,
    log_marginal,
    sparsity_term,
)
from selfcaps.losses.feedback import CapsuleDeconv2d, FeedbackAgreement, feature_extractor
from selfcaps.losses.margin import MarginLoss
from selfcaps.losses.ntxent import NTXentLoss, gather_with_grad
from selfcaps.losses.reconstruction import (
    masked_patch_mse,
    reconstruction_loss,
    squared_error_per_image,
)
from selfcaps.losses.sinkhorn import (
    KLDivergence,
    SinkhornDivergence,
    ground_cost,
    sinkhorn_cost,
    sinkhorn_log_plan,
)

__all__ = [
    "CDChain",
    "CapsuleDeconv2d",
    "FeedbackAgreement",
    "KLDivergence",
    "MarginLoss",
    "NTXentLoss",
    "SinkhornDivergence",
    "cd_chain",
    "class_nll",
    "data_term",
    "decoder_cd_update",
    "decoder_reconstruction_update",
    "encoder_cd_terms",
    "encoder_cd_update",
    "feature_extractor",
    "free_energies",
    "gather_with_grad",
    "ground_cost",
    "log_marginal",
    "masked_patch_mse",
    "reconstruction_loss",
    "sinkhorn_cost",
    "sinkhorn_log_plan",
    "sparsity_term",
    "squared_error_per_image",
]
