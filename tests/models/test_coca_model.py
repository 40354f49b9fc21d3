import pytest
import torch

import selfcaps
from selfcaps.models.coca import CoCaNet


def test_registry_and_parameter_count():
    assert "coca" in selfcaps.list_models()
    net = selfcaps.create_model("coca")
    total = sum(p.numel() for p in net.parameters())
    routing = net.class_caps.weight.numel()
    assert routing == 512 * 10 * 16 * 16 == 1_310_720
    # backbone convs (no bias) + BN + primary conv (no bias) + BN + routing
    convs = 3 * 16 * 9 + 16 * 32 * 9 + 32 * 32 * 9 + 32 * 64 * 9 + 64 * 64 * 9 + 64 * 128 * 9
    bns = 2 * (16 + 32 + 32 + 64 + 64 + 128) + 2 * 512
    primary = 128 * 512 * 9
    assert total == convs + bns + primary + routing == 2_045_520


def test_shapes_for_cifar_and_mnist():
    for chans, size in ((3, 32), (1, 28)):
        net = CoCaNet(in_chans=chans).eval()
        x = torch.randn(3, chans, size, size)
        assert net.forward_backbone(x).shape == (3, 128, 4, 4)
        assert net.forward_capsules(x).shape == (3, 10, 16)
        z = net(x)
        assert z.shape == (3, 10)
        torch.testing.assert_close(z.norm(dim=1), torch.ones(3))
        assert (z >= 0).all()  # lengths are non-negative


def test_routing_init_std():
    net = CoCaNet()
    assert abs(net.class_caps.weight.std().item() - 0.1) < 0.002


def test_wrong_input_names_expected_and_got():
    net = CoCaNet(in_chans=3)
    with pytest.raises(ValueError, match=r"\(B, 3, H, W\).*\(2, 1, 32, 32\)"):
        net(torch.randn(2, 1, 32, 32))
    with pytest.raises(ValueError, match="expects 4x4"):
        net(torch.randn(2, 3, 64, 64))
