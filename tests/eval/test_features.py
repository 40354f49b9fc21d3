import warnings

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from selfcaps.eval import extract_features


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Dropout(0.5))
        self.frozen_bn = nn.BatchNorm1d(16)

    def forward_features(self, x):
        return self.frozen_bn(self.body(x).flatten(1)).unflatten(1, (4, 2, 2))


@pytest.fixture
def setup():
    torch.manual_seed(0)
    net = Net()
    with torch.no_grad():  # non-trivial running statistics
        net.body[1].running_mean.uniform_(-1, 1)
        net.frozen_bn.running_var.uniform_(0.5, 2)
    net.train()
    net.frozen_bn.eval()  # a deliberately mixed state that must survive
    data = TensorDataset(torch.randn(23, 1, 4, 4), torch.arange(23) % 3)
    return net, data


def manual(net, data):
    net.eval()
    with torch.no_grad():
        x, y = data.tensors
        return net.forward_features(x).flatten(1), y


def test_same_features_as_a_manual_loop_and_modes_restored(setup):
    net, data = setup
    features, labels = extract_features(net.forward_features, data, batch_size=5)
    modes = [m.training for m in net.modules()]
    assert net.training and net.body[3].training and not net.frozen_bn.training
    expected_f, expected_y = manual(net, data)
    torch.testing.assert_close(features, expected_f)
    assert torch.equal(labels, expected_y)
    assert features.shape == (23, 16) and features.dtype == torch.float32
    assert labels.dtype == torch.long
    assert modes == [True, True, True, True, True, True, False]


def test_dataloader_and_explicit_module(setup):
    net, data = setup
    loader = DataLoader(data, batch_size=4)
    features, _ = extract_features(lambda x: net.forward_features(x), loader, module=net)
    assert net.training
    torch.testing.assert_close(features, manual(net, data)[0])


def test_modes_restored_after_an_error(setup):
    net, _ = setup

    def broken(x):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        extract_features(broken, TensorDataset(torch.zeros(2, 1), torch.zeros(2)), module=net)
    assert net.training and not net.frozen_bn.training


def test_callable_without_module_warns(setup):
    _, data = setup
    with pytest.warns(UserWarning, match="found no nn.Module"):
        extract_features(lambda x: x, data)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        features, _ = extract_features(lambda x: x, data, module=())
    assert features.shape == (23, 16)


def test_batches_without_targets_are_rejected():
    data = torch.zeros(4, 3)  # a tensor "dataset": samples without targets
    with pytest.raises(ValueError, match=r"expected batches \(images, targets"):
        extract_features(nn.Identity(), data)
