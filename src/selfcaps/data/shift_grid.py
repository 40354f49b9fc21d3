"""Every digit at every integer shift of a canvas, digit after digit (SparseCaps' reference).

The SparseCaps reference code (github.com/ProjectAGI/sparse-unsupervised-capsules, its
README: ``mnist_shift.py --shift=6 --pad=6``) writes each MNIST training digit at all
``(2 s + 1)^2`` integer shifts in ``[-s, s]^2`` of a 40x40 canvas, digit after digit, and
training reads that file in order through a shuffle buffer. :class:`ShiftGridDataset`
is that file as a dataset (item ``i`` is digit ``i // (2 s + 1)^2`` at shift number
``i % (2 s + 1)^2``); the buffer is the data module's ``data.shuffle_buffer``
(:func:`selfcaps.data.datamodule.buffered_order`).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor
from torch.utils.data import Dataset

from selfcaps.data.affine import place_in_canvas

__all__ = ["ShiftGridDataset"]


class ShiftGridDataset(Dataset):
    """Each image of ``base`` at every shift in ``[-max_shift, max_shift]^2`` of a canvas.

    Args:
        base: Dataset of ``(uint8 (C, H, W) image, target)``.
        canvas: Canvas side.
        max_shift: Largest shift in each direction, pixels.

    Examples:
        >>> import torch
        >>> base = [(torch.ones(1, 2, 2, dtype=torch.uint8), 7)]
        >>> grid = ShiftGridDataset(base, canvas=4, max_shift=1)
        >>> len(grid), grid[0][1]
        (9, 7)
        >>> grid[0][0][0].tolist()  # shift (dx, dy) = (-1, -1): one pixel up and left
        [[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    """

    def __init__(self, base: Any, canvas: int, max_shift: int) -> None:
        self.base, self.canvas, self.max_shift = base, canvas, max_shift
        self.side = 2 * max_shift + 1

    def __len__(self) -> int:
        return len(self.base) * self.side**2

    def shift(self, index: int) -> tuple[int, int, int]:
        """``(digit, dx, dy)`` of item ``index``: shifts row by row, ``dx`` fastest."""
        digit, k = divmod(index, self.side**2)
        dy, dx = divmod(k, self.side)
        return digit, dx - self.max_shift, dy - self.max_shift

    def __getitem__(self, index: int) -> tuple[Tensor, Any]:
        if not 0 <= index < len(self):
            raise IndexError(f"ShiftGridDataset index {index} out of range [0, {len(self)})")
        digit, dx, dy = self.shift(index)
        img, target = self.base[digit]
        return place_in_canvas(img, self.canvas, dx, dy), target
