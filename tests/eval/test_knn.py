import math

import pytest
import torch
import torch.nn.functional as F

import selfcaps.eval.knn as knn_module
from selfcaps.eval import KNNEvaluator, knn_evaluate, knn_predict, topk_accuracy

# A bank of five unit vectors in 2-D, as columns (D, N), with their classes.
BANK = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8], [0.8, 0.6], [-1.0, 0.0]]).t()
LABELS = torch.tensor([0, 1, 1, 2, 0])


def knn_loop(queries, bank, labels, num_classes, k, t):
    """One query, one bank vector at a time: sort by similarity, sum exp(sim / t) per class."""
    ranked = []
    for q in queries.tolist():
        sims = [sum(a * b for a, b in zip(q, col)) for col in bank.t().tolist()]
        nearest = sorted(range(len(sims)), key=lambda i: -sims[i])[:k]
        scores = [0.0] * num_classes
        for i in nearest:
            scores[int(labels[i])] += math.exp(sims[i] / t)
        ranked.append(sorted(range(num_classes), key=lambda c: (-scores[c], c)))
    return torch.tensor(ranked)


def test_hand_computed_example():
    # q = (0.8, 0.6): similarities to the bank are 0.8, 0.6, 0.96, 1.0, -0.8.
    q = torch.tensor([[0.8, 0.6]])
    # k=3, t=0.5: neighbours b3 (class 2, sim 1.0), b2 (class 1, 0.96), b0 (class 0, 0.8);
    # scores: class 2 e^2.0 = 7.389 > class 1 e^1.92 = 6.821 > class 0 e^1.6 = 4.953.
    assert knn_predict(q, BANK, LABELS, 3, knn_k=3, knn_t=0.5).tolist() == [[2, 1, 0]]
    # k=4 adds b1 (class 1, sim 0.6): class 1 e^1.92 + e^1.2 = 10.141 now beats class 2's 7.389.
    assert knn_predict(q, BANK, LABELS, 3, knn_k=4, knn_t=0.5).tolist() == [[1, 2, 0]]
    # k=4, t=0.05: the nearest neighbour dominates, e^20 > e^19.2 + e^12.
    assert math.exp(20) > math.exp(19.2) + math.exp(12)
    assert knn_predict(q, BANK, LABELS, 3, knn_k=4, knn_t=0.05).tolist() == [[2, 1, 0]]
    # q = (0, 1): neighbours b1, b2 (class 1), b3 (class 2); class 0 has no vote and comes last.
    q = torch.tensor([[0.0, 1.0]])
    assert knn_predict(q, BANK, LABELS, 3, knn_k=3, knn_t=0.5).tolist() == [[1, 2, 0]]


def test_classes_without_votes_follow_in_index_order():
    q = torch.tensor([[0.0, 1.0]])
    assert knn_predict(q, BANK, LABELS, 6, knn_k=1, knn_t=0.1).tolist() == [[1, 0, 2, 3, 4, 5]]


@pytest.mark.parametrize(("k", "t"), [(1, 0.1), (7, 0.1), (20, 0.5), (60, 0.07)])
def test_matches_loop_on_random_data(k, t):
    g = torch.Generator().manual_seed(k)
    bank = F.normalize(torch.randn(60, 8, generator=g, dtype=torch.float64), dim=1).t()
    labels = torch.randint(0, 5, (60,), generator=g)
    queries = F.normalize(torch.randn(9, 8, generator=g, dtype=torch.float64), dim=1)
    expected = knn_loop(queries, bank, labels, 5, k, t)
    assert torch.equal(knn_predict(queries, bank, labels, 5, knn_k=k, knn_t=t), expected)


def test_tiny_temperature_stays_finite():
    # exp(1 / 0.001) overflows; the ranking must still be the nearest neighbour's class first.
    q = torch.tensor([[0.8, 0.6]])
    assert knn_predict(q, BANK, LABELS, 3, knn_k=5, knn_t=1e-3)[0, 0] == 2


def _random_split(n_train=300, n_test=70, dim=16, classes=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    centers = 2 * torch.randn(classes, dim, generator=g)
    y = torch.randint(0, classes, (n_train + n_test,), generator=g)
    x = centers[y] + torch.randn(n_train + n_test, dim, generator=g)
    return x[:n_train], y[:n_train], x[n_train:], y[n_train:]


def test_batched_evaluate_equals_unbatched_computation(monkeypatch):
    train_x, train_y, test_x, test_y = _random_split()
    bank = F.normalize(train_x, dim=1).t()
    ranked = knn_predict(F.normalize(test_x, dim=1), bank, train_y, 4, knn_k=25, knn_t=0.1)
    expected = topk_accuracy(ranked, test_y, ks=(1, 5))

    seen_rows = []

    def spy(feature, *args):
        seen_rows.append(feature.shape[0])
        return knn_predict(feature, *args)

    monkeypatch.setattr(knn_module, "knn_predict", spy)
    result = knn_evaluate(train_x, train_y, test_x, test_y, 4, k=25, t=0.1, batch_size=16)
    assert result == expected
    assert seen_rows == [16, 16, 16, 16, 6]  # never more than batch_size queries x N at once
    evaluator = KNNEvaluator(train_x, train_y, 4, k=25, t=0.1, batch_size=16)
    assert torch.equal(evaluator.predict(test_x), ranked)


def test_features_need_not_be_normalised():
    train_x, train_y, test_x, test_y = _random_split(seed=1)
    a = knn_evaluate(train_x, train_y, test_x, test_y, 4, k=10)
    b = knn_evaluate(3.0 * train_x, train_y, 0.5 * test_x, test_y, 4, k=10)
    assert a == b


def test_top5_is_clamped_to_three_classes():
    train_x, train_y, test_x, test_y = _random_split(classes=3, seed=2)
    result = knn_evaluate(train_x, train_y, test_x, test_y, num_classes=3, k=5)
    assert result["top5"] == 100.0
    assert set(result) == {"top1", "top5"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"k": 0}, r"^k must be in \[1, bank size 300\]"),
        ({"k": 301}, r"^k must be in \[1, bank size 300\], got 301"),
        ({"t": 0.0}, r"^t must be > 0"),
        ({"t": -1.0}, r"^t must be > 0"),
        ({"batch_size": 0}, r"^batch_size must be > 0"),
        ({"num_classes": 2}, r"^train_labels must lie in \[0, num_classes=2\)"),
        ({"test_features": torch.zeros(5, 3)}, r"^test_features must be \(N, 16\)"),
        ({"test_labels": torch.zeros(3, dtype=torch.long)}, r"^test_labels must be \(70,\)"),
        ({"train_labels": torch.zeros(299, dtype=torch.long)}, r"^train_labels must be \(300,\)"),
    ],
)
def test_clear_errors(kwargs, message):
    train_x, train_y, test_x, test_y = _random_split()
    args = {
        "train_features": train_x,
        "train_labels": train_y,
        "test_features": test_x,
        "test_labels": test_y,
        "num_classes": 4,
        **kwargs,
    }
    with pytest.raises(ValueError, match=message):
        knn_evaluate(**args)


def test_knn_predict_errors_name_lightly_keys():
    q = torch.tensor([[1.0, 0.0]])
    with pytest.raises(ValueError, match=r"^knn_k must be"):
        knn_predict(q, BANK, LABELS, 3, knn_k=6)
    with pytest.raises(ValueError, match=r"^knn_t must be > 0"):
        knn_predict(q, BANK, LABELS, 3, knn_k=2, knn_t=0.0)
    with pytest.raises(ValueError, match=r"needs \.t\(\)"):
        knn_predict(q, BANK.t(), LABELS, 3, knn_k=2)
