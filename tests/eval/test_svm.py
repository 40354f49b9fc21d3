import numpy as np
import pytest
import torch
from sklearn.svm import SVC

from selfcaps.eval import svm_probe


def data(n=210, classes=7, dim=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    centers = 0.8 * torch.randn(classes, dim, generator=g)
    y = torch.arange(n) % classes
    x = centers[y] + torch.randn(n, dim, generator=g)
    return x[:140], y[:140], x[140:], y[140:]


def test_matches_sklearn_directly():
    train_x, train_y, test_x, test_y = data()
    result = svm_probe(train_x, train_y, test_x, test_y, C=10.0, gamma=0.1)
    svc = SVC(kernel="rbf", C=10.0, gamma=0.1).fit(train_x.numpy(), train_y.numpy())
    assert result["top1"] == pytest.approx(100 * svc.score(test_x.numpy(), test_y.numpy()))
    ranking = np.argsort(-svc.decision_function(test_x.numpy()), axis=1)[:, :5]
    top5 = np.mean([t in r for t, r in zip(test_y.numpy(), ranking)])
    assert result["top5"] == pytest.approx(100 * top5)
    assert 0 < result["top1"] < result["top5"] < 100  # a non-trivial problem
    assert result["num_train"] == 140


def test_two_classes_and_linear_kernel():
    train_x, train_y, test_x, test_y = data(classes=2)
    result = svm_probe(train_x, train_y, test_x, test_y, kernel="linear", C=1.0)
    svc = SVC(kernel="linear", C=1.0).fit(train_x.numpy(), train_y.numpy())
    assert result["top1"] == pytest.approx(100 * svc.score(test_x.numpy(), test_y.numpy()))
    assert result["top5"] == 100.0


def test_max_train_subsamples_stratified_and_seeded():
    train_x, train_y, test_x, test_y = data()
    a = svm_probe(train_x, train_y, test_x, test_y, max_train=70, seed=3)
    b = svm_probe(train_x, train_y, test_x, test_y, max_train=70, seed=3)
    assert a == b and a["num_train"] == 70
    assert svm_probe(train_x, train_y, test_x, test_y, max_train=1000)["num_train"] == 140


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"C": 0.0}, r"^C must be > 0"),
        ({"C": -1.0}, r"^C must be > 0"),
        ({"gamma": 0.0}, r"^gamma must be > 0"),
        ({"gamma": "often"}, r'^gamma must be > 0, "scale" or "auto"'),
        ({"max_train": 0}, r"^max_train must be > 0"),
    ],
)
def test_errors(kwargs, message):
    train_x, train_y, test_x, test_y = data()
    with pytest.raises(ValueError, match=message):
        svm_probe(train_x, train_y, test_x, test_y, **kwargs)


def test_gamma_strings_are_accepted():
    train_x, train_y, test_x, test_y = data()
    assert svm_probe(train_x, train_y, test_x, test_y, gamma="scale")["top1"] > 0
