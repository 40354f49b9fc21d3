"""Training curves from a run's ``metrics.csv``: one panel per metric, train and val together.

``train_<name>`` and ``val_<name>`` share a panel (labelled ``<name>``); metrics
logged every step are drawn at fractional epochs; a ``stage`` (or ``phase``)
column marks where a multi-stage method moves on, with a dashed line in every
panel. At most four panels a row keep the figure readable at 100%.
"""

from __future__ import annotations

import csv
import itertools
import math
from collections import defaultdict
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator

from selfcaps.engine.metric_names import ELAPSED_KEY
from selfcaps.viz.images import save_figure

__all__ = ["COLUMNS_PER_ROW", "ELAPSED_KEY", "plot_against_minutes", "plot_training_curves"]

#: Panels per row of the figure.
COLUMNS_PER_ROW = 4
_PHASE_KEYS = ("stage", "phase")
_SPLITS = ("train", "val")


def _float(v: str | None) -> float | None:
    try:
        return float(v) if v not in ("", None) else None
    except ValueError:
        return None


def _epoch_positions(rows: list[dict[str, str]]) -> list[float | None]:
    """Each row's x position: its 1-based epoch, with rows within an epoch spread by step."""
    steps: dict[int, list[float]] = defaultdict(list)
    for r in rows:
        e, s = _float(r.get("epoch")), _float(r.get("step"))
        if e is not None and s is not None:
            steps[int(e)].append(s)
    xs: list[float | None] = []
    for r in rows:
        e, s = _float(r.get("epoch")), _float(r.get("step"))
        if e is None:
            xs.append(None)
            continue
        lo, hi = (min(steps[int(e)]), max(steps[int(e)])) if steps[int(e)] else (0.0, 0.0)
        frac = (s - lo) / (hi - lo) if s is not None and hi > lo else 1.0
        xs.append(int(e) - 1 + frac)  # epoch e (1-based, as metrics.csv counts) ends at x = e
    return xs


def _panels(
    rows: list[dict[str, str]], xs: list[float | None]
) -> dict[str, dict[str, tuple[list[float], list[float]]]]:
    """``{panel: {line label: (xs, ys)}}``; ``train_x`` and ``val_x`` share panel ``x``."""
    keys = sorted({k for r in rows for k, v in r.items() if v not in ("", None)})
    panels: dict[str, dict[str, tuple[list[float], list[float]]]] = {}
    for key in keys:
        if key in ("epoch", "step", ELAPSED_KEY, *_PHASE_KEYS):  # minutes: their own figure
            continue
        split, _, rest = key.partition("_")
        panel, label = (rest, split) if split in _SPLITS and rest else (key, key)
        pts = [(x, _float(r.get(key))) for r, x in zip(rows, xs, strict=True)]
        pts = [(x, y) for x, y in pts if x is not None and y is not None and math.isfinite(y)]
        if pts:
            panels.setdefault(panel, {})[label] = ([p[0] for p in pts], [p[1] for p in pts])
    return panels


def _phase_changes(rows: list[dict[str, str]]) -> tuple[str, list[tuple[float, int]]]:
    """The phase column's name and ``(x, new phase)`` where it changes between epochs."""
    for key in _PHASE_KEYS:
        by_epoch: dict[int, int] = {}
        for r in rows:
            e, v = _float(r.get("epoch")), _float(r.get(key))
            if e is not None and v is not None:
                by_epoch[int(e)] = int(v)
        epochs = sorted(by_epoch)
        changes = [
            (float(b - 1), by_epoch[b])  # epoch b (1-based) starts at x = b - 1
            for a, b in itertools.pairwise(epochs)
            if by_epoch[b] != by_epoch[a]
        ]
        if by_epoch:
            return key, changes
    return "", []


def _panel_grid(n: int) -> tuple[plt.Figure, list[plt.Axes]]:
    """A figure of ``n`` panels, at most :data:`COLUMNS_PER_ROW` a row; spare cells hidden."""
    ncols = min(COLUMNS_PER_ROW, n)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(3.1 * ncols, 2.4 * nrows + 0.4), squeeze=False, layout="constrained"
    )
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat)[:n]


def _read_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def plot_against_minutes(metrics_csv: Path | str, out: Path | str, title: str = "") -> bool:
    """Every validation metric against the run's wall-clock minutes (time to accuracy).

    The x position of a validation is its ``elapsed_min``
    (:class:`selfcaps.engine.clock.ElapsedTime`): minutes from the start of training to
    the start of that validation, summed over resumes. One panel per ``val_*`` column.

    Args:
        metrics_csv: The CSV logger's file.
        out: PNG to write.
        title: Figure title (the run).

    Returns:
        False (and writes nothing) when no validation row has ``elapsed_min``.
    """
    path = Path(metrics_csv)
    if not path.is_file():
        return False
    rows = [r for r in _read_rows(path) if _float(r.get(ELAPSED_KEY)) is not None]
    keys = sorted({k for r in rows for k, v in r.items() if k.startswith("val_") and v != ""})
    if not keys:
        return False
    fig, axes = _panel_grid(len(keys))
    for ax, key in zip(axes, keys, strict=True):
        pts = [(_float(r[ELAPSED_KEY]), _float(r.get(key))) for r in rows]
        xs = [x for x, y in pts if x is not None and y is not None and math.isfinite(y)]
        ys = [y for x, y in pts if x is not None and y is not None and math.isfinite(y)]
        ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, ms=4)
        ax.set_xlim(0, max([1.0, *xs]) * 1.05)
        ax.set_xlabel("wall-clock minutes")
        ax.set_ylabel(key.replace("_", " "))
        ax.grid(alpha=0.3)
    fig.suptitle(f"{title or 'validation'} against minutes of training", fontsize=11)
    save_figure(fig, out)
    return True


def plot_training_curves(metrics_csv: Path | str, out: Path | str, title: str = "") -> bool:
    """Plot every metric of ``metrics.csv`` against the epoch (module docstring).

    Args:
        metrics_csv: The CSV logger's file.
        out: PNG to write.
        title: Figure title (the run, e.g. ``"coca on mnist5k"``).

    Returns:
        False (and writes nothing) when the file has no metrics yet.
    """
    path = Path(metrics_csv)
    if not path.is_file():
        return False
    rows = _read_rows(path)
    xs = _epoch_positions(rows)
    panels = _panels(rows, xs)
    if not panels:
        return False
    last = max(x for x in xs if x is not None)
    phase, changes = _phase_changes(rows)
    fig, axes = _panel_grid(len(panels))
    for ax, (name, lines) in zip(axes, panels.items(), strict=True):
        for label, (lx, ly) in lines.items():
            ax.plot(lx, ly, marker="o" if len(lx) < 30 else None, ms=4, label=label)
            if len(lx) == 1:
                ax.annotate(f"{ly[0]:.4g}", (lx[0], ly[0]), textcoords="offset points",
                            xytext=(6, 4), fontsize=8)  # fmt: skip
        for x, value in changes:
            ax.axvline(x, color="0.4", ls="--", lw=1)
            ax.text(x, 1.01, f"{phase} {value}", transform=ax.get_xaxis_transform(),
                    ha="center", va="bottom", fontsize=7, color="0.3")  # fmt: skip
        ax.set_xlim(0, max(1.0, math.ceil(last)) + 0.25)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("epoch")
        ax.set_ylabel(name.replace("_", " "))
        ax.grid(alpha=0.3)
        if len(lines) > 1 or set(lines) & set(_SPLITS):
            ax.legend(fontsize=7)
    has_val = any("val" in lines for lines in panels.values())
    note = "" if has_val else " (no validation epoch in this run)"
    fig.suptitle(f"{title or 'training curves'}{note}", fontsize=11)
    save_figure(fig, out)
    return True
