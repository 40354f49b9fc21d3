"""A run resumed in the middle of an epoch starts the data at the batch it stopped at."""

from selfcaps.methods.datamodule import EpochSampler


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
