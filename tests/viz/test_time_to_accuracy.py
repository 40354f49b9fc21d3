"""Validation metrics against wall-clock minutes: the column, its count over resumes, the figure."""

import time

from PIL import Image

from selfcaps.engine.clock import ElapsedTime
from selfcaps.viz import plot_against_minutes


def test_the_count_continues_from_a_checkpoint():
    clock = ElapsedTime()
    clock.load_state_dict({"seconds": 120.0})  # a checkpoint written after 2 minutes
    clock.on_train_start(None, None)  # type: ignore[arg-type]
    time.sleep(0.01)
    s = clock.seconds()
    assert 120.0 < s < 130.0
    assert clock.state_dict()["seconds"] >= s  # the next checkpoint carries it on


def test_figure_plots_each_validation_metric_against_minutes(tmp_path):
    csv = tmp_path / "metrics.csv"
    csv.write_text(
        "epoch,step,train_loss,val_knn_top1,val_knn_top5,elapsed_min\n"
        "0,9,2.0,,,\n"
        "0,9,,40.0,80.0,1.5\n"
        "1,19,1.5,,,\n"
        "1,19,,55.0,90.0,3.25\n"
    )
    out = tmp_path / "time_to_accuracy.png"
    assert plot_against_minutes(csv, out, title="coca on mnist5k")
    w, h = Image.open(out).size
    assert w > 2 * 200 and h > 150  # two panels side by side


def test_no_figure_without_the_minutes(tmp_path):
    csv = tmp_path / "metrics.csv"
    csv.write_text("epoch,step,train_loss,val_knn_top1\n0,9,2.0,\n0,9,,40.0\n")
    out = tmp_path / "time_to_accuracy.png"
    assert not plot_against_minutes(csv, out)
    assert not out.exists()
    assert not plot_against_minutes(tmp_path / "missing.csv", out)
