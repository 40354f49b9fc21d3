"""Real SIGKILLs at named points and budgets that stop training, then ``--resume``.

The final weights (``model.safetensors`` and ``last.ckpt``), ``metrics.json`` and
``metrics.csv`` must equal an uninterrupted run's bit for bit (``--deterministic``, CPU).
The reference is a CoCa run with a step budget that ends in the middle of an epoch and
an epoch-interval cosine schedule, the case where Lightning's own ``max_steps`` made a
resumed run count an extra step and diverge (issue 14).
"""

import json

import pytest

from selfcaps.cli import main
from selfcaps.engine.checkpoints import load_checkpoint
from tests.reliability.resume_helpers import ARGS, assert_same_run, resume, resume_at
from tests.runs import run_killed_at


@pytest.mark.slow
def test_killed_mid_epoch_in_validation_and_in_final_evaluation(reference, tmp_path):
    """Three kills in one run, each followed by --resume; the last resume finishes it."""
    run = tmp_path / "run"
    # After the 11th batch: in epoch 1, after last.ckpt of epoch 0 (the case).
    run_killed_at("train_batch", 11, *ARGS, "--out", str(run))
    assert resume_at(run) == [1, 0] and not (run / "metrics.json").exists()
    # In epoch 1's validation (bank: 1 batch, validation split: 2 batches).
    run_killed_at("val_batch", 2, "run", "coca", "--out", str(run), "--resume")
    assert resume_at(run) == [1, 0]
    # Training is over (step 20, in epoch 2): killed as the final evaluation starts.
    run_killed_at("evaluate", 1, "run", "coca", "--out", str(run), "--resume")
    assert resume_at(run) == [2, 4] and not (run / "metrics.json").exists()
    resume(run)
    assert_same_run(reference, run)


@pytest.mark.slow
def test_step_and_time_budgets_stop_mid_epoch_and_resume_exactly(reference, tmp_path, capsys):
    """--max-steps 5, then --max-time that ends after one batch, then the rest."""
    run = tmp_path / "run"
    assert main([*ARGS, "--max-steps", "5", "--out", str(run)]) == 0
    m = json.loads((run / "metrics.json").read_text())
    assert (m["stopped_by"], m["steps"], m["epochs_trained"], m["epochs_planned"]) == (
        "max_steps",
        5,
        0,
        3,
    )
    assert "stopped early by --max-steps" in capsys.readouterr().out
    assert resume_at(run) == [0, 5]
    saved = load_checkpoint(run / "checkpoints" / "last.ckpt")["callbacks"]
    before = next(v["train_seconds"] for k, v in saved.items() if "LastCheckpoint" in k)
    # metrics.json rounds to 0.1 s; rounding is monotone, so compare at that precision.
    assert before > 0 and round(before, 1) <= m["train_time_s"]
    resume(run, "--max-steps", "20", "--max-time", "1e-6")
    m = json.loads((run / "metrics.json").read_text())
    assert (m["stopped_by"], m["steps"]) == ("max_time", 6)
    assert m["train_time_s"] >= round(before, 1)  # the first leg's seconds are counted too
    assert "0 epochs and 6 batches trained of 3 planned" in capsys.readouterr().out
    resume(run, "--max-time", "600")
    # Epoch 0 was trained by three processes; its mean training loss too is exact.
    assert_same_run(reference, run)
