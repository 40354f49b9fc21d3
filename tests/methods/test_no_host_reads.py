"""The accelerator paths read nothing on the host and compute what the CPU paths compute.

Each piece that had a host read in a training step (boolean-mask batch norm and loss in
MCAE, the squash fallback in EncapNet, the one-hot of the margin loss, SparseCaps' boosting
branches, the hue sort of the batch SimCLR transform) is run on both paths: equal values
(to float rounding), and zero syncs on the accelerator path, counted at the dispatcher.
"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from selfcaps.caps.chunking import sized_for
from selfcaps.caps.master_aide import squash_channels
from selfcaps.data.batch_transforms import BatchSimCLRTransform
from selfcaps.eval.dispatch import DispatchTally
from selfcaps.losses import MarginLoss
from selfcaps.losses.reconstruction import masked_patch_mse
from selfcaps.models.mcae import MaskedReconstruction, _batch_norm_visible
from selfcaps.models.sparsecaps import LifetimeBoost


@pytest.mark.parametrize("momentum", [0.1, None])
def test_visible_batch_norm_by_masked_moments(momentum):
    g = torch.Generator().manual_seed(0)
    f = torch.randn(4, 3, 5, 5, generator=g, dtype=torch.float64)
    visible = torch.rand(4, 5, 5, generator=g) > 0.4
    results = []
    for kind in ("cpu", "accelerator"):
        bn = nn.BatchNorm2d(3, momentum=momentum).double()
        with torch.no_grad():
            bn.weight.copy_(torch.tensor([0.5, 1.5, -1.0]))
            bn.bias.copy_(torch.tensor([0.1, -0.2, 0.3]))
        with sized_for(kind), DispatchTally() as t:  # type: ignore[arg-type]
            out = [_batch_norm_visible(bn, f * s, visible) for s in (1.0, 2.0)]
        results.append((*out, bn.running_mean.clone(), bn.running_var.clone()))
        if kind == "accelerator":
            assert t.syncs == 0
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b)
    # the masked positions hold 0, the visible ones are normalised over visible positions only
    out = results[1][0]
    assert (out.permute(0, 2, 3, 1)[~visible] == 0).all()
    rows = f.permute(0, 2, 3, 1)[visible]
    want = (rows - rows.mean(0)) / torch.sqrt(rows.var(0, unbiased=False) + 1e-5)
    want = want * torch.tensor([0.5, 1.5, -1.0], dtype=f.dtype) + torch.tensor(
        [0.1, -0.2, 0.3], dtype=f.dtype
    )
    torch.testing.assert_close(out.permute(0, 2, 3, 1)[visible], want)


def test_masked_patch_mse_without_boolean_indexing():
    g = torch.Generator().manual_seed(1)
    pred, target = torch.randn(3, 6, 4, generator=g), torch.randn(3, 6, 4, generator=g)
    mask = torch.rand(3, 6, generator=g) > 0.5
    out = MaskedReconstruction(pred=pred, target=target, mask=mask)
    want = (pred - target).pow(2).mean(-1)[mask].mean()  # by hand: masked patches only
    with sized_for("accelerator"), DispatchTally() as t:
        got = masked_patch_mse(out)
    assert t.syncs == 0
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(masked_patch_mse(out), want)


def test_squash_channels_on_an_accelerator_is_squash_without_a_read():
    x = torch.randn(2, 6, 3, 3, dtype=torch.float64)
    want = squash_channels(x, 2)
    with sized_for("accelerator"), DispatchTally() as t:
        got = squash_channels(x, 2)
    assert t.syncs == 0
    torch.testing.assert_close(got, want)
    big = torch.full((1, 2, 1, 1), 1e30)  # |s|^2 overflows float32: still a unit vector
    with sized_for("accelerator"):
        v = squash_channels(big, 1)
    torch.testing.assert_close(v.flatten().norm(), torch.tensor(1.0))


def test_margin_loss_one_hot_by_scatter():
    lengths = torch.rand(5, 4)
    targets = torch.tensor([0, 3, 1, 1, 2])
    loss = MarginLoss()
    with DispatchTally() as t:
        got = loss(lengths, targets)
    assert t.syncs == 0
    t_ = F.one_hot(targets, 4).float()  # the textbook form (it reads the targets' range)
    want = (
        (
            t_ * (0.9 - lengths).clamp(min=0).pow(2)
            + 0.5 * (1 - t_) * (lengths - 0.1).clamp(min=0).pow(2)
        )
        .sum(1)
        .mean()
    )
    assert torch.equal(got, want)


def test_lifetime_boost_branch_free_against_algorithm_1():
    """Algorithm 1 written as a loop with branches: EMA from the first batch on, boosting
    every ``every`` batches (raise rare winners by ``step``, lower common ones, not below 1)."""
    g = torch.Generator().manual_seed(2)
    boost = LifetimeBoost(4, ema_decay=0.9, every=3, step=0.5, min_freq=0.2, max_freq=0.3)
    ema, b, started = torch.zeros(4), torch.ones(4), False
    for n in range(1, 10):
        freq = torch.rand(4, generator=g)
        freq = freq / freq.sum()
        with DispatchTally() as t:
            boost.update(freq)
        assert t.syncs == 0
        ema = ema * 0.9 + 0.1 * freq if started else freq.clone()
        started = True
        if n % 3 == 0:
            b = torch.where(ema < 0.2, b + 0.5, b)
            b = torch.where(ema > 0.3, (b - 0.5).clamp(min=1.0), b)
        assert torch.equal(boost.freq_ema, ema) and torch.equal(boost.boost, b), n


@pytest.mark.parametrize(
    "recipe",
    [{}, {"degrees": 15.0, "blur_prob": 0.5}],  # CIFAR's (hue on); with rotation and blur
)
def test_batch_transform_on_an_accelerator_reads_nothing_and_equals_the_cpu_path(recipe):
    """One pass for every view, whole batch, hue where due, against the CPU path's views."""
    t = BatchSimCLRTransform(input_size=32, channels=3, **recipe)
    t.chunk_size = 8
    x = torch.randint(0, 256, (20, 3, 32, 32), dtype=torch.uint8)
    cpu = t(x, torch.Generator().manual_seed(5))
    with sized_for("accelerator"), DispatchTally() as tally:
        acc = t(x, torch.Generator().manual_seed(5))
    assert tally.syncs == 0
    for a, b in zip(cpu, acc, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
