import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from selfcaps.caps import safe_norm, squash, unit_vector, unsquash


def test_squash_hand_computed():
    # |s|^2 = 25 -> scale 25/26, direction (0.6, 0.8)
    v = squash(torch.tensor([3.0, 4.0], dtype=torch.float64))
    assert torch.allclose(v, torch.tensor([0.6, 0.8], dtype=torch.float64) * 25 / 26, atol=1e-12)
    # 1-D unit vector: |v| = 1/2
    assert squash(torch.tensor([0.0, 1.0], dtype=torch.float64))[1].item() == pytest.approx(0.5)


def test_squash_norms_in_unit_interval():
    torch.manual_seed(0)
    s = torch.randn(1000, 16) * torch.logspace(-6, 3, 1000).unsqueeze(-1)
    n = squash(s).norm(dim=-1)
    assert (n >= 0).all() and (n < 1).all()
    # monotone in |s|
    order = s.norm(dim=-1).argsort()
    assert (n[order][1:] >= n[order][:-1] - 1e-6).all()  # float32 rounding near 1


@pytest.mark.parametrize("scale", [0.0, 1e-12, 1e6, 1e30])
@pytest.mark.parametrize("fn", [squash, unit_vector, safe_norm])
def test_extreme_inputs_finite_value_and_gradient(fn, scale):
    s = (torch.ones(3, 8) * scale).requires_grad_(True)
    out = fn(s)
    assert torch.isfinite(out).all()
    out.sum().backward()
    assert torch.isfinite(s.grad).all()


@pytest.mark.parametrize("fn", [squash, unit_vector, safe_norm, unsquash])
def test_float16_zero_vectors_stay_finite(fn):
    """The epsilons (1e-12, 1e-20) vanish in float16: float16 is computed in float32."""
    s = torch.tensor([[0.0, 0.0, 0.0], [0.3, -0.4, 0.0]], dtype=torch.float16, requires_grad=True)
    out = fn(s)
    assert out.dtype == torch.float16 and torch.isfinite(out).all()
    if fn in (squash, safe_norm):  # the others' gradients at zero (1e6, 1e10) exceed float16
        (grad,) = torch.autograd.grad(out.float().sum(), s)
        assert torch.isfinite(grad).all()
    want = fn(s.detach().double())
    torch.testing.assert_close(out.double(), want, rtol=1e-3, atol=1e-3)


def test_squash_of_huge_is_unit_direction():
    v = squash(torch.tensor([1e30, -1e30]))
    assert torch.allclose(v, torch.tensor([1.0, -1.0]) / math.sqrt(2.0))


@pytest.mark.parametrize("fn", [squash, unsquash, unit_vector])
def test_nan_propagates_visibly(fn):
    s = torch.tensor([[0.1, float("nan"), 0.2], [0.1, 0.2, 0.3]])
    out = fn(s)
    assert torch.isnan(out[0]).all()
    assert torch.isfinite(out[1]).all()


def test_unsquash_inverts_squash_float64_over_six_decades():
    torch.manual_seed(0)
    directions = torch.nn.functional.normalize(torch.randn(500, 16, dtype=torch.float64), dim=-1)
    norms = torch.logspace(-3, 3, 500, dtype=torch.float64).unsqueeze(-1)
    s = directions * norms
    back = unsquash(squash(s))
    rel = (back - s).norm(dim=-1) / s.norm(dim=-1)
    assert rel.max() < 1e-5


def test_unsquash_float32_round_trip_where_representable():
    torch.manual_seed(0)
    s = (
        torch.nn.functional.normalize(torch.randn(200, 8), dim=-1)
        * torch.logspace(-1, 1, 200)[:, None]
    )
    rel = (unsquash(squash(s)) - s).norm(dim=-1) / s.norm(dim=-1)
    assert rel.max() < 1e-3


def test_unsquash_of_unit_length_is_finite():
    v = torch.tensor([[1.0, 0.0], [0.0, 0.0]], requires_grad=True)
    out = unsquash(v)
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(v.grad).all()


def test_gradcheck_squash_unsquash():
    torch.manual_seed(0)
    s = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(squash, (s,))
    big = (torch.randn(3, 5, dtype=torch.float64) * 7).requires_grad_(True)
    assert torch.autograd.gradcheck(squash, (big,))
    v = (
        torch.nn.functional.normalize(torch.randn(4, 5, dtype=torch.float64), dim=-1)
        * torch.rand(4, 1, dtype=torch.float64).mul(0.8).add(0.1)
    ).requires_grad_(True)
    assert torch.autograd.gradcheck(unsquash, (v,))


def test_squash_gradient_at_zero_is_zero():
    s = torch.zeros(2, 4, requires_grad=True)
    squash(s).sum().backward()
    assert torch.equal(s.grad, torch.zeros(2, 4))


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.integers(1, 6), st.integers(1, 9), st.integers(-1, 1))
def test_shapes_preserved_any_dim(a, b, c, dim):
    x = torch.randn(a, b, c)
    assert squash(x, dim=dim).shape == x.shape
    assert unsquash(squash(x, dim=dim), dim=dim).shape == x.shape
    assert safe_norm(x, dim=dim).shape == x.sum(dim).shape
