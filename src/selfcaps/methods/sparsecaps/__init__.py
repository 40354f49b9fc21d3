"""Sparse unsupervised capsules (SparseCaps): the method, its SVM protocols and its figures.

``from selfcaps.methods.sparsecaps import SparseCaps`` gives the LightningModule; the
network is in :mod:`selfcaps.models.sparsecaps`.
"""

from selfcaps.methods.sparsecaps.method import CanvasTransform, SparseCaps

__all__ = ["CanvasTransform", "SparseCaps"]
