"""Plain-data figure specifications that methods return and ``selfcaps.viz`` renders.

Methods know what to show (reconstructions, samples, routing statistics);
the viz layer knows how to draw it. Keeping the hand-over as plain data keeps
the layers apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import Tensor

__all__ = ["BarPlot", "Figure", "ImageGrid", "LinePlot"]


@dataclass
class ImageGrid:
    """Images ``(N, C, H, W)`` in [0, 1] laid out ``nrow`` per row; optional row labels."""

    images: Tensor
    nrow: int
    title: str = ""
    row_labels: list[str] = field(default_factory=list)


@dataclass
class LinePlot:
    """Named series ``{label: (xs, ys)}`` on shared axes."""

    series: dict[str, tuple[list[float], list[float]]]
    xlabel: str = ""
    ylabel: str = ""
    title: str = ""
    logy: bool = False


@dataclass
class BarPlot:
    """Bars at ``labels``, one group per entry of ``values``, side by side."""

    values: dict[str, list[float]]
    labels: list[str]
    xlabel: str = ""
    ylabel: str = ""
    title: str = ""


Figure = ImageGrid | LinePlot | BarPlot
