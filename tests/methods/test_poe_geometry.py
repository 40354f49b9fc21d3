"""How many dimensions PoE capsules use: rank-one shares and sample agreement by angle."""

from types import SimpleNamespace

import pytest
import torch

from selfcaps.caps.layers import DenseCaps
from selfcaps.methods.poe.geometry import (
    angle_agreement,
    decoder_axis_alignment,
    decoder_maps,
    encoder_maps,
    equalize_encoder_maps,
    pole_purity,
    pose_angles,
    rank_metrics,
    top_singular_share,
)
from selfcaps.models.poe import PoECapsNet


def test_top_singular_share_by_hand():
    diag = torch.diag(torch.tensor([3.0, 4.0]))  # singular values 4, 3: 16 / 25
    rank_one = torch.outer(torch.arange(1.0, 6.0), torch.tensor([2.0, -1.0, 0.5]))
    shares = top_singular_share(torch.stack([diag, torch.eye(2)]))
    assert shares.tolist() == pytest.approx([16 / 25, 1 / 2])
    assert top_singular_share(rank_one[None]).item() == pytest.approx(1.0)
    assert top_singular_share(torch.eye(16)[None]).item() == pytest.approx(1 / 16)


@pytest.mark.parametrize(
    ("maps", "match"),
    [
        (torch.ones(3, 4), r"\(k, m, n\) stack of matrices, got shape \(3, 4\)"),
        (torch.stack([torch.eye(2), torch.zeros(2, 2)]), r"matrices \[1\] are all zero"),
    ],
)
def test_top_singular_share_rejects_bad_input(maps, match):
    with pytest.raises(ValueError, match=match):
        top_singular_share(maps)


def _layer() -> DenseCaps:
    torch.manual_seed(0)
    return DenseCaps(in_caps=3, in_dim=2, out_caps=4, out_dim=5)


def test_encoder_maps_give_the_summed_votes_of_every_child():
    """Output capsule j's map: sum_i u_i W_ij = flatten(u) @ encoder_maps[j] (a loop over i)."""
    layer = _layer()
    u = torch.randn(6, 3, 2)
    votes = layer.votes(u)  # (B, in_caps, out_caps, out_dim)
    maps = encoder_maps(layer)
    assert maps.shape == (4, 6, 5)
    for j in range(4):
        summed = sum(votes[:, i, j] for i in range(3))
        torch.testing.assert_close(u.flatten(1) @ maps[j], summed)


def test_decoder_maps_give_each_input_capsules_votes():
    """Input capsule j's map: its votes for every output, u_j @ decoder_maps[j]."""
    layer = _layer()
    u = torch.randn(6, 3, 2)
    votes = layer.votes(u)
    maps = decoder_maps(layer)
    assert maps.shape == (3, 2, 20)
    for j in range(3):
        torch.testing.assert_close(u[:, j] @ maps[j], votes[:, j].flatten(1))


def _net() -> PoECapsNet:
    torch.manual_seed(0)
    return PoECapsNet(channels=16, init_std=0.5, normalize="parents").eval()


def test_rank_metrics_of_random_and_rank_one_maps():
    net = _net()
    m = rank_metrics(net, "_u")
    # A random 576*8 x 16 Gaussian map spreads its norm over all 16 directions.
    assert 1 / 16 < m["encoder_rank1_share_u"] < 0.12
    assert 1 / 16 < m["decoder_rank1_share_u"] < 0.12
    assert m["encoder_rank1_share_min_u"] <= m["encoder_rank1_share_u"]
    with torch.no_grad():  # every capsule's U_j = a_j b_j^T: rank one
        a, b = torch.randn(20, 16, 1), torch.randn(20, 1, net.decoder.weight.shape[-1])
        net.decoder.weight.copy_(a @ b)
    m = rank_metrics(net)
    assert m["decoder_rank1_share"] == pytest.approx(1.0, abs=1e-6)
    assert m["decoder_rank1_share_min"] == pytest.approx(1.0, abs=1e-6)
    assert m["encoder_rank1_share"] < 0.12


def test_angle_agreement_by_hand():
    cos = torch.tensor([-0.5, 0.1, 0.2, 0.5, 0.9])
    agrees = torch.tensor([False, True, False, True, True])
    # bins: below 0 | [0, 0.5) | from 0.5; cos = 0.5 falls in the last bin
    assert angle_agreement(cos, agrees, torch.tensor([0.0, 0.5])) == [0.0, 50.0, 100.0]
    assert angle_agreement(cos, agrees, torch.tensor([-0.9, 0.0])) == [None, 0.0, 75.0]
    with pytest.raises(ValueError, match=r"cos \(5,\) and agrees \(4,\) differ"):
        angle_agreement(cos, agrees[:4], torch.tensor([0.0]))


def test_pose_angles_match_one_image_at_a_time():
    net = _net()
    with torch.no_grad():
        net.hemisphere.copy_(torch.randn(20, 16))
    images = torch.rand(7, 1, 28, 28, generator=torch.Generator().manual_seed(1))
    loader = [(images[i : i + 3], torch.zeros(3)) for i in range(0, 7, 3)]
    cos, length = pose_angles(net, loader, SimpleNamespace(eval=SimpleNamespace(max_images=5)))
    assert cos.shape == length.shape == (5, 20)
    m = net.hemisphere
    with torch.no_grad():
        for n in range(5):
            pose = net.encode(images[n : n + 1])[0][0]
            for j in range(20):
                expected = float(pose[j] @ m[j] / (pose[j].norm() * m[j].norm()))
                assert cos[n, j].item() == pytest.approx(expected, abs=1e-5)
                assert length[n, j].item() == pytest.approx(float(pose[j].norm()), rel=1e-5)


def test_pose_angles_need_the_mean_poses():
    cfg = SimpleNamespace(eval=SimpleNamespace(max_images=None))
    with pytest.raises(ValueError, match="mean poses, measured in stage 3"):
        pose_angles(_net(), [], cfg)


def test_pole_purity_by_hand():
    # capsule 0: near pole 3, 3, 1 (2 of 3 = 3), far pole 7, 7 (7); one draw on the equator
    # capsule 1: near pole 4, 4, 4 (4); no draw at the far pole
    cos = torch.tensor([[0.5, 0.9], [0.3, 0.2], [0.8, 0.05], [-0.4, 0.0], [-0.6, 0.5], [0.01, 0.0]])
    preds = torch.tensor([[3, 4], [3, 4], [1, 9], [7, 2], [7, 4], [5, 5]])
    m = pole_purity(cos, preds, 0.1)
    assert m["pole_purity_near"] == pytest.approx((200 / 3 + 100) / 2)
    assert m["pole_purity_far"] == pytest.approx(100.0)  # capsule 0 only
    assert m["pole_majority_near"] == "3,4" and m["pole_majority_far"] == "7,-"
    assert m["pole_majorities_differ"] == 1


@pytest.mark.parametrize(
    ("cos", "preds", "edge", "match"),
    [
        (torch.zeros(3, 2), torch.zeros(3, 3), 0.1, r"got \(3, 2\) and \(3, 3\)"),
        (torch.zeros(3, 2), torch.zeros(3, 2), 1.0, "0 <= edge < 1, got 1.0"),
        (torch.ones(3, 2), torch.zeros(3, 2), 0.1, "no draw lies at the far pole"),
    ],
)
def test_pole_purity_rejects_bad_input(cos, preds, edge, match):
    with pytest.raises(ValueError, match=match):
        pole_purity(cos, preds, edge)


def test_equalize_encoder_maps_by_hand_and_against_the_polar_factor():
    torch.manual_seed(0)
    layer = DenseCaps(in_caps=3, in_dim=2, out_caps=2, out_dim=2)
    with torch.no_grad():  # capsule 0's map: columns 2 e_1 and e_2 (norm sqrt(5))
        w = layer.weight.view(6, 2, 2)
        w[:, 0] = 0.0
        w[0, 0, 0], w[1, 0, 1] = 2.0, 1.0
    other = encoder_maps(layer)[1].double().clone()
    equalize_encoder_maps(layer)
    maps = encoder_maps(layer).double()
    expected = torch.zeros(6, 2, dtype=torch.float64)
    expected[0, 0] = expected[1, 1] = (5 / 2) ** 0.5  # equal columns, Frobenius norm kept
    torch.testing.assert_close(maps[0], expected, rtol=1e-6, atol=1e-6)
    u, _, vh = torch.linalg.svd(other, full_matrices=False)  # the polar factor, by SVD
    torch.testing.assert_close(maps[1], u @ vh * other.norm() / 2**0.5, rtol=1e-5, atol=1e-6)
    assert top_singular_share(maps).tolist() == pytest.approx([0.5, 0.5])


def test_equalize_encoder_maps_refuses_dependent_columns():
    layer = DenseCaps(in_caps=3, in_dim=2, out_caps=2, out_dim=2)
    with torch.no_grad():
        layer.weight.view(6, 2, 2)[:, 0] = torch.ones(6, 1)  # capsule 0: two equal columns
    with pytest.raises(ValueError, match="linearly dependent columns"):
        equalize_encoder_maps(layer)


def test_decoder_axis_alignment_by_hand():
    net = _net()
    with pytest.raises(ValueError, match="mean poses, measured in stage 3"):
        decoder_axis_alignment(net)
    m = torch.zeros(20, 16)
    m[:, 0] = 1.0  # every mean pose along e_0
    b = torch.randn(20, 1, net.decoder.weight.shape[-1])
    a = torch.zeros(20, 16, 1)
    a[:10, 0] = -3.0  # capsules 0-9 decode along -e_0: |cos| 1
    a[10:, 1] = 2.0  # capsules 10-19 along e_1: |cos| 0
    with torch.no_grad():
        net.hemisphere.copy_(m)
        net.decoder.weight.copy_(a @ b)
    axis = decoder_axis_alignment(net)
    assert axis[:10].tolist() == pytest.approx([1.0] * 10, abs=1e-6)
    assert axis[10:].tolist() == pytest.approx([0.0] * 10, abs=1e-6)
