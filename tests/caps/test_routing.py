import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from selfcaps.caps import dynamic_routing, em_routing, self_routing
from tests.caps.reference import dynamic_routing_loop, em_routing_loop, self_routing_loop

torch.manual_seed(0)


@pytest.mark.parametrize("agreement", ["dot", "cosine"])
@pytest.mark.parametrize("normalize", ["parents", "children"])
@pytest.mark.parametrize("iters", [1, 3])
def test_dynamic_routing_matches_loop(agreement, normalize, iters):
    u = torch.randn(3, 7, 4, 5, dtype=torch.float64)
    v, c = dynamic_routing(u, iters=iters, agreement=agreement, normalize=normalize)
    v_ref, c_ref = dynamic_routing_loop(u, iters, agreement, normalize)
    torch.testing.assert_close(v, v_ref, atol=1e-6, rtol=0)
    torch.testing.assert_close(c, c_ref, atol=1e-6, rtol=0)


def test_coupling_sums_to_one():
    u = torch.randn(2, 9, 5, 4)
    _, c = dynamic_routing(u, iters=3)
    torch.testing.assert_close(c.sum(-1), torch.ones(2, 9))
    _, c = dynamic_routing(u, iters=3, normalize="children")
    torch.testing.assert_close(c.sum(1), torch.ones(2, 5))


@pytest.mark.parametrize("agreement", ["dot", "cosine"])
def test_dynamic_routing_gradcheck(agreement):
    u = torch.randn(2, 5, 3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: dynamic_routing(x, 3, agreement)[0], (u,))


def test_detach_intermediate_equals_last_iteration_only():
    u = torch.randn(2, 6, 3, 4, dtype=torch.float64, requires_grad=True)
    v, _ = dynamic_routing(u, iters=3, detach_intermediate=True)
    g = torch.randn_like(v)
    (grad,) = torch.autograd.grad((v * g).sum(), u)
    # Independent: coefficients computed without autograd, then one differentiable pass.
    with torch.no_grad():
        _, c = dynamic_routing(u, iters=3)
    s = (c.unsqueeze(-1) * u).sum(1)
    from selfcaps.caps import squash

    (grad_ref,) = torch.autograd.grad((squash(s) * g).sum(), u)
    torch.testing.assert_close(grad, grad_ref)


def test_routing_extreme_inputs_finite():
    for scale in (0.0, 1e-12, 1e6):
        u = (torch.randn(2, 6, 3, 4) * scale).requires_grad_(True)
        for agreement in ("dot", "cosine"):
            v, c = dynamic_routing(u, 3, agreement)
            v.sum().backward()
            assert torch.isfinite(v).all() and torch.isfinite(c).all()
            assert torch.isfinite(u.grad).all()
            u.grad = None


def test_routing_nan_is_visible():
    u = torch.randn(2, 6, 3, 4)
    u[0, 2, 1, 0] = float("nan")
    v, _ = dynamic_routing(u, 3)
    assert torch.isnan(v[0]).any()
    assert torch.isfinite(v[1]).all()


def test_routing_bad_shapes_raise():
    with pytest.raises(ValueError, match=r"\(B, N, M, D\)"):
        dynamic_routing(torch.randn(3, 4, 5))
    with pytest.raises(ValueError, match="iters"):
        dynamic_routing(torch.randn(1, 2, 3, 4), iters=0)
    with pytest.raises(ValueError, match="agreement"):
        dynamic_routing(torch.randn(1, 2, 3, 4), agreement="dotty")


def test_self_routing_matches_loop_and_gradcheck():
    u = torch.randn(2, 6, 3, 4, dtype=torch.float64, requires_grad=True)
    a = torch.rand(2, 6, dtype=torch.float64, requires_grad=True)
    logits = torch.randn(2, 6, 3, dtype=torch.float64, requires_grad=True)
    v, a_out, c = self_routing(u, a, logits)
    v_ref, a_ref = self_routing_loop(u.detach(), a.detach(), logits.detach())
    torch.testing.assert_close(v, v_ref)
    torch.testing.assert_close(a_out, a_ref)
    torch.testing.assert_close(c.sum(-1), torch.ones(2, 6, dtype=torch.float64))
    assert torch.autograd.gradcheck(lambda *x: self_routing(*x)[:2], (u, a, logits))


def test_self_routing_zero_activations_finite():
    u = torch.randn(2, 6, 3, 4, requires_grad=True)
    a = torch.zeros(2, 6, requires_grad=True)
    v, a_out, _ = self_routing(u, a, torch.zeros(2, 6, 3))
    (v.sum() + a_out.sum()).backward()
    assert torch.isfinite(v).all() and torch.isfinite(u.grad).all() and torch.isfinite(a.grad).all()


def test_em_routing_matches_loop():
    V = torch.randn(2, 6, 3, 4, dtype=torch.float64)
    a = torch.rand(2, 6, dtype=torch.float64)
    bu, ba = torch.randn(3, dtype=torch.float64), torch.randn(3, dtype=torch.float64)
    mu, act, R = em_routing(V, a, bu, ba, iters=3, inverse_temperature=(1.0, 0.01))
    mu_ref, act_ref = em_routing_loop(V, a, bu, ba, [0.01, 0.505, 1.0])
    torch.testing.assert_close(mu, mu_ref)
    torch.testing.assert_close(act, act_ref)
    torch.testing.assert_close(R.sum(-1), torch.ones(2, 6, dtype=torch.float64))


def test_em_routing_gradcheck():
    V = torch.randn(2, 5, 3, 4, dtype=torch.float64, requires_grad=True)
    a = torch.rand(2, 5, dtype=torch.float64).add(0.1).requires_grad_(True)
    bu = torch.randn(3, dtype=torch.float64, requires_grad=True)
    ba = torch.randn(3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda *x: em_routing(*x, iters=3)[:2], (V, a, bu, ba))


@pytest.mark.parametrize("scale", [1e-6, 1.0, 1e3, 1e6])
def test_em_routing_never_nan_with_many_iterations(scale):
    V = (torch.randn(2, 32, 4, 16) * scale).requires_grad_(True)
    a = torch.rand(2, 32)
    a[0] = 0.0  # no active children at all in sample 0
    mu, act, R = em_routing(V, a, torch.zeros(4), torch.zeros(4), iters=10)
    (mu.sum() + act.sum()).backward()
    for t in (mu, act, R, V.grad):
        assert torch.isfinite(t).all()


@settings(max_examples=25, deadline=None)
@given(
    st.integers(1, 4), st.integers(1, 8), st.integers(1, 6), st.integers(1, 5), st.integers(1, 3)
)
def test_shape_contracts(B, N, M, D, iters):
    u = torch.randn(B, N, M, D)
    v, c = dynamic_routing(u, iters)
    assert v.shape == (B, M, D) and c.shape == (B, N, M)
    v, a, c = self_routing(u, torch.rand(B, N), torch.randn(B, N, M))
    assert v.shape == (B, M, D) and a.shape == (B, M) and c.shape == (B, N, M)
    mu, act, R = em_routing(u, torch.rand(B, N), torch.zeros(M), torch.zeros(M), iters)
    assert mu.shape == (B, M, D) and act.shape == (B, M) and R.shape == (B, N, M)
