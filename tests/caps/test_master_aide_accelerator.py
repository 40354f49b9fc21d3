"""EncapNet's accelerator paths against its CPU paths and independent float64 computations.

Off the CPU path (``sized_for("accelerator")``) the capConvs squash with a hand-written
backward (its own tests: ``test_fused_squash.py``), run the two branches' ReLU and squash once
on both, and skip the channels-last copies; the feedback units' cosine costs come from one
batched Gram product. Each is held here to what the CPU path computes (values, input and
parameter gradients, running statistics; float64), and every new function to
``torch.autograd.gradcheck``.
"""

import copy
import math

import pytest
import torch

from selfcaps.caps import CapsuleModule, MasterAideConv2d, squash_channels
from selfcaps.caps.chunking import sized_for
from selfcaps.caps.master_aide import channels_last_conv
from selfcaps.eval.dispatch import DispatchTally
from selfcaps.losses import SinkhornDivergence, ground_cost
from selfcaps.losses.feedback import CapsuleDeconv2d, FeedbackAgreement
from selfcaps.losses.sinkhorn import cosine_cost_triples, sinkhorn_log_plan
from selfcaps.models.encapnet import EncapNet

SOURCES = ("v1", "v2", "v3", "own", "cross")
EPS = 1e-12


def _run(module, inputs, kind):
    """Output, input gradients, parameter gradients and buffers after one pass under ``kind``."""
    module = copy.deepcopy(module)
    inputs = [x.detach().clone().requires_grad_() for x in inputs]
    with sized_for(kind), DispatchTally() as tally:
        out = module(*inputs)
        g = torch.linspace(-1.0, 1.0, out.numel(), dtype=out.dtype).view_as(out)
        grads = torch.autograd.grad(out, [*inputs, *module.parameters()], g, allow_unused=True)
    assert tally.syncs == 0 or kind == "cpu"
    return out, grads, [b.clone() for b in module.buffers()], tally


def _assert_paths_agree(module, *inputs):
    cpu, acc = (_run(module, inputs, kind) for kind in ("cpu", "accelerator"))
    torch.testing.assert_close(acc[0], cpu[0], rtol=1e-10, atol=1e-12)
    assert len(acc[1]) == len(cpu[1])
    for a, b in zip(acc[1], cpu[1], strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)
    for a, b in zip(acc[2], cpu[2], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    return cpu[3], acc[3]


# ------------------------------------------------------------------ squash
def test_squash_channels_accelerator_path_equals_cpu_path():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 12, 3, 3, generator=g, dtype=torch.float64) * 2.0
    cpu, acc = [], []
    for kind, out in (("cpu", cpu), ("accelerator", acc)):
        xi = x.clone().requires_grad_()
        with sized_for(kind):
            v = squash_channels(xi, 4)
        out += [v, *torch.autograd.grad(v, xi, torch.cos(x))]
    for a, b in zip(acc, cpu, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)


# ------------------------------------------------------------------ capConvs
@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize(("kernel", "stride", "in_dim"), [(3, 2, 2), (1, 1, 4)])
def test_capconv_accelerator_path_equals_cpu_path(source, kernel, stride, in_dim):
    torch.manual_seed(3)
    layer = MasterAideConv2d(3, in_dim, 4, kernel, stride, coefficients=source).double()
    for p in layer.parameters():  # coefficients away from their start (biases 1)
        p.data.add_(0.1 * torch.randn_like(p))
    x = torch.randn(2, 3 * in_dim, 6, 6, dtype=torch.float64)
    skip = torch.randn(2, 12, 6 // stride, 6 // stride, dtype=torch.float64)
    _assert_paths_agree(layer, x, skip)


def test_capconv_accelerator_path_runs_one_squash_for_both_branches():
    torch.manual_seed(4)
    layer = MasterAideConv2d(4, 2, 4, 1, 1)
    x = torch.randn(2, 8, 5, 5)
    cpu, acc = _assert_paths_agree(layer.double(), x.double())
    # two squashes (branches together, then the output) against three: one 'rsqrt' each
    assert acc.op_names["aten.rsqrt"] == 2 and cpu.op_names["aten.rsqrt"] == 0
    assert acc.ops < cpu.ops


def test_channels_last_conv_off_the_cpu_path_copies_nothing():
    conv = torch.nn.Conv2d(4, 8, 3, padding=1, groups=4)
    x = torch.randn(2, 4, 5, 5)
    with sized_for("cpu"):
        want = channels_last_conv(conv, x)
    with sized_for("accelerator"), DispatchTally() as t:
        got = channels_last_conv(conv, x)
    assert dict(t.op_names) == {"aten.convolution": 1}
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("skip", ["none", "module", "layerwise"])
def test_capsule_module_accelerator_path_equals_cpu_path(skip):
    torch.manual_seed(5)
    module = CapsuleModule(3, 2, 4, stride=2, num_type2=2, skip=skip).double()
    _assert_paths_agree(module, torch.randn(2, 6, 8, 8, dtype=torch.float64))


def test_encapnet_accelerator_path_equals_cpu_path():
    torch.manual_seed(6)
    net = EncapNet(num_caps=4, dims=(2, 4), strides=(1, 2), input_size=8, num_type2=1).double()
    _assert_paths_agree(net, torch.randn(3, 3, 8, 8, dtype=torch.float64))


@pytest.mark.parametrize(("upsample", "num_caps"), [(2, 4), (1, 4), (2, None)])
def test_generator_accelerator_path_equals_cpu_path(upsample, num_caps):
    torch.manual_seed(7)
    gen = CapsuleDeconv2d(8, 12, upsample, num_caps).double()
    _assert_paths_agree(gen, torch.randn(2, 8, 3, 3, dtype=torch.float64))


# ------------------------------------------------------------------ feedback costs
def _pairs(widths, n=5, seed=8):
    g = torch.Generator().manual_seed(seed)
    return [
        tuple(torch.randn(n, d, generator=g, dtype=torch.float64, requires_grad=True) for _ in "xy")
        for d in widths
    ]


@torch.no_grad()
def test_cosine_cost_triples_against_cosines_by_hand():
    pairs = _pairs((4, 1, 9))
    pairs[1][0][2] = 0.0  # a zero row: orthogonal to everything (cost 1)
    got = cosine_cost_triples(pairs)
    assert got.shape == (9, 5, 5)
    i = 0
    for x, y in pairs:
        for a, b in ((x, y), (x, x), (y, y)):
            for r in range(5):
                for c in range(5):
                    # the safe norm: sqrt(|a|^2 + eps), so a zero row has cosine 0 with all
                    na = math.sqrt(float(a[r] @ a[r]) + EPS)
                    nb = math.sqrt(float(b[c] @ b[c]) + EPS)
                    cos = float(a[r] @ b[c]) / (na * nb)
                    assert math.isclose(float(got[i, r, c]), 1.0 - cos, abs_tol=1e-12)
            i += 1


def test_cosine_cost_triples_gradients():
    pairs = _pairs((3, 2), n=3)
    flat = [t for p in pairs for t in p]

    def costs(*ts):
        return cosine_cost_triples([(ts[0], ts[1]), (ts[2], ts[3])])

    assert torch.autograd.gradcheck(costs, flat)
    want = torch.stack([ground_cost(a, b) for x, y in pairs for a, b in ((x, y), (x, x), (y, y))])
    w = torch.linspace(0, 1, want.numel(), dtype=want.dtype).view_as(want)
    g_got = torch.autograd.grad(costs(*flat), flat, w)
    g_want = torch.autograd.grad(want, flat, w)
    for a, b in zip(g_got, g_want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_many_units_on_an_accelerator_equal_each_unit_on_the_cpu():
    """Units of different feature sizes (padded on the accelerator): the divergences and their
    gradients equal the CPU path's unit-by-unit ones; the ops do not grow with equal-size pairs."""
    div = SinkhornDivergence(1.0, 6, "cosine", detach_plan=True)
    pairs = _pairs((16, 4, 16, 1))
    flat = [t for p in pairs for t in p]
    with sized_for("accelerator"):
        got = div.many(pairs)
    with sized_for("cpu"):
        want = torch.stack([div(x, y) for x, y in pairs])
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    w = torch.tensor([1.0, -2.0, 0.5, 3.0], dtype=torch.float64)
    for a, b in zip(
        torch.autograd.grad(got, flat, w), torch.autograd.grad(want, flat, w), strict=True
    ):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)
    ops = []
    for k in (2, 5):
        same_size = _pairs((8,) * k)
        with sized_for("accelerator"), DispatchTally() as t:
            div.many(same_size)
        ops.append(t.ops)
    assert ops[0] == ops[1]


def test_feedback_unit_accelerator_features_equal_cpu_features():
    torch.manual_seed(9)
    unit = FeedbackAgreement((8, 4, 4), (4, 8, 8), SinkhornDivergence(), num_caps=4).double()
    hi, lo = (
        torch.randn(3, 8, 4, 4, dtype=torch.float64),
        torch.randn(3, 4, 8, 8, dtype=torch.float64),
    )
    _assert_paths_agree(unit, hi, lo)


def _plain_sinkhorn(cost: torch.Tensor, eps: float, iters: int) -> torch.Tensor:
    """Eq. 9 as printed, no logarithms (float64): u = a / (K v), v = b / (K^T u) from v = 1/M."""
    k = torch.exp(-cost / eps)
    n, m = cost.shape
    v = torch.full((m,), 1.0 / m, dtype=cost.dtype)
    for _ in range(iters):
        u = (1.0 / n) / (k @ v)
        v = (1.0 / m) / (k.t() @ u)
    return u[:, None] * k * v[None, :]


@pytest.mark.parametrize("eps", [1.0, 0.2])
def test_square_sinkhorn_plan_on_an_accelerator(eps):
    """Square problems on the accelerator path: the plain iteration's plan (float64, each problem
    of a batch), and the CPU path's plan and gradient (the loop is differentiated through)."""
    g = torch.Generator().manual_seed(10)
    cost = (torch.rand(3, 6, 6, generator=g, dtype=torch.float64) * 2).requires_grad_()
    with sized_for("accelerator"), DispatchTally() as t:
        acc = sinkhorn_log_plan(cost, eps, 7)
    assert t.op_names["aten.logsumexp"] == 2 * 7 and t.ops <= 4 * 7 + 6
    for i in range(3):
        want = _plain_sinkhorn(cost[i].detach(), eps, 7)
        torch.testing.assert_close(acc[i].exp(), want, rtol=1e-10, atol=1e-14)
    with sized_for("cpu"):
        cpu = sinkhorn_log_plan(cost, eps, 7)
    torch.testing.assert_close(acc, cpu, rtol=1e-12, atol=1e-12)
    w = torch.cos(torch.arange(cost.numel(), dtype=cost.dtype)).view_as(cost)
    (d_acc,) = torch.autograd.grad(acc, cost, w)
    (d_cpu,) = torch.autograd.grad(cpu, cost, w)
    torch.testing.assert_close(d_acc, d_cpu, rtol=1e-10, atol=1e-12)
