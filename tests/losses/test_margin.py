import pytest
import torch

from selfcaps.losses import MarginLoss


def test_margin_loss_hand_computed():
    # lengths for two classes, target 0: present (0.9-0.5)^2 = 0.16; absent 0.5*(0.6-0.1)^2 = 0.125
    loss = MarginLoss()(torch.tensor([[0.5, 0.6]], dtype=torch.float64), torch.tensor([0]))
    assert loss.item() == pytest.approx(0.16 + 0.125)


def test_margin_loss_zero_when_confident_and_batch_mean():
    lengths = torch.tensor([[0.95, 0.05, 0.0], [0.0, 0.99, 0.1]])
    assert MarginLoss()(lengths, torch.tensor([0, 1])).item() == 0.0
    one = MarginLoss()(torch.tensor([[0.0, 0.0, 0.0]]), torch.tensor([2]))
    two = MarginLoss()(torch.tensor([[0.0, 0.0, 0.0], [0.95, 0.0, 0.0]]), torch.tensor([2, 0]))
    assert two.item() == pytest.approx(one.item() / 2)


def test_margin_loss_validates():
    with pytest.raises(ValueError, match="m_neg"):
        MarginLoss(m_pos=0.1, m_neg=0.9)
    with pytest.raises(ValueError, match="targets"):
        MarginLoss()(torch.rand(4, 3), torch.zeros(3, dtype=torch.long))
