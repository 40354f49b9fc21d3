import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from selfcaps.caps import (
    ConvCaps2d,
    DenseCaps,
    PrimaryCaps2d,
    SelfRouting1d,
    SelfRouting2d,
    SelfRoutingDense,
    child_votes,
    dynamic_routing,
    flatten_caps,
    fused_dense_routing,
    route_in_autocast_dtype,
    self_routing,
)
from tests.caps.reference import dynamic_routing_loop, self_routing_loop, votes_loop

torch.manual_seed(0)


def test_child_votes_match_per_sample_matvec():
    u = torch.randn(3, 5, 4, dtype=torch.float64)
    W = torch.randn(5, 4, 2 * 6, dtype=torch.float64)
    torch.testing.assert_close(child_votes(u, W, 2), votes_loop(u, W, 2))


def test_dense_caps_matches_loop_reference():
    layer = DenseCaps(6, 4, 3, 5, iters=3).double()
    u = torch.randn(2, 6, 4, dtype=torch.float64)
    v, c = layer(u, return_coupling=True)
    v_ref, c_ref = dynamic_routing_loop(votes_loop(u, layer.weight.detach(), 3), 3)
    torch.testing.assert_close(v, v_ref, atol=1e-6, rtol=0)
    torch.testing.assert_close(c, c_ref, atol=1e-6, rtol=0)


@pytest.mark.parametrize("agreement", ["dot", "cosine"])
@pytest.mark.parametrize("normalize", ["parents", "children"])
@pytest.mark.parametrize("detach", [False, True])
def test_fused_equals_readable_routing_values_and_gradients(agreement, normalize, detach):
    x = torch.randn(5, 12, 6, dtype=torch.float64, requires_grad=True)
    W = torch.randn(12, 6, 4 * 3, dtype=torch.float64, requires_grad=True)
    v1, c1 = fused_dense_routing(x, W, 4, 3, agreement, normalize, detach)
    v2, c2 = dynamic_routing(child_votes(x, W, 4), 3, agreement, detach, normalize)
    g = torch.randn_like(v1)
    g1 = torch.autograd.grad((v1 * g).sum(), [x, W])
    g2 = torch.autograd.grad((v2 * g).sum(), [x, W])
    torch.testing.assert_close(v1, v2)
    torch.testing.assert_close(c1, c2)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("agreement", ["dot", "cosine"])
@pytest.mark.parametrize("normalize", ["parents", "children"])
def test_fused_gradcheck(agreement, normalize):
    x = torch.randn(2, 7, 3, dtype=torch.float64, requires_grad=True)
    W = torch.randn(7, 3, 3 * 4, dtype=torch.float64, requires_grad=True)
    fn = lambda a, b: fused_dense_routing(a, b, 3, 3, agreement, normalize)[0]  # noqa: E731
    assert torch.autograd.gradcheck(fn, (x, W))


def test_fused_chunking_does_not_change_results(monkeypatch):
    import selfcaps.caps.fused_routing as fr

    x = torch.randn(9, 8, 4, dtype=torch.float64, requires_grad=True)
    W = torch.randn(8, 4, 3 * 5, dtype=torch.float64, requires_grad=True)
    v1, _ = fused_dense_routing(x, W, 3)
    (g1,) = torch.autograd.grad(v1.sum(), x)
    monkeypatch.setattr(fr, "_CHUNK_ELEMENTS", 8 * 3 * 5 * 2)  # chunks of 2 samples, one of 1
    v2, _ = fused_dense_routing(x, W, 3)
    (g2,) = torch.autograd.grad(v2.sum(), x)
    torch.testing.assert_close(v1, v2)
    torch.testing.assert_close(g1, g2)


def test_fused_low_precision_routes_in_float32():
    x = torch.randn(2, 6, 4).bfloat16()
    W = torch.randn(6, 4, 12).bfloat16()
    v, _ = fused_dense_routing(x, W, 3)
    assert v.dtype == torch.bfloat16 and torch.isfinite(v.float()).all()


def _routing_under_autocast(layer: DenseCaps, x: torch.Tensor, low: bool):
    """Poses and input/weight gradients of ``layer`` under bfloat16 autocast."""
    x = x.clone().requires_grad_(True)
    layer.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16), route_in_autocast_dtype(low):
        v = layer(x)
    (v.float() * torch.linspace(-1, 1, v.numel()).view_as(v)).sum().backward()
    return v, x.grad, layer.weight.grad.clone()


def test_routing_in_autocast_dtype_is_bfloat16_and_close_to_float64():
    """``trainer.routing_precision: autocast``: the votes, routing and gradients run in
    bfloat16 (poses come out in bfloat16); values and gradients stay within bfloat16's
    resolution of the float64 routing (8-bit mantissa: relative error about 2**-8 per
    rounding, a few percent after the iterations), while the default routes in float32."""
    torch.manual_seed(3)
    layer = DenseCaps(48, 8, 10, 16, iters=3)
    x = torch.randn(6, 48, 8) * 0.3
    ref = layer.double()
    xd = x.double().requires_grad_(True)
    v_ref = ref(xd)
    (
        v_ref * torch.linspace(-1, 1, v_ref.numel(), dtype=torch.float64).view_as(v_ref)
    ).sum().backward()
    gx_ref, gw_ref = xd.grad, ref.weight.grad.clone()
    layer = ref.float()
    v32, gx32, gw32 = _routing_under_autocast(layer, x, low=False)
    v16, gx16, gw16 = _routing_under_autocast(layer, x, low=True)
    assert v32.dtype == torch.float32 and v16.dtype == torch.bfloat16
    assert gw16.dtype == torch.float32  # the parameter's gradient keeps its dtype
    scale = lambda t: t.abs().max().item()  # noqa: E731
    for got, want, tol in [(v32, v_ref, 1e-5), (gx32, gx_ref, 1e-5), (gw32, gw_ref, 1e-5)]:
        assert (got.double() - want).abs().max().item() <= tol * scale(want)
    for got, want in [(v16, v_ref), (gx16, gx_ref), (gw16, gw_ref)]:
        err = (got.double() - want).abs().max().item() / scale(want)
        assert 1e-4 < err < 5e-2  # bfloat16, not float32, and still close
    with route_in_autocast_dtype(True):  # outside autocast: float32 as ever
        torch.testing.assert_close(layer(x), v32.detach())


def test_primary_caps_memory_order():
    caps = PrimaryCaps2d(3, num_caps=4, caps_dim=5, kernel_size=1, activate=False)
    x = torch.randn(2, 3, 6, 7)
    out = caps(x)
    y = caps.conv(x)
    assert out.shape == (2, 4, 6, 7, 5)
    # channel t * D + d at (h, w) -> out[:, t, h, w, d]
    t, d, h, w = 2, 3, 4, 5
    torch.testing.assert_close(out[:, t, h, w, d], y[:, t * 5 + d, h, w])
    # flattened: child n = t * (H * W) + h * W + w
    flat = flatten_caps(out)
    torch.testing.assert_close(flat[:, t * 42 + h * 7 + w], out[:, t, h, w])


def test_primary_caps_squashes():
    caps = PrimaryCaps2d(8, 4, 6, kernel_size=3, batchnorm=True, bias=False)
    out = caps(torch.randn(3, 8, 5, 5) * 10)
    assert (out.norm(dim=-1) < 1).all()


def test_conv_caps_matches_loop_over_positions():
    layer = ConvCaps2d(3, 4, 2, 5, kernel_size=3, stride=2, padding=1, iters=2).double()
    x = torch.randn(2, 3, 5, 5, 4, dtype=torch.float64)
    out = layer(x)
    assert out.shape == (2, 2, 3, 3, 5)
    xp = torch.nn.functional.pad(x, (0, 0, 1, 1, 1, 1))  # pad W and H
    W = layer.weight.detach()
    for b in range(2):
        for ho in range(3):
            for wo in range(3):
                kids = []
                for t in range(3):
                    for dy in range(3):
                        for dx in range(3):
                            kids.append(xp[b, t, 2 * ho + dy, 2 * wo + dx])
                u = torch.stack(kids).unsqueeze(0)  # (1, 27, 4)
                v_ref, _ = dynamic_routing_loop(votes_loop(u, W, 2), 2)
                torch.testing.assert_close(out[b, :, ho, wo], v_ref[0], atol=1e-6, rtol=0)


def test_self_routing2d_matches_loop():
    layer = SelfRouting2d(2, 3, 4, 5, kernel_size=2, stride=1, padding=0).double()
    with torch.no_grad():  # non-trivial routing weights
        layer.core.weight_route.normal_()
        layer.core.bias_route.normal_()
    pose = torch.randn(2, 2, 3, 3, 4, dtype=torch.float64)
    act = torch.rand(2, 2, 3, 3, dtype=torch.float64)
    v, a = layer(pose, act)
    assert v.shape == (2, 3, 2, 2, 5) and a.shape == (2, 3, 2, 2)
    core = layer.core
    for b in range(2):
        for ho in range(2):
            for wo in range(2):
                kid_pose, kid_act = [], []
                for t in range(2):
                    for dy in range(2):
                        for dx in range(2):
                            kid_pose.append(pose[b, t, ho + dy, wo + dx])
                            kid_act.append(act[b, t, ho + dy, wo + dx])
                u = torch.stack(kid_pose)  # (8, 4)
                logits = torch.stack(
                    [u[i] @ core.weight_route[i] + core.bias_route[i] for i in range(8)]
                ).detach()
                u_hat = votes_loop(u.unsqueeze(0), core.weight_pose.detach(), 3)
                v_ref, a_ref = self_routing_loop(
                    u_hat, torch.stack(kid_act).unsqueeze(0), logits.unsqueeze(0)
                )
                torch.testing.assert_close(v[b, :, ho, wo], v_ref[0])
                torch.testing.assert_close(a[b, :, ho, wo], a_ref[0])


def test_self_routing_starts_uniform():
    layer = SelfRouting1d(4, 3, 5, 5)
    pose = torch.randn(2, 6, 4, 5)
    u_hat = child_votes(pose.reshape(12, 4, 5), layer.core.weight_pose, 3)
    logits = torch.zeros(12, 4, 3)
    _, _, c = self_routing(u_hat, torch.rand(12, 4), logits)
    torch.testing.assert_close(c, torch.full_like(c, 1 / 3))
    assert torch.count_nonzero(layer.core.weight_route) == 0


def test_self_routing1d_pointwise_routes_each_position_alone():
    layer = SelfRouting1d(4, 3, 5, 6)
    pose, act = torch.randn(2, 7, 4, 5), torch.rand(2, 7, 4)
    v, a = layer(pose, act)
    pose2 = pose.clone()
    pose2[:, 3] += 10.0  # change one position
    v2, _ = layer(pose2, act)
    changed = (v2 - v).abs().amax(dim=(0, 2, 3)) > 0
    assert changed.tolist() == [False, False, False, True, False, False, False]
    assert v.shape == (2, 7, 3, 6) and a.shape == (2, 7, 3)


def test_self_routing1d_window_equals_2d_with_height_one():
    l1 = SelfRouting1d(3, 2, 4, 4, kernel_size=3, padding=1)
    l2 = SelfRouting2d(3, 2, 4, 4, kernel_size=(1, 3), padding=(0, 1))
    l2.load_state_dict(l1.state_dict())
    pose, act = torch.randn(2, 5, 3, 4), torch.rand(2, 5, 3)
    v1, a1 = l1(pose, act)
    v2, a2 = l2(pose.permute(0, 2, 1, 3).unsqueeze(2), act.permute(0, 2, 1).unsqueeze(2))
    torch.testing.assert_close(v1, v2[:, :, 0].permute(0, 2, 1, 3))
    torch.testing.assert_close(a1, a2[:, :, 0].permute(0, 2, 1))


def test_self_routing_dense_every_output_sees_every_input():
    layer = SelfRoutingDense(4 * 3, 4 * 2, 5, 5, out_positions=4)
    pose, act = torch.randn(1, 4, 3, 5), torch.rand(1, 4, 3)
    v, a = layer(pose, act)
    pose2 = pose.clone()
    pose2[:, 0] += 1.0
    v2, _ = layer(pose2, act)
    assert ((v2 - v).abs().amax(dim=(0, 2, 3)) > 0).all()
    assert v.shape == (1, 4, 2, 5) and a.shape == (1, 4, 2)


def test_layer_gradcheck_self_routing2d():
    layer = SelfRouting2d(2, 2, 3, 3, kernel_size=2).double()
    pose = torch.randn(1, 2, 3, 3, 3, dtype=torch.float64, requires_grad=True)
    act = torch.rand(1, 2, 3, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda p, a: layer(p, a), (pose, act))


def test_dense_caps_rejects_wrong_children():
    layer = DenseCaps(10, 4, 3, 4)
    with pytest.raises(ValueError, match="matching N"):
        layer(torch.randn(2, 9, 4))


@settings(max_examples=20, deadline=None)
@given(
    st.integers(1, 4),
    st.integers(1, 9),
    st.integers(1, 5),
    st.integers(1, 4),
    st.integers(1, 5),
    st.integers(1, 3),
)
def test_dense_caps_shapes(B, N, Din, M, Dout, iters):
    layer = DenseCaps(N, Din, M, Dout, iters=iters)
    v, c = layer(torch.randn(B, N, Din), return_coupling=True)
    assert v.shape == (B, M, Dout) and c.shape == (B, N, M)
    torch.testing.assert_close(c.sum(-1), torch.ones(B, N))


@settings(max_examples=15, deadline=None)
@given(
    st.integers(1, 3),
    st.integers(1, 3),
    st.integers(3, 7),
    st.integers(1, 3),
    st.integers(1, 2),
    st.integers(0, 1),
)
def test_conv_layers_shapes(B, A, H, k, s, p):
    x = torch.randn(B, A, H, H, 4)
    Ho = (H + 2 * p - k) // s + 1
    assert ConvCaps2d(A, 4, 2, 3, k, s, p)(x).shape == (B, 2, Ho, Ho, 3)
    v, a = SelfRouting2d(A, 2, 4, 3, k, s, p)(x, torch.rand(B, A, H, H))
    assert v.shape == (B, 2, Ho, Ho, 3) and a.shape == (B, 2, Ho, Ho)


def test_fused_routing_switch_gives_same_layer_output():
    from selfcaps.caps import use_fused_routing

    layer = DenseCaps(9, 4, 3, 5).double()
    u = torch.randn(2, 9, 4, dtype=torch.float64, requires_grad=True)
    v1 = layer(u)
    (g1,) = torch.autograd.grad(v1.sum(), u)
    with use_fused_routing(False):
        v2 = layer(u)
        (g2,) = torch.autograd.grad(v2.sum(), u)
    torch.testing.assert_close(v1, v2)
    torch.testing.assert_close(g1, g2)


def test_autocast_dtype_is_read_on_and_off():
    from selfcaps.caps.fused_routing import _autocast_dtype

    assert _autocast_dtype("cpu") is None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert _autocast_dtype("cpu") == torch.bfloat16
