"""Names of ``metrics.csv`` columns that the training writes and the figures read.

Torch-free, so that both :mod:`selfcaps.methods` (which logs them) and
:mod:`selfcaps.viz` (which plots them) import the name from here, the layer above both.
"""

from __future__ import annotations

__all__ = ["ELAPSED_KEY"]

#: The ``metrics.csv`` column of wall-clock minutes (:class:`selfcaps.engine.clock.ElapsedTime`).
ELAPSED_KEY = "elapsed_min"
