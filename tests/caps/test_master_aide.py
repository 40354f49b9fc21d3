"""capConv (master/aide), its modules and CapFC against independent float64 computations."""

import itertools

import pytest
import torch
import torch.nn.functional as F

from selfcaps.caps import CapFC, CapsuleModule, MasterAideConv2d, squash_channels
from tests.caps.reference import squash_ref

SOURCES = ("v1", "v2", "v3", "own", "cross")


def _randomise_bn(module):
    """Non-trivial running statistics and affine parameters, so eval-mode BN is not identity."""
    g = torch.Generator().manual_seed(1)
    for m in module.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            n = m.num_features
            m.running_mean.copy_(torch.randn(n, generator=g, dtype=torch.float64) * 0.1)
            m.running_var.copy_(torch.rand(n, generator=g, dtype=torch.float64) + 0.5)
            m.weight.data.copy_(torch.rand(n, generator=g, dtype=torch.float64) + 0.5)
            m.bias.data.copy_(torch.randn(n, generator=g, dtype=torch.float64) * 0.1)


def _bn_eval(x, bn):
    shape = (1, -1, 1, 1)
    mean, var = bn.running_mean.view(shape), bn.running_var.view(shape)
    return (x - mean) / torch.sqrt(var + bn.eps) * bn.weight.view(shape) + bn.bias.view(shape)


@torch.no_grad()
def _squash_loop(x, T):
    """Per-capsule squash with the hand-written reference (one vector at a time)."""
    B, C, H, W = x.shape
    D = C // T
    out = torch.empty_like(x)
    for b, t, h, w in itertools.product(range(B), range(T), range(H), range(W)):
        out[b, t * D : (t + 1) * D, h, w] = squash_ref(x[b, t * D : (t + 1) * D, h, w])
    return out


def _grouped_conv_loop(x, weight, bias, T, stride, padding):
    """A grouped convolution as T separate ungrouped convolutions on channel slices."""
    cin, cout = x.shape[1] // T, weight.shape[0] // T
    parts = []
    for t in range(T):
        b = None if bias is None else bias[t * cout : (t + 1) * cout]
        parts.append(
            F.conv2d(
                x[:, t * cin : (t + 1) * cin],
                weight[t * cout : (t + 1) * cout],
                b,
                stride=stride,
                padding=padding,
            )
        )
    return torch.cat(parts, dim=1)


def _act(x, bn, T):
    return _squash_loop(torch.relu(_bn_eval(x, bn)), T)


@pytest.mark.parametrize(
    ("kind", "kernel", "stride", "din", "dout", "size_out"),
    [("type1", 3, 2, 2, 4, 3), ("type1-no-downsample", 3, 1, 1, 2, 5), ("type2", 1, 1, 4, 4, 5)],
)
@pytest.mark.parametrize("source", SOURCES)
def test_capconv_shapes_for_both_types_and_all_sources(
    kind, kernel, stride, din, dout, size_out, source
):
    T = 3
    layer = MasterAideConv2d(T, din, dout, kernel, stride, aide=True, coefficients=source)
    assert layer.master.groups == T and layer.master.kernel_size == (kernel, kernel)
    assert layer.aide_conv.groups == 1 and layer.aide_conv.kernel_size == (kernel + 4,) * 2
    c_src = 2 * T * dout if source == "v3" else T * dout
    for conv in (layer.coef_master, layer.coef_aide):
        assert conv.weight.shape == (T, c_src // T, 3, 3) and conv.groups == T
    y = layer(torch.randn(2, T * din, 5, 5))
    assert y.shape == (2, T * dout, size_out, size_out)
    lengths = y.view(2, T, dout, size_out, size_out).norm(dim=2)
    assert (lengths < 1).all()  # squashed capsules


def test_master_only_parameters_and_values_against_group_loop():
    T, din, dout = 4, 2, 3
    layer = MasterAideConv2d(T, din, dout, 3, 2, aide=False).double().eval()
    _randomise_bn(layer)
    n_params = sum(p.numel() for p in layer.parameters())
    assert n_params == T * dout * din * 9 + 2 * T * dout  # grouped conv (no bias) + BN
    x = torch.randn(2, T * din, 6, 6, dtype=torch.float64)
    expected = _act(_grouped_conv_loop(x, layer.master.weight, None, T, 2, 1), layer.out_act.bn, T)
    torch.testing.assert_close(layer(x), expected)


@pytest.mark.parametrize("source", SOURCES)
def test_master_aide_is_eq6_against_independent_computation(source):
    T, din, dout = 3, 2, 2
    layer = MasterAideConv2d(T, din, dout, 3, 1, aide=True, coefficients=source).double().eval()
    _randomise_bn(layer)
    x = torch.randn(2, T * din, 5, 5, dtype=torch.float64)
    a_m = _act(_grouped_conv_loop(x, layer.master.weight, None, T, 1, 1), layer.master_act.bn, T)
    a_a = _act(F.conv2d(x, layer.aide_conv.weight, padding=3), layer.aide_act.bn, T)

    def both(a, b):  # per type: the type's master dims, then its aide dims
        return torch.cat(
            [torch.cat([a[:, t * dout : (t + 1) * dout], b[:, t * dout : (t + 1) * dout]], 1)
             for t in range(T)],
            1,
        )  # fmt: skip

    src1, src2 = {
        "v1": (a_m, a_m),
        "v2": (a_a, a_a),
        "v3": (both(a_m, a_a), both(a_m, a_a)),
        "own": (a_m, a_a),
        "cross": (a_a, a_m),
    }[source]
    cm, ca = layer.coef_master, layer.coef_aide
    m1 = _grouped_conv_loop(src1, cm.weight, cm.bias, T, 1, 1)
    m2 = _grouped_conv_loop(src2, ca.weight, ca.bias, T, 1, 1)
    s = torch.empty_like(a_m)
    for t in range(T):
        sl = slice(t * dout, (t + 1) * dout)
        s[:, sl] = m1[:, t : t + 1] * a_m[:, sl] + m2[:, t : t + 1] * a_a[:, sl]
    torch.testing.assert_close(layer.mix(x), s)
    torch.testing.assert_close(layer(x), _act(s, layer.out_act.bn, T))


def test_master_sees_only_its_own_type_and_aide_sees_all():
    T, D = 4, 2
    for aide in (False, True):
        layer = MasterAideConv2d(T, D, D, 1, 1, aide=aide, coefficients="own").eval()
        x = torch.randn(1, T * D, 4, 4, requires_grad=True)
        layer(x)[:, 0:D].sum().backward()  # output type 0
        grad_other_types = x.grad[:, D:].abs().sum()
        assert (grad_other_types > 0) == aide


def test_coefficients_start_as_a_plain_sum():
    layer = MasterAideConv2d(2, 2, 2, 3, 1)
    for conv in (layer.coef_master, layer.coef_aide):
        assert torch.equal(conv.bias, torch.ones(2))


def test_grouped_convolutions_run_channels_last_with_the_same_values():
    # grouped convolutions run channels-last (CPU speed); the values must not change.
    layer = MasterAideConv2d(4, 1, 2, 3, 1, aide=False).double().eval()
    x = torch.randn(2, 4, 6, 6, dtype=torch.float64)
    torch.testing.assert_close(layer.mix(x), F.conv2d(x, layer.master.weight, padding=1, groups=4))


def test_squash_channels_against_reference_and_overflow_fallback():
    x = torch.randn(2, 6, 3, 3, dtype=torch.float64)
    torch.testing.assert_close(squash_channels(x, 3), _squash_loop(x, 3))
    huge = torch.zeros(1, 2, 1, 1)
    huge[0, 0] = 3e20  # |s|^2 overflows float32: the fallback rescales
    v = squash_channels(huge, 1)
    assert torch.isfinite(v).all() and v[0, 0].item() == pytest.approx(1.0)
    zero = torch.zeros(1, 4, 2, 2, requires_grad=True)
    squash_channels(zero, 2).sum().backward()
    assert torch.isfinite(zero.grad).all()
    with pytest.raises(ValueError, match="capsule types"):
        squash_channels(torch.zeros(1, 5, 1, 1), 2)


@pytest.mark.parametrize("skip", ["none", "module", "layerwise"])
def test_module_taps_and_skip_wiring(skip):
    T, din, dout, n2 = 2, 2, 4, 3
    m = CapsuleModule(T, din, dout, 2, n2, aide=False, skip=skip).double().eval()
    _randomise_bn(m)
    x = torch.randn(2, T * din, 6, 6, dtype=torch.float64)
    out, taps = m(x, return_taps=True)
    assert [tuple(t.shape[1:]) for t in taps] == [(4, 6, 6)] + [(8, 3, 3)] * (1 + n2)
    assert torch.equal(out, taps[-1]) and torch.equal(taps[0], x)
    assert (m.projection is None) == (skip == "none")
    # Rebuild the chain from the layers' own pre-activations and the documented skips.
    proj = m.projection(x) if m.projection is not None else None
    y1 = m.type1.out_act(m.type1.mix(x) + (proj if proj is not None else 0))
    torch.testing.assert_close(taps[1], y1)
    y = y1
    for i, layer in enumerate(m.type2):
        add = {"none": 0, "layerwise": y, "module": y1 if i == n2 - 1 else 0}[skip]
        y = layer.out_act(layer.mix(y) + add)
        torch.testing.assert_close(taps[2 + i], y)


def test_module_identity_skip_when_shape_is_kept():
    m = CapsuleModule(2, 4, 4, stride=1, num_type2=1, skip="module")
    assert m.projection is None  # the input is added as it is


def test_capfc_against_loop():
    B, N, M, D = 2, 5, 3, 4
    fc = CapFC(N, M, D).double()
    u = torch.randn(B, N, D, dtype=torch.float64)
    expected = torch.empty(B, M, D, dtype=torch.float64)
    w = fc.weight.detach()
    for b, j in itertools.product(range(B), range(M)):
        s = torch.tensor(
            [sum(float(w[d, i, j] * u[b, i, d]) for i in range(N)) for d in range(D)],
            dtype=torch.float64,
        )
        expected[b, j] = squash_ref(s)
    torch.testing.assert_close(fc(u), expected)
    assert fc.weight.abs().max() <= N**-0.5
    with pytest.raises(ValueError, match=r"\(B, 5, 4\)"):
        fc(torch.randn(B, N, D + 1))


def test_invalid_options_are_named():
    with pytest.raises(ValueError, match="coefficients"):
        MasterAideConv2d(2, 2, 2, coefficients="v4")
    with pytest.raises(ValueError, match="skip"):
        CapsuleModule(2, 2, 2, skip="sometimes")
