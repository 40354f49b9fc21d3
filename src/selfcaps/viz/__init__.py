"""Figures: what a person would rather look at than read."""

from selfcaps.viz.curves import plot_against_minutes, plot_training_curves
from selfcaps.viz.images import denormalize, save_figure, save_image_grid
from selfcaps.viz.render import render_figure

__all__ = [
    "denormalize",
    "plot_against_minutes",
    "plot_training_curves",
    "render_figure",
    "save_figure",
    "save_image_grid",
]
