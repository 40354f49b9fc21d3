"""Every figure a run writes is titled and fits a laptop screen at 100%: size and aspect ratio."""

import csv

import pytest
import torch
from PIL import Image

from selfcaps.viz import plot_training_curves, render_figure
from selfcaps.viz.curves import _panels, _phase_changes
from selfcaps.viz.figures import BarPlot, ImageGrid, LinePlot, capsule_columns

BAR_LABELS = [str(i) for i in range(32)]
MAX_W, MAX_H = 1600, 1600  # pixels: a laptop screen at 100% wide; tall figures scroll


def _size(path):
    with Image.open(path) as im:
        return im.size


def _check(path, max_aspect=4.0):
    w, h = _size(path)
    assert 250 <= w <= MAX_W and 150 <= h <= MAX_H, (w, h)
    assert 1 / max_aspect <= w / h <= max_aspect, (w, h)


def _write_csv(path, rows):
    keys = sorted({k for r in rows for k in r})
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)


def _poe_like_rows(epochs=6, metrics=8):
    rows = []
    for e in range(epochs):  # metrics.csv counts epochs from 1
        rows.append({"epoch": e + 1, "step": 10 * e + 9, "stage": 1 + e // 2,
                     **{f"train_m{j}": e + j for j in range(metrics)}})  # fmt: skip
        rows.append({"epoch": e + 1, "step": 10 * e + 9,
                     **{f"val_m{j}": e - j for j in range(metrics)},
                     "val_select": 1.0 / (e + 1)})  # fmt: skip
    return rows


def test_curves_of_many_metrics_wrap_at_four_panels_a_row(tmp_path):
    _write_csv(tmp_path / "m.csv", _poe_like_rows(metrics=16))  # 17 panels, as PoE logs
    assert plot_training_curves(tmp_path / "m.csv", tmp_path / "c.png", title="poe on mnist5k")
    w, h = _size(tmp_path / "c.png")
    _check(tmp_path / "c.png")
    assert h > w / 2  # 5 rows of 4, not one strip of 17


def test_one_epoch_curves_are_a_readable_small_figure(tmp_path):
    _write_csv(tmp_path / "m.csv", [{"epoch": 1, "step": 27, "train_loss": 5.25}])
    assert plot_training_curves(tmp_path / "m.csv", tmp_path / "c.png", title="coca")
    _check(tmp_path / "c.png", max_aspect=2.0)


def test_train_and_val_share_a_panel_and_stages_are_found():
    rows = [{k: str(v) for k, v in r.items()} for r in _poe_like_rows(epochs=6, metrics=2)]
    xs = [float(r["epoch"]) for r in rows]  # metrics.csv counts epochs from 1
    panels = _panels(rows, xs)
    assert sorted(panels) == ["m0", "m1", "select"]
    assert sorted(panels["m0"]) == ["train", "val"] and list(panels["select"]) == ["val"]
    assert _phase_changes(rows) == ("stage", [(2.0, 2), (4.0, 3)])  # epochs 1-2, 3-4, 5-6


@pytest.mark.parametrize(
    ("spec", "max_aspect"),
    [
        (capsule_columns(torch.rand(4 * 20, 1, 28, 28), 20, "samples"), 4.0),  # PoE Fig. 2
        (
            ImageGrid(
                torch.rand(72, 3, 32, 32),
                9,
                "retrieval",
                col_labels=list("q12345678"),
                highlight_col=0,
            ),
            2.0,
        ),
        (
            ImageGrid(
                torch.rand(16 * 11, 1, 40, 40),
                11,
                "equivariance",
                row_labels=[f"dim {d}" for d in range(16)],
            ),
            2.0,
        ),
        (
            ImageGrid(
                torch.rand(8 * 34, 1, 40, 40),
                34,
                "reconstructions",
                row_labels=[str(i) for i in range(8)],
            ),
            4.0,
        ),
        (LinePlot({"a": ([0, 1, 2], [1, 2, 3])}, "x", "y", "line"), 3.0),
        (BarPlot({"a": [1.0] * 32, "b": [2.0] * 32}, BAR_LABELS, "x", "y", "bars"), 3.0),
    ],
)
def test_rendered_figures_fit_the_screen(spec, max_aspect, tmp_path):
    render_figure(spec, tmp_path / "f.png")
    _check(tmp_path / "f.png", max_aspect)
