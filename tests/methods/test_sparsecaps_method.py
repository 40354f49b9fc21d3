"""SparseCaps method pieces checked against literal computations: figures' statistics,
the headline feature kind, the reference code's smooth learning-rate decay."""

import pytest
import torch

from selfcaps.methods.sparsecaps import rank_frequency, ranked_support
from tests.methods.test_sparsecaps_e2e import _method


def test_ranked_support_is_sorted_support_over_rank_zero_averaged_by_loop():
    torch.manual_seed(0)
    support = torch.rand(7, 5) + 0.1
    expected = [0.0] * 5
    for row in support.tolist():
        top = max(row)
        for r, value in enumerate(sorted(row, reverse=True)):
            expected[r] += value / top / len(support)
    torch.testing.assert_close(ranked_support(support), torch.tensor(expected))


def test_rank_frequency_counts_each_capsule_at_each_rank_by_loop():
    torch.manual_seed(1)
    ranks = torch.stack([torch.randperm(4) for _ in range(9)])
    expected = torch.zeros(4, 4)
    for row in ranks.tolist():
        for capsule, rank in enumerate(row):
            expected[capsule, rank] += 1 / 9
    torch.testing.assert_close(rank_frequency(ranks), expected)


@pytest.mark.parametrize(
    ("variant", "feature", "kind"),
    [
        ("sparse", "output", "masked"),  # section 2.3.1: v' replaces v for classification
        ("dense", "output", "unmasked"),  # no mask in the dense network
        ("supervised", "output", "unmasked"),
        ("sparse", "unmasked", "unmasked"),  # the reference code's classifier
        ("dense", "masked", "masked"),
    ],
)
def test_headline_feature_kind(variant, feature, kind):
    method = _method(("model.variant", variant), ("eval.feature", feature))
    assert method.feature_kind == kind


def test_schedule_without_stairs_is_smooth_decay_with_floor():
    method = _method(("optim.staircase", False), ("optim.min_lr", 2e-4), ("optim.step_size", 20))
    opt = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
    sched = method._scheduler(opt)
    seen = {}
    for t in range(1, 801):
        opt.step()
        sched.step()
        if t in (10, 20, 30, 400, 800):
            seen[t] = opt.param_groups[0]["lr"]
    assert seen[10] == pytest.approx(1e-3 * 0.96**0.5)  # between the stairs
    assert seen[20] == pytest.approx(1e-3 * 0.96)
    assert seen[30] == pytest.approx(1e-3 * 0.96**1.5)
    assert seen[400] == pytest.approx(1e-3 * 0.96**20)
    assert seen[800] == pytest.approx(2e-4)  # 0.96**40 = 0.195 is below the floor


def test_step_schedule_still_steps_in_stairs():
    method = _method(("optim.staircase", True))
    opt = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
    sched = method._scheduler(opt)
    for _ in range(1999):
        opt.step()
        sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(1e-3)
    opt.step()
    sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(1e-3 * 0.96)
