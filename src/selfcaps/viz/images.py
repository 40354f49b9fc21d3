"""Writing figures and image grids atomically."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import torch
from torchvision.utils import make_grid

from selfcaps.engine.checkpoints import atomic_write_bytes

__all__ = ["denormalize", "save_figure", "save_image_grid"]


def denormalize(x: torch.Tensor, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    """Undo ``Normalize(mean, std)`` on ``(B, C, H, W)`` images and clamp to [0, 1]."""
    m = torch.tensor(mean, dtype=x.dtype, device=x.device).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=x.dtype, device=x.device).view(1, -1, 1, 1)
    return (x * s + m).clamp(0, 1)


def save_figure(fig: plt.Figure, path: Path | str, dpi: int = 120) -> None:
    """Save a matplotlib figure as PNG atomically and close it."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def save_image_grid(images: torch.Tensor, path: Path | str, nrow: int, padding: int = 2) -> None:
    """Save ``(N, C, H, W)`` images in [0, 1] as a PNG grid with ``nrow`` images per row."""
    from PIL import Image

    grid = make_grid(
        images.detach().float().cpu().clamp(0, 1), nrow=nrow, padding=padding, pad_value=1.0
    )
    arr = (grid.permute(1, 2, 0) * 255).round().to(torch.uint8).numpy()
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    atomic_write_bytes(path, buf.getvalue())
