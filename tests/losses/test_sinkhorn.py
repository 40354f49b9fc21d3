"""Sinkhorn divergence (log domain) against a direct float64 computation and geomloss; KL; units."""

import math

import numpy as np
import pytest
import torch
from geomloss import SamplesLoss

from selfcaps.losses import (
    FeedbackAgreement,
    KLDivergence,
    SinkhornDivergence,
    ground_cost,
    sinkhorn_cost,
    sinkhorn_log_plan,
)

COSTS = ("cosine", "sqeuclidean", "euclidean")


def _cost_np(x, y, cost):
    if cost == "cosine":
        xn = x / np.linalg.norm(x, axis=1, keepdims=True)
        yn = y / np.linalg.norm(y, axis=1, keepdims=True)
        return 1.0 - xn @ yn.T
    d2 = ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1)
    return d2 if cost == "sqeuclidean" else np.sqrt(d2 + 1e-12)  # the safe norm


def _plain_sinkhorn(C, eps, iters):
    """The textbook scaling iteration (eq. 9) in float64, no logarithms: P = diag(u) K diag(v)."""
    n, m = C.shape
    K = np.exp(-C / eps)
    a, b = np.full(n, 1.0 / n), np.full(m, 1.0 / m)
    v = np.full(m, 1.0 / m)
    for _ in range(iters):
        u = a / (K @ v)
        v = b / (K.T @ u)
    return u[:, None] * K * v[None, :]


def _w_np(x, y, eps, iters, cost, objective="transport"):
    C = _cost_np(x, y, cost)
    P = _plain_sinkhorn(C, eps, iters)
    w = (P * C).sum()
    if objective == "entropic":
        ab = 1.0 / (C.shape[0] * C.shape[1])
        w += eps * ((P * np.log(P / ab)).sum() - P.sum() + 1.0)
    return w


def _clouds(n=7, m=7, d=3, shift=0.7, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    y = torch.randn(m, d, generator=g, dtype=torch.float64) + shift
    return x, y


def test_ground_costs_hand_computed():
    x = torch.tensor([[1.0, 0.0], [0.0, 0.0]])
    y = torch.tensor([[0.0, 2.0], [3.0, 4.0]])
    torch.testing.assert_close(ground_cost(x, y, "cosine"), torch.tensor([[1.0, 0.4], [1.0, 1.0]]))
    torch.testing.assert_close(
        ground_cost(x, y, "sqeuclidean"), torch.tensor([[5.0, 20.0], [4.0, 25.0]])
    )
    torch.testing.assert_close(
        ground_cost(x, y, "euclidean"), torch.tensor([[5.0, 20.0], [4.0, 25.0]]).sqrt()
    )
    with pytest.raises(ValueError, match="cost"):
        ground_cost(x, y, "manhattan")


@pytest.mark.parametrize("eps", [1.0, 0.3, 0.05])
@pytest.mark.parametrize("cost", COSTS)
def test_log_domain_plan_equals_plain_float64_iteration(eps, cost):
    x, y = _clouds(6, 5)
    C = ground_cost(x, y, cost)
    P = sinkhorn_log_plan(C, eps, iters=10).exp()
    np.testing.assert_allclose(P.numpy(), _plain_sinkhorn(C.numpy(), eps, 10), rtol=1e-10)
    np.testing.assert_allclose(P.sum(0).numpy(), np.full(5, 1 / 5), rtol=1e-12)  # exact columns


@pytest.mark.parametrize("objective", ["transport", "entropic"])
@pytest.mark.parametrize("debias", [True, False])
@pytest.mark.parametrize("cost", COSTS)
def test_divergence_equals_direct_float64_computation(cost, debias, objective):
    x, y = _clouds()
    eps, iters = 0.5, 10
    div = SinkhornDivergence(eps, iters, cost, debias=debias, objective=objective)
    xn, yn = x.numpy(), y.numpy()
    expected = _w_np(xn, yn, eps, iters, cost, objective)
    if debias:  # eq. 11
        expected = (
            2 * expected
            - _w_np(xn, xn, eps, iters, cost, objective)
            - _w_np(yn, yn, eps, iters, cost, objective)
        )
    assert div(x, y).item() == pytest.approx(expected, rel=1e-10)


def test_debiased_entropic_divergence_is_twice_geomloss():
    # geomloss' debiased value is OT(x,y) - OT(x,x)/2 - OT(y,y)/2: half of eq. 11 (converged).
    x, y = _clouds(12, 12)
    eps = 2.0

    def sqdist(a, b):  # geomloss' tensorized custom cost: batched (B, N, M)
        return ((a[:, :, None, :] - b[:, None, :, :]) ** 2).sum(-1)

    geo = SamplesLoss(
        "sinkhorn", p=2, blur=math.sqrt(eps), debias=True, backend="tensorized",
        cost=sqdist, scaling=0.999,
    )(x, y)  # fmt: skip
    ours = SinkhornDivergence(eps, 500, "sqeuclidean", objective="entropic")(x, y)
    assert ours.item() == pytest.approx(2 * geo.item(), rel=1e-5)


def test_log_domain_survives_tiny_epsilon_where_plain_iteration_fails():
    x, y = _clouds()
    C = ground_cost(x.float(), y.float(), "sqeuclidean")
    with np.errstate(all="ignore"):
        plain = _plain_sinkhorn(C.numpy().astype(np.float32), 1e-3, 10)
    assert not np.isfinite(plain).all()  # exp(-C/eps) underflows to 0: 0/0
    P = sinkhorn_log_plan(C, 1e-3, 10).exp()
    assert torch.isfinite(P).all()
    torch.testing.assert_close(P.sum(0), torch.full((7,), 1 / 7), rtol=1e-3, atol=0)


@pytest.mark.parametrize("objective", ["transport", "entropic"])
@pytest.mark.parametrize("cost", COSTS)
def test_identical_clouds_give_zero_and_different_ones_positive(cost, objective):
    x, y = _clouds()
    for eps in (1.0, 0.1, 1e-3):
        div = SinkhornDivergence(eps, 10, cost, objective=objective)
        assert div(x, x).item() == 0.0
        assert div(x, y).item() > 0.0


@pytest.mark.parametrize("detach_plan", [False, True])
@pytest.mark.parametrize("cost", COSTS)
@pytest.mark.parametrize("eps", [1.0, 1e-1, 1e-2, 1e-3])
def test_gradients_are_finite_for_identical_inputs_and_small_epsilon(eps, cost, detach_plan):
    x, y = _clouds()
    div = SinkhornDivergence(eps, 10, cost, detach_plan=detach_plan)
    for a, b in ((x, x.clone()), (x, y)):
        a = a.float().requires_grad_(True)
        b = b.float().requires_grad_(True)
        div(a, b).backward()
        assert torch.isfinite(a.grad).all() and torch.isfinite(b.grad).all()


def test_detached_plan_gradient_flows_through_the_cost_only():
    x, y = _clouds()
    x.requires_grad_(True)
    sinkhorn_cost(x, y, 0.5, 10, "sqeuclidean", detach_plan=True).backward()
    P = sinkhorn_log_plan(ground_cost(x, y, "sqeuclidean"), 0.5, 10).exp().detach()
    # d/dx_i sum_j P_ij |x_i - y_j|^2 = 2 sum_j P_ij (x_i - y_j)
    expected = 2 * (P.sum(1, keepdim=True) * x - P @ y)
    torch.testing.assert_close(x.grad, expected.detach())


def test_kl_alternative_hand_computed():
    x = torch.tensor([[0.0, 0.0]])  # softmax (1/2, 1/2)
    y = torch.tensor([[math.log(3.0), 0.0]])  # softmax (3/4, 1/4)
    expected = 0.75 * math.log(0.75 / 0.5) + 0.25 * math.log(0.25 / 0.5)
    assert KLDivergence()(x, y).item() == pytest.approx(expected, rel=1e-6)
    assert KLDivergence()(y, y).item() == pytest.approx(0.0, abs=1e-7)


def test_invalid_settings_are_named():
    with pytest.raises(ValueError, match="epsilon"):
        SinkhornDivergence(epsilon=0.0)
    with pytest.raises(ValueError, match="cost"):
        SinkhornDivergence(cost="l1")
    with pytest.raises(ValueError, match="objective"):
        SinkhornDivergence(objective="dual")


@pytest.mark.parametrize(
    ("hi", "lo", "num_caps"), [((16, 4, 4), (8, 8, 8), 4), ((8, 8, 8), (8, 8, 8), None)]
)
def test_feedback_unit_shapes_and_gradients(hi, lo, num_caps):
    unit = FeedbackAgreement(hi, lo, SinkhornDivergence(0.5), num_caps=num_caps)
    stride = lo[1] // hi[1]
    assert unit.generator.deconv.stride == (stride, stride)
    assert unit.generator.deconv.groups == (num_caps or 1)
    higher = torch.randn(5, *hi, requires_grad=True)
    lower = torch.randn(5, *lo, requires_grad=True)
    g = unit.generator(higher)
    assert g.shape == (5, *lo)
    if num_caps:  # encapsulated: squashed capsules
        assert (g.view(5, num_caps, -1, *lo[1:]).norm(dim=2) < 1).all()
    assert unit.extractor(lower).shape == (5, 4)  # f_phi: 8x8 -> 2x2
    loss = unit(higher, lower)
    loss.backward()
    assert torch.isfinite(loss)
    for p in unit.parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all()
    assert higher.grad.abs().sum() > 0 and lower.grad.abs().sum() > 0


def test_feedback_unit_rejects_unrelated_sizes():
    with pytest.raises(ValueError, match="twice"):
        FeedbackAgreement((8, 2, 2), (8, 8, 8), KLDivergence())


@pytest.mark.parametrize("objective", ["transport", "entropic"])
@pytest.mark.parametrize("detach_plan", [False, True])
def test_batched_debiased_divergence_equals_three_problems(objective, detach_plan):
    """On an accelerator eq. 11's three problems run as one batched Sinkhorn loop: same value
    and gradients as three separate ones (float64), and one logsumexp pair per iteration."""
    from selfcaps.caps.chunking import sized_for
    from selfcaps.eval.dispatch import DispatchTally

    g = torch.Generator().manual_seed(4)
    x = torch.randn(6, 5, generator=g, dtype=torch.float64, requires_grad=True)
    y = torch.randn(6, 5, generator=g, dtype=torch.float64, requires_grad=True)
    div = SinkhornDivergence(0.5, 7, "sqeuclidean", objective=objective, detach_plan=detach_plan)
    got = []
    for kind in ("cpu", "accelerator"):
        with sized_for(kind), DispatchTally() as t:
            d = div(x, y)
            got.append((d, *torch.autograd.grad(d, (x, y))))
        if kind == "accelerator":
            assert t.op_names["aten.logsumexp"] == 2 * 7
    for a, b in zip(*got, strict=True):
        torch.testing.assert_close(a, b)


def test_batched_plan_equals_each_problem():
    g = torch.Generator().manual_seed(5)
    q = torch.rand(3, 4, 6, generator=g, dtype=torch.float64)
    batched = sinkhorn_log_plan(q, 0.3, 5)
    for i in range(3):
        torch.testing.assert_close(batched[i], sinkhorn_log_plan(q[i], 0.3, 5))
