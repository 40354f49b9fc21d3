"""What a run prints: bars on stderr, results on stdout, one epoch numbering everywhere."""

import csv
import json

import pytest

from tests.runs import run_cli

#: A CoCa run of a few seconds with its progress bar on: 7 steps an epoch, validation
#: after the first, stopped by the step budget in the second.
_ARGS = ["--batch-size", "32", "--threads", "1", "data.train_subset=256",
         "data.eval_batch_size=256", "monitor.knn_every_n_epochs=1", "monitor.knn_k=10",
         "eval.knn_k=10", "eval.baselines=false", "--max-steps", "9"]  # fmt: skip


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished run directory and its process (stdout and stderr apart, as `> log`)."""
    run = tmp_path_factory.mktemp("coca") / "run"
    done = run_cli("run", "coca", *_ARGS, "--out", str(run))
    assert done.returncode == 0, done.stderr[-3000:]
    return run, done


@pytest.mark.slow
def test_stdout_has_the_summary_and_no_progress_bar(finished):
    run, done = finished
    # `selfcaps run coca > log`: the log holds readable lines only
    assert "\r" not in done.stdout, done.stdout
    assert "evaluated checkpoint:" in done.stdout and "Epoch 1/16" not in done.stdout
    assert "Epoch 1/16" in done.stderr  # the bar is drawn, on stderr
    # one epoch numbering: metrics.csv, metrics.json and the console count from 1
    with open(run / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    validated = [r["epoch"] for r in rows if r.get("val_knn_top1")]
    assert validated == ["1"], rows
    assert {r["epoch"] for r in rows} == {"1", "2"}  # 7 steps of epoch 1, 2 of epoch 2
    m = json.loads((run / "metrics.json").read_text())
    assert m["best_epoch"] == 1 and m["best_checkpoint"] == "max val_knn_top1 (epoch 1)"
    assert "(epoch 1)" in done.stdout


@pytest.mark.slow
def test_eval_says_where_it_wrote_and_what_the_digest_is(finished, capsys):
    from selfcaps.cli import main

    run, _ = finished
    assert main(["eval", str(run), "--protocol", "knn", "--no-progress"]) == 0
    out = capsys.readouterr().out
    m = json.loads((run / "metrics.json").read_text())
    digest = m["eval_knn_backbone_weights"]
    assert f"written to {run / 'metrics.json'}: 7 keys merged into the run's metrics" in out, out
    assert f"weights {digest} (the first digits of their SHA-256" in out, out
    assert "eval_knn_backbone_weights" not in out  # no bare key and hash
    assert f"knn_top1_backbone  {m['knn_top1_backbone']:.2f}" in out
