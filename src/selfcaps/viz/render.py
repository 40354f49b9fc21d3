"""Render the figure specifications of :mod:`selfcaps.viz.figures` to PNG files."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from selfcaps.viz.figures import BarPlot, Figure, ImageGrid, LinePlot
from selfcaps.viz.images import save_figure

__all__ = ["render_figure"]


#: Largest size a grid is enlarged to, in pixels, and how far its images are enlarged at most.
MAX_GRID_WIDTH = 1400
MAX_GRID_HEIGHT = 1000
MAX_ZOOM = 3.0
_DPI = 100


def _grid_figure(spec: ImageGrid, out: Path) -> None:
    """A titled grid, enlarged (at most 3x) to fit 1400 x 1000 pixels, labels at the sides."""
    from matplotlib.patches import Rectangle
    from torchvision.utils import make_grid

    pad = 2
    grid = make_grid(
        spec.images.detach().float().cpu().clamp(0, 1), nrow=spec.nrow, padding=pad, pad_value=1.0
    )
    h, w = grid.shape[1:]
    zoom = max(1.0, min(MAX_ZOOM, MAX_GRID_WIDTH / w, MAX_GRID_HEIGHT / h))
    fig, ax = plt.subplots(figsize=(w * zoom / _DPI, h * zoom / _DPI), dpi=_DPI)
    ax.imshow(grid.permute(1, 2, 0).numpy(), interpolation="nearest")
    cell_h, cell_w = spec.images.shape[2] + pad, spec.images.shape[3] + pad
    centre = pad / 2 + 0.5
    if spec.row_labels:
        ax.set_yticks([cell_h * (i + 0.5) + centre - 1 for i in range(len(spec.row_labels))])
        ax.set_yticklabels(spec.row_labels, fontsize=8)
    else:
        ax.set_yticks([])
    if spec.col_labels:
        ax.set_xticks([cell_w * (i + 0.5) + centre - 1 for i in range(len(spec.col_labels))])
        ax.set_xticklabels(spec.col_labels, fontsize=8)
        ax.xaxis.tick_top()
    else:
        ax.set_xticks([])
    if spec.highlight_col is not None:
        ax.add_patch(
            Rectangle(
                (spec.highlight_col * cell_w, 0), cell_w + pad / 2, h - 1,
                fill=False, edgecolor="tab:red", linewidth=2,
            )
        )  # fmt: skip
    if spec.xlabel:
        ax.set_xlabel(spec.xlabel, fontsize=9)
    ax.set_title(spec.title or f"{len(spec.images)} images", fontsize=10)
    save_figure(fig, out, dpi=_DPI)


def render_figure(spec: Figure, out: Path | str) -> None:
    """Draw one figure specification to ``out`` (PNG, written atomically).

    Args:
        spec: An :class:`ImageGrid`, :class:`LinePlot` or :class:`BarPlot`.
        out: Target file.
    """
    out = Path(out)
    if isinstance(spec, ImageGrid):
        _grid_figure(spec, out)
        return
    fig, ax = plt.subplots(figsize=(6, 3.5))
    if isinstance(spec, LinePlot):
        for label, (xs, ys) in spec.series.items():
            ax.plot(xs, ys, marker="o", ms=3, label=label)
        if spec.logy:
            ax.set_yscale("log")
    elif isinstance(spec, BarPlot):
        groups = list(spec.values.items())
        width = 0.8 / max(len(groups), 1)
        x = np.arange(len(spec.labels))
        for i, (label, vals) in enumerate(groups):
            ax.bar(x + i * width - 0.4 + width / 2, vals, width=width, label=label)
        ax.set_xticks(x, spec.labels, fontsize=7)
    else:  # pragma: no cover - guarded by the type
        raise TypeError(f"unknown figure specification {type(spec).__name__}")
    ax.set_xlabel(spec.xlabel)
    ax.set_ylabel(spec.ylabel)
    ax.set_title(spec.title)
    ax.grid(alpha=0.3)
    if len(getattr(spec, "series", getattr(spec, "values", {}))) > 1:
        ax.legend(fontsize=7)
    save_figure(fig, out)
