"""How MCAE learns: the masked-patch loss, the class-capsule loss, transforms, selection."""

import math

import pytest
import torch
from lightning.pytorch.callbacks import Callback
from omegaconf import OmegaConf
from torch import nn
from torch.utils.data import TensorDataset
from torchvision.transforms import v2

from selfcaps.config.loading import load_config
from selfcaps.data.transforms import PerImageStandardize
from selfcaps.eval import finetune
from selfcaps.eval.profile import count_flops
from selfcaps.losses import class_nll, masked_patch_mse
from selfcaps.methods.mcae.finetuning import finetune_param_groups
from selfcaps.methods.mcae.method import MCAE, _input_size
from selfcaps.models.mcae import (
    ConvMixerPrimaryCaps,
    MaskedReconstruction,
    MCAENet,
    random_masking,
)
from tests.models.test_mcae_model import one_thread  # noqa: F401  (autouse fixture)


def reconstruction(seed=0, B=3, L=8, P=5):
    g = torch.Generator().manual_seed(seed)
    pred = torch.randn(B, L, P, generator=g, requires_grad=True)
    target = torch.randn(B, L, P, generator=g, requires_grad=True)
    mask = random_masking(B, L, 0.5, generator=g).mask
    return MaskedReconstruction(pred, target, mask)


def test_masked_mse_against_a_loop():
    out = reconstruction()
    pred, target = out.pred.detach(), out.target.detach()
    total, count = 0.0, 0
    for b in range(3):
        for pos in range(8):
            if out.mask[b, pos]:
                for p, t in zip(pred[b, pos].tolist(), target[b, pos].tolist(), strict=True):
                    total += (p - t) ** 2
                    count += 1
    assert math.isclose(masked_patch_mse(out).item(), total / count, rel_tol=1e-5)
    everything = ((out.pred - out.target) ** 2).sum().item() / out.pred.numel()
    assert math.isclose(masked_patch_mse(out, masked_only=False).item(), everything, rel_tol=1e-5)


def test_no_gradient_from_visible_patches_when_masked_only():
    out = reconstruction(1)
    masked_patch_mse(out).backward()
    for grad in (out.pred.grad, out.target.grad):
        assert (grad[~out.mask] == 0).all()
        assert (grad[out.mask].abs().sum(-1) > 0).all()
    out = reconstruction(1)
    masked_patch_mse(out, masked_only=False).backward()
    assert (out.pred.grad[~out.mask].abs().sum(-1) > 0).all()  # the Table 3 ablation


def test_no_gradient_reaches_visible_patch_outputs_through_the_network():
    torch.manual_seed(0)
    net = MCAENet(
        dim=8, kernel_size=3, primary_caps=2, caps_dim=4, encoder_caps=2, decoder_caps=1,
        decoder_dim=4,
    )  # fmt: skip
    out = net.forward_pretrain(torch.randn(2, 3, 32, 32))
    out.pred.retain_grad()
    masked_patch_mse(out).backward()
    assert (out.pred.grad[~out.mask] == 0).all()
    assert (out.pred.grad[out.mask] != 0).any(dim=-1).all()


def test_class_nll_is_cross_entropy_of_probabilities():
    probs = torch.softmax(torch.randn(4, 3), dim=1)
    y = torch.tensor([0, 2, 1, 2])
    expected = -sum(math.log(float(probs[i, y[i]])) for i in range(4)) / 4
    assert math.isclose(float(class_nll(probs, y)), expected, rel_tol=1e-6)
    torch.testing.assert_close(class_nll(probs, y), nn.functional.cross_entropy(probs.log(), y))


def test_per_image_standardize_matches_numpy():
    x = torch.rand(1, 6, 5) * 255
    out = PerImageStandardize()(x)
    arr = x.numpy()
    expected = (arr - arr.mean()) / max(arr.std(), 1 / math.sqrt(arr.size))
    torch.testing.assert_close(out, torch.from_numpy(expected), rtol=1e-5, atol=1e-5)
    flat = PerImageStandardize()(torch.full((1, 2, 2), 3.0))
    assert torch.equal(flat, torch.zeros(1, 2, 2))  # constant image: no division by zero


def test_per_image_standardize_of_a_batch_is_image_by_image():
    x = torch.rand(3, 2, 4, 5) * 255
    x[1] = 7.0  # a constant image in the batch: the floor applies to it alone
    out = PerImageStandardize()(x)
    loop = torch.stack([PerImageStandardize()(img) for img in x])
    torch.testing.assert_close(out, loop, rtol=1e-6, atol=1e-6)
    assert torch.equal(out[1], torch.zeros(2, 4, 5))


def method_for(data, **overrides):
    pairs = [("data.name", data), ("model.dim", 8), ("model.decoder_caps", 1), *overrides.items()]
    return MCAE(load_config("mcae", "quick", pairs))


@pytest.mark.parametrize(
    ("data", "raw", "size"),
    [("cifar10", (3, 32, 32), 32), ("fashion_mnist", (1, 28, 28), 28),
     ("smallnorb", (1, 48, 48), 32)],
)  # fmt: skip
def test_transforms_and_input_size_per_dataset(data, raw, size):
    method = method_for(data)
    assert method.input_size() == size == method.mcae.img_size
    train, evaluate = method.build_transforms()
    img = torch.randint(0, 256, raw, dtype=torch.uint8)
    a, b = train(img), evaluate(img)
    assert a.shape == b.shape == (raw[0], size, size)
    assert torch.equal(b, evaluate(img))  # evaluation is deterministic
    if data == "smallnorb":  # standardised per image; the centre crop for evaluation
        assert abs(float(b.mean())) < 1e-5 and abs(float(b.std(unbiased=False)) - 1) < 1e-4
        centre = img[:, 8:40, 8:40].float() / 255
        torch.testing.assert_close(b, PerImageStandardize()(centre), rtol=1e-5, atol=1e-5)
        assert torch.equal(method.mcae.target_images(b)[0], b)  # not invertible: the target
    else:  # eq. 4: the decoder regresses the pixel values the evaluation transform normalised
        pixels = v2.ToDtype(torch.float32, scale=True)(img)
        torch.testing.assert_close(method.mcae.target_images(b)[0], pixels, rtol=1e-5, atol=1e-5)


def test_class_capsules_frozen_in_pretraining_and_trained_in_finetuning():
    method = method_for("mnist5k", **{"optim.scheduler": "none"})
    head = list(method.mcae.class_caps.parameters())
    assert head and not any(p.requires_grad for p in head)
    groups = method.configure_optimizers().param_groups
    trained = {id(p) for group in groups for p in group["params"]}
    assert not trained & {id(p) for p in head}
    clf = method.classifier()
    assert clf.decoder is None and all(p.requires_grad for p in clf.parameters())
    for k, v in clf.state_dict().items():  # a copy of the current weights, decoder dropped
        torch.testing.assert_close(v, method.mcae.state_dict()[k])


def test_image_folder_input_size_comes_from_the_preset():
    cfg = load_config("mcae", "quick", [("model.patch_size", 8)])
    cfg.data.name = "imagefolder:imagenette2"  # resized to augment.image_size (paper: 64)
    assert _input_size(cfg) == 64
    MCAE.validate_config(cfg)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [("model.mask_ratio", 1.0, "model.mask_ratio"), ("model.patch_size", 5, "model.patch_size"),
     ("eval.finetune_epochs", -1, "eval.finetune_epochs"), ("optim.scheduler", "step", "optim"),
     ("eval.finetune_epochs", 2.5, "eval.finetune_epochs"),
     ("model.mask_ratio", "half", "model.mask_ratio"),
     ("eval.finetune_pretrained_lr_scale", "abc", "eval.finetune_pretrained_lr_scale"),
     ("eval.finetune_pretrained_lr_scale", None, "eval.finetune_pretrained_lr_scale"),
     ("model.mask_mode", "zeros", "model.mask_mode: expected removed or pixels_zeroed")],
)  # fmt: skip
def test_validate_config_names_the_key(key, value, message):
    cfg = load_config("mcae", "quick")
    OmegaConf.update(cfg, key, value)
    with pytest.raises(ValueError, match=message):
        MCAE.validate_config(cfg)


#: The paper's Table 2: the ConvMixer backbone's mFLOPs "to process one image", counted with
#: fvcore (one multiply-add = one FLOP), by preset, with the dataset's image channels.
TABLE_2 = {
    "paper_mnist": (1, 0.5), "paper_fashion_mnist": (1, 0.5), "paper_smallnorb": (1, 2.0),
    "paper": (3, 3.0), "paper_imagenette": (3, 13.0), "paper_imagewoof": (3, 13.0),
}  # fmt: skip


@pytest.mark.parametrize("preset", list(TABLE_2))
def test_paper_presets_backbone_cost_is_table_2s(preset):
    """The project's counter (2 FLOPs per multiply-add, convolutions only) against a count by
    hand, then fvcore's conventions against the table: the table prints 0.5 and whole numbers,
    so a count lands on its figure within half of the last printed digit. fvcore also counts
    BatchNorm, 2 FLOPs per element in eval mode and 5 in training; each count lands, and the
    eval-mode one is within 5% of the figure."""
    cfg = load_config("mcae", preset)
    chans, table = TABLE_2[preset]
    m, size = cfg.model, _input_size(cfg)
    mixer = ConvMixerPrimaryCaps(
        chans, m.patch_size, m.dim, m.depth, m.kernel_size, m.primary_caps, m.caps_dim
    ).mixer
    norm_elements = []
    for module in mixer.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.register_forward_hook(lambda _m, _i, out: norm_elements.append(out.numel()))
    macs = count_flops(mixer.forward_features, torch.randn(1, chans, size, size)) / 2
    positions = (size // m.patch_size) ** 2  # the stem embeds each patch; per block a k x k
    stem = positions * m.dim * chans * m.patch_size**2  # depthwise and a 1x1 convolution
    blocks = m.depth * positions * (m.dim * m.kernel_size**2 + m.dim * m.dim)
    assert macs == stem + blocks
    norm = sum(norm_elements)
    assert norm == (1 + 2 * m.depth) * positions * m.dim
    last_digit = 0.05 if table < 1 else 0.5
    for count in (macs, macs + 2 * norm, macs + 5 * norm):
        assert abs(count / 1e6 - table) < last_digit, (preset, count)
    assert abs((macs + 2 * norm) / 1e6 - table) <= 0.05 * table


def test_paper_presets_remove_masked_patches_and_quick_ones_zero_them():
    """Section 3.1's masking for every paper preset; the measured quick presets keep theirs."""
    for preset in TABLE_2:
        assert load_config("mcae", preset).model.mask_mode == "removed"
    for preset in ("quick", "cifar10_full", "cifar10_lf10"):
        assert load_config("mcae", preset).model.mask_mode == "pixels_zeroed"


def test_a_run_made_before_mask_mode_keeps_zeroing_pixels():
    """A saved config.yaml without ``model.mask_mode`` (resumed runs) builds the former network."""
    cfg = load_config("mcae", "quick", [("model.dim", 8), ("model.decoder_caps", 1)])
    old = OmegaConf.create(OmegaConf.to_container(cfg))
    del old.model["mask_mode"]
    assert MCAE(old).mcae.backbone.mask_mode == "pixels_zeroed"
    cfg.model.mask_mode = "removed"
    assert MCAE(cfg).mcae.backbone.mask_mode == "removed"


def test_finetune_selects_the_lowest_validation_loss():
    """``select='val_loss'`` keeps (and tests) the epoch whose mean validation loss is lowest."""
    g = torch.Generator().manual_seed(0)
    y = torch.arange(96) % 2
    x = torch.randn(96, 4, generator=g) + 0.5 * (2 * y - 1)[:, None]
    train, val, test = (TensorDataset(x[i::3], y[i::3]) for i in range(3))
    torch.manual_seed(0)
    net = nn.Linear(4, 2)
    losses, states = [], []

    class Independent(Callback):  # the validation loss, computed here after every epoch
        def on_validation_end(self, trainer, module):
            with torch.no_grad():
                losses.append(
                    float(nn.functional.cross_entropy(net(val.tensors[0]), val.tensors[1]))
                )
            states.append({k: v.clone() for k, v in net.state_dict().items()})

    def sgd(module):  # large steps, so the validation loss goes up and down
        return torch.optim.SGD(module.parameters(), lr=3.0)

    res = finetune(
        net, 4, 2, train, val, test, epochs=5, lr=0.1, weight_decay=0.0, batch_size=8,
        head=nn.Identity(), select="val_loss", optimizer_fn=sgd,
        trainer_kwargs={"callbacks": [Independent()]},
    )  # fmt: skip
    assert len(losses) == 5
    best = losses.index(min(losses))
    assert res["best_epoch"] == best
    assert math.isclose(res["best_val_loss"], losses[best], rel_tol=1e-5)
    for k, v in net.state_dict().items():  # the network holds the selected epoch's weights
        torch.testing.assert_close(v, states[best][k])


@pytest.mark.parametrize("scale", [1.0, 0.1, 0.0])
def test_finetune_param_groups_split_pretrained_from_new_layers(scale):
    """Backbone and encoder at lr x scale, the class capsules at lr; every parameter once."""
    cfg = load_config("mcae", "quick")
    method = MCAE(cfg)
    net = method.classifier()
    groups = finetune_param_groups(net, 0.5, scale)
    by_name = {id(p): n for n, p in net.named_parameters()}
    names = [[by_name[id(p)] for p in g["params"]] for g in groups]
    assert sorted(names[0] + names[1]) == sorted(by_name.values())  # each parameter exactly once
    assert all(n.startswith(("backbone.", "encoder.")) for n in names[0])
    assert names[1] and all(n.startswith("class_caps.") for n in names[1])
    assert [g["lr"] for g in groups] == [0.5 * scale, 0.5]
    opt = torch.optim.Adam(groups, lr=0.5)  # the groups' rates win over the default
    assert [g["lr"] for g in opt.param_groups] == [0.5 * scale, 0.5]


def test_finetune_pretrained_lr_scale_is_checked():
    cfg = load_config("mcae", "quick", [("eval.finetune_pretrained_lr_scale", -0.5)])
    with pytest.raises(ValueError, match=r"eval\.finetune_pretrained_lr_scale"):
        MCAE.validate_config(cfg)
