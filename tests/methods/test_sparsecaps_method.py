"""SparseCaps method pieces checked against literal computations: figures' statistics,
the SVM metric keys, the reference code's smooth learning-rate decay."""

import pytest
import torch

from selfcaps.methods.sparsecaps.figures import rank_frequency, ranked_support
from selfcaps.methods.sparsecaps.svm import svm_key, svm_metric
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


def test_svm_metric_reads_v_and_v_prime_in_both_layouts():
    new = {"svm_affnist_a": 62.6, "svm_affnist_a_masked": 36.1, "svm_affnist_a_pixels": 46.8}
    # before the headline read v: svm_<protocol> followed eval.feature (v' for sparse)
    old = {"svm_affnist_a": 36.1, "svm_affnist_a_masked": 36.1, "svm_affnist_a_unmasked": 62.6}
    for metrics in (new, old):
        assert svm_metric(metrics, "affnist_a", "unmasked") == 62.6
        assert svm_metric(metrics, "affnist_a", "masked") == 36.1
    assert svm_metric(new, "affnist_a", "pixels") == 46.8
    assert svm_metric(old, "affnist_a", "pixels") is None
    assert svm_key("mnist", "unmasked") == "svm_mnist"
    assert svm_key("mnist", "masked") == "svm_mnist_masked"


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


def test_canvas_shifts_per_batch_equal_the_per_image_path():
    """SparseCaps' training transform on an accelerator: the loader draws each image's shift
    (``SeededParamsDataset``), the batch is placed at once; the per-image path
    (``SeededTransformDataset``, ``pad_to_canvas``) gives the same floats, bit for bit."""
    from selfcaps.data.datamodule import SeededParamsDataset, SeededTransformDataset
    from selfcaps.eval.dispatch import DispatchTally
    from selfcaps.methods.sparsecaps import CanvasTransform

    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (64, 1, 28, 28), dtype=torch.uint8, generator=g)
    data = torch.utils.data.TensorDataset(images, torch.arange(64) % 10)
    t = CanvasTransform(40, 6)
    assert t.batches_on_accelerator and not CanvasTransform(40).batches_on_accelerator
    for seed, epoch in [(0, 0), (5, 2)]:
        per_image = SeededTransformDataset(data, t, seed)
        want = torch.stack([per_image[(epoch, i)][0] for i in range(64)])
        items = [SeededParamsDataset(data, t, seed)[(epoch, i)][0] for i in range(64)]
        shifts = torch.stack([p for _, p in items])
        with DispatchTally() as tally:
            got = t([torch.stack([x for x, _ in items]), shifts], torch.Generator())
        assert got.dtype == torch.float32 and torch.equal(got, want)
        assert tally.syncs == 0
    assert shifts.abs().max() == 6 and len({tuple(s) for s in shifts.tolist()}) > 10
