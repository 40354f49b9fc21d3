"""Products of expert capsules trained by contrastive divergence (PoE).

The method and its own evaluation: reconstruction, selectivity, pose geometry, collapse
and the judge network.

``from selfcaps.methods.poe import PoE`` gives the LightningModule; the network is in
:mod:`selfcaps.models.poe` and the contrastive-divergence objective in
:mod:`selfcaps.losses.contrastive_divergence`.
"""

from selfcaps.methods.poe.method import PoE, stage_of, stages_completed

__all__ = ["PoE", "stage_of", "stages_completed"]
