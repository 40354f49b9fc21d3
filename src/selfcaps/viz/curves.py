"""Training curves from a run's ``metrics.csv``."""

from __future__ import annotations

import csv
from pathlib import Path

import matplotlib.pyplot as plt

from selfcaps.viz.images import save_figure

__all__ = ["plot_training_curves"]


def _series(rows: list[dict[str, str]], key: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for r in rows:
        if r.get(key, "") not in ("", None) and r.get("epoch", "") not in ("", None):
            xs.append(float(r["epoch"]) + 1)
            ys.append(float(r[key]))
    return xs, ys


def plot_training_curves(metrics_csv: Path | str, out: Path | str, title: str = "") -> bool:
    """Plot every per-epoch metric of ``metrics.csv`` against the epoch, one panel each.

    Args:
        metrics_csv: The CSV logger's file.
        out: PNG to write.
        title: Figure title.

    Returns:
        False (and writes nothing) when the file has no per-epoch metrics yet.
    """
    path = Path(metrics_csv)
    if not path.is_file():
        return False
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    keys = sorted({k for r in rows for k, v in r.items() if v and k not in ("epoch", "step")})
    series = {k: _series(rows, k) for k in keys}
    series = {k: v for k, v in series.items() if v[0]}
    if not series:
        return False
    fig, axes = plt.subplots(1, len(series), figsize=(4 * len(series), 3), squeeze=False)
    for ax, (k, (xs, ys)) in zip(axes[0], series.items(), strict=True):
        ax.plot(xs, ys, marker="o", ms=3)
        ax.set_xlabel("epoch")
        ax.set_title(k)
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    save_figure(fig, out)
    return True
