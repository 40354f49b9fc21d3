"""Votes from bfloat16 inputs (``votes_in_bf16``), checked against float64 computations.

The references here are independent of the library: votes by ``einsum`` in float64, dynamic
routing (Sabour et al. 2017, eqs. 1-3: softmax over parents, weighted sum, squash,
dot-product agreement) written out below in float64, itself checked against the per-sample
loop of ``tests/caps/reference.py``, and convolutional neighbourhoods gathered by a loop.

Error model of the switch. Each input element is rounded to the nearest bfloat16 value:
``fl(x) = x (1 + d)`` with ``|d| <= 2^-8`` (8 significant bits, round to nearest). A product
of two rounded values is exact in float32 (8 + 8 significant bits fit in 24), and off from the
exact product by ``|(1 + d1)(1 + d2) - 1| <= 2^-7 + 2^-16``. Summing ``K = in_dim`` such
products in float32 adds at most ``gamma_K = K u / (1 - K u)``, ``u = 2^-24``, times the sum of
their magnitudes (Higham, Accuracy and Stability of Numerical Algorithms, eq. 3.5). So per vote
element, with ``S = sum_k |W_k| |u_k|``:

    |u_hat - W u| <= (2^-7 + 2^-16 + gamma_K (1 + 2^-8)^2) S.

A float32 product of unrounded inputs is bounded by ``gamma_K S`` alone (about ``1e-6 S`` for
``K = 16``), which is what the not-exact checks below rule out.
"""

from __future__ import annotations

import pytest
import torch

from selfcaps.caps import ConvCaps2d, DenseCaps, squash, use_fused_routing, votes_in_bf16
from selfcaps.caps import layers as caps_layers
from selfcaps.caps.fused_routing import fused_dense_routing
from tests.caps.reference import dynamic_routing_loop

F64 = torch.float64
U32 = 2.0**-24
ITERS = 3
DEVICES = [
    "cpu",
    pytest.param(
        "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
    ),
]


def _gamma(k: int) -> float:
    return k * U32 / (1 - k * U32)


def _bf16_bound(k: int) -> float:
    """Relative bound of a vote element under bfloat16 inputs (module docstring)."""
    return 2.0**-7 + 2.0**-16 + _gamma(k) * (1 + 2.0**-8) ** 2


def _rounded(t: torch.Tensor) -> torch.Tensor:
    """``t`` rounded to bfloat16 values, in float64."""
    return t.detach().to(torch.bfloat16).to(F64)


def votes64(u: torch.Tensor, weight: torch.Tensor, out_caps: int) -> torch.Tensor:
    """``u_hat[b, i, j] = W_ij^T u[b, i]`` in float64, ``(B, N, M, D)``."""
    B, N, _ = u.shape
    return torch.einsum("bnk,nke->bne", u.to(F64), weight.to(F64)).reshape(B, N, out_caps, -1)


def vote_scale64(u: torch.Tensor, weight: torch.Tensor, out_caps: int) -> torch.Tensor:
    """``S = sum_k |W_k| |u_k|`` per vote element, ``(B, N, M, D)``."""
    return votes64(u.detach().abs(), weight.detach().abs(), out_caps)


def squash64(s: torch.Tensor) -> torch.Tensor:
    """Eq. 1: ``|s|^2 / (1 + |s|^2) * s / |s|``."""
    n2 = (s * s).sum(-1, keepdim=True)
    return s * n2 / (1 + n2) / n2.sqrt()


def route64(u_hat: torch.Tensor, iters: int = ITERS) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic routing in float64 (eqs. 1-3), differentiable: ``(v, c)``."""
    B, N, M, _ = u_hat.shape
    logits = u_hat.new_zeros(B, N, M)
    for it in range(iters):
        c = torch.softmax(logits, dim=2)
        v = squash64(torch.einsum("bnm,bnmd->bmd", c, u_hat))
        if it < iters - 1:
            logits = logits + torch.einsum("bnmd,bmd->bnm", u_hat, v)
    return v, c


def conv_children64(x: torch.Tensor, k: int, stride: int, pad: int) -> torch.Tensor:
    """Neighbourhoods of a capsule map ``(B, T, H, W, D)`` by a loop: ``(B*Ho*Wo, T*k*k, D)``.

    Children are ordered type-major, then kernel offset row-major; rows batch-major, then
    output position row-major (the layout of ``ConvCaps2d``).
    """
    B, T, H, W, D = x.shape
    xp = x.new_zeros(B, T, H + 2 * pad, W + 2 * pad, D)
    xp[:, :, pad : pad + H, pad : pad + W] = x
    Ho, Wo = (H + 2 * pad - k) // stride + 1, (W + 2 * pad - k) // stride + 1
    rows = []
    for b in range(B):
        for ho in range(Ho):
            for wo in range(Wo):
                kids = [
                    xp[b, t, ho * stride + dy, wo * stride + dx]
                    for t in range(T)
                    for dy in range(k)
                    for dx in range(k)
                ]
                rows.append(torch.stack(kids))
    return torch.stack(rows)


def _dense(device: str) -> tuple[DenseCaps, torch.Tensor]:
    torch.manual_seed(0)
    layer = DenseCaps(64, 16, 10, 16, iters=ITERS).to(device)  # weights N(0, 0.1), as CoCa
    u = squash(torch.randn(8, 64, 16, device=device))  # children are squashed capsules
    return layer, u


def _conv(device: str) -> tuple[ConvCaps2d, torch.Tensor]:
    torch.manual_seed(1)
    layer = ConvCaps2d(4, 8, 3, 8, kernel_size=3, stride=2, padding=1, iters=ITERS).to(device)
    x = squash(torch.randn(2, 4, 7, 7, 8, device=device))
    return layer, x


def _children64(layer, x64: torch.Tensor) -> torch.Tensor:
    """The children ``(B', N, Din)`` that ``layer`` routes, from float64 inputs."""
    if isinstance(layer, DenseCaps):
        return x64
    return conv_children64(x64, layer.kernel_size[0], layer.stride[0], layer.padding[0])


def _forward64(layer, x64: torch.Tensor, w64: torch.Tensor) -> torch.Tensor:
    """Float64 parent poses of ``layer`` for inputs ``x64`` and weight ``w64``."""
    v, _ = route64(votes64(_children64(layer, x64), w64, layer.out_caps))
    if isinstance(layer, DenseCaps):
        return v
    k, st, p = layer.kernel_size[0], layer.stride[0], layer.padding[0]
    B, _, H, W, _ = x64.shape
    Ho, Wo = (H + 2 * p - k) // st + 1, (W + 2 * p - k) // st + 1
    return v.view(B, Ho, Wo, layer.out_caps, layer.out_dim).permute(0, 3, 1, 2, 4)


def _reference(layer, x: torch.Tensor, rounded: bool = False) -> torch.Tensor:
    """Float64 parent poses at the inputs (``rounded``: at their bfloat16 values)."""
    cast = _rounded if rounded else (lambda t: t.detach().to(F64))
    return _forward64(layer, cast(x), cast(layer.weight))


def _float32_routing_tol(n_children: int) -> float:
    """Absolute tolerance of a float32 routing of ``n_children`` children (|poses| < 1).

    Each weighted sum of ``N`` votes carries float32 rounding of order ``N 2^-24`` times the
    sum of magnitudes (below 1 here), over three iterations: ``3 N 2^-24`` (1.1e-5 for 64
    children; measured: under 1e-6).
    """
    return ITERS * n_children * U32


def test_float64_reference_routing_matches_loop():
    u_hat = torch.randn(2, 5, 3, 4, dtype=F64)
    v, c = route64(u_hat)
    v_ref, c_ref = dynamic_routing_loop(u_hat, ITERS)
    torch.testing.assert_close(v, v_ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(c, c_ref, rtol=0, atol=1e-12)


def test_conv_children_reference_matches_layer_at_float64():
    layer, x = _conv("cpu")
    layer = layer.double()
    torch.testing.assert_close(layer(x.double()), _reference(layer, x), rtol=0, atol=1e-12)


def test_votes_within_bf16_rounding_bound_and_not_exact(monkeypatch):
    """The votes the readable path routes under the switch: bound holds, float32 bound does not."""
    seen: list[torch.Tensor] = []
    real = caps_layers.dynamic_routing

    def spy(u_hat, *args, **kwargs):
        seen.append(u_hat.detach())
        return real(u_hat, *args, **kwargs)

    monkeypatch.setattr(caps_layers, "dynamic_routing", spy)
    layer, u = _dense("cpu")
    with use_fused_routing(False), votes_in_bf16(True):
        layer(u)
    (votes,) = seen
    K = layer.in_dim
    S = vote_scale64(u, layer.weight, layer.out_caps)
    err = (votes.to(F64) - votes64(u, layer.weight.detach(), layer.out_caps)).abs()
    assert votes.dtype == torch.float32
    assert bool((err <= _bf16_bound(K) * S).all())
    assert float((err / S).max()) > 100 * _gamma(K)  # bfloat16 rounding, not float32's
    # Exactly bfloat16-rounded inputs, float32 accumulation of exact products.
    err_r = (votes.to(F64) - votes64(_rounded(u), _rounded(layer.weight), layer.out_caps)).abs()
    S_r = vote_scale64(_rounded(u), _rounded(layer.weight), layer.out_caps)
    assert bool((err_r <= _gamma(K) * S_r).all())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("make", [_dense, _conv], ids=["DenseCaps", "ConvCaps2d"])
def test_routed_output_close_to_float64(make, fused, device):
    """Parent poses under the switch, against float64 routing.

    (a) Against float64 at the bfloat16-rounded inputs: float32 routing error only
    (:func:`_float32_routing_tol`), so the switch rounds exactly the inputs and nothing else.
    (b) Against float64 at the original inputs: the inputs' rounding moves each vote by at most
    ``_bf16_bound(K) S``; with the coefficients held fixed a parent's total input moves by at
    most ``e_j = _bf16_bound(K) max_d sum_i c_ij S_ij``, and squash is 0.65-Lipschitz. The
    coefficients themselves move with the agreements, which carry the same relative error; we
    allow ``2 max_j e_j`` for both (measured: below 0.1 of it, rounding errors cancel).
    (c) Not exact: the error in (b) exceeds ten times the float32 tolerance of (a).
    """
    layer, x = make(device)
    with use_fused_routing(fused), votes_in_bf16(True):
        v = layer(x)
    assert v.dtype == torch.float32
    v = v.detach().cpu().to(F64)
    layer, x = layer.cpu(), x.cpu()
    n_children = layer.weight.shape[0]
    tol32 = _float32_routing_tol(n_children)
    assert float((v - _reference(layer, x, rounded=True)).abs().max()) <= tol32
    ref = _reference(layer, x)
    kids, w = _children64(layer, x.to(F64)), layer.weight.detach().to(F64)
    S = vote_scale64(kids, w, layer.out_caps)
    _, c = route64(votes64(kids, w, layer.out_caps))
    e = _bf16_bound(layer.weight.shape[1]) * torch.einsum("bnm,bnmd->bmd", c, S).amax()
    err = float((v - ref).abs().max())
    assert err <= 2 * float(e)
    assert err > 10 * tol32


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("make", [_dense, _conv], ids=["DenseCaps", "ConvCaps2d"])
def test_gradients_flow_and_are_close_to_float64(make, fused, device):
    """Gradients under the switch are straight-through: the float32 gradient at the rounded inputs.

    (a) Against float64 autograd at the rounded inputs: norm-relative error below 1e-5
    (float32 routing; measured: about 3e-7). (b) Against float64 at the original inputs: the
    gradient is a smooth function of inputs each moved by at most ``2^-8`` relative; we allow
    ``4 * 2^-8`` norm-relative (measured: about 2e-3) and require more than 1e-4, i.e. that the
    rounding is there. All gradients finite.
    """
    layer, x = make(device)
    x = x.clone().requires_grad_()
    g = torch.randn(layer(x).shape, dtype=F64, generator=torch.Generator().manual_seed(2))
    with use_fused_routing(fused), votes_in_bf16(True):
        v = layer(x)
    grads = torch.autograd.grad((v.cpu().to(F64) * g).sum(), [x, layer.weight])
    grads = [t.cpu().to(F64) for t in grads]
    layer, x = layer.cpu(), x.detach().cpu()

    def reference(cast):
        x64, w64 = cast(x).requires_grad_(), cast(layer.weight).requires_grad_()
        return torch.autograd.grad((_forward64(layer, x64, w64) * g).sum(), [x64, w64])

    for got, at_rounded, at_original in zip(
        grads, reference(_rounded), reference(lambda t: t.detach().to(F64)), strict=True
    ):
        assert bool(torch.isfinite(got).all())
        assert float((got - at_rounded).norm() / at_rounded.norm()) < 1e-5
        rel = float((got - at_original).norm() / at_original.norm())
        assert 1e-4 < rel < 4 * 2.0**-8


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("make", [_dense, _conv], ids=["DenseCaps", "ConvCaps2d"])
def test_default_off_is_bit_identical_and_float32_accurate(make, fused):
    """Off (the default, or ``votes_in_bf16(False)``) computes what it computed before the switch.

    Bit for bit the same output as an explicit ``False``, and as accurate as float32 routing
    (which bfloat16 votes are not: ``test_routed_output_close_to_float64`` (c)).
    """
    layer, x = make("cpu")
    with use_fused_routing(fused):
        default = layer(x)
        with votes_in_bf16(False):
            off = layer(x)
        with votes_in_bf16(True), votes_in_bf16(False):
            nested_off = layer(x)
    assert torch.equal(default, off) and torch.equal(default, nested_off)
    tol32 = _float32_routing_tol(layer.weight.shape[0])
    assert float((default.detach().to(F64) - _reference(layer, x)).abs().max()) <= tol32


def test_switch_restores_the_previous_setting_after_an_error():
    layer, u = _dense("cpu")
    before = layer(u)
    with pytest.raises(RuntimeError, match="boom"), votes_in_bf16(True):
        raise RuntimeError("boom")
    assert torch.equal(layer(u), before)


def test_fused_argument_default_is_off_and_low_precision_routing_is_untouched():
    """``fused_dense_routing``'s ``votes_bf16`` defaults to off; in bfloat16 routing it is moot."""
    layer, u = _dense("cpu")
    w = layer.weight.detach()
    v_default, _ = fused_dense_routing(u, w, 10)
    v_off, _ = fused_dense_routing(u, w, 10, votes_bf16=False)
    assert torch.equal(v_default, v_off)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low, _ = fused_dense_routing(u, w, 10, float32_under_autocast=False)
        low_switch, _ = fused_dense_routing(u, w, 10, float32_under_autocast=False, votes_bf16=True)
    assert low.dtype == torch.bfloat16 and torch.equal(low, low_switch)
