"""Deterministic, stratified carving of a validation split out of a training split.

Procedure of :func:`carve_validation` (the same on every machine and every
numpy/torch version, because it uses no library random generator):

1. Every index ``i`` gets the 64-bit key ``splitmix64(splitmix64(seed) XOR i)``
   (``splitmix64`` is Steele et al.'s 64-bit finaliser, a bijection on integers
   modulo 2**64), so the keys are distinct and look uniformly random.
2. Within each class ``c`` with ``n_c`` images, the ``round(fraction * n_c)``
   indices with the smallest keys (halves round up) go to validation.
3. Both index lists are returned sorted ascending.

The split depends only on ``(targets, fraction, seed)``: selfcaps uses a fixed
``seed`` (0 by default), independent of any training run's seed, so that every
run of every method selects its models on the same images.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

__all__ = ["carve_validation", "splitmix64"]

_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser, element-wise on ``uint64`` (wrapping arithmetic).

    Args:
        x: Unsigned 64-bit integers.

    Returns:
        Their hashes, ``uint64``.

    Examples:
        >>> hex(int(splitmix64(np.array([0], dtype=np.uint64))[0]))
        '0xe220a8397b1dcdaf'
    """
    z = np.asarray(x, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def carve_validation(
    targets: Tensor | np.ndarray, fraction: float = 0.1, seed: int = 0
) -> tuple[Tensor, Tensor]:
    """Split indices ``0..N-1`` into training and validation, stratified by class.

    See the module docstring for the exact procedure.

    Args:
        targets: Integer class labels ``(N,)``.
        fraction: Share of each class that goes to validation, in ``[0, 1)``.
        seed: Any integer; the same seed always gives the same split.

    Returns:
        ``(train_idx, val_idx)``: disjoint, sorted ``torch.long`` tensors covering ``0..N-1``.

    Examples:
        >>> train, val = carve_validation(torch.tensor([0] * 10 + [1] * 20), 0.1)
        >>> len(train), len(val), torch.tensor([0] * 10 + [1] * 20)[val].tolist()
        (27, 3, [0, 1, 1])
    """
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"fraction must lie in [0, 1), got {fraction}")
    y = torch.as_tensor(targets).numpy() if isinstance(targets, Tensor) else np.asarray(targets)
    if y.ndim != 1 or not (y.dtype.kind in "iu" or y.size == 0):
        raise ValueError(f"targets must be 1-D integers, got {y.dtype} {y.shape}")
    mixed_seed = splitmix64(np.array([seed % 2**64], dtype=np.uint64))
    keys = splitmix64(np.arange(len(y), dtype=np.uint64) ^ mixed_seed)
    is_val = np.zeros(len(y), dtype=bool)
    for c in np.unique(y):
        members = np.flatnonzero(y == c)
        n_val = int(np.floor(fraction * len(members) + 0.5))
        is_val[members[np.argsort(keys[members], kind="stable")[:n_val]]] = True
    return torch.from_numpy(np.flatnonzero(~is_val)), torch.from_numpy(np.flatnonzero(is_val))
