import numpy as np
import pytest
import torch

from selfcaps.eval import accuracy_from_predictions, topk_accuracy, topk_correct


def test_hand_example_from_logits():
    logits = torch.tensor(
        [
            [0.1, 0.5, 0.2, 0.0, 0.9, 0.3],  # ranking 4 1 5 2 0 3; target 1 -> top-2
            [2.0, 1.0, 0.0, -1.0, -2.0, -3.0],  # ranking 0 1 2 3 4 5; target 0 -> top-1
            [0.0, 0.1, 0.2, 0.3, 0.4, 0.5],  # ranking 5 4 3 2 1 0; target 0 -> last
            [0.3, 0.2, 0.1, 0.6, 0.5, 0.4],  # ranking 3 4 5 0 1 2; target 1 -> top-5
        ]
    )
    targets = torch.tensor([1, 0, 0, 1])
    assert topk_accuracy(logits, targets, ks=(1, 2, 5, 6)) == {
        "top1": 25.0,
        "top2": 50.0,
        "top5": 75.0,
        "top6": 100.0,
    }
    assert topk_correct(logits, targets, ks=(1, 2, 5, 6)) == {
        "top1": 1,
        "top2": 2,
        "top5": 3,
        "top6": 4,
    }


def test_ranked_indices_give_the_same_as_their_scores():
    ranked = torch.tensor([[4, 1, 5, 2, 0, 3], [0, 1, 2, 3, 4, 5]])
    assert topk_accuracy(ranked, torch.tensor([1, 3]), ks=(1, 2, 4)) == {
        "top1": 0.0,
        "top2": 50.0,
        "top4": 100.0,
    }


def test_k_is_clamped_to_the_number_of_classes():
    logits = torch.tensor([[0.2, 0.5, 0.3], [0.9, 0.0, 0.1]])
    assert topk_accuracy(logits, torch.tensor([0, 1])) == {"top1": 0.0, "top5": 100.0}
    # ranked input with fewer columns than classes: clamp to the columns given
    assert topk_accuracy(torch.tensor([[7], [3]]), torch.tensor([7, 4])) == {
        "top1": 50.0,
        "top5": 50.0,
    }


def test_numpy_inputs_and_predictions():
    assert topk_accuracy(np.array([[0.1, 0.9]]), np.array([1]), ks=(1,)) == {"top1": 100.0}
    assert accuracy_from_predictions(np.array([2, 0, 1, 1]), torch.tensor([2, 0, 0, 1])) == 75.0
    assert accuracy_from_predictions(torch.tensor([1.0, 0.0]), [1, 1]) == 50.0


@pytest.mark.parametrize(
    ("scores", "targets", "ks", "message"),
    [
        (torch.zeros(3), torch.zeros(3), (1,), "scores_or_ranked must be"),
        (torch.zeros(3, 2), torch.zeros(2), (1,), r"targets must be \(3,\)"),
        (torch.zeros(3, 2), torch.zeros(3), (0,), "ks must be positive"),
        (torch.zeros(0, 2), torch.zeros(0), (1,), "targets is empty"),
    ],
)
def test_errors(scores, targets, ks, message):
    with pytest.raises(ValueError, match=message):
        topk_accuracy(scores, targets, ks)
