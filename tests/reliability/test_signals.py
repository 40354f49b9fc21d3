"""SIGTERM and SIGINT: the batch in progress ends, ``last.ckpt`` is written there, exit 128+N.

Real subprocesses that send themselves real signals at named points
(``tests/reliability/kill_at.py``), then ``--resume`` into the uninterrupted
reference run (``conftest.reference``), compared bit for bit. Also the periodic
checkpoints inside an epoch (``trainer.checkpoint_every_n_steps`` / ``_minutes``)
with a SIGKILL between two of them, and the agreement of DDP processes on the stop.
"""

import json
import signal

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from selfcaps.engine.stopping import agree
from tests.reliability.resume_helpers import ARGS, assert_same_run, resume, resume_at
from tests.runs import TINY, run_cli, run_killed_at, run_signalled_at

#: Lightning's own messages that must not reach the user.
LIGHTNING_NOISE = ("Received SIGTERM", "exists and is not empty", "weights_only")


def _metrics(run):
    return json.loads((run / "metrics.json").read_text())


@pytest.mark.slow
def test_sigterm_then_sigint_stop_at_batch_ends_and_resume_exactly(reference, tmp_path):
    run = tmp_path / "run"
    # SIGTERM as the 11th batch starts: that batch (epoch 1, its 3rd) ends, then the stop.
    done = run_signalled_at("term_batch", 11, *ARGS, "--out", str(run))
    assert done.returncode == 128 + signal.SIGTERM, done.stderr[-3000:]
    m = _metrics(run)
    assert (m["stopped_by"], m["signal"], m["steps"]) == ("signal", "SIGTERM", 11)
    assert (m["epochs_trained"], m["batches_into_next_epoch"]) == (1, 3)
    assert "test_knn_top1" not in m  # no final evaluation in a grace period
    assert resume_at(run) == [1, 3]
    assert f"selfcaps run coca --out {run} --resume" in done.stdout
    assert "finishing the current batch" in done.stderr
    assert not any(noise in done.stderr for noise in LIGHTNING_NOISE), done.stderr[-3000:]
    # SIGINT (Ctrl+C) as the 5th batch of the resumed process starts: step 16, the last batch
    # of epoch 1, which is then validated and ends as every epoch does.
    done = run_signalled_at("int_batch", 5, "run", "coca", "--out", str(run), "--resume")
    assert done.returncode == 128 + signal.SIGINT, done.stderr[-3000:]
    assert "resuming from" in done.stdout and "at epoch 2 of 3, batch 4 (11 steps" in done.stdout
    assert (_metrics(run)["steps"], _metrics(run)["signal"]) == (16, "SIGINT")
    assert resume_at(run) == [2, 0]
    done = run_cli("run", "coca", "--out", str(run), "--resume")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "at epoch 3 of 3, batch 1 (16 steps trained)" in done.stdout
    assert not any(noise in done.stderr for noise in LIGHTNING_NOISE), done.stderr[-3000:]
    assert_same_run(reference, run)


@pytest.mark.slow
def test_a_second_signal_stops_at_once(tmp_path):
    run = tmp_path / "run"
    done = run_signalled_at("term_twice_batch", 3, "run", "coca", "--epochs", "1", *TINY,
                            "--out", str(run))  # fmt: skip
    assert done.returncode == -signal.SIGTERM, done.stderr[-3000:]
    assert "SIGTERM again: stopping at once" in done.stderr
    assert not (run / "checkpoints" / "last.ckpt").exists()
    assert not (run / "metrics.json").exists()


@pytest.mark.slow
def test_a_signal_in_the_final_evaluation_stops_at_once(tmp_path):
    run = tmp_path / "run"
    done = run_signalled_at("term_evaluate", 1, "run", "coca", "--epochs", "1", *TINY,
                            "--out", str(run))  # fmt: skip
    assert done.returncode == 128 + signal.SIGTERM, done.stderr[-3000:]
    assert (
        f"stopped by SIGTERM during the final evaluation; selfcaps run coca --out {run} "
        "--resume continues it" in done.stderr
    )
    assert resume_at(run) == [1, 0] and not (run / "metrics.json").exists()


@pytest.mark.slow
def test_periodic_checkpoints_bound_what_a_kill_loses(reference, tmp_path):
    """Every 3 steps: killed after step 11, the resume starts after step 9, not 8."""
    run = tmp_path / "run"
    run_killed_at("train_batch", 11, *ARGS, "trainer.checkpoint_every_n_steps=3",
                  "--out", str(run))  # fmt: skip
    assert resume_at(run) == [1, 1]
    assert not list(run.rglob("*.tmp"))
    resume(run)
    assert_same_run(reference, run)
    # On the clock: a checkpoint at every batch end that is due, here every batch.
    clock = tmp_path / "clock"
    run_killed_at("train_batch", 6, *ARGS, "trainer.checkpoint_every_n_minutes=1e-9",
                  "--out", str(clock))  # fmt: skip
    assert resume_at(clock) == [0, 6]


def _agree_in_process(rank: int, store_file: str, results) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store_file}", rank=rank, world_size=2)
    try:
        # What Lightning's DDPStrategy.reduce(t, reduce_op="max") calls, as the engine does.
        from lightning.fabric.utilities.distributed import _sync_ddp

        def reduce_max(t):
            return _sync_ddp(t, reduce_op="max")

        # Rank 1 received SIGTERM (15); only rank 0's clocks count (rank 1 passes 0 for them).
        signum = 15 if rank == 1 else 0
        late, due = (False, True) if rank == 0 else (False, False)
        results[rank] = agree([signum, late, due], reduce_max)
    finally:
        dist.destroy_process_group()


def test_ddp_processes_agree_on_the_stop_and_on_rank_zero_clocks(tmp_path):
    """Two gloo processes: a signal received by one stops both; rank 0's clock decides."""
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        results = manager.dict()
        procs = [
            ctx.Process(target=_agree_in_process, args=(r, str(tmp_path / "store"), results))
            for r in range(2)
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=300)
        assert [p.exitcode for p in procs] == [0, 0]
        assert dict(results) == {0: [15.0, 0.0, 1.0], 1: [15.0, 0.0, 1.0]}


def test_single_process_agreement_is_the_local_decision():
    assert agree([0, True, False], lambda t: t) == [0.0, 1.0, 0.0]
