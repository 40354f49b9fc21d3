"""EncapNet's networks: shapes, parameter counts by hand, taps, Table 1 set, EM chunking."""

import itertools

import pytest
import torch

import selfcaps
from selfcaps.caps import CapFC, ConvCaps2d, DenseCaps, MasterAideConv2d, PrimaryCaps2d
from selfcaps.models.encapnet import EMCaps, EncapNet

TABLE1 = (
    "table1_capnet_dynamic",
    "table1_capnet_em",
    "table1_cnn",
    "table1_encapnet_master",
    "table1_encapnet_master_aide",
)


_LAYERS = (
    MasterAideConv2d,
    PrimaryCaps2d,
    ConvCaps2d,
    DenseCaps,
    CapFC,
    EMCaps,
    torch.nn.Conv2d,
    torch.nn.Linear,
)


def _count_layers(module):
    """Convolutional, linear and capsule layers, each counted once (not their parts)."""
    if isinstance(module, _LAYERS):
        return 1
    return sum(_count_layers(m) for m in module.children())


def _params(m):
    return sum(p.numel() for p in m.parameters())


def _capconv_params(T, din, dout, k, aide, coef_in_factor=2):
    """Parameters of one capConv, by hand (coefficients from both branches: v3)."""
    n = T * dout * din * k * k + 2 * T * dout  # grouped master (no bias) + output BN
    if aide:
        k2 = k + 4
        n += (T * dout) * (T * din) * k2 * k2  # ungrouped aide (no bias)
        n += 2 * (2 * T * dout)  # the two branch BNs
        n += 2 * (T * (coef_in_factor * dout) * 9 + T)  # two grouped 3x3 coefficient convs
    return n


def test_encapnet18_shapes_and_parameter_count_by_hand():
    T, dims, n2 = 32, (2, 4, 8, 16), 3  # the paper's N = 3, aide in every module
    for variant in ("master", "master_aide"):
        net = selfcaps.create_model("encapnet18", variant=variant)
        expected = 3 * T * 9 + 2 * T  # stem conv (no bias) + BN
        d_in = 1
        aide = variant == "master_aide"
        for d in dims:
            expected += _capconv_params(T, d_in, d, 3, aide)  # Type I
            expected += n2 * _capconv_params(T, d, d, 1, aide)  # Type II
            expected += (T * d_in) * (T * d) * 9  # skip projection
            d_in = d
        expected += 16 * 512 * 10  # CapFC: 512 capsules of 16 -> 10 classes
        assert _params(net) == expected
        out = net(torch.randn(2, 3, 32, 32))
        assert out.shape == (2, 10, 16) and (out.norm(dim=-1) < 1).all()
        assert net.score_kind == "length"


def test_tap_shapes_match_forward_taps():
    net = EncapNet(num_caps=4, dims=(2, 4, 8), strides=(1, 2, 2), num_type2=2, aide_modules=[3])
    net.eval()
    caps, taps = net.forward_taps(torch.randn(2, 3, 32, 32))
    assert caps.shape == (2, 10, 8)
    assert [[tuple(t.shape[1:]) for t in m] for m in taps] == net.tap_shapes()
    assert net.tap_shapes()[2] == [(16, 16, 16), (32, 8, 8), (32, 8, 8), (32, 8, 8)]
    torch.testing.assert_close(
        net(torch.zeros(2, 3, 32, 32)), net.forward_taps(torch.zeros(2, 3, 32, 32))[0]
    )


def test_resnet_counterpart_is_resnet18_shaped():
    net = selfcaps.create_model("encapnet18_resnet")
    convs = [
        m
        for n, m in net.named_modules()
        if isinstance(m, torch.nn.Conv2d) and "downsample" not in n
    ]
    linears = [m for m in net.modules() if isinstance(m, torch.nn.Linear)]
    assert len(convs) + len(linears) == 18
    assert [b.conv2.out_channels for b in net.body[1:]] == [64, 64, 128, 128, 256, 256, 512, 512]
    assert net(torch.randn(2, 3, 32, 32)).shape == (2, 10) and net.score_kind == "logit"


def _block_outputs(net, x):
    """The stem's and every BasicBlock's output, recorded by forward hooks on ``net(x)``."""
    outs = []
    hooks = [m.register_forward_hook(lambda m, i, o: outs.append(o)) for m in net.body]
    try:
        logits = net(x)
    finally:
        for h in hooks:
            h.remove()
    return logits, outs


def test_resnet_taps_are_stage_inputs_and_block_outputs():
    net = selfcaps.create_model("encapnet18_resnet", num_caps=4, dims=(2, 4, 8), strides=(1, 2, 2))
    net.eval()
    x = torch.randn(2, 3, 32, 32)
    logits, outs = _block_outputs(net, x)  # stem, then 2 blocks per stage
    got_logits, taps = net.forward_taps(x)
    torch.testing.assert_close(got_logits, logits)
    expected = [[outs[2 * k], outs[2 * k + 1], outs[2 * k + 2]] for k in range(3)]
    assert len(taps) == 3 and all(len(t) == 3 for t in taps)
    for got, want in zip(taps, expected, strict=True):
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b)
    assert [[tuple(t.shape[1:]) for t in m] for m in taps] == net.tap_shapes()
    # stem 4 channels at 32; stages 8, 16, 32 channels at 32, 16, 8 pixels
    assert net.tap_shapes()[1] == [(8, 32, 32), (16, 16, 16), (16, 16, 16)]


@pytest.mark.parametrize("name", TABLE1)
def test_table1_rows_share_input_and_output(name):
    net = selfcaps.create_model(name).eval()
    out = net(torch.randn(2, 3, 32, 32))
    scores = out.norm(dim=-1) if out.dim() == 3 else out
    assert scores.shape == (2, 10)
    # six layers on the main path (EM adds its activation convolution to layer 4)
    assert _count_layers(net) == (7 if name == "table1_capnet_em" else 6)


def test_table1_cnn_parameter_count_by_hand():
    chans = [3, 32, 64, 128, 256, 512]
    convs = sum(a * b * 9 + 2 * b for a, b in itertools.pairwise(chans))
    assert _params(selfcaps.create_model("table1_cnn")) == convs + 512 * 16 * 10 + 10


def test_em_chunks_give_the_same_values_and_gradients():
    torch.manual_seed(0)
    big = EMCaps(4, 4, 3, 4, kernel_size=3, stride=2, padding=1).double()
    small = EMCaps(4, 4, 3, 4, kernel_size=3, stride=2, padding=1, chunk_elements=1).double()
    small.load_state_dict(big.state_dict())
    assert small.chunk_rows == 1 and big.chunk_rows > 8
    pose = torch.randn(2, 4, 5, 5, 4, dtype=torch.float64)
    act = torch.rand(2, 4, 5, 5, dtype=torch.float64)
    outs = []
    for layer in (big, small):
        mu, a = layer(pose, act)
        assert mu.shape == (2, 3, 3, 3, 4) and a.shape == (2, 3, 3, 3)
        (mu.sum() + a.sum()).backward()
        outs.append((mu.detach(), a.detach(), layer.weight.grad.clone()))
    for x, y in zip(*outs):
        torch.testing.assert_close(x, y)


def test_wrong_inputs_and_options_are_named():
    net = EncapNet(num_caps=4, dims=(2, 4), strides=(2, 2), aide_modules=[2])
    with pytest.raises(ValueError, match=r"\(B, 3, 32, 32\).*\(2, 3, 28, 28\)"):
        net(torch.randn(2, 3, 28, 28))
    with pytest.raises(ValueError, match="aide_modules"):
        EncapNet(dims=(2, 4), strides=(2, 2), aide_modules=[3])
    with pytest.raises(ValueError, match="variant"):
        EncapNet(variant="aide")
    with pytest.raises(ValueError, match="divisible"):
        EncapNet(input_size=28)
