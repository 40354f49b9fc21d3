"""Masked capsule autoencoders (MCAE): pretraining, supervised finetuning and figures.

``from selfcaps.methods.mcae import MCAE`` gives the LightningModule; the network is in
:mod:`selfcaps.models.mcae`.
"""

from selfcaps.methods.mcae.method import MCAE

__all__ = ["MCAE"]
