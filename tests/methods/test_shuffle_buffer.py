"""The reference stream of SparseCaps: every shift of each digit, read through a shuffle buffer."""

import json

import pytest
import torch

from selfcaps.cli import main
from selfcaps.data.affine import place_in_canvas
from selfcaps.data.datamodule import EpochSampler, buffered_order, mix_seed
from selfcaps.data.shift_grid import ShiftGridDataset


def test_buffered_order_is_a_permutation_that_never_runs_ahead_of_the_buffer():
    n, buffer = 500, 16
    out = list(buffered_order(n, buffer, torch.Generator().manual_seed(1)))
    assert sorted(out) == list(range(n))
    # index i enters the buffer only after i - buffer + 1 outputs: it cannot come out earlier
    assert all(pos >= i - (buffer - 1) for pos, i in enumerate(out))
    assert out != list(range(n))  # and it does shuffle
    assert list(buffered_order(7, 1, torch.Generator())) == list(range(7))


def test_buffered_order_picks_uniformly_among_the_buffered_items():
    # The first output is uniform over the first `buffer` indices: chi-square over 2,000 draws.
    buffer, draws = 5, 2000
    counts = torch.zeros(buffer)
    for seed in range(draws):
        counts[next(buffered_order(100, buffer, torch.Generator().manual_seed(seed)))] += 1
    chi2 = ((counts - draws / buffer) ** 2 / (draws / buffer)).sum().item()
    assert chi2 < 18.5  # chi-square, 4 degrees of freedom, p = 0.001


def test_buffered_sampler_shards_and_resumes_like_the_permutation():
    def sampler(**kw):
        s = EpochSampler(1000, seed=2, drop_last=True, batch_size=10, buffer=50, **kw)
        s.set_epoch(1)
        return s

    whole = [i for _, i in sampler(rank=0, world_size=1)]
    assert len(whole) == 1000 and sorted(whole) == list(range(1000))
    g = torch.Generator().manual_seed(mix_seed(2, 1))
    assert whole == list(buffered_order(1000, 50, g))  # epoch 1's stream of seed 2
    halves = [[i for _, i in sampler(rank=r, world_size=2)] for r in (0, 1)]
    assert halves[0] == whole[0::2] and halves[1] == whole[1::2]
    resumed = sampler(rank=0, world_size=1)
    resumed.resume_at(1, 7)
    assert [i for _, i in resumed] == whole[70:]


def test_shift_grid_holds_every_shift_of_every_digit_in_digit_order():
    digits = [(torch.randint(1, 255, (1, 28, 28), dtype=torch.uint8), c) for c in (3, 8)]
    grid = ShiftGridDataset(digits, canvas=40, max_shift=6)
    assert len(grid) == 2 * 169
    shifts = {grid.shift(i)[1:] for i in range(169)}
    assert shifts == {(dx, dy) for dx in range(-6, 7) for dy in range(-6, 7)}
    assert [grid.shift(i)[0] for i in (0, 168, 169, 337)] == [0, 0, 1, 1]
    for i in (0, 100, 200, 337):
        img, label = grid[i]
        digit, dx, dy = grid.shift(i)
        assert label == digits[digit][1]
        assert torch.equal(img, place_in_canvas(digits[digit][0], 40, dx, dy))
        assert img.sum() == digits[digit][0].sum()  # +/-6 in a 40x40 canvas keeps the digit whole
    with pytest.raises(IndexError, match="338"):
        grid[338]


def test_exhaustive_shift_order_trains_on_the_grid(tmp_path):
    out = tmp_path / "run"
    args = [
        "run", "sparsecaps", "--data", "mnist5k", "--data-root", str(tmp_path), "--out", str(out),
        "--max-steps", "3", "--batch-size", "8", "--threads", "1", "--no-progress",
        "augment.shift_order=exhaustive", "data.shuffle_buffer=20", "data.train_subset=16",
        "model.conv_channels=8", "model.primary_types=2", "model.decoder_widths=[16,32]",
        "eval.affnist=none", "eval.svm_max_train=50", "eval.svm_max_test=50",
        "eval.baselines=false", "eval.figure_images=16", "monitor.bank_size=16", "monitor.knn_k=5",
        "eval.knn_k=5",
    ]  # fmt: skip
    assert main(args) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["steps"] == 3 and m["epochs_trained"] == 0  # an epoch is now 16 x 169 images
