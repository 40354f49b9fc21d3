"""A run resumed in the middle of an epoch starts the data at the batch it stopped at."""

from selfcaps.data.datamodule import EpochSampler
from selfcaps.engine import trainer as engine


def test_resume_at_skips_the_trained_batches_of_that_epoch_only():
    full = EpochSampler(100, seed=3, drop_last=True, batch_size=8)
    full.set_epoch(2)
    order = list(full)
    assert len(order) == 96  # 12 whole batches
    resumed = EpochSampler(100, seed=3, drop_last=True, batch_size=8)
    resumed.resume_at(2, 5)
    assert list(resumed) == order[5 * 8 :]
    assert list(resumed) == order[5 * 8 :]  # every iteration over epoch 2 starts there
    assert len(resumed) == 96  # Lightning counts the epoch's batches as usual
    resumed.set_epoch(3)
    full.set_epoch(3)
    assert list(resumed) == list(full)  # the next epoch is whole
    resumed.set_epoch(2)
    assert list(resumed) == order  # and skipping does not come back


def test_resume_at_an_epoch_start_sets_the_epoch_before_any_iteration():
    """Worker processes may draw the order when the iterator is created, before set_epoch."""
    a, b = EpochSampler(50, seed=0), EpochSampler(50, seed=0)
    a.set_epoch(4)
    b.resume_at(4, 0)
    assert list(a) == list(b)


def test_last_checkpoint_carries_the_training_seconds_over_a_resume(tmp_path, monkeypatch):
    """train_time_s of a resumed run = seconds saved in last.ckpt + the new process's own."""
    clock = [1000.0]
    monkeypatch.setattr(engine.time, "monotonic", lambda: clock[0])
    first = engine.LastCheckpoint(tmp_path / "last.ckpt", epochs=3)
    first._t0 = clock[0]
    clock[0] += 125.0  # 125 s of training, then the checkpoint is written
    saved = first.state_dict()
    assert saved["train_seconds"] == 125.0
    second = engine.LastCheckpoint(tmp_path / "last.ckpt", epochs=3)
    assert second.seconds_before == 0.0  # a fresh run
    second.load_state_dict(saved)
    second._t0 = clock[0] + 40.0  # setup after the crash is not training
    clock[0] += 40.0 + 60.0
    assert second.seconds_before == 125.0
    assert second.state_dict()["train_seconds"] == 185.0
    older = engine.LastCheckpoint(tmp_path / "last.ckpt", epochs=3)
    older.load_state_dict({"stopped_by": None, "position": [1, 0]})  # before train_seconds
    assert older.seconds_before == 0.0
