"""Which affNIST images SparseCaps' protocol (a) fits its SVM on, and which it tests on.

Protocol (a) of the SparseCaps paper (section 3.1) fits an SVM on affNIST codes and
tests it "on SPARSECAPS output on a disjoint affNIST set"; the paper gives neither
the sizes nor how the two sets are drawn. ``eval.affnist_halves`` chooses:

``permutation`` (default)
    One seeded permutation of the affNIST test split, the same for every run and
    seed: its first ``n_test`` images are the test set (also protocol (b)'s), the
    next ``n_fit`` the fit set. On ``affnist_like`` (one distortion per MNIST test
    digit) the two sets hold different digits.
``file_order``
    The reference code's halves (its ``classifier.py`` splits the encoded file with
    ``train_test_split(shuffle=False)``): the first ``n_fit`` images in file order
    are the fit set, the next ``n_test`` the test set.
``same_digits``
    The test set of ``permutation``; the fit set is the *same* source digits under
    other distortions (``affnist_like`` with distortion seeds 1, 2, ...): the fit
    set holds every test digit, differently transformed. This is what file-order
    halves give on the official test split if its 320,000 images are stored
    transformation-major (each of the 32 transformations of all 10,000 MNIST test
    digits in turn; the affNIST page says each digit has 32 transformed versions,
    not how the file orders them): the reference's first 60,000 would then hold six
    versions of every test digit, its next 10,000 a seventh. Only for
    ``affnist_like``, whose digits can be redistorted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from selfcaps.methods.datamodule import mix_seed

__all__ = ["AffnistHalves", "affnist_halves"]

#: Salt of the permutation of ``permutation`` (fixed: the same images for every run).
PERMUTATION_SALT = 0xAFF


@dataclass(frozen=True)
class AffnistHalves:
    """The two sets of protocol (a).

    Attributes:
        fit: Indices of the fit images: into the affNIST split, or, when
            ``redistortions > 0``, into the concatenation of ``redistortions``
            redistorted copies of it (copy ``k`` is distortion seed ``k + 1``).
        test: Indices of the test images into the affNIST split (sorted).
        redistortions: Redistorted copies the fit set reads (``same_digits``), else 0.
    """

    fit: list[int]
    test: list[int]
    redistortions: int = 0


def affnist_halves(
    n: int, n_fit: int, n_test: int, mode: str = "permutation", max_fit: int | None = None
) -> AffnistHalves:
    """The fit and test images of protocol (a) on an affNIST split of ``n`` images.

    Args:
        n: Images in the affNIST split.
        n_fit: Requested fit images (``eval.affnist_fit``).
        n_test: Requested test images (``eval.affnist_test``).
        mode: ``permutation``, ``file_order`` or ``same_digits`` (module docstring).
        max_fit: A further cap on the fit images (``eval.svm_max_train``), or None.

    Returns:
        The two sets. ``permutation`` and ``file_order`` keep them disjoint within the
        split: at most ``n // 2`` test images, and the fit set gets what is left.
        ``same_digits`` draws the test set as ``permutation`` does and fits on
        ``n_fit`` images of its digits redistorted, copy after copy.

    Raises:
        ValueError: An unknown mode, or fewer than 2 images.

    Examples:
        >>> h = affnist_halves(10, 3, 2, "file_order")
        >>> h.fit, h.test
        ([0, 1, 2], [3, 4])
        >>> h = affnist_halves(10, 5, 2, "same_digits")
        >>> h.redistortions, [i % 10 for i in h.fit] == (h.test * 3)[:5]
        (3, True)
    """
    if n < 2:
        raise ValueError(f"affNIST protocol (a) needs at least 2 images, got {n}")
    n_test = min(n_test, n // 2)
    cap = max_fit if max_fit is not None else math.inf
    if mode == "file_order":
        n_fit = int(min(n_fit, n - n_test, cap))
        return AffnistHalves(list(range(n_fit)), list(range(n_fit, n_fit + n_test)))
    generator = torch.Generator().manual_seed(mix_seed(PERMUTATION_SALT))
    order = torch.randperm(n, generator=generator)
    test = order[:n_test].sort().values.tolist()
    if mode == "permutation":
        n_fit = int(min(n_fit, n - n_test, cap))
        return AffnistHalves(order[n_test : n_test + n_fit].sort().values.tolist(), test)
    if mode == "same_digits":
        n_fit = int(min(n_fit, cap))
        copies = math.ceil(n_fit / n_test)
        fit = [k * n + i for k in range(copies) for i in test][:n_fit]
        return AffnistHalves(fit, test, copies)
    raise ValueError(
        f"eval.affnist_halves: expected permutation, file_order or same_digits, got {mode!r}"
    )
