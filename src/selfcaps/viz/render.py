"""Render the figure specifications of :mod:`selfcaps.methods.figures` to PNG files."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from selfcaps.methods.figures import BarPlot, Figure, ImageGrid, LinePlot
from selfcaps.viz.images import save_figure, save_image_grid

__all__ = ["render_figure"]


def _labelled_grid(spec: ImageGrid, out: Path) -> None:
    from torchvision.utils import make_grid

    grid = make_grid(
        spec.images.detach().float().cpu().clamp(0, 1), nrow=spec.nrow, padding=2, pad_value=1.0
    )
    fig, ax = plt.subplots(figsize=(max(4.0, grid.shape[2] / 40), max(2.0, grid.shape[1] / 40)))
    ax.imshow(grid.permute(1, 2, 0).numpy(), interpolation="nearest")
    ax.set_xticks([])
    rows = len(spec.row_labels)
    if rows:
        h = grid.shape[1] / rows
        ax.set_yticks([h * (i + 0.5) for i in range(rows)], spec.row_labels, fontsize=7)
    else:
        ax.set_yticks([])
    if spec.title:
        ax.set_title(spec.title, fontsize=9)
    save_figure(fig, out)


def render_figure(spec: Figure, out: Path | str) -> None:
    """Draw one figure specification to ``out`` (PNG, written atomically).

    Args:
        spec: An :class:`ImageGrid`, :class:`LinePlot` or :class:`BarPlot`.
        out: Target file.
    """
    out = Path(out)
    if isinstance(spec, ImageGrid):
        if spec.row_labels or spec.title:
            _labelled_grid(spec, out)
        else:
            save_image_grid(spec.images, out, nrow=spec.nrow)
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
