"""Protocol (a)'s affNIST fit and test images (``eval.affnist_halves``), checked by hand."""

import pytest
import torch

from selfcaps.data.datamodule import mix_seed
from selfcaps.methods.sparsecaps.affnist_halves import affnist_halves


def test_permutation_is_the_fixed_seeded_draw_with_disjoint_halves():
    order = torch.randperm(1000, generator=torch.Generator().manual_seed(mix_seed(0xAFF)))
    h = affnist_halves(1000, 300, 200, "permutation")
    assert h.test == sorted(order[:200].tolist())
    assert h.fit == sorted(order[200:500].tolist())
    assert h.fit_split == "test" and not set(h.fit) & set(h.test)


def test_file_order_fits_on_the_first_images_and_tests_on_the_next():
    # the reference's classifier.py: train_test_split(shuffle=False) of 60,000 + 10,000
    h = affnist_halves(80_000, 60_000, 10_000, "file_order")
    assert h.fit == list(range(60_000)) and h.test == list(range(60_000, 70_000))


@pytest.mark.parametrize("mode", ["permutation", "file_order"])
def test_disjoint_modes_cap_the_sets(mode):
    h = affnist_halves(10, 100, 100, mode)  # at most half for testing, the rest to fit
    assert (len(h.test), len(h.fit)) == (5, 5) and not set(h.fit) & set(h.test)
    assert len(affnist_halves(10, 100, 2, mode, max_fit=3).fit) == 3


def test_same_digits_fits_on_the_other_versions_of_the_test_digits():
    digits, versions = 100, 4  # image i: version i // 100 of digit i % 100
    n = digits * versions
    h = affnist_halves(n, 25, 10, "same_digits", versions=versions)
    assert h.test == affnist_halves(n, 25, 10, "permutation").test
    assert len(h.fit) == len(set(h.fit)) == 25 and not set(h.fit) & set(h.test)
    assert {i % digits for i in h.fit} == {i % digits for i in h.test}
    # asked for more than there is: every image of a test digit that is not a test image
    everything = affnist_halves(n, 10_000, 10, "same_digits", versions=versions)
    by_hand = {i for i in range(n) if i % digits in {t % digits for t in h.test}} - set(h.test)
    assert set(everything.fit) == by_hand and len(everything.fit) == len(by_hand)
    assert everything.fit[:25] == h.fit  # the request cuts one fixed order
    assert len(affnist_halves(n, 25, 10, "same_digits", 7, versions).fit) == 7


def test_train_digits_fits_on_the_training_split():
    order = torch.randperm(640, generator=torch.Generator().manual_seed(mix_seed(0xAFF7)))
    h = affnist_halves(320, 50, 20, "train_digits", n_train=640)
    assert h.fit_split == "train" and h.fit == sorted(order[:50].tolist())
    assert h.test == affnist_halves(320, 50, 20, "permutation").test
    assert len(affnist_halves(320, 50, 20, "train_digits", 30, n_train=640).fit) == 30


def test_bad_requests_are_named():
    with pytest.raises(ValueError, match=r"eval\.affnist_halves.*'contiguous'"):
        affnist_halves(10, 2, 2, "contiguous")
    with pytest.raises(ValueError, match="at least 2 images, got 1"):
        affnist_halves(1, 1, 1)
    with pytest.raises(ValueError, match=r"same_digits needs .* got 100 images in 1 version"):
        affnist_halves(100, 10, 10, "same_digits")
    with pytest.raises(ValueError, match="train_digits needs the affNIST training split"):
        affnist_halves(100, 10, 10, "train_digits")
