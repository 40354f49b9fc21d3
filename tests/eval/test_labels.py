"""Label-efficiency subsets: exact stratification, reproducible by seed, inside the train split."""

import numpy as np
import pytest
import torch
from torch.utils.data import Subset, TensorDataset

from selfcaps.data import get_dataset
from selfcaps.eval.labels import (
    dataset_targets,
    label_suffix,
    labelled_subset,
    stratified_label_indices,
)


def test_fraction_quotas_by_largest_remainder_hand_computed():
    # Classes of 10, 7 and 3 images, 25%: shares 2.5, 1.75, 0.75 -> floors 2, 1, 0 (3 images);
    # round(0.25 * 20) = 5 in all, so the two largest remainders (0.75, 0.75; class 1 before
    # class 2 on the tie) get one more: 2, 2, 1.
    y = torch.tensor([0] * 10 + [1] * 7 + [2] * 3)
    idx = stratified_label_indices(y, fraction=0.25, seed=3)
    assert torch.bincount(y[idx], minlength=3).tolist() == [2, 2, 1]
    assert idx.tolist() == sorted(set(idx.tolist()))  # sorted, no repeats


@pytest.mark.parametrize(("fraction", "per_class"), [(0.1, 450), (0.01, 45)])
def test_cifar10_sized_split_gets_the_issue_counts(fraction, per_class):
    """1% and 10% of a 45,000-image, 10-class split: 450 and 4,500 images, equal per class."""
    y = torch.arange(45_000) % 10
    idx = stratified_label_indices(y, fraction=fraction, seed=0)
    assert len(idx) == 450_00 * fraction
    assert torch.bincount(y[idx]).tolist() == [per_class] * 10


def test_labels_per_class_is_exact_and_names_a_short_class():
    y = torch.tensor([0] * 5 + [1] * 9 + [2] * 4)
    idx = stratified_label_indices(y, per_class=4, seed=1)
    assert torch.bincount(y[idx]).tolist() == [4, 4, 4]
    with pytest.raises(ValueError, match="class 2 has only 4"):
        stratified_label_indices(y, per_class=5)


def test_reproducible_by_seed_and_nested():
    y = torch.arange(3000) % 7
    a = stratified_label_indices(y, fraction=0.1, seed=5)
    assert torch.equal(a, stratified_label_indices(y, fraction=0.1, seed=5))
    assert not torch.equal(a, stratified_label_indices(y, fraction=0.1, seed=6))
    small = stratified_label_indices(y, fraction=0.01, seed=5)
    assert set(small.tolist()) <= set(a.tolist())  # the 1% images are among the 10%


def test_choice_is_spread_over_the_split():
    """Not the first images of each class: about as many from each half of the split."""
    y = torch.arange(10_000) % 2
    idx = stratified_label_indices(y, fraction=0.1, seed=0)
    first_half = int((idx < 5_000).sum())
    assert 400 < first_half < 600


def test_subset_is_inside_the_train_split_disjoint_from_val_and_test():
    train = get_dataset("mnist5k", split="train")
    val = get_dataset("mnist5k", split="val")
    sub = labelled_subset(train, per_class=10, seed=0)
    parent = set(train.indices[torch.tensor(sub.indices)].tolist())  # indices of the official train
    assert len(parent) == 100 and not parent & set(val.indices.tolist())
    labels = [int(sub[i][1]) for i in range(len(sub))]
    assert np.bincount(labels).tolist() == [10] * 10
    assert torch.equal(dataset_targets(sub), torch.tensor(labels))
    # The test split is another file: its images are never in train's parent.
    assert len(get_dataset("mnist5k", split="test")) == 1000


def test_targets_through_views_and_plain_datasets():
    plain = TensorDataset(torch.zeros(6, 1), torch.tensor([2, 0, 1, 2, 0, 1]))
    assert dataset_targets(plain).tolist() == [2, 0, 1, 2, 0, 1]
    assert dataset_targets(Subset(plain, [3, 1])).tolist() == [2, 0]


def test_suffixes_and_bad_requests():
    assert label_suffix(0.1) == "_lf10" and label_suffix(per_class=4) == "_lpc4"
    assert label_suffix(0.005) == "_lf0p5"
    y = torch.arange(10) % 2
    for kwargs, message in [
        ({}, "exactly one"),
        ({"fraction": 0.1, "per_class": 2}, "exactly one"),
        ({"fraction": 0.0}, r"in \(0, 1\]"),
        ({"fraction": 1.5}, r"in \(0, 1\]"),
        ({"per_class": 0}, ">= 1"),
        ({"fraction": 0.01}, "is no image"),
    ]:
        with pytest.raises(ValueError, match=message):
            stratified_label_indices(y, **kwargs)
