"""SparseCaps' mathematics against loops and hand-computed values."""

import math

import numpy as np
import pytest
import torch

import selfcaps
from selfcaps.caps import flatten_caps
from selfcaps.models.sparsecaps import (
    LifetimeBoost,
    SparseCapsNet,
    rank_capsules,
    routing_support,
    sparse_mask,
    winner_frequency,
)

TINY = {"conv_channels": 8, "primary_types": 3, "decoder_widths": (16, 32)}


def _coupling(B: int, T: int, P: int, L: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(3 * torch.randn(B, T * P, L, generator=g, dtype=torch.float64), -1)


def test_support_paper_is_max_over_types_summed_over_positions():
    B, T, H, W, L = 2, 3, 2, 3, 4
    c = _coupling(B, T, H * W, L)
    psi = routing_support(c, T, "paper")
    for b in range(B):
        for j in range(L):
            total = 0.0
            for h in range(H):
                for w in range(W):
                    total += max(float(c[b, t * H * W + h * W + w, j]) for t in range(T))
            assert psi[b, j].item() == pytest.approx(total, rel=1e-12)


def test_support_chunk_is_the_reference_reshape():
    # The reference reshapes the type-major children to (dim, dim, types) and maximises over
    # the last axis: a maximum over chunks of T consecutive children.
    B, T, side, L = 2, 4, 3, 5
    c = _coupling(B, T, side * side, L, seed=1)
    expected = c.numpy().reshape(B, side, side, T, L).max(axis=3).sum(axis=2).sum(axis=1)
    np.testing.assert_allclose(routing_support(c, T, "chunk").numpy(), expected, rtol=1e-12)
    loop = [
        [sum(max(float(c[b, q * T + s, j]) for s in range(T)) for q in range(side * side))]
        for b in range(B)
        for j in range(L)
    ]
    np.testing.assert_allclose(expected.reshape(-1), np.array(loop).reshape(-1), rtol=1e-12)
    assert not torch.allclose(routing_support(c, T, "chunk"), routing_support(c, T, "paper"))


def test_support_of_the_network_uses_positions_and_types_of_the_primary_map():
    torch.manual_seed(0)
    net = SparseCapsNet(image_size=28, **TINY).eval()
    x = torch.rand(2, 1, 28, 28)
    with torch.no_grad():
        prim = net.primary(torch.relu(net.conv1(x)))  # (B, T, 6, 6, 8)
        _, c = net.latent(flatten_caps(prim), return_coupling=True)
        _, psi = net.encode(x)
    T, H, W = prim.shape[1:4]
    for b in range(2):
        for j in range(net.num_caps):
            total = sum(
                max(float(c[b, t * H * W + h * W + w, j]) for t in range(T))
                for h in range(H)
                for w in range(W)
            )
            assert psi[b, j].item() == pytest.approx(total, rel=1e-5)


def test_ranks_hand_computed_with_ties_to_the_lower_index():
    z = torch.tensor([[0.2, 0.9, 0.5, 0.9], [4.0, 3.0, 2.0, 1.0]])
    assert rank_capsules(z).tolist() == [[3, 0, 2, 1], [0, 1, 2, 3]]


def test_mask_values_hand_computed():
    L = 16
    m = sparse_mask(torch.arange(L).unsqueeze(0), gamma=12.0, threshold=0.01)[0]
    expected = [1.0, 0.449329, 0.201897, 0.090718, 0.040762, 0.018316] + [0.0] * 10
    np.testing.assert_allclose(m.numpy(), expected, atol=1e-6)
    # exp(-12 * 6 / 15) = 0.00823 is below the threshold: six capsules stay
    assert math.exp(-12 * 6 / 15) < 0.01 < math.exp(-12 * 5 / 15)


def test_boosted_support_to_mask_hand_computed():
    net = SparseCapsNet(image_size=28, latent_caps=4, **TINY)
    net.boosting.boost.copy_(torch.tensor([1.0, 3.5, 1.0, 1.0]))
    psi = torch.tensor([[3.0, 1.0, 2.0, 0.5]])  # z = (3, 3.5, 2, 0.5)
    ranks = net.rank(psi)
    assert ranks.tolist() == [[1, 0, 2, 3]]
    v = torch.ones(1, 4, 16)
    mask = net.decoder_mask(v, ranks, None)
    np.testing.assert_allclose(mask[0].numpy(), [math.exp(-4), 1.0, 0.0, 0.0], rtol=1e-6)


def test_winner_frequency():
    ranks = torch.tensor([[0, 1, 2], [1, 0, 2], [0, 2, 1], [0, 1, 2]])
    assert winner_frequency(ranks).tolist() == [0.75, 0.25, 0.0]


def test_boosting_updates_hand_computed():
    boost = LifetimeBoost(4, ema_decay=0.5, every=2, step=0.1, min_freq=0.2, max_freq=0.5)
    steps = [
        ([0.75, 0.25, 0.0, 0.0], [0.75, 0.25, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]),  # EMA := f
        ([1.0, 0.0, 0.0, 0.0], [0.875, 0.125, 0.0, 0.0], [1.0, 1.1, 1.1, 1.1]),  # boost
        ([0.0, 0.0, 1.0, 0.0], [0.4375, 0.0625, 0.5, 0.0], [1.0, 1.1, 1.1, 1.1]),
        ([0.0, 0.0, 1.0, 0.0], [0.21875, 0.03125, 0.75, 0.0], [1.0, 1.2, 1.0, 1.2]),  # boost
    ]
    for i, (f, ema, g) in enumerate(steps, start=1):
        boost.update(torch.tensor(f))
        np.testing.assert_allclose(boost.freq_ema.numpy(), ema, rtol=1e-6)
        np.testing.assert_allclose(boost.boost.numpy(), g, rtol=1e-6)
        assert int(boost.batches) == i


def test_boosting_state_is_in_the_state_dict():
    net = SparseCapsNet(image_size=28, **TINY)
    keys = set(net.state_dict())
    for name in ("boost", "freq_ema", "batches", "ema_started"):
        assert f"boosting.{name}" in keys


def test_paper_geometry_parameter_count():
    net = selfcaps.create_model("sparsecaps")
    conv1 = 81 * 256 + 256
    primary = 256 * 256 * 81 + 256
    assert net.positions == 12 * 12
    latent = 32 * 144 * 8 * 16 * 16
    decoder = (256 * 512 + 512) + (512 * 1024 + 1024) + (1024 * 1600 + 1600)
    assert sum(p.numel() for p in net.parameters()) == conv1 + primary + latent + decoder


def test_variants_masks_and_shapes():
    torch.manual_seed(0)
    x, y = torch.rand(3, 1, 28, 28), torch.tensor([1, 7, 3])
    dense = SparseCapsNet(image_size=28, variant="dense", **TINY)
    assert torch.equal(dense(x).mask, torch.ones(3, 16))
    sup = SparseCapsNet(image_size=28, variant="supervised", **TINY)
    out = sup(x, labels=y)
    assert out.capsules.shape == (3, 10, 16)
    assert out.mask.argmax(1).tolist() == [1, 7, 3] and out.mask.sum().item() == 3
    unlabelled = sup(x)
    longest = out.capsules.norm(dim=-1).argmax(1)
    assert torch.equal(unlabelled.mask.argmax(1), longest)
    sparse = SparseCapsNet(image_size=28, **TINY)
    assert ((sparse(x).mask > 0).sum(1) == 6).all()
    with pytest.raises(ValueError, match="variant"):
        SparseCapsNet(variant="other")
    with pytest.raises(ValueError, match=r"expects images \(B, 1, 40, 40\)"):
        SparseCapsNet(**TINY)(torch.rand(1, 1, 28, 28))


def test_masked_capsules_get_no_gradient_from_the_decoder():
    torch.manual_seed(0)
    net = SparseCapsNet(image_size=28, **TINY)
    x = torch.rand(2, 1, 28, 28)
    v, psi = net.encode(x)
    v.retain_grad()
    mask = net.decoder_mask(v, net.rank(psi), None)
    (net.decode(v * mask.unsqueeze(-1)) - x).pow(2).sum().backward()
    grad_norm = v.grad.norm(dim=-1)
    assert (grad_norm[mask == 0] == 0).all()
    assert (grad_norm[mask > 0] > 0).all()
