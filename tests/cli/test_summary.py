"""The end-of-run summary is a few lines however many metrics a run writes."""

from pathlib import Path

from selfcaps.cli.summary import format_summary


def test_summary_shows_headline_and_notes_not_every_metric():
    metrics = {f"purity_capsule_{j:02d}": 50.0 + j for j in range(60)}
    metrics |= {"method": "poe", "dataset": "mnist5k", "purity_mean": 61.25,
                "purity_mean_untrained": 99.5, "stages_completed": 3, "epochs_trained": 6,
                "train_time_s": 90.0, "best_checkpoint": "last"}  # fmt: skip
    text = format_summary(
        metrics,
        Path("runs/poe"),
        "class purity",
        {"top1": "purity_mean", "top5": None, "random_init": "purity_mean_untrained"},
        {"stages completed": "stages_completed", "absent note": "no_such_key"},
    )
    lines = text.strip().splitlines()
    assert len(lines) == 6, text
    assert "class purity                 61.25" in text
    assert "baseline: untrained network  99.50" in text
    assert "stages completed             3" in text
    assert "purity_capsule" not in text and "absent note" not in text
    assert "trained 6 epochs in 1.5 min" in text and "runs/poe/metrics.json" in text
