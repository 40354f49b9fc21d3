import pytest
import torch

from selfcaps.eval import linear_probe
from selfcaps.eval.linear import WEIGHT_DECAY_GRID


def blobs(n, dim=20, classes=5, seed=0, scale=100.0, shift=7.0):
    """Separable classes in badly scaled, shifted features (standardisation must cope)."""
    g = torch.Generator().manual_seed(seed)
    centers = 4 * torch.randn(classes, dim, generator=g)
    y = torch.arange(n) % classes
    x = centers[y] + 0.5 * torch.randn(n, dim, generator=g)
    return scale * x + shift, y


def test_separable_data_reaches_100_percent():
    x, y = blobs(500)
    result = linear_probe(x[:300], y[:300], x[300:], y[300:], num_classes=5)
    assert result["top1"] == 100.0 and result["top5"] == 100.0
    assert result["train_top1"] == 100.0


def test_random_labels_give_chance():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2000, 32, generator=g)
    y = torch.randint(0, 4, (2000,), generator=g)
    result = linear_probe(x[:1000], y[:1000], x[1000:], y[1000:], num_classes=4, weight_decay=1e-2)
    assert 20.0 < result["top1"] < 30.0  # chance is 25%, binomial sd 1.4%


def test_deterministic_and_independent_of_chunking():
    x, y = blobs(300, classes=3, seed=2, scale=1.0, shift=0.0)
    x = x + 3 * torch.randn(300, 20, generator=torch.Generator().manual_seed(3))  # overlap
    a = linear_probe(x[:200], y[:200], x[200:], y[200:], 3)
    b = linear_probe(x[:200], y[:200], x[200:], y[200:], 3)
    c = linear_probe(x[:200], y[:200], x[200:], y[200:], 3, batch_size=64)
    assert a == b
    assert a["top1"] == c["top1"] and abs(a["train_top1"] - c["train_top1"]) <= 0.5


def test_weight_decay_chosen_on_validation():
    x, y = blobs(400, classes=3, seed=4, scale=1.0, shift=0.0)
    x = x + 4 * torch.randn(400, 20, generator=torch.Generator().manual_seed(5))
    result = linear_probe(
        x[:200], y[:200], x[300:], y[300:], 3, val_f=x[200:300], val_y=y[200:300], epochs=30
    )
    assert result["weight_decay"] in WEIGHT_DECAY_GRID
    scores = {
        wd: linear_probe(x[:200], y[:200], x[200:300], y[200:300], 3, weight_decay=wd, epochs=30)[
            "top1"
        ]
        for wd in WEIGHT_DECAY_GRID
    }
    assert result["val_top1"] == max(scores.values())
    assert scores[result["weight_decay"]] == result["val_top1"]


def test_errors():
    x, y = blobs(40, classes=2)
    with pytest.raises(ValueError, match="weight_decay: choosing among several"):
        linear_probe(x, y, x, y, 2, weight_decay=[1e-3, 1e-2])
    with pytest.raises(ValueError, match="val_f and val_y must be given together"):
        linear_probe(x, y, x, y, 2, val_f=x)
    with pytest.raises(ValueError, match=r"^test_f must be \(N, 20\)"):
        linear_probe(x, y, x[:, :3], y, 2)
    with pytest.raises(ValueError, match=r"^train_y must lie in \[0, num_classes=1\)"):
        linear_probe(x, y, x, y, 1)
    with pytest.raises(ValueError, match=r"^epochs must be > 0"):
        linear_probe(x, y, x, y, 2, epochs=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_runs_on_gpu_tensors():
    x, y = blobs(200)
    cpu = linear_probe(x[:100], y[:100], x[100:], y[100:], 5)
    gpu = linear_probe(x[:100].cuda(), y[:100].cuda(), x[100:].cuda(), y[100:].cuda(), 5)
    assert cpu["top1"] == gpu["top1"]
