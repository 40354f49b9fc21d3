"""EncapNet's method: the total loss, the OT units only in training, configuration checks."""

import argparse
import copy

import pytest
import torch

from selfcaps.config.loading import load_config
from selfcaps.eval import count_flops, count_parameters
from selfcaps.methods import get_method
from selfcaps.methods.encapnet import EncapNetMethod, gradient_probe
from selfcaps.records import get_record, on_off

# A small EncapNet on 28x28 digits: 8 capsule types, modules at 14x14 and 7x7.
SMALL = [
    ("data.name", "mnist5k"),
    ("model.num_caps", 8),
    ("model.dims", [2, 4]),
    ("model.strides", [2, 2]),
    ("model.num_type2", 1),
    ("model.aide_modules", [2]),
    ("loss.units", [[1, 1, -1], [2, 0, 2]]),
]


def _method(*overrides, seed=0):
    cfg = load_config("encapnet", "quick", [*SMALL, *overrides])
    EncapNetMethod.validate_config(cfg)
    torch.manual_seed(seed)
    return EncapNetMethod(cfg)


def test_registered_with_cli_flags():
    assert get_method("encapnet") is EncapNetMethod
    assert EncapNetMethod.monitor_metric == ("val_top1", "max")
    assert get_record("encapnet").flags["--variant"].choices == ("master", "master_aide")
    assert on_off("on") is True and on_off("OFF") is False
    with pytest.raises(argparse.ArgumentTypeError):
        on_off("maybe")


def test_ot_units_add_nothing_at_inference():
    on, off = _method(("loss.ot", True)), _method(("loss.ot", False))
    assert len(on.feedback) == 2 and len(off.feedback) == 0
    assert count_parameters(on) > count_parameters(off)  # the units train with the method ...
    # ... but the network, its weights and its inference path are the same.
    assert on.model_config() == off.model_config()
    a, b = on.network.state_dict(), off.network.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    x = torch.randn(4, 1, 28, 28)
    assert count_flops(on.features, x) == count_flops(off.features, x)
    calls = []
    for unit in on.feedback:
        unit.register_forward_hook(lambda *args: calls.append(1))
    on.eval(), off.eval()
    with torch.no_grad():
        fa, fb = on.features(x), off.features(x)
        on.validation_step((x, torch.zeros(4, dtype=torch.long)), 0)
    for k in fa:
        torch.testing.assert_close(fa[k], fb[k], rtol=0, atol=0)
    assert not calls


def test_total_loss_is_margin_plus_weighted_divergences():
    m = _method(("loss.ot", True), ("loss.ot_weight", 3.0))
    m.train()
    x, y = torch.randn(6, 1, 28, 28), torch.arange(6) % 10
    ref = copy.deepcopy(m)  # train mode: BatchNorm uses the batch statistics in both
    loss, logs = m.compute_loss((x, y))
    out, taps = ref.network.forward_taps(x)
    lengths = out.norm(dim=-1)
    t = torch.nn.functional.one_hot(y, 10).float()
    margin = (t * (0.9 - lengths).clamp(min=0) ** 2).sum(1)
    margin = (margin + 0.5 * ((1 - t) * (lengths - 0.1).clamp(min=0) ** 2).sum(1)).mean()
    (u1, u2) = ref.feedback
    ot = u1(taps[0][-1], taps[0][1]) + u2(taps[1][2], taps[1][0])
    torch.testing.assert_close(logs["train_ot_loss"], ot.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(loss, margin + 3.0 * ot, rtol=1e-5, atol=1e-6)
    loss.backward()
    for unit in m.feedback:  # the generators and extractors learn
        assert all(p.grad is not None for p in unit.parameters())


def test_ot_off_is_the_margin_loss_and_master_variant_has_no_aide():
    m = _method(("loss.ot", False), ("model.variant", "master"))
    assert not any(type(x).__name__ == "Conv2d" and x.groups == 1 and x.kernel_size[0] > 3
                   for x in m.network.modules())  # fmt: skip
    loss, logs = m.compute_loss((torch.randn(4, 1, 28, 28), torch.tensor([0, 1, 2, 3])))
    assert "train_ot_loss" not in logs
    torch.testing.assert_close(loss, logs["train_cls_loss"])


def test_kl_divergence_option():
    m = _method(("loss.divergence", "kl"))
    assert all(type(u.divergence).__name__ == "KLDivergence" for u in m.feedback)


def test_logit_networks_train_with_cross_entropy():
    m = _method(("model.name", "encapnet18_resnet"), ("loss.ot", False), ("model.strides", [1, 2]))
    x, y = torch.randn(4, 1, 28, 28), torch.tensor([0, 1, 2, 3])
    expected = torch.nn.functional.cross_entropy(copy.deepcopy(m.net)(x), y)
    loss, _ = m.compute_loss((x, y))
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)


def test_eval_transform_is_deterministic_and_train_transform_is_not():
    m = _method(("data.name", "cifar10"), ("model.strides", [2, 2]))
    train, evaluate = m.build_transforms()
    img = torch.randint(0, 256, (3, 32, 32), dtype=torch.uint8)
    assert torch.equal(evaluate(img), evaluate(img))
    torch.manual_seed(0)
    views = [train(img) for _ in range(4)]
    assert any(not torch.equal(views[0], v) for v in views[1:])
    assert evaluate(img).shape == (3, 32, 32)


@pytest.mark.parametrize(
    ("override", "key"),
    [
        (("loss.epsilon", 0.0), "loss.epsilon"),
        (("loss.cost", "l1"), "loss.cost"),
        (("loss.units", [[5, 0, -1]]), "loss.units"),
        (("model.name", "coca"), "model.name"),
        (("augment.recipe", "autoaugment"), "augment.recipe"),
    ],
)
def test_bad_settings_name_their_key(override, key):
    cfg = load_config("encapnet", "quick", [*SMALL, override])
    with pytest.raises(ValueError, match=key):
        EncapNetMethod.validate_config(cfg)


def test_feedback_on_tiny_maps_is_refused():
    # 32x32 images, strides 4 and 4: module 2's maps are 2x2, which f_phi makes one number.
    with pytest.raises(ValueError, match="one number"):
        _method(("data.name", "cifar10"), ("model.strides", [4, 4]), ("loss.units", [[2, 1, -1]]))


def test_ot_needs_an_encapnet():
    cfg = load_config("encapnet", "quick", [*SMALL, ("model.name", "table1_cnn")])
    with pytest.raises(ValueError, match=r"loss\.ot"):
        EncapNetMethod.validate_config(cfg)


def test_feedback_units_attach_to_the_resnet_counterpart():
    # Table 3 cases a-b train the unit on ResNet: taps are each stage's input and block outputs.
    resnet = [("model.name", "encapnet18_resnet"), ("loss.encapsulated_generator", False)]
    m = _method(*resnet, ("loss.ot", True), ("loss.ot_weight", 3.0))
    assert len(m.feedback) == 2
    m.train()
    x, y = torch.randn(4, 1, 28, 28), torch.tensor([0, 1, 2, 3])
    net, units = copy.deepcopy(m.net), copy.deepcopy(m.feedback)
    outs = []  # stem, block 1, block 2 (stage 1: 14x14), block 3, block 4 (stage 2: 7x7)
    for layer in net.body:
        layer.register_forward_hook(lambda mod, i, o: outs.append(o))
    logits = net(x)
    # units [[1, 1, -1], [2, 0, 2]]: stage 1's block 1 from its block 2; stage 2's input from
    # its block 2
    ot = units[0](outs[2], outs[1]) + units[1](outs[4], outs[2])
    expected = torch.nn.functional.cross_entropy(logits, y) + 3.0 * ot
    loss, logs = m.compute_loss((x, y))
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(logs["train_ot_loss"], ot.detach(), rtol=1e-5, atol=1e-6)
    cfg = load_config("encapnet", "quick", [*SMALL, resnet[0], ("loss.ot", True)])
    with pytest.raises(ValueError, match=r"loss\.encapsulated_generator"):
        EncapNetMethod.validate_config(cfg)


def test_cifar100_gets_100_class_capsules_and_svhn_no_flips():
    m = _method(("data.name", "cifar100"), ("model.strides", [2, 2]), ("loss.ot", False))
    assert m.network.class_caps.out_caps == 100
    assert m.network(torch.randn(2, 3, 32, 32)).shape == (2, 100, 4)
    flips = {}
    for name in ("cifar10", "svhn"):
        train, _ = _method(("data.name", name), ("model.strides", [2, 2])).build_transforms()
        flips[name] = any("Flip" in type(t).__name__ for t in train.transforms)
    assert flips == {"cifar10": True, "svhn": False}


def test_gradient_probe_norms_and_cosine_by_hand():
    w = torch.tensor([3.0, 4.0], requires_grad=True)
    unused = torch.zeros(2, requires_grad=True)
    # d/dw (w . w) = 2w = (6, 8), norm 10; d/dw (2 w0 - w1) = (2, -1), norm sqrt 5; dot 4
    s = gradient_probe((w * w).sum(), 2 * w[0] - w[1], [w, unused])
    assert s["probe_grad_cls"] == pytest.approx(10.0)
    assert s["probe_grad_ot"] == pytest.approx(5**0.5)
    assert s["probe_grad_ratio"] == pytest.approx(5**0.5 / 10)
    assert s["probe_grad_cos"] == pytest.approx(4 / (10 * 5**0.5))


def test_gradient_probe_measures_the_shared_weights_only():
    """The probe's OT gradient is the network's share of d(lambda W)/d theta, not the units'."""
    m = _method(("loss.ot", True), ("loss.ot_weight", 2.0))
    m.train()
    x, y = torch.randn(6, 1, 28, 28), torch.arange(6) % 10
    _, taps = m.network.forward_taps(x)
    out = m.network(x)
    ot = sum(u(taps[k - 1][hi], taps[k - 1][lo]) for u, (k, lo, hi) in
             zip(m.feedback, m.cfg.loss.units, strict=True))  # fmt: skip
    cls = m.margin(out.norm(dim=-1), y)
    params = list(m.network.parameters())
    s = gradient_probe(cls, 2.0 * ot, params)
    g = torch.autograd.grad(2.0 * ot, params, retain_graph=True, allow_unused=True)
    direct = torch.sqrt(sum((gi**2).sum() for gi in g if gi is not None))
    assert s["probe_grad_ot"] == pytest.approx(float(direct), rel=1e-5)
    assert s["probe_grad_ot"] > 0 and s["probe_grad_cls"] > 0


def test_paper_preset_follows_the_paper_and_reference_preset_the_code():
    paper = load_config("encapnet", "paper")
    # "18 layers (N = 3, n = 2)"; depth 2 + sum_i (N_i + 1) over four modules
    assert 2 + len(paper.model.dims) * (paper.model.num_type2 + 1) == 18
    assert list(paper.model.aide_modules) == [1, 2, 3, 4] and paper.loss.ot_weight == 10.0
    per_module = {k: [u for u in paper.loss.units if u[0] == k] for k in range(1, 5)}
    # two units per module; module 4's same-size unit (4x4 maps) is left out
    assert [len(v) for v in per_module.values()] == [2, 2, 2, 1]
    assert (paper.loss.cost, paper.loss.detach_plan, paper.loss.encapsulated_generator) == (
        "cosine",
        True,
        True,
    )
    ref = load_config("encapnet", "reference")
    assert ref.model.num_type2 == 2 and list(ref.model.aide_modules) == [3, 4]
    assert [list(u) for u in ref.loss.units] == [[3, 1, -1], [4, 0, 2]]
    assert (ref.loss.ot_weight, ref.loss.cost, ref.loss.detach_plan) == (1.0, "euclidean", False)
    # option/option.py: --batch_size_train 256 (the paper: "Batch size is 128")
    assert (ref.data.batch_size, paper.data.batch_size) == (256, 128)
    EncapNetMethod.validate_config(paper)
    EncapNetMethod.validate_config(ref)


def test_feedback_units_batched_on_an_accelerator_equal_unit_by_unit():
    """On an accelerator every unit's Sinkhorn problems share one loop: the same loss and
    gradients as the CPU path's unit-by-unit sum (float64), with 2 x iters logsumexps in all."""
    from selfcaps.caps.chunking import sized_for
    from selfcaps.eval.dispatch import DispatchTally

    method = _method(("loss.ot", True)).double()
    assert len(method.feedback) == 2
    x = torch.rand(4, 1, 28, 28, dtype=torch.float64)
    y = torch.tensor([0, 1, 2, 3])
    got = []
    for kind in ("cpu", "accelerator"):
        method.zero_grad()
        with sized_for(kind), DispatchTally() as t:
            loss, _ = method.compute_loss((x, y))
        loss.backward()
        grads = [p.grad.clone() for p in method.parameters() if p.grad is not None]
        got.append((loss.detach(), grads))
    assert t.op_names["aten.logsumexp"] == 2 * int(method.cfg.loss.iters)  # one loop for both
    torch.testing.assert_close(got[0][0], got[1][0])
    assert len(got[0][1]) == len(got[1][1]) > 0
    for a, b in zip(got[0][1], got[1][1], strict=True):
        torch.testing.assert_close(a, b)
