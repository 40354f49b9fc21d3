"""The accelerator path's squashes against Sabour eq. 1 computed directly, in float64.

``squash_capsules`` (rescaled, any finite input) and ``relu_squash_capsules`` (BatchNorm
outputs: no rescaling in the wide float types, the ReLU inside, parts side by side) are each
held to the textbook formula (values and gradients, from tiny to large inputs), to
``torch.autograd.gradcheck``, and to the op counts their docstrings state; the compiled
function to the eager one.
"""

import pytest
import torch

from selfcaps.caps import squash_channels
from selfcaps.caps.chunking import sized_for
from selfcaps.caps.functional import caps_length, squash, squashed_length
from selfcaps.caps.fused_squash import relu_squash_capsules, squash_capsules
from selfcaps.eval.dispatch import DispatchTally

EPS = 1e-12


def _squash_formula(s: torch.Tensor, dim: int) -> torch.Tensor:
    """Sabour eq. 1 with the safe norm, directly: |s|^2 / (1 + |s|^2) s / sqrt(|s|^2 + eps)."""
    n2 = (s * s).sum(dim, keepdim=True)
    return s * n2 / ((1.0 + n2) * torch.sqrt(n2 + EPS))


def _relu_squash_formula(parts: list[torch.Tensor], num_caps: int) -> torch.Tensor:
    """The parts' capsules side by side (B, T, k, D, H, W), then ReLU and eq. 1 over D."""
    B, C, H, W = parts[0].shape
    caps = torch.stack([p.view(B, num_caps, C // num_caps, H, W) for p in parts], dim=2)
    return _squash_formula(torch.relu(caps), 3)


# ------------------------------------------------------------------ squash
@pytest.mark.parametrize("dim", [0, 2, -1])
def test_squash_capsules_gradcheck(dim):
    g = torch.Generator().manual_seed(0)
    s = torch.randn(3, 4, 5, generator=g, dtype=torch.float64)
    s[1, 1, 1] = 3.0  # entries above 1: the rescaled branch (k > 1)
    s.requires_grad_()
    assert torch.autograd.gradcheck(lambda x: squash_capsules(x, dim), (s,))


def test_squash_capsules_is_eq1_with_its_gradient_at_every_scale():
    g = torch.Generator().manual_seed(1)
    base = torch.randn(6, 3, 4, generator=g, dtype=torch.float64)
    grad = torch.randn(6, 3, 4, generator=g, dtype=torch.float64)
    for scale in (1e-4, 0.3, 1.0, 7.0, 1e6, 1e30):  # 1e30: |s|^2 overflows float32, not float64
        s = (base * scale).requires_grad_()
        got = squash_capsules(s, 1)
        (dgot,) = torch.autograd.grad(got, s, grad)
        s2 = s.detach().clone().requires_grad_()
        want = _squash_formula(s2, 1)
        (dwant,) = torch.autograd.grad(want, s2, grad)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-300)
        torch.testing.assert_close(dgot, dwant, rtol=1e-9, atol=1e-300)


def test_squash_capsules_float32_overflow_zero_and_nan():
    big = torch.full((1, 2, 3), 1e30, requires_grad=True)  # |s|^2 overflows float32
    v = squash_capsules(big, 1)
    torch.testing.assert_close(v.norm(dim=1), torch.ones(1, 3))
    (dv,) = torch.autograd.grad(v.sum(), big)
    assert torch.isfinite(dv).all()
    zero = torch.zeros(2, 4, requires_grad=True)
    v0 = squash_capsules(zero, 1)
    (d0,) = torch.autograd.grad(v0.sum(), zero)
    assert (v0 == 0).all() and (d0 == 0).all()
    nan = torch.tensor([[float("nan"), 1.0], [1.0, 1.0]])
    out = squash_capsules(nan, 1)
    assert out[0].isnan().all() and not out[1].isnan().any()


# ------------------------------------------------------------------ ReLU and squash
def _parts(k: int, scale: float = 1.0, seed: int = 11, dtype=torch.float64) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    parts = [torch.randn(2, 6, 3, 4, generator=g, dtype=torch.float64) * scale for _ in range(k)]
    parts[0][0, :2, 0, 0] = -1.0  # a capsule the ReLU zeroes entirely
    return [p.to(dtype).requires_grad_() for p in parts]


@pytest.mark.parametrize("k", [1, 2, 3])
def test_relu_squash_capsules_gradcheck(k):
    parts = _parts(k)
    assert torch.autograd.gradcheck(lambda *p: relu_squash_capsules(p, 3), parts)


@pytest.mark.parametrize("k", [1, 2])
def test_relu_squash_capsules_is_relu_then_eq1_at_every_scale(k):
    for scale in (1e-5, 0.3, 1.0, 7.0, 1e4, 1e12):
        parts = _parts(k, scale)
        got = relu_squash_capsules(parts, 3)
        assert got.shape == (2, 3, k, 2, 3, 4)
        g = torch.cos(torch.arange(got.numel(), dtype=got.dtype)).view_as(got)
        d_got = torch.autograd.grad(got, parts, g)
        plain = [p.detach().clone().requires_grad_() for p in parts]
        want = _relu_squash_formula(plain, 3)
        d_want = torch.autograd.grad(want, plain, g)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-300)
        for a, b in zip(d_got, d_want, strict=True):
            assert a.is_contiguous()  # what the BatchNorm's backward reads, without a copy
            # f g and 2 F' (s.g) s nearly cancel for g along s (large |s|): both ways of
            # computing lose digits there, relative to the gradient's size, not its entries'
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12 * float(b.abs().max()))


@pytest.mark.parametrize(("k", "forward", "backward"), [(1, 11, 6), (2, 12, 6)])
def test_relu_squash_capsules_ops(k, forward, backward):
    parts = [p.detach().float().requires_grad_() for p in _parts(k)]
    with DispatchTally() as fwd:
        out = relu_squash_capsules(parts, 3)
    g = torch.ones_like(out)
    with DispatchTally() as bwd:
        torch.autograd.grad(out, parts, g)
    assert (fwd.ops, bwd.ops, fwd.syncs + bwd.syncs) == (forward, backward, 0)
    assert "aten.clone" not in bwd.op_names  # each part's gradient is written contiguous


@pytest.mark.parametrize("fn", [squash_capsules, lambda z: relu_squash_capsules([z], 3)])
def test_float16_is_computed_in_float32(fn):
    """In float16 eps (1e-12) vanishes and |s|^2 overflows from entries of 256 / sqrt(D)."""
    z = _parts(1, seed=12)[0].detach() * 400
    z[1, :2] = 0.0  # zero capsules: 0 / 0 if eps vanished
    got = fn(z.half())
    assert got.dtype == torch.float16 and torch.isfinite(got).all()
    torch.testing.assert_close(got, fn(z.half().float()).half(), rtol=0, atol=0)
    want = fn(z)
    torch.testing.assert_close(got.double(), want, rtol=1e-3, atol=1e-3)


def test_relu_squash_capsules_compiled_equals_eager():
    parts = [p.detach().float().requires_grad_() for p in _parts(2, seed=13)]

    def loss(a, b):
        return (
            relu_squash_capsules([a, b], 3) * torch.linspace(-1, 1, 288).view(2, 3, 2, 2, 3, 4)
        ).sum()

    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    got, want = compiled(*parts), loss(*parts)
    torch.testing.assert_close(got, want)
    for a, b in zip(torch.autograd.grad(got, parts), torch.autograd.grad(want, parts), strict=True):
        torch.testing.assert_close(a, b)


def test_relu_squash_capsules_rejects_mismatched_parts():
    with pytest.raises(ValueError, match="split into 4 capsule types"):
        relu_squash_capsules([torch.zeros(1, 6, 2, 2)], 4)
    with pytest.raises(ValueError, match="one shape and dtype"):
        relu_squash_capsules([torch.zeros(1, 6, 2, 2), torch.zeros(1, 6, 2, 3)], 3)


# ------------------------------------------------------------------ lengths
def test_squashed_length_is_caps_length_of_squashed_capsules():
    g = torch.Generator().manual_seed(14)
    for scale in (1e-3, 1.0, 1e3, 1e30):
        v = squash(torch.randn(5, 10, 16, generator=g) * scale)
        assert v.abs().max() <= 1.0
        torch.testing.assert_close(squashed_length(v), caps_length(v), rtol=0, atol=0)
    v64 = squash(torch.randn(4, 3, generator=g, dtype=torch.float64)).requires_grad_()
    want = torch.sqrt((v64.detach() ** 2).sum(-1) + EPS)
    torch.testing.assert_close(squashed_length(v64), want, rtol=1e-15, atol=0)
    assert torch.autograd.gradcheck(squashed_length, (v64,))


@pytest.mark.parametrize("kind", ["cpu", "accelerator"])
def test_squash_channels_float16_zero_capsules_stay_finite(kind):
    x = torch.zeros(2, 6, 2, 2, dtype=torch.float16)
    x[0, :3] = 2.0
    with sized_for(kind):
        got = squash_channels(x, 2)
    assert got.dtype == torch.float16 and torch.isfinite(got).all()
    torch.testing.assert_close(got, squash_channels(x.float(), 2).half(), rtol=0, atol=0)
