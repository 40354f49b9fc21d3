"""MCAE's network: masking, patch order, leakage, decoder and classifier maths, shapes."""

import copy
import math

import pytest
import torch

import selfcaps
from selfcaps.caps import SelfRouting1d
from selfcaps.config.checks import mcae as config_checks_mcae
from selfcaps.models.mcae import (
    MASK_MODES,
    CapsuleDecoder,
    ClassCapsules,
    Masking,
    MCAENet,
    gather_positions,
    patchify,
    random_masking,
    restore_positions,
    unpatchify,
)


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny tensors: one thread avoids OpenMP hand-offs on a shared 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


TINY = dict(
    dim=16, kernel_size=3, num_heads=2, primary_caps=4, caps_dim=4, encoder_caps=4,
    decoder_caps=2, decoder_dim=4,
)  # fmt: skip


def tiny(**kwargs):
    torch.manual_seed(0)
    return MCAENet(**{**TINY, **kwargs})


CASES = [(64, 0.5), (49, 0.5), (49, 0.75), (16, 0.9), (7, 0.0)]


@pytest.mark.parametrize(("length", "ratio"), CASES)
def test_masking_keeps_exactly_the_requested_count(length, ratio):
    g = torch.Generator().manual_seed(length)
    m = random_masking(5, length, ratio, generator=g)
    keep = max(1, int(length * (1 - ratio)))
    assert m.ids_keep.shape == (5, keep)
    assert (m.mask.sum(dim=1) == length - keep).all()
    for b in range(5):
        kept = m.ids_keep[b].tolist()
        assert len(set(kept)) == keep  # no position kept twice
        assert [i for i in range(length) if not m.mask[b, i]] == sorted(kept)


def test_masking_is_random_per_sample_and_reproducible():
    a = random_masking(4, 64, 0.5, generator=torch.Generator().manual_seed(1))
    b = random_masking(4, 64, 0.5, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a.ids_keep, b.ids_keep)
    assert len({tuple(r.tolist()) for r in a.mask}) == 4
    with pytest.raises(ValueError, match="mask_ratio"):
        random_masking(1, 4, 1.0)


def test_restore_puts_visible_values_back_in_order_and_token_elsewhere():
    B, L = 3, 10
    x = torch.randn(B, L, 2, 5)
    token = torch.full((2, 5), 7.0)
    m = random_masking(B, L, 0.6, generator=torch.Generator().manual_seed(3))
    visible = gather_positions(x, m.ids_keep)
    for b in range(B):  # gather, checked by a loop
        for k, i in enumerate(m.ids_keep[b].tolist()):
            assert torch.equal(visible[b, k], x[b, i])
    full = restore_positions(visible, token, m.ids_restore)
    for b in range(B):
        for i in range(L):
            assert torch.equal(full[b, i], token if m.mask[b, i] else x[b, i])


def test_patchify_order_against_a_loop_and_inverse():
    x = torch.randn(2, 3, 8, 12)
    p = 4
    patches = patchify(x, p)
    assert patches.shape == (2, 2 * 3, p * p * 3)
    for r in range(2):
        for c in range(3):
            block = x[:, :, r * p : (r + 1) * p, c * p : (c + 1) * p]  # (B, C, p, p)
            expected = block.permute(0, 2, 3, 1).reshape(2, -1)  # (dy, dx, channel)
            torch.testing.assert_close(patches[:, r * 3 + c], expected, rtol=0, atol=0)
    assert torch.equal(unpatchify(patches, p, (2, 3), 3), x)


def test_convmixer_stem_is_a_patch_embedding():
    """Changing patch j changes stem token j only: kernel = stride = patch size."""
    net = tiny().eval()
    stem = net.backbone.mixer.stem
    x = torch.randn(1, 3, 32, 32)
    base = stem(x)
    for j in (0, 9, 63):
        r, c = divmod(j, 8)
        y = x.clone()
        y[:, :, 4 * r : 4 * r + 4, 4 * c : 4 * c + 4] += torch.randn(3, 4, 4)
        changed = (stem(y) - base).abs().amax(dim=1).flatten() > 0
        assert changed.nonzero().flatten().tolist() == [j]


@pytest.mark.parametrize(
    ("backbone", "mask_mode"),
    [("convmixer", "removed"), ("convmixer", "pixels_zeroed"), ("vit", "removed")],
)
@pytest.mark.parametrize("train", [True, False])
def test_masked_patches_never_reach_visible_features(backbone, mask_mode, train):
    """Rewriting every masked patch changes no visible position's encoder capsules."""
    net = tiny(backbone=backbone, mask_mode=mask_mode).train(train)
    x = torch.randn(4, 3, 32, 32)
    m = random_masking(4, 64, 0.5, generator=torch.Generator().manual_seed(0))
    pixels = m.mask.view(4, 1, 8, 8).repeat_interleave(4, 2).repeat_interleave(4, 3)
    y = torch.where(pixels, torch.randn_like(x) * 5, x)
    with torch.no_grad():
        a, b = net.encode(x, m), net.encode(y, m)
    for ta, tb in zip(a, b, strict=True):
        assert torch.equal(ta, tb)
    # control: the same change made to a visible patch does change the features
    z = x.clone()
    first = m.ids_keep[0, 0].item()
    r, c = divmod(first, 8)
    z[0, :, 4 * r : 4 * r + 4, 4 * c : 4 * c + 4] += 1.0
    with torch.no_grad():
        assert not torch.equal(net.encode(z, m)[0], a[0])


def cut_masking(batch, visible):
    """A :class:`Masking` of the 8x8 grid keeping the positions where ``visible`` (8, 8) is True."""
    mask = ~visible.flatten()
    keep, masked = (~mask).nonzero().flatten(), mask.nonzero().flatten()  # row-major order
    restore = torch.cat([keep, masked]).argsort()
    return Masking(keep.expand(batch, -1), restore.expand(batch, -1), mask.expand(batch, -1))


HALVES = {  # visible region of the 8x8 grid, and the pixels of a 32x32 image it covers
    "left": ((slice(None), slice(0, 4)), (..., slice(0, 32), slice(0, 16))),
    "top": ((slice(0, 4), slice(None)), (..., slice(0, 16), slice(0, 32))),
}


def visible_only(half):
    rows_cols, pixels = HALVES[half]
    visible = torch.zeros(8, 8, dtype=torch.bool)
    visible[rows_cols] = True
    return visible, pixels


@pytest.mark.parametrize("half", list(HALVES))
@pytest.mark.parametrize("train", [True, False])
def test_removed_masking_is_the_network_on_the_visible_patches_alone(half, train):
    """mask_mode="removed": the visible half's capsules and features are those of the same
    network (timm's plain ConvMixer, primary capsules, encoder) run on that half of the image
    cut out, in float64; BatchNorm statistics (train mode) included. The zeroed-pixel mode
    differs: the embeddings of its zero patches reach the visible features."""
    visible, pixels = visible_only(half)
    x = torch.randn(4, 3, 32, 32, dtype=torch.float64)
    m = cut_masking(4, visible)
    outs = {}
    for mode in ("removed", "pixels_zeroed"):
        net = tiny(mask_mode=mode).double().train(train)
        alone = copy.deepcopy(net)  # same weights and running statistics
        with torch.no_grad():
            outs[mode] = net.encode(x, m), alone.encode(x[pixels])
    for got, want in zip(*outs["removed"], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-10)
    zeroed, alone = outs["pixels_zeroed"]
    assert not torch.allclose(zeroed[2], alone[2], rtol=1e-3, atol=1e-3)


def test_removed_masking_per_sample_in_eval_mode():
    """Each sample of a batch keeps its own visible region (eval mode: no batch statistics)."""
    net = tiny().double().eval()
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    (left, left_px), (top, top_px) = visible_only("left"), visible_only("top")
    a, b = cut_masking(1, left), cut_masking(1, top)
    m = Masking(*(torch.cat([u, v]) for u, v in zip(a, b, strict=True)))
    with torch.no_grad():
        pose, act, feat = net.encode(x, m)
        for i, px in ((0, left_px), (1, top_px)):
            want = net.encode(x[i : i + 1][px])
            for got, ref in zip((pose[i], act[i], feat[i]), want, strict=True):
                torch.testing.assert_close(got, ref[0], rtol=1e-9, atol=1e-10)


def test_mask_mode_is_checked_and_mirrored_by_the_config_check():
    with pytest.raises(ValueError, match="mask_mode must be one of removed, pixels_zeroed"):
        tiny(mask_mode="zeros")
    with pytest.raises(ValueError, match="mask_mode"):
        tiny(backbone="vit", mask_mode="zeros")
    assert MASK_MODES == config_checks_mcae.MASK_MODES


def test_encoder_is_point_wise():
    """Without masking, a position's encoder capsules depend only on its primary capsules."""
    net = tiny().eval()
    pose = torch.randn(2, 5, 4, 4)
    act = torch.rand(2, 5, 4)
    out = net.encoder(pose, act)
    pose2 = pose.clone()
    pose2[:, 3] += 1.0
    out2 = net.encoder(pose2, act)
    changed = (out2[0] - out[0]).abs().flatten(2).amax(dim=(0, 2)) > 0
    assert changed.tolist() == [False, False, False, True, False]


def _self_routing_loop(pose, act, core):
    """Paper eqs. 1-3 for one child set, written with explicit loops over parents."""
    N, _ = pose.shape
    M, D = core.out_caps, core.out_dim
    W = core.weight_pose.view(N, -1, M, D)
    logits = torch.stack([pose[i] @ core.weight_route[i] + core.bias_route[i] for i in range(N)])
    c = torch.softmax(logits, dim=1)  # eq. 1
    v, a_out = torch.zeros(M, D, dtype=pose.dtype), torch.zeros(M, dtype=pose.dtype)
    for j in range(M):
        w = c[:, j] * act
        a_out[j] = w.sum() / act.sum()  # eq. 2
        v[j] = sum(w[i] * (pose[i] @ W[i, :, j]) for i in range(N)) / w.sum()  # eq. 3
    return v, a_out


def test_class_capsules_average_routed_activations_over_positions():
    """Eqs. 1-2 per position by a loop, averaged; equal to SelfRouting1d's activations."""
    torch.manual_seed(1)
    head = ClassCapsules(3, 4, 5).double()
    for p in head.parameters():
        torch.nn.init.normal_(p, std=0.5)
    pose, act = torch.randn(2, 6, 3, 4).double(), torch.rand(2, 6, 3).double()
    probs = head(pose, act)
    expected = torch.zeros(2, 5, dtype=torch.float64)
    for b in range(2):
        for pos in range(6):
            for j in range(5):
                w, bias = head.weight_route, head.bias_route
                c = [torch.softmax(pose[b, pos, i] @ w[i] + bias[i], 0)[j] for i in range(3)]
                a_j = sum(c[i] * act[b, pos, i] for i in range(3)) / act[b, pos].sum()
                expected[b, j] += a_j / 6
    torch.testing.assert_close(probs, expected)
    torch.testing.assert_close(probs.sum(1), torch.ones(2, dtype=torch.float64))
    # The same activations as a full self-routing layer with these routing parameters.
    layer = SelfRouting1d(3, 5, 4, 2).double()
    with torch.no_grad():
        layer.core.weight_route.copy_(head.weight_route)
        layer.core.bias_route.copy_(head.bias_route)
    torch.testing.assert_close(layer(pose, act)[1].mean(1), probs)
    assert {n for n, _ in head.named_parameters()} == {"weight_route", "bias_route"}


@pytest.mark.parametrize("linear", ["shared", "per_position"])
@pytest.mark.parametrize("fused", [True, False])
def test_decoder_global_routing_and_linear(linear, fused):
    """Every output position is routed from every position, normalised, then a linear layer."""
    torch.manual_seed(2)
    L, A, D = 3, 2, 3
    dec = CapsuleDecoder(L, A, D, caps=2, caps_dim=2, patch_pixels=5, linear=linear)
    dec = dec.double().eval()
    dec.fused = fused
    for p in dec.route.parameters():
        torch.nn.init.normal_(p, std=0.5)
    m = random_masking(1, L, 0.34, generator=torch.Generator().manual_seed(0))  # keeps 1
    pose, act = torch.randn(1, 2, A, D).double(), torch.rand(1, 2, A).double()
    pred = dec(pose, act, m.ids_restore)
    full_pose = restore_positions(pose, dec.mask_pose, m.ids_restore)[0].reshape(L * A, D)
    token_act = torch.softmax(dec.mask_act_logits, 0)
    full_act = restore_positions(act, token_act, m.ids_restore)[0].reshape(L * A)
    v, _ = _self_routing_loop(full_pose, full_act, dec.route.core)  # (L * 2, 2)
    v = v / math.sqrt(1 + 1e-5)  # BatchNorm of the poses with its initial running statistics
    for pos in range(L):
        x = v[2 * pos : 2 * pos + 2].flatten()
        if linear == "shared":  # one layer for every position (paper Fig. 1)
            expected = x @ dec.head.weight.T + dec.head.bias
        else:
            expected = x @ dec.weight[pos] + dec.bias[pos]
        torch.testing.assert_close(pred[0, pos], expected)
    masked = m.mask[0].nonzero().flatten().tolist()
    assert len(masked) == 2
    assert torch.allclose(token_act, torch.full((A,), 1.0 / A, dtype=torch.float64))


@pytest.mark.parametrize("backbone", ["convmixer", "vit"])
def test_fused_routing_equals_the_readable_layers_in_float64(backbone):
    """The whole pretraining loss and every parameter's gradient, fused vs readable."""
    net = tiny(backbone=backbone, img_size=16).double()
    x = torch.randn(3, 3, 16, 16, dtype=torch.float64)
    results = []
    for fused in (True, False):
        net.use_fused_routing(fused).zero_grad()
        out = net.forward_pretrain(x, generator=torch.Generator().manual_seed(0))
        loss = (out.pred - out.target)[out.mask].pow(2).mean() + net(x).log().sum()
        loss.backward()
        results.append((loss.detach(), {n: p.grad.clone() for n, p in net.named_parameters()}))
    (l1, g1), (l2, g2) = results
    torch.testing.assert_close(l1, l2)
    assert g1.keys() == g2.keys()
    for name in g1:
        torch.testing.assert_close(g1[name], g2[name], msg=name)


def test_target_is_the_pixel_values_or_the_normalised_input():
    """Eq. 4: 'the actual pixel values', i.e. the input with its normalisation undone."""
    mean, std = (0.4, 0.5, 0.6), (0.2, 0.25, 0.3)
    x = torch.randn(2, 3, 16, 16)
    pixels = tiny(img_size=16, pixel_mean=mean, pixel_std=std).forward_pretrain(x)
    raw = torch.stack([x[:, c] * std[c] + mean[c] for c in range(3)], dim=1)
    torch.testing.assert_close(pixels.target, patchify(raw, 4))
    normalized = tiny(img_size=16, target="normalized", pixel_mean=mean, pixel_std=std)
    torch.testing.assert_close(normalized.forward_pretrain(x).target, patchify(x, 4))
    # The linear layer's output is read in normalised units: the same weights predict
    # out * std + mean for pixel targets (an affine reparametrisation of one linear layer).
    pred_pixels = tiny(img_size=16, pixel_mean=mean, pixel_std=std).forward_pretrain(
        x, generator=torch.Generator().manual_seed(0)
    )
    pred_norm = normalized.forward_pretrain(x, generator=torch.Generator().manual_seed(0))
    std_p, mean_p = torch.tensor(std).repeat(16), torch.tensor(mean).repeat(16)  # (dy, dx, c)
    torch.testing.assert_close(pred_pixels.pred, pred_norm.pred * std_p + mean_p)
    with pytest.raises(ValueError, match="one per channel"):
        tiny(pixel_mean=(0.5,), pixel_std=(0.5,))
    with pytest.raises(ValueError, match="target must be"):
        tiny(target="raw")


DATASETS = {  # channels, input side, patch side (paper section 4.2 sizes)
    "mnist / fashion_mnist": (1, 28, 4),
    "cifar10": (3, 32, 4),
    "smallnorb (32x32 crops)": (1, 32, 4),
    "imagenette / imagewoof (64x64)": (3, 64, 8),
}


@pytest.mark.parametrize("backbone", ["convmixer", "vit"])
@pytest.mark.parametrize("dataset", list(DATASETS))
def test_shapes_for_every_backbone_and_dataset(backbone, dataset):
    chans, size, patch = DATASETS[dataset]
    net = tiny(backbone=backbone, in_chans=chans, img_size=size, patch_size=patch, num_classes=5)
    L = (size // patch) ** 2
    x = torch.randn(3, chans, size, size)
    out = net.forward_pretrain(x)
    assert out.pred.shape == out.target.shape == (3, L, patch * patch * chans)
    assert (out.mask.sum(1) == L - int(L * 0.5)).all()
    masked, recon = net.reconstruct(out)
    assert masked.shape == recon.shape == x.shape
    probs = net.eval()(x)
    assert probs.shape == (3, 5)
    torch.testing.assert_close(probs.sum(1), torch.ones(3))
    pose, act = net.capsule_features(x)
    assert pose.shape == (3, L, 4, 4) and act.shape == (3, L, 4)
    assert net.forward_features(x).shape == (3, net.num_features)


def test_registry_parameter_count_and_no_decoder_variant():
    net = selfcaps.create_model("mcae", **TINY)
    assert "mcae" in selfcaps.list_models()
    L, A, D = 64, 4, 4
    decoder = sum(p.numel() for p in net.decoder.parameters())
    route = L * A * D * (L * 2 * 4) + L * A * D * (L * 2) + L * A * (L * 2)  # pose, route, bias
    norm = 2 * (2 * 4)
    linear = (2 * 4) * 48 + 48  # one linear layer shared by the positions
    assert decoder == A * D + A + route + norm + linear
    per_position = selfcaps.create_model("mcae", decoder_linear="per_position", **TINY)
    assert sum(p.numel() for p in per_position.decoder.parameters()) == decoder + (L - 1) * linear
    assert sum(p.numel() for p in net.class_caps.parameters()) == A * D * 10 + A * 10
    lean = selfcaps.create_model("mcae", decoder=False, **TINY)
    assert lean.decoder is None
    full_state = {k: v for k, v in net.state_dict().items() if not k.startswith("decoder.")}
    lean.load_state_dict(full_state)  # strict: the same keys without the decoder
    with pytest.raises(RuntimeError, match="without its decoder"):
        lean.forward_pretrain(torch.randn(1, 3, 32, 32))


def test_wrong_input_names_expected_and_got():
    net = tiny()
    with pytest.raises(ValueError, match=r"\(B, 3, 32, 32\).*\(2, 3, 28, 28\)"):
        net.forward_pretrain(torch.randn(2, 3, 28, 28))
    with pytest.raises(ValueError, match="multiple of patch_size"):
        MCAENet(img_size=30, patch_size=4)
    assert math.isclose(net.mask_ratio, 0.5)
