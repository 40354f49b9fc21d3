import pytest
import torch
from torch import nn

from selfcaps.caps import DenseCaps, PrimaryCaps2d
from selfcaps.eval import count_flops, count_parameters, format_profile, profile_model


def test_linear_flops():
    assert count_flops(nn.Linear(10, 20), torch.randn(3, 10)) == 2 * 3 * 10 * 20


def test_conv_flops_by_hand():
    conv = nn.Conv2d(3, 8, kernel_size=3, stride=2, padding=1)
    # output 8 channels x 5 x 5 per image; each output is 3 * 3 * 3 multiply-adds
    macs = 2 * (8 * 5 * 5) * (3 * 3 * 3)
    assert count_flops(conv, torch.randn(2, 3, 10, 10)) == 2 * macs


def test_function_with_several_inputs():
    a, b = torch.randn(4, 5, 6), torch.randn(4, 6, 7)
    assert count_flops(torch.bmm, (a, b)) == 2 * 4 * 5 * 6 * 7
    assert count_flops(lambda x, y: torch.einsum("bij,bjk->bik", x, y), (a, b)) == 2 * 4 * 5 * 6 * 7


def test_parameters():
    net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.Linear(8, 2))
    assert count_parameters(net) == (8 * 3 * 9 + 8) + (8 + 8) + (8 * 2 + 2)
    net[0].requires_grad_(False)
    assert count_parameters(net, trainable_only=True) == (8 + 8) + (8 * 2 + 2)
    shared = nn.Linear(4, 4)
    assert count_parameters(nn.Sequential(shared, shared)) == 20


class CapsNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.primary = PrimaryCaps2d(16, num_caps=4, caps_dim=8, kernel_size=3, stride=2, padding=1)
        self.classes = DenseCaps(4 * 4 * 4, 8, 10, 16, iters=3)

    def forward(self, x):
        return self.classes(self.primary(self.stem(x)).flatten(1, 3))


def test_flops_per_image_do_not_depend_on_batch_size():
    net = CapsNet().train()
    one = profile_model(net, (1, 1, 8, 8))
    five = profile_model(net, (5, 1, 8, 8))
    assert five["flops"] == 5 * one["flops"]
    assert five["flops_per_image"] == one["flops_per_image"] == one["flops"]
    assert five["uncounted_elements"] == 5 * one["uncounted_elements"]
    assert net.training and net.stem[1].training  # modes restored


def test_breakdown_and_report():
    p = profile_model(CapsNet(), (2, 1, 8, 8))
    conv = 2 * 2 * (16 * 8 * 8) * (1 * 9)
    names = {m["name"]: m for m in p["modules"]}
    assert names["CapsNet.stem.0"]["flops"] == conv and names["CapsNet.stem.0"]["type"] == "Conv2d"
    assert names["CapsNet.classes"]["type"] == "DenseCaps"
    assert sum(m["flops"] for m in p["modules"]) == p["flops"]  # own FLOPs do not overlap
    assert sum(m["share"] for m in p["modules"]) == pytest.approx(100.0)
    assert "aten._softmax" in p["uncounted_ops"]  # the routing softmax is seen, not counted
    assert "aten.clone" not in p["uncounted_ops"]
    text = format_profile(p)
    assert "NOT counted" in text and "squash" in text and "softmax" in text
    assert "CapsNet.classes" in text and "FLOPs per image" in text


def test_breakdown_through_an_uncalled_module_list():
    """Modules in an nn.ModuleList (never called itself) are charged to the real caller."""

    class Stack(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList([nn.Linear(8, 8, bias=False), nn.Linear(8, 4, bias=False)])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for b in self.blocks:
                x = b(x)
            return x

    prof = profile_model(Stack(), (1, 8))
    by_name = {m["name"].split(".", 1)[-1]: m["flops"] for m in prof["modules"]}
    assert by_name == {"blocks.0": 2 * 8 * 8, "blocks.1": 2 * 8 * 4}  # Stack itself owns 0
    assert sum(m["share"] for m in prof["modules"]) == pytest.approx(100.0)


def test_flops_by_kind_splits_a_training_step_by_hand():
    """Forward and backward of a grouped convolution and a batched product, counted by hand."""
    from selfcaps.eval.profile import flop_counter, flops_by_kind

    conv = nn.Conv2d(4, 6, 3, padding=1, groups=2, bias=False)
    w = torch.randn(3, 6 * 5 * 5, 7, requires_grad=True)
    x = torch.randn(3, 4, 5, 5, requires_grad=True)
    with flop_counter() as fc:
        h = conv(x).flatten(1).unsqueeze(1)  # (3, 1, 150)
        torch.bmm(h, w).sum().backward()
    conv_fwd = 2 * (6 * 5 * 5) * (2 * 3 * 3) * 3  # outputs x multiply-adds per output x batch
    bmm_fwd = 2 * 3 * 1 * 150 * 7
    # backward: the convolution's input and weight gradients, the product's two gradients
    assert flops_by_kind(fc) == {"conv": 3 * conv_fwd, "matmul": 3 * bmm_fwd}
    assert sum(flops_by_kind(fc).values()) == fc.get_total_flops()
