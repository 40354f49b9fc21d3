"""Which affNIST images SparseCaps' protocol (a) fits its SVM on, and which it tests on.

Protocol (a) of the SparseCaps paper (section 3.1) fits an SVM on affNIST codes and
tests it "on SPARSECAPS output on a disjoint affNIST set"; the paper gives neither
the sizes nor how the two sets are drawn. ``eval.affnist_fit`` and ``eval.affnist_test``
count images (not digits: affNIST holds 32 transformed versions of every MNIST digit).
The test set (also protocol (b)'s) always comes from the affNIST test split, which
transforms the MNIST test digits; ``eval.affnist_halves`` chooses:

``permutation`` (default)
    One seeded permutation of the affNIST test split, the same for every run and
    seed: its first ``n_test`` images are the test set, the next ``n_fit`` the fit
    set. Both come from the same split, as the reference code draws both from the
    official test file: an MNIST digit can be in both sets under different
    transformations, never the same image.
``file_order``
    The reference code's halves (its ``classifier.py`` splits the encoded file with
    ``train_test_split(shuffle=False)``): the first ``n_fit`` images in file order
    are the fit set, the next ``n_test`` the test set.
``same_digits``
    The test set of ``permutation``; the fit set is the *same* digits under their
    other transformations (version ``k + 1``, ``k + 2``, ... of each test image's
    digit, one round over the test images after another, skipping test images and
    versions already taken): the fit set holds every test digit, differently
    transformed. This is what file-order halves give on the
    official test split if its 320,000 images are stored transformation-major (the
    32 versions of all 10,000 digits one version after another; the affNIST page
    says each digit has 32 transformed versions, not how the file orders them): the
    reference's first 60,000 would then hold six versions of every test digit, its
    next 10,000 a seventh. Only for ``affnist_like``, whose order is known.
``train_digits``
    The test set of ``permutation``; the fit set is ``n_fit`` images of the affNIST
    *training* split (transformations of MNIST training digits, drawn by another
    seeded permutation), as the official sets are built: fit and test then share no
    digit. Only for ``affnist_like`` (the official training file holds 1,920,000
    images).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from selfcaps.data.datamodule import mix_seed

__all__ = ["AffnistHalves", "affnist_halves"]

#: Salt of the permutation of ``permutation`` (fixed: the same images for every run).
PERMUTATION_SALT = 0xAFF
#: Salt of the permutation of the training split that ``train_digits`` fits on.
TRAIN_SALT = 0xAFF7


@dataclass(frozen=True)
class AffnistHalves:
    """The two sets of protocol (a).

    Attributes:
        fit: Indices of the fit images into the split named by ``fit_split``.
        test: Indices of the test images into the affNIST test split (sorted).
        fit_split: ``test`` (the fit images come from the test split) or ``train``.
    """

    fit: list[int]
    test: list[int]
    fit_split: str = "test"


def _permutation(n: int, salt: int) -> torch.Tensor:
    return torch.randperm(n, generator=torch.Generator().manual_seed(mix_seed(salt)))


def affnist_halves(
    n: int,
    n_fit: int,
    n_test: int,
    mode: str = "permutation",
    max_fit: int | None = None,
    versions: int = 1,
    n_train: int | None = None,
) -> AffnistHalves:
    """The fit and test images of protocol (a) on an affNIST test split of ``n`` images.

    Args:
        n: Images in the affNIST test split.
        n_fit: Requested fit images (``eval.affnist_fit``).
        n_test: Requested test images (``eval.affnist_test``).
        mode: ``permutation``, ``file_order``, ``same_digits`` or ``train_digits``
            (module docstring).
        max_fit: A further cap on the fit images (``eval.svm_max_train``), or None.
        versions: Transformed versions of each digit in the split, stored
            transformation-major (image ``i`` is version ``i // (n / versions)`` of digit
            ``i % (n / versions)``); ``same_digits`` needs at least 2.
        n_train: Images in the affNIST training split (``train_digits``).

    Returns:
        The two sets. ``permutation`` and ``file_order`` keep them disjoint within the
        split: at most ``n // 2`` test images, and the fit set gets what is left.
        ``same_digits`` fits on the versions of the test images' digits that are not test
        images (each once); ``train_digits`` on at most ``n_train`` training images.

    Raises:
        ValueError: An unknown mode, fewer than 2 images, or a mode the split cannot serve.

    Examples:
        >>> h = affnist_halves(10, 3, 2, "file_order")
        >>> h.fit, h.test
        ([0, 1, 2], [3, 4])
        >>> h = affnist_halves(40, 5, 2, "same_digits", versions=4)  # 10 digits x 4 versions
        >>> sorted({i % 10 for i in h.fit}) == sorted({i % 10 for i in h.test})
        True
    """
    if n < 2:
        raise ValueError(f"affNIST protocol (a) needs at least 2 images, got {n}")
    n_test = min(n_test, n // 2)
    cap = max_fit if max_fit is not None else math.inf
    if mode == "file_order":
        n_fit = int(min(n_fit, n - n_test, cap))
        return AffnistHalves(list(range(n_fit)), list(range(n_fit, n_fit + n_test)))
    order = _permutation(n, PERMUTATION_SALT)
    test = order[:n_test].sort().values.tolist()
    if mode == "permutation":
        n_fit = int(min(n_fit, n - n_test, cap))
        return AffnistHalves(order[n_test : n_test + n_fit].sort().values.tolist(), test)
    if mode == "same_digits":
        if versions < 2 or n % versions:
            raise ValueError(
                "eval.affnist_halves=same_digits needs a split of N digits x >= 2 versions, "
                f"got {n} images in {versions} version(s)"
            )
        digits, taken = n // versions, set(test)
        fit: list[int] = []
        for shift in range(1, versions):  # one round over the test images per version shift
            for i in test:
                other = ((i // digits + shift) % versions) * digits + i % digits
                if other not in taken:  # a test image, or a version already in the fit set
                    taken.add(other)
                    fit.append(other)
        return AffnistHalves(fit[: int(min(n_fit, cap))], test)
    if mode == "train_digits":
        if not n_train:
            raise ValueError("eval.affnist_halves=train_digits needs the affNIST training split")
        n_fit = int(min(n_fit, cap, n_train))
        fit = _permutation(n_train, TRAIN_SALT)[:n_fit].sort().values.tolist()
        return AffnistHalves(fit, test, "train")
    raise ValueError(
        "eval.affnist_halves: expected permutation, file_order, same_digits or train_digits, "
        f"got {mode!r}"
    )
