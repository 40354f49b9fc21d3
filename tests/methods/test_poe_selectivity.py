"""The purity of PoE capsules' groups of real images, against loops and hand-computed values."""

from types import SimpleNamespace

import pytest
import torch

from selfcaps.methods.poe.selectivity import (
    group_counts,
    group_purity,
    loader_group_counts,
    selectivity_metrics,
)
from selfcaps.models.poe import PoECapsNet


def test_group_counts_against_a_loop():
    g = torch.Generator().manual_seed(0)
    lengths = torch.rand(200, 7, generator=g)
    labels = torch.randint(0, 5, (200,), generator=g)
    expected = torch.zeros(7, 5, dtype=torch.long)
    for row, label in zip(lengths.tolist(), labels.tolist(), strict=True):
        longest = max(range(7), key=lambda j: row[j])
        expected[longest, label] += 1
    assert torch.equal(group_counts(lengths, labels, 5), expected)


def test_group_purity_by_hand():
    # group 0: three 0s and a 1 (majority 0); group 1 empty; group 2: two 1s, two 2s (tie: 1)
    m = group_purity(torch.tensor([[3, 1, 0], [0, 0, 0], [0, 2, 2]]), "_x")
    assert m == {
        "caps_group_purity_x": 100.0 * (3 + 2) / 8,
        "caps_group_classes_x": 2,
        "caps_group_empty_x": 1,
        "caps_group_majority_classes_x": "0,-,1",
        "caps_group_images_x": 8,
    }


def test_one_capsule_always_longest_is_the_largest_class_share():
    """The untrained layer's case: every image in one group, purity = the commonest class."""
    lengths = torch.tensor([[0.1, 0.9]]).repeat(10, 1)
    labels = torch.tensor([0, 0, 0, 0, 1, 1, 2, 2, 2, 3])
    m = group_purity(group_counts(lengths, labels, 4))
    assert m["caps_group_purity"] == 40.0 and m["caps_group_empty"] == 1
    assert m["caps_group_classes"] == 1 and m["caps_group_majority_classes"] == "-,0"


@pytest.mark.parametrize(
    ("lengths", "labels", "match"),
    [
        (torch.rand(4), torch.zeros(4, dtype=torch.long), r"lengths \(N, M\)"),
        (torch.rand(4, 3), torch.zeros(5, dtype=torch.long), r"got \(4, 3\) and \(5,\)"),
        (torch.rand(2, 3), torch.tensor([0, 10]), r"labels must lie in \[0, 10\)"),
        (torch.rand(2, 3), torch.tensor([-1, 0]), r"labels must lie in \[0, 10\)"),
    ],
)
def test_group_counts_rejects_bad_input(lengths, labels, match):
    with pytest.raises(ValueError, match=match):
        group_counts(lengths, labels, 10)


def _tiny_net() -> PoECapsNet:
    torch.manual_seed(0)
    net = PoECapsNet(channels=16, init_std=0.5, normalize="parents").eval()
    return net


def test_loader_groups_match_one_image_at_a_time():
    """Batched routing groups each image as routing it alone does, within ``eval.max_images``."""
    net = _tiny_net()
    g = torch.Generator().manual_seed(1)
    images = torch.rand(11, 1, 28, 28, generator=g)
    labels = torch.randint(0, 10, (11,), generator=g)
    loader = [(images[i : i + 4], labels[i : i + 4]) for i in range(0, 11, 4)]
    cfg = SimpleNamespace(eval=SimpleNamespace(max_images=9))
    expected = torch.zeros(20, 10, dtype=torch.long)
    with torch.no_grad():
        for x, y in zip(images[:9], labels[:9], strict=True):
            caps, _ = net.encode(x[None])
            expected[int(caps.norm(dim=-1).argmax()), int(y)] += 1
    counts = loader_group_counts(net, loader, cfg, 10)
    assert torch.equal(counts, expected) and int(counts.sum()) == 9
    m = selectivity_metrics(net, loader, cfg, 10, "_t")
    assert m["caps_group_images_t"] == 9
    assert m["caps_group_purity_t"] == pytest.approx(
        100.0 * float(expected.max(1).values.sum()) / 9
    )


def test_an_empty_table_is_an_error_not_nan():
    with pytest.raises(ValueError, match=r"table \(20, 10\) counts no images"):
        group_purity(torch.zeros(20, 10, dtype=torch.long))


def test_an_empty_loader_is_an_error():
    cfg = SimpleNamespace(eval=SimpleNamespace(max_images=None))
    with pytest.raises(ValueError, match="yielded no images"):
        loader_group_counts(_tiny_net(), [], cfg, 10)
