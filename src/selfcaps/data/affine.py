"""affNIST-style affine distortions of digits, and random placement in a larger canvas.

affNIST (Tieleman, 2013) places each MNIST digit in a 40x40 canvas after a
random affine transformation drawn uniformly from these published ranges:

=================  ===================
rotation           -20 .. +20 degrees
shear              -0.2 .. +0.2
horizontal scale   0.8 .. 1.2
vertical scale     0.8 .. 1.2
translation        anywhere, as long as the whole digit stays in the 40x40 canvas
=================  ===================

Geometry used here (x to the right, y downwards, origin at the image centre):
the linear part is ``A = R(rotation) @ [[1, shear], [0, 1]] @ diag(scale_x, scale_y)``
with ``R`` a counter-clockwise rotation as seen on screen; a source point ``p``
(relative to the 28x28 centre) lands at ``A p + offset`` relative to the canvas
centre. Images are resampled bilinearly (``grid_sample``, zero padding).
"Whole digit inside" means that the support of the bilinearly interpolated
source (its ink box grown by one pixel) maps inside the canvas, so no ink is lost.

:class:`AffNISTLike` (a transform) and :func:`pad_to_canvas` /
:class:`RandomCanvasTranslate` (SparseCaps' training input: MNIST in a 40x40
canvas shifted by up to +/-6 pixels) work on uint8 or float ``(C, H, W)`` tensors
and can be used inside ``torchvision.transforms.v2.Compose``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "AFFNIST_RANGES",
    "AffNISTLike",
    "AffineParams",
    "RandomCanvasTranslate",
    "affine_digit",
    "affine_digits",
    "ink_box",
    "pad_to_canvas",
    "place_in_canvas",
    "sample_affnist_params",
]

_CHUNK = 512  # images per grid_sample call (keeps the sampling grids in cache)

#: Published affNIST ranges (uniform): rotation in degrees, shear, scale_x, scale_y.
AFFNIST_RANGES = {
    "rotation_deg": (-20.0, 20.0),
    "shear": (-0.2, 0.2),
    "scale_x": (0.8, 1.2),
    "scale_y": (0.8, 1.2),
}


@dataclass(frozen=True)
class AffineParams:
    """One affine distortion (see the module docstring for the geometry).

    Attributes:
        rotation_deg: Counter-clockwise rotation on screen, degrees.
        shear: Horizontal shear factor.
        scale_x: Horizontal scale.
        scale_y: Vertical scale.
        offset: ``(dx, dy)`` of the digit's centre from the canvas centre, pixels.
    """

    rotation_deg: float
    shear: float
    scale_x: float
    scale_y: float
    offset: tuple[float, float] = (0.0, 0.0)

    def matrix(self) -> tuple[tuple[float, float], tuple[float, float]]:
        """The linear part ``A = R @ Shear @ Scale`` as ``((a, b), (c, d))``."""
        c, s = math.cos(math.radians(self.rotation_deg)), math.sin(math.radians(self.rotation_deg))
        sx, sy, k = self.scale_x, self.scale_y, self.shear
        # [[c, s], [-s, c]] @ [[1, k], [0, 1]] @ [[sx, 0], [0, sy]]
        return (c * sx, (c * k + s) * sy), (-s * sx, (c - s * k) * sy)


def sample_affnist_params(generator: torch.Generator | None = None) -> AffineParams:
    """Draw rotation, shear and scales uniformly from :data:`AFFNIST_RANGES` (offset 0).

    Args:
        generator: Source of randomness (default: torch's global generator).

    Returns:
        The parameters; the offset is chosen per image by :class:`AffNISTLike`.

    Examples:
        >>> p = sample_affnist_params(torch.Generator().manual_seed(0))
        >>> -20 <= p.rotation_deg <= 20 and 0.8 <= p.scale_x <= 1.2
        True
    """
    u = torch.rand(4, generator=generator, dtype=torch.float64).tolist()
    values = [lo + ui * (hi - lo) for ui, (lo, hi) in zip(u, AFFNIST_RANGES.values())]
    return AffineParams(*values)


def ink_box(images: Tensor) -> Tensor:
    """Extent of the non-zero pixels of each image, in pixel-centre coordinates.

    Args:
        images: ``(N, C, H, W)``.

    Returns:
        ``(N, 4)`` float64 ``[x_min, x_max, y_min, y_max]`` of the ink's pixel
        centres relative to the image centre; the whole image for a blank one.
    """
    N, _, H, W = images.shape
    ink = images.reshape(N, -1, H, W).ne(0).any(dim=1)
    cols, rows = ink.any(dim=1), ink.any(dim=2)  # (N, W), (N, H)

    def extent(mask: Tensor, size: int) -> tuple[Tensor, Tensor]:
        first = torch.where(mask.any(1), mask.float().argmax(1), 0)
        last = torch.where(mask.any(1), size - 1 - mask.flip(1).float().argmax(1), size - 1)
        return first - (size - 1) / 2, last - (size - 1) / 2

    (x0, x1), (y0, y1) = extent(cols, W), extent(rows, H)
    return torch.stack([x0, x1, y0, y1], dim=1).double()


def _offset_range(
    box: tuple[float, float, float, float], params: AffineParams, canvas: int
) -> tuple[tuple[float, float], tuple[float, float]]:
    """``((dx_lo, dx_hi), (dy_lo, dy_hi))`` keeping the transformed support inside the canvas."""
    x0, x1, y0, y1 = box[0] - 1, box[1] + 1, box[2] - 1, box[3] + 1  # bilinear support
    (a, b), (c, d) = params.matrix()
    xs = [a * x + b * y for x in (x0, x1) for y in (y0, y1)]
    ys = [c * x + d * y for x in (x0, x1) for y in (y0, y1)]
    half = canvas / 2
    return (-half - min(xs), half - max(xs)), (-half - min(ys), half - max(ys))


def affine_digits(images: Tensor, params: list[AffineParams], canvas: int = 40) -> Tensor:
    """Apply one affine distortion per image and place the results in a ``canvas`` square.

    Args:
        images: ``(N, C, H, W)``, uint8 or float.
        params: ``N`` distortions.
        canvas: Output side length.

    Returns:
        ``(N, C, canvas, canvas)``, same dtype (uint8 is rounded and clamped).
    """
    N, C, H, W = images.shape
    if len(params) != N:
        raise ValueError(f"{N} images but {len(params)} parameter sets")
    inv = torch.linalg.inv(torch.tensor([p.matrix() for p in params], dtype=torch.float64)).float()
    offset = torch.tensor([p.offset for p in params], dtype=torch.float32)  # (N, 2)
    centres = torch.arange(canvas, dtype=torch.float32) - (canvas - 1) / 2
    qy, qx = torch.meshgrid(centres, centres, indexing="ij")
    q = torch.stack([qx, qy], dim=-1).reshape(1, -1, 2)  # output pixel centres (1, P, 2)
    to_unit = torch.tensor([2 / W, 2 / H])  # grid_sample's [-1, 1] coordinates
    out = torch.empty(N, C, canvas, canvas, dtype=images.dtype)
    for s in range(0, N, _CHUNK):
        e = min(s + _CHUNK, N)
        src = (q - offset[s:e, None]) @ inv[s:e].transpose(1, 2)  # A^{-1} (q - offset)
        grid = (src * to_unit).reshape(e - s, canvas, canvas, 2)
        warped = F.grid_sample(images[s:e].float(), grid, "bilinear", "zeros", align_corners=False)
        out[s:e] = warped.round_().clamp_(0, 255) if images.dtype == torch.uint8 else warped
    return out


def affine_digit(
    img28: Tensor,
    rotation_deg: float,
    shear: float,
    scale_x: float,
    scale_y: float,
    offset: tuple[float, float] = (0.0, 0.0),
    canvas: int = 40,
) -> Tensor:
    """Distort one digit affinely and place it in a ``canvas`` x ``canvas`` image.

    Args:
        img28: ``(C, H, W)`` or ``(H, W)`` image (28x28 for MNIST), uint8 or float.
        rotation_deg: Counter-clockwise rotation, degrees.
        shear: Horizontal shear factor.
        scale_x: Horizontal scale.
        scale_y: Vertical scale.
        offset: ``(dx, dy)`` of the digit's centre from the canvas centre, pixels.
        canvas: Output side length (40 for affNIST).

    Returns:
        ``(C, canvas, canvas)`` (or ``(canvas, canvas)`` for a 2-D input), same dtype.

    Examples:
        >>> digit = torch.zeros(1, 28, 28, dtype=torch.uint8)
        >>> digit[0, 10:18, 12:16] = 255
        >>> out = affine_digit(digit, 0.0, 0.0, 1.0, 1.0, offset=(3, -2))
        >>> out.shape, int(out.sum()) == int(digit.sum())   # a pure shift keeps every pixel
        (torch.Size([1, 40, 40]), True)
    """
    params = AffineParams(
        rotation_deg, shear, scale_x, scale_y, (float(offset[0]), float(offset[1]))
    )
    batch = img28.reshape(1, -1, *img28.shape[-2:])
    return affine_digits(batch, [params], canvas)[0].reshape(*img28.shape[:-2], canvas, canvas)


class AffNISTLike:
    """Random affNIST distortion of a digit into a 40x40 canvas (a transform).

    Draws rotation, shear and scales with :func:`sample_affnist_params`, then a
    uniform offset among those that keep the whole digit inside the canvas (if
    none does, the digit is centred). Its own ``torch.Generator`` seeded with
    ``seed`` makes the sequence of outputs reproducible; note that DataLoader
    workers each get a copy of it, so use it for fixed datasets (as
    ``affnist_like`` does) rather than for on-line augmentation with workers.

    Args:
        seed: Seed of the transform's generator.
        canvas: Output side length.

    Examples:
        >>> digit = torch.zeros(1, 28, 28, dtype=torch.uint8)
        >>> digit[0, 6:22, 12:16] = 255
        >>> a, b = AffNISTLike(seed=1)(digit), AffNISTLike(seed=1)(digit)
        >>> a.shape, torch.equal(a, b)
        (torch.Size([1, 40, 40]), True)
    """

    def __init__(self, seed: int = 0, canvas: int = 40) -> None:
        self.seed = seed
        self.canvas = canvas
        self.generator = torch.Generator().manual_seed(seed)

    def draw(self, box: tuple[float, float, float, float]) -> AffineParams:
        """Draw the distortion for an image whose :func:`ink_box` is ``box``."""
        params = sample_affnist_params(self.generator)
        u = torch.rand(2, generator=self.generator, dtype=torch.float64).tolist()
        offset = tuple(
            lo + ui * (hi - lo) if lo <= hi else (lo + hi) / 2
            for ui, (lo, hi) in zip(u, _offset_range(box, params, self.canvas))
        )
        return AffineParams(
            params.rotation_deg, params.shear, params.scale_x, params.scale_y, offset
        )

    def __call__(self, img: Tensor) -> Tensor:
        """Distort ``img`` (``(C, H, W)`` or ``(H, W)``)."""
        batch = img.reshape(1, -1, *img.shape[-2:])
        out = affine_digits(batch, [self.draw(ink_box(batch)[0].tolist())], self.canvas)
        return out[0].reshape(*img.shape[:-2], self.canvas, self.canvas)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(seed={self.seed}, canvas={self.canvas})"


def place_in_canvas(img: Tensor, size: int, dx: int, dy: int) -> Tensor:
    """Paste ``img`` at the centre of a zero ``size`` x ``size`` canvas, shifted by ``(dx, dy)``.

    Pixels shifted past the border are cut off.

    Args:
        img: ``(C, H, W)`` or ``(H, W)``.
        size: Canvas side length.
        dx: Shift to the right, pixels.
        dy: Shift downwards, pixels.

    Returns:
        ``(C, size, size)`` (or ``(size, size)``), same dtype.
    """
    H, W = img.shape[-2:]
    out = img.new_zeros(*img.shape[:-2], size, size)
    top, left = (size - H) // 2 + dy, (size - W) // 2 + dx
    t0, l0 = max(top, 0), max(left, 0)
    t1, l1 = min(top + H, size), min(left + W, size)
    if t0 < t1 and l0 < l1:
        out[..., t0:t1, l0:l1] = img[..., t0 - top : t1 - top, l0 - left : l1 - left]
    return out


def pad_to_canvas(
    img: Tensor, size: int = 40, max_shift: int = 6, generator: torch.Generator | None = None
) -> Tensor:
    """Place ``img`` in a ``size`` canvas, shifted by random integers ``dx, dy`` in +/-max_shift.

    With MNIST (28x28), ``size=40`` and ``max_shift=6`` the digit always stays whole
    (SparseCaps' training input).

    Args:
        img: ``(C, H, W)`` or ``(H, W)``.
        size: Canvas side length.
        max_shift: Largest shift in each direction, pixels.
        generator: Source of randomness (default: torch's global generator).

    Returns:
        ``(C, size, size)`` (or ``(size, size)``), same dtype.

    Examples:
        >>> pad_to_canvas(torch.ones(1, 28, 28), generator=torch.Generator().manual_seed(0)).shape
        torch.Size([1, 40, 40])
    """
    dx, dy = torch.randint(-max_shift, max_shift + 1, (2,), generator=generator).tolist()
    return place_in_canvas(img, size, dx, dy)


class RandomCanvasTranslate:
    """Transform: :func:`pad_to_canvas` with fixed ``canvas`` and ``max_shift``.

    Args:
        canvas: Canvas side length.
        max_shift: Largest shift in each direction, pixels.
        seed: ``None`` (default) uses torch's global generator, which DataLoader seeds
            differently in each worker; an integer gives this transform its own
            generator (reproducible, but replayed identically by every worker).
    """

    def __init__(self, canvas: int = 40, max_shift: int = 6, seed: int | None = None) -> None:
        self.canvas = canvas
        self.max_shift = max_shift
        self.generator = None if seed is None else torch.Generator().manual_seed(seed)

    def __call__(self, img: Tensor) -> Tensor:
        """Shift ``img`` into the canvas."""
        return pad_to_canvas(img, self.canvas, self.max_shift, self.generator)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(canvas={self.canvas}, max_shift={self.max_shift})"
