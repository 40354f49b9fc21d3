"""The feedback units' accelerator path against the CPU path and independent float64 formulas.

Off the CPU path (``sized_for("accelerator")``) generators of one output shape share one ReLU
and squash, each extractor convolves its two inputs at once, and the BatchNorms' batch counts
are added in one op for all (``caps.master_aide.batch_norm(..., count=False)`` and
``count_batches``). Each is held here to what the CPU path computes unit by unit (features,
gradients of inputs and weights, running statistics, batch counts; float64), and the running
statistics to the momentum update written out by hand.
"""

import copy

import pytest
import torch
from torch import nn

from selfcaps.caps.chunking import sized_for
from selfcaps.caps.master_aide import batch_norm, count_batches, deferred_counters
from selfcaps.config.loading import load_config
from selfcaps.eval.dispatch import DispatchTally
from selfcaps.losses import SinkhornDivergence
from selfcaps.losses.feedback import FeedbackAgreement, feedback_features
from selfcaps.methods.encapnet import EncapNetMethod

# (higher, lower) shapes as EncapNet's units: two generators of one output shape (16, 8, 8),
# one of another (8, 8, 8); strides 1 and 2.
SHAPES = [((16, 8, 8), (16, 8, 8)), ((32, 4, 4), (16, 8, 8)), ((16, 8, 8), (8, 8, 8))]


def _units(num_caps=4, extractor=True, seed=0):
    torch.manual_seed(seed)
    units = [
        FeedbackAgreement(hi, lo, SinkhornDivergence(), num_caps=num_caps, extractor=extractor)
        for hi, lo in SHAPES
    ]
    for u in units:
        for p in u.parameters():  # BatchNorm weights and biases away from 1 and 0
            p.data.add_(0.2 * torch.randn_like(p))
    return [u.double() for u in units]


def _inputs(n=5, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [
        tuple(torch.randn(n, *shape, generator=g, dtype=torch.float64) for shape in pair)
        for pair in SHAPES
    ]


def _run(units, pairs, kind):
    """Features, gradients (inputs, then weights) and buffers after one pass under ``kind``."""
    units = copy.deepcopy(units)
    pairs = [tuple(t.clone().requires_grad_() for t in p) for p in pairs]
    with sized_for(kind), DispatchTally() as tally:
        feats = feedback_features(units, pairs)
    flat = [f for pair in feats for f in pair]
    weights = [torch.cos(torch.arange(f.numel(), dtype=f.dtype)).view_as(f) for f in flat]
    leaves = [t for p in pairs for t in p] + [p for u in units for p in u.parameters()]
    grads = torch.autograd.grad(flat, leaves, weights)
    buffers = [b.clone() for u in units for b in u.buffers()]
    return flat, grads, buffers, tally


@pytest.mark.parametrize(("num_caps", "extractor"), [(4, True), (None, True), (4, False)])
def test_feedback_features_accelerator_equal_cpu_unit_by_unit(num_caps, extractor):
    units, pairs = _units(num_caps, extractor), _inputs()
    cpu, acc = _run(units, pairs, "cpu"), _run(units, pairs, "accelerator")
    assert acc[3].syncs == 0
    for got, want in zip(acc[:3], cpu[:3], strict=True):
        assert len(got) == len(want) > 0
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    assert acc[3].ops < cpu[3].ops


def test_feedback_features_share_activations_and_count_batches_once():
    units, pairs = _units(), _inputs()
    _, _, _, cpu = _run(units, pairs, "cpu")
    _, _, buffers, acc = _run(units, pairs, "accelerator")
    # one ReLU-squash per generator output shape (2 shapes for 3 units): one rsqrt each
    assert acc.op_names["aten.rsqrt"] == 2 and cpu.op_names["aten.rsqrt"] == 0
    # each extractor convolution once for both inputs; the deconvolutions once each
    assert acc.op_names["aten.convolution"] == 3 + 2 * 3
    assert cpu.op_names["aten.convolution"] == 3 + 4 * 3
    # 3 generator + 12 extractor BatchNorm calls, their counts added by one op
    assert acc.op_names["aten.add_"] == 0 and acc.op_names["aten._foreach_add_"] == 1
    assert cpu.op_names["aten.add_"] == 15
    counters = [b for b in buffers if b.dtype == torch.long]
    assert [int(c) for c in counters] == [1, 2, 2] * 3


def test_deferred_batch_norm_updates_running_statistics_as_two_momentum_steps():
    """Two deferred calls, then one count: the momentum update of nn.BatchNorm2d twice,
    written out (float64), and the counter +2."""
    torch.manual_seed(2)
    bn = nn.BatchNorm2d(3, momentum=0.3).double()
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.5, 2)
    mean0, var0 = bn.running_mean.clone(), bn.running_var.clone()
    xs = [torch.randn(4, 3, 2, 5, dtype=torch.float64) * 2 + 1 for _ in range(2)]
    outs = [batch_norm(bn, x, count=False) for x in xs]
    assert int(bn.num_batches_tracked) == 0
    count_batches(deferred_counters(bn), 2)
    assert int(bn.num_batches_tracked) == 2
    mean, var = mean0, var0
    for x, out in zip(xs, outs, strict=True):
        flat = x.transpose(0, 1).reshape(3, -1)
        mu, n = flat.mean(1), flat.shape[1]
        biased = ((flat - mu[:, None]) ** 2).sum(1) / n
        want = (x - mu.view(1, 3, 1, 1)) / torch.sqrt(biased.view(1, 3, 1, 1) + bn.eps)
        torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)
        mean = 0.7 * mean + 0.3 * mu
        var = 0.7 * var + 0.3 * biased * n / (n - 1)
    torch.testing.assert_close(bn.running_mean, mean, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(bn.running_var, var, rtol=1e-12, atol=1e-14)


def test_batch_norm_counts_itself_when_it_cannot_defer():
    """Cumulative averaging (momentum None) reads the count, so it is never deferred; nor is
    anything in evaluation mode."""
    cumulative = nn.BatchNorm2d(2, momentum=None)
    x = torch.randn(3, 2, 2, 2)
    batch_norm(cumulative, x, count=False)
    assert int(cumulative.num_batches_tracked) == 1 and deferred_counters(cumulative) == []
    fixed = nn.BatchNorm2d(2)
    assert len(deferred_counters(fixed)) == 1
    assert deferred_counters(fixed.eval()) == []
    count_batches([])  # nothing to count: no op, no error


def test_unit_forward_on_an_accelerator_equals_cpu_with_its_state():
    units, pairs = _units(), _inputs()
    unit, (hi, lo) = units[1], pairs[1]
    losses, states = [], []
    for kind in ("cpu", "accelerator"):
        u = copy.deepcopy(unit)
        with sized_for(kind):
            losses.append(u(hi, lo))
        states.append(u.state_dict())
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-10, atol=1e-12)
    assert states[0].keys() == states[1].keys()
    for k in states[0]:
        torch.testing.assert_close(states[1][k], states[0][k], rtol=1e-10, atol=1e-12)


def test_encapnet_step_on_an_accelerator_leaves_the_cpu_path_state():
    """One training loss and backward of a small EncapNet with two units whose generators
    share an output shape: loss, every gradient and the whole state dict (running statistics,
    batch counts) as on the CPU path (float64)."""
    cfg = load_config(
        "encapnet",
        "quick",
        [
            ("data.name", "mnist5k"),
            ("model.num_caps", 8),
            ("model.dims", [2, 4]),
            ("model.strides", [2, 2]),
            ("model.num_type2", 1),
            ("model.aide_modules", [1, 2]),
            ("loss.units", [[1, 1, -1], [2, 0, 2]]),
        ],
    )
    torch.manual_seed(3)
    method = EncapNetMethod(cfg).double()
    x = torch.rand(4, 1, 28, 28, dtype=torch.float64)
    y = torch.tensor([0, 1, 2, 3])
    got = []
    for kind in ("cpu", "accelerator"):
        m = copy.deepcopy(method)
        with sized_for(kind), DispatchTally() as t:
            loss, _ = m.compute_loss((x, y))
        loss.backward()
        got.append((loss.detach(), [p.grad for p in m.parameters()], m.state_dict(), t))
    torch.testing.assert_close(got[1][0], got[0][0], rtol=1e-10, atol=1e-12)
    for a, b in zip(got[1][1], got[0][1], strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10)
    assert got[1][2].keys() == got[0][2].keys()
    for k, v in got[0][2].items():
        torch.testing.assert_close(got[1][2][k], v, rtol=1e-10, atol=1e-12)
    assert got[1][3].syncs == 0 and got[1][3].ops < got[0][3].ops
