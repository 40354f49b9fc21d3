"""Protocol (a)'s affNIST fit and test images (``eval.affnist_halves``), checked by hand."""

import pytest
import torch

from selfcaps.methods.affnist_halves import affnist_halves
from selfcaps.methods.datamodule import mix_seed


def test_permutation_is_the_fixed_seeded_draw_with_disjoint_halves():
    order = torch.randperm(1000, generator=torch.Generator().manual_seed(mix_seed(0xAFF)))
    h = affnist_halves(1000, 300, 200, "permutation")
    assert h.test == sorted(order[:200].tolist())
    assert h.fit == sorted(order[200:500].tolist())
    assert h.redistortions == 0 and not set(h.fit) & set(h.test)


def test_file_order_fits_on_the_first_images_and_tests_on_the_next():
    # the reference's classifier.py: train_test_split(shuffle=False) of 60,000 + 10,000
    h = affnist_halves(80_000, 60_000, 10_000, "file_order")
    assert h.fit == list(range(60_000)) and h.test == list(range(60_000, 70_000))


@pytest.mark.parametrize("mode", ["permutation", "file_order"])
def test_disjoint_modes_cap_the_sets(mode):
    h = affnist_halves(10, 100, 100, mode)  # at most half for testing, the rest to fit
    assert (len(h.test), len(h.fit)) == (5, 5) and not set(h.fit) & set(h.test)
    assert len(affnist_halves(10, 100, 2, mode, max_fit=3).fit) == 3


def test_same_digits_fits_on_the_test_digits_redistorted():
    n = 50
    h = affnist_halves(n, 25, 10, "same_digits")
    assert h.test == affnist_halves(n, 25, 10, "permutation").test
    assert h.redistortions == 3  # ceil(25 / 10) redistorted copies, copy k at offset k * n
    assert h.fit == [k * n + i for k in range(3) for i in h.test][:25]
    assert {i % n for i in h.fit} == set(h.test)
    assert len(affnist_halves(n, 25, 10, "same_digits", max_fit=7).fit) == 7


def test_bad_requests_are_named():
    with pytest.raises(ValueError, match=r"eval\.affnist_halves.*'contiguous'"):
        affnist_halves(10, 2, 2, "contiguous")
    with pytest.raises(ValueError, match="at least 2 images, got 1"):
        affnist_halves(1, 1, 1)
