"""The PoE capsule network: sizes, tied weights, capsule layout, routing, sampling."""

import math

import pytest
import torch
import torch.nn.functional as F

import selfcaps
from selfcaps.caps import squash, unsquash
from selfcaps.models.poe import PoECapsNet, RoutedCaps, TiedConvAutoencoder


def test_registry_sizes_and_parameter_count():
    assert "poe" in selfcaps.list_models() and "poe_capsnet" not in selfcaps.list_models()
    assert type(selfcaps.create_model("poe_capsnet")) is PoECapsNet  # the former name still works
    net = selfcaps.create_model("poe")
    assert net.num_primary == 576 and net.num_features == 320
    ae = 128 * 1 * 81 + 128 + 128 * 128 * 81 + 128 + 128 + 1  # two convs, two decoder biases
    caps = 2 * 576 * 20 * 16 * 8  # W and U
    assert sum(p.numel() for p in net.parameters()) == ae + caps
    assert net.encoder.matrices.shape == (576, 20, 16, 8)  # W_ij: 8-D -> 16-D
    assert net.decoder.matrices.shape == (20, 576, 8, 16)  # U_ji: 16-D -> 8-D
    assert abs(net.encoder.weight.std().item() - 0.01) < 2e-4  # N(0, 0.01)


def test_autoencoder_shapes_and_tied_weights():
    torch.manual_seed(0)
    code = TiedConvAutoencoder().encode(torch.rand(2, 1, 28, 28))
    assert code.shape == (2, 128, 6, 6)
    ae = TiedConvAutoencoder(channels=16).double()
    out = ae.decode(ae.encode(torch.rand(2, 1, 28, 28, dtype=torch.float64)))
    assert out.shape == (2, 1, 28, 28) and out.min() >= 0 and out.max() <= 1
    # the decoder's first layer is the adjoint of conv2: <conv2(a), b> == <conv2^T(b), a>
    a = torch.randn(2, 16, 20, 20, dtype=torch.float64)
    b = torch.randn(2, 16, 6, 6, dtype=torch.float64)
    lhs = (F.conv2d(a, ae.conv2.weight, stride=2) * b).sum()
    rhs = (F.conv_transpose2d(b, ae.conv2.weight, stride=2, output_padding=1) * a).sum()
    torch.testing.assert_close(lhs, rhs)
    assert {n for n, _ in ae.named_parameters()} == {
        "conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias", "dec_bias2", "dec_bias1"
    }  # fmt: skip


def test_rgb_32x32_and_wrong_input():
    ae = TiedConvAutoencoder(in_chans=3, image_size=32)
    assert ae.decode(ae.encode(torch.rand(1, 3, 32, 32))).shape == (1, 3, 32, 32)
    with pytest.raises(ValueError, match=r"\(B, 1, 28, 28\).*\(2, 3, 28, 28\)"):
        PoECapsNet().ae.encode(torch.rand(2, 3, 28, 28))


def test_primary_capsules_are_type_major_and_invertible():
    net = PoECapsNet().double()
    code = torch.randn(2, 128, 6, 6, dtype=torch.float64)
    caps = net.code_to_capsules(code)
    # capsule n = t * 36 + h * 6 + w holds channels t*8 .. t*8+7 at (h, w), squashed
    t, h, w = 5, 2, 3
    torch.testing.assert_close(
        caps[:, t * 36 + h * 6 + w], squash(code[:, t * 8 : t * 8 + 8, h, w])
    )
    torch.testing.assert_close(net.capsules_to_code(caps), code, rtol=1e-9, atol=1e-9)


def test_centred_codes_use_the_exact_running_mean_and_invert():
    torch.manual_seed(0)
    net = PoECapsNet(channels=16, center=True).double()
    codes = torch.rand(10, 16, 6, 6, dtype=torch.float64)
    for batch in (codes[:3], codes[3:4], codes[4:]):  # uneven batches
        net.observe_codes(batch.sum(0), batch.shape[0])
    mean = sum(codes[k] for k in range(10)) / 10  # a loop, not the running update
    torch.testing.assert_close(net.code_mean, mean)
    assert net.code_count.item() == 10
    caps = net.code_to_capsules(codes[:2])
    torch.testing.assert_close(caps[:, 7], squash(codes[:2, 0:8, 1, 1] - mean[0:8, 1, 1]))
    torch.testing.assert_close(net.capsules_to_code(caps), codes[:2], rtol=1e-9, atol=1e-9)
    off = PoECapsNet(channels=16).double()  # the paper: the mean is neither subtracted nor added
    off.code_mean.copy_(mean)
    torch.testing.assert_close(off.code_to_capsules(codes[:2])[:, 7], squash(codes[:2, 0:8, 1, 1]))
    assert "code_mean" in net.state_dict() and "code_count" in net.state_dict()


def test_matrices_view_gives_the_votes():
    layer = RoutedCaps(5, 3, 4, 2, init_std=1.0)
    x = torch.randn(2, 5, 3)
    expected = torch.einsum("nmed,bnd->bnme", layer.matrices, x)
    torch.testing.assert_close(layer.votes(x), expected)


def test_transpose_is_the_adjoint_of_the_forward_map_at_fixed_c():
    torch.manual_seed(0)
    layer = RoutedCaps(5, 3, 4, 2, init_std=1.0).double()
    x = torch.randn(2, 5, 3, dtype=torch.float64)
    y = torch.randn(2, 4, 2, dtype=torch.float64)
    c = torch.rand(2, 5, 4, dtype=torch.float64)
    lhs = (layer.forward_with(x, c) * y).sum()
    rhs = (layer.transpose(y, c) * x).sum()
    torch.testing.assert_close(lhs, rhs)


def test_sampling_is_deterministic_under_a_seed():
    torch.manual_seed(0)
    net = PoECapsNet(channels=16, init_std=0.3).eval()
    a, b = net.sample_grid(2, seed=7), net.sample_grid(2, seed=7)
    assert a.shape == (40, 1, 28, 28)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not torch.equal(a, net.sample_grid(2, seed=8))
    # column j of the grid is capsule j: only capsule j is non-zero in its draws
    s = net.draws(2, torch.Generator().manual_seed(7))
    torch.testing.assert_close(a[20 + 3], net.generate(3, s[1:2, 3])[0])


def _code_of(v, bsz):
    """Unsquash primary capsules (B, 72, 8) of a 16-channel net and reshape to its code."""
    return unsquash(v).reshape(bsz, 2, 6, 6, 8).permute(0, 1, 4, 2, 3).reshape(bsz, 16, 6, 6)


def test_paper_generation_routes_the_zero_capsules_too_by_hand():
    """Section 4.2: "the other 19 capsules having 0 as their input" (the default).

    Cosine agreement, coefficients normalised over the 20 children: a zero capsule's vote has
    cosine 0 with everything and the active one's cosine 1, so the logits of the active
    capsule go 0, 1, 2 over the three iterations and its final coefficient is
    e^2 / (e^2 + 19) = 0.2800 for every primary capsule, computed here by hand.
    """
    torch.manual_seed(0)
    net = PoECapsNet(channels=16, init_std=0.3).double().eval()  # 2 types x 36 = 72 capsules
    assert net.generation == "paper"
    s = torch.randn(3, 16, dtype=torch.float64)
    e_active = math.exp(2) / (math.exp(2) + 19)
    assert abs(e_active - 0.2800) < 1e-4
    y = torch.zeros(3, 20, 16, dtype=torch.float64)
    y[:, 4] = squash(s)
    _, _, e = net.decoder.route(y)
    # (the cosine's safe norm, sqrt(|x|^2 + 1e-12), keeps the cosine a hair below 1)
    full = torch.full((3, 72), e_active, dtype=torch.float64)
    torch.testing.assert_close(e[:, 4], full, rtol=0, atol=1e-5)
    v = squash(e[:, 4, :, None] * torch.einsum("iod,bd->bio", net.decoder.matrices[4], y[:, 4]))
    torch.testing.assert_close(net.generate(4, s), net.ae.decode(_code_of(v, 3)))
    with pytest.raises(IndexError):
        net.generate(20, s)


def test_generation_alone_routes_only_the_sampled_capsule():
    torch.manual_seed(0)
    net = PoECapsNet(channels=16, init_std=0.3, generation="alone").double().eval()
    s = torch.randn(3, 16, dtype=torch.float64)
    # one child: its coefficients are all 1 (children normalisation), full-size vote
    v = squash(torch.einsum("iod,bd->bio", net.decoder.matrices[4], squash(s)))
    torch.testing.assert_close(net.generate(4, s), net.ae.decode(_code_of(v, 3)))
    paper = PoECapsNet(channels=16, init_std=0.3).double().eval()
    paper.load_state_dict(net.state_dict())
    assert not torch.allclose(paper.generate(4, s), net.generate(4, s))
    with pytest.raises(ValueError, match="generation"):
        PoECapsNet(generation="zeros")  # type: ignore[arg-type]


@pytest.mark.parametrize("generation", ["paper", "alone"])
def test_generation_with_parents_normalisation_equals_routing_every_capsule(generation):
    # a per-child softmax: the silent capsules never affect the active one's coefficients
    torch.manual_seed(0)
    net = PoECapsNet(channels=16, init_std=0.3, normalize="parents", generation=generation)
    net = net.double().eval()
    s = torch.randn(3, 16, dtype=torch.float64)
    y = torch.zeros(3, 20, 16, dtype=torch.float64)
    y[:, 9] = squash(s)
    torch.testing.assert_close(net.generate(9, s), net.decode_capsules(y))


def test_the_decoder_can_normalise_differently_from_the_encoder():
    net = PoECapsNet(channels=16, normalize="parents", decoder_normalize="children")
    assert (net.encoder.normalize, net.decoder.normalize) == ("parents", "children")
    same = PoECapsNet(channels=16, normalize="parents")
    assert (same.encoder.normalize, same.decoder.normalize) == ("parents", "parents")
    torch.manual_seed(0)
    s = torch.randn(2, 16)
    *_, c = net.decoder.route(squash(torch.randn(2, 20, 16)))
    torch.testing.assert_close(c.sum(1), torch.ones(2, net.num_primary))  # over the 20 children
    assert net.generate(3, s).shape == (2, 1, 28, 28)


def test_restricted_draws_lie_in_the_visited_half_space():
    net = PoECapsNet()
    with pytest.raises(ValueError, match="stage 3"):
        net.draws(4, torch.Generator().manual_seed(0), restricted=True)
    net.hemisphere.normal_()
    free = net.draws(500, torch.Generator().manual_seed(0))
    kept = net.draws(500, torch.Generator().manual_seed(0), restricted=True)
    m = net.hemisphere
    assert ((kept * m).sum(-1) >= 0).all()
    torch.testing.assert_close(kept.norm(dim=-1), free.norm(dim=-1))  # a reflection
    inside = (free * m).sum(-1) >= 0
    torch.testing.assert_close(kept[inside], free[inside])
