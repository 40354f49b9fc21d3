"""affNIST-style affine distortions of digits, and random placement in a larger canvas.

What the affNIST page (Tieleman, 2013) documents, and what :func:`draw_affnist` matches:
each MNIST digit is placed in a 40x40 canvas after a random affine transformation, "32
randomly chosen transformed versions of each original (a different 32 for each
original)"; the test set transforms the 10,000 MNIST test digits (320,000 images), the
training and validation sets the 60,000 MNIST training digits. The ranges, drawn
uniformly and independently here, are the ones the page lists:

=================  ===================
rotation           -20 .. +20 degrees
shear              -0.2 .. +0.2
horizontal scale   0.8 .. 1.2
vertical scale     0.8 .. 1.2
translation        anywhere, as long as the whole digit stays in the 40x40 canvas
=================  ===================

(The stored copy of the page that this project's machines can read ends after its first
paragraphs: the 40x40 canvas, the 32 versions per original and the splits were checked
against it, the ranges were not.)

What is ours where the page gives no rule (each a named difference from the official
files, which are not on our machines):

* **Composition.** The linear part is ``A = R(rotation) @ [[1, shear], [0, 1]] @
  diag(scale_x, scale_y)`` (scale, then shear, then rotation), with ``R`` a
  counter-clockwise rotation as seen on screen; x to the right, y downwards, origin at
  the image centre. A source point ``p`` (relative to the 28x28 centre) lands at
  ``A p + offset`` relative to the canvas centre.
* **Translation.** The offset is uniform over the range that keeps the whole digit in
  the canvas, each axis independently; "whole digit" means that the support of the
  bilinearly interpolated source (its ink box grown by one pixel) maps inside the canvas,
  so no ink is lost. A digit that fits nowhere is centred (not seen with these ranges).
* **Resampling.** Bilinear (``grid_sample``, zero padding), rounded to uint8.
* **Order of the images.** Transformation-major: image ``i`` is version ``i // N`` of
  digit ``i % N`` (``N`` digits), so the first ``N`` images hold one version of every
  digit. This is how the official batched files are laid out if batch ``k`` holds the
  ``k``-th version of every original (32 batches of ``N`` images); the page does not say.

:class:`AffNISTLike` (a transform) and :func:`pad_to_canvas` /
:class:`RandomCanvasTranslate` (SparseCaps' training input: MNIST in a 40x40
canvas shifted by up to +/-6 pixels) work on uint8 or float ``(C, H, W)`` tensors
and can be used inside ``torchvision.transforms.v2.Compose``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "AFFNIST_RANGES",
    "AFFNIST_VERSIONS",
    "AffNISTDraws",
    "AffNISTLike",
    "AffineParams",
    "RandomCanvasTranslate",
    "affine_digit",
    "affine_digits",
    "affine_matrices",
    "draw_affnist",
    "gather_windows",
    "ink_box",
    "offset_ranges",
    "pad_to_canvas",
    "place_in_canvas",
    "place_in_canvases",
    "sample_affnist_params",
    "warp_digits",
]

_CHUNK = 512  # images per grid_sample call (keeps the sampling grids in cache)

#: Published affNIST ranges (uniform): rotation in degrees, shear, scale_x, scale_y.
AFFNIST_RANGES = {
    "rotation_deg": (-20.0, 20.0),
    "shear": (-0.2, 0.2),
    "scale_x": (0.8, 1.2),
    "scale_y": (0.8, 1.2),
}


#: Transformed versions of each original digit in the official affNIST files.
AFFNIST_VERSIONS = 32


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
        fields = (self.rotation_deg, self.shear, self.scale_x, self.scale_y)
        (a, b), (c, d) = affine_matrices(torch.tensor([fields], dtype=torch.float64))[0].tolist()
        return (a, b), (c, d)


def affine_matrices(params: Tensor) -> Tensor:
    """The linear parts ``A = R(rotation) @ [[1, shear], [0, 1]] @ diag(scale_x, scale_y)``.

    Args:
        params: ``(M, 4)``: rotation in degrees (counter-clockwise on screen), shear,
            scale_x, scale_y (the order of :data:`AFFNIST_RANGES`).

    Returns:
        ``(M, 2, 2)`` in ``params``' dtype, acting on ``(x, y)`` with y downwards.

    Examples:
        >>> affine_matrices(torch.tensor([[90.0, 0.5, 2.0, 3.0]]))[0].round(decimals=2).tolist()
        [[-0.0, 3.0], [-2.0, -1.5]]
    """
    theta = torch.deg2rad(params[:, 0])
    c, s = torch.cos(theta), torch.sin(theta)
    k, sx, sy = params[:, 1], params[:, 2], params[:, 3]
    # [[c, s], [-s, c]] @ [[1, k], [0, 1]] @ [[sx, 0], [0, sy]]
    row0 = torch.stack([c * sx, (c * k + s) * sy], dim=-1)
    row1 = torch.stack([-s * sx, (c - s * k) * sy], dim=-1)
    return torch.stack([row0, row1], dim=-2)


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


def offset_ranges(boxes: Tensor, matrices: Tensor, canvas: int) -> tuple[Tensor, Tensor]:
    """The offsets that keep each transformed digit whole inside the canvas.

    Args:
        boxes: ``(M, 4)`` :func:`ink_box` of each source image.
        matrices: ``(M, 2, 2)`` linear parts (:func:`affine_matrices`).
        canvas: Canvas side.

    Returns:
        ``(lo, hi)``, each ``(M, 2)`` (x, y): the offset of image ``m`` keeps its
        bilinear support (the ink box grown by one pixel) inside the canvas iff
        ``lo[m] <= offset <= hi[m]``; ``lo > hi`` where no offset does.
    """
    x0, x1, y0, y1 = (boxes[:, i] + d for i, d in enumerate((-1.0, 1.0, -1.0, 1.0)))
    corners = torch.stack(  # (M, 2, 4): the four corners of the support, as columns
        [torch.stack([x, y]) for x in (x0, x1) for y in (y0, y1)], dim=-1
    ).permute(1, 0, 2)
    mapped = matrices.to(corners.dtype) @ corners  # (M, 2, 4)
    half = canvas / 2
    return -half - mapped.amin(dim=-1), half - mapped.amax(dim=-1)


def _place(lo: Tensor, hi: Tensor, u: Tensor) -> Tensor:
    """Offsets ``lo + u (hi - lo)``, or the middle of the range where ``lo > hi``."""
    return torch.where(lo <= hi, lo + u * (hi - lo), (lo + hi) / 2)


@dataclass(frozen=True)
class AffNISTDraws:
    """Random affNIST transformations of ``N`` digits, ``versions`` of each.

    Row ``i`` describes image ``i``: version ``i // N`` of digit ``i % N``
    (transformation-major, see the module docstring).

    Attributes:
        params: ``(M, 4)`` float64: rotation (degrees), shear, scale_x, scale_y.
        matrices: ``(M, 2, 2)`` float64: the linear parts (:func:`affine_matrices`).
        offsets: ``(M, 2)`` float64: ``(dx, dy)`` of the digit's centre from the canvas centre.
        num_digits: ``N``.
    """

    params: Tensor
    matrices: Tensor
    offsets: Tensor
    num_digits: int

    def digit(self, index: Tensor) -> Tensor:
        """The source digit of each image index."""
        return index % self.num_digits

    def version(self, index: Tensor) -> Tensor:
        """Which of its digit's versions each image index is (``0 .. versions - 1``)."""
        return index // self.num_digits


def draw_affnist(
    boxes: Tensor,
    versions: int = AFFNIST_VERSIONS,
    generator: torch.Generator | None = None,
    canvas: int = 40,
) -> AffNISTDraws:
    """Draw ``versions`` random affNIST transformations of each of ``N`` digits (vectorised).

    One ``torch.rand((versions * N, 6))`` call: columns 0-3 map linearly onto the
    ranges of :data:`AFFNIST_RANGES`, columns 4-5 place the digit uniformly within
    :func:`offset_ranges` (x, then y).

    Args:
        boxes: ``(N, 4)`` :func:`ink_box` of the digits.
        versions: Transformed versions per digit (affNIST: 32).
        generator: Source of randomness (seed it for the same draws every time).
        canvas: Canvas side.

    Returns:
        The draws, ``versions * N`` rows in transformation-major order.

    Examples:
        >>> boxes = torch.tensor([[-3.0, 3.0, -9.0, 9.0]], dtype=torch.float64)
        >>> d = draw_affnist(boxes, 32, torch.Generator().manual_seed(0))
        >>> d.params.shape, d.offsets.shape, d.version(torch.tensor([31])).item()
        (torch.Size([32, 4]), torch.Size([32, 2]), 31)
    """
    n = boxes.shape[0]
    u = torch.rand((versions * n, 6), generator=generator, dtype=torch.float64)
    bounds = torch.tensor(list(AFFNIST_RANGES.values()), dtype=torch.float64)  # (4, 2)
    params = bounds[:, 0] + u[:, :4] * (bounds[:, 1] - bounds[:, 0])
    matrices = affine_matrices(params)
    lo, hi = offset_ranges(boxes.double().repeat(versions, 1), matrices, canvas)
    return AffNISTDraws(params, matrices, _place(lo, hi, u[:, 4:]), n)


@functools.lru_cache(maxsize=4)
def _pixel_centres(canvas: int) -> Tensor:
    """``(1, canvas * canvas, 2)``: the ``(x, y)`` of every pixel centre, from the canvas centre."""
    centres = torch.arange(canvas, dtype=torch.float32) - (canvas - 1) / 2
    qy, qx = torch.meshgrid(centres, centres, indexing="ij")
    return torch.stack([qx, qy], dim=-1).reshape(1, -1, 2)


def warp_digits(images: Tensor, matrices: Tensor, offsets: Tensor, canvas: int = 40) -> Tensor:
    """Apply one affine map per image and place the results in a ``canvas`` square.

    Output pixel ``q`` (relative to the canvas centre) reads the source at
    ``A^{-1} (q - offset)`` (relative to the source centre), bilinearly, zero outside.

    Args:
        images: ``(N, C, H, W)``, uint8 or float.
        matrices: ``(N, 2, 2)`` linear parts ``A`` (:func:`affine_matrices`).
        offsets: ``(N, 2)`` ``(dx, dy)`` of the source centre from the canvas centre.
        canvas: Output side length.

    Returns:
        ``(N, C, canvas, canvas)``, same dtype (uint8 is rounded and clamped).
    """
    N, C, H, W = images.shape
    if matrices.shape != (N, 2, 2) or offsets.shape != (N, 2):
        raise ValueError(
            f"{N} images need matrices (N, 2, 2) and offsets (N, 2), "
            f"got {tuple(matrices.shape)} and {tuple(offsets.shape)}"
        )
    inv = torch.linalg.inv(matrices.double()).float()
    offset = offsets.float()
    q = _pixel_centres(canvas)  # (1, P, 2)
    to_unit = torch.tensor([2 / W, 2 / H])  # grid_sample's [-1, 1] coordinates
    out = torch.empty(N, C, canvas, canvas, dtype=images.dtype)
    for s in range(0, N, _CHUNK):
        e = min(s + _CHUNK, N)
        src = (q - offset[s:e, None]) @ inv[s:e].transpose(1, 2)  # A^{-1} (q - offset)
        grid = (src * to_unit).reshape(e - s, canvas, canvas, 2)
        warped = F.grid_sample(images[s:e].float(), grid, "bilinear", "zeros", align_corners=False)
        out[s:e] = warped.round_().clamp_(0, 255) if images.dtype == torch.uint8 else warped
    return out


def affine_digits(images: Tensor, params: list[AffineParams], canvas: int = 40) -> Tensor:
    """Apply one affine distortion per image and place the results in a ``canvas`` square.

    Args:
        images: ``(N, C, H, W)``, uint8 or float.
        params: ``N`` distortions.
        canvas: Output side length.

    Returns:
        ``(N, C, canvas, canvas)``, same dtype (uint8 is rounded and clamped).
    """
    if len(params) != images.shape[0]:
        raise ValueError(f"{images.shape[0]} images but {len(params)} parameter sets")
    fields = [(p.rotation_deg, p.shear, p.scale_x, p.scale_y) for p in params]
    matrices = affine_matrices(torch.tensor(fields, dtype=torch.float64).reshape(-1, 4))
    offsets = torch.tensor([p.offset for p in params], dtype=torch.float64).reshape(-1, 2)
    return warp_digits(images, matrices, offsets, canvas)


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
        u = torch.rand(2, generator=self.generator, dtype=torch.float64)
        matrix = torch.tensor([params.matrix()], dtype=torch.float64)
        lo, hi = offset_ranges(torch.tensor([box], dtype=torch.float64), matrix, self.canvas)
        dx, dy = _place(lo[0], hi[0], u).tolist()
        return AffineParams(
            params.rotation_deg, params.shear, params.scale_x, params.scale_y, (dx, dy)
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


def gather_windows(images: Tensor, top: Tensor, left: Tensor, size: tuple[int, int]) -> Tensor:
    """Every ``images[b, :, top[b]:top[b] + h, left[b]:left[b] + w]`` at once: ``(B, C, h, w)``.

    One advanced-indexing gather for the batch (no loop, no host read); every window must
    lie inside the images.

    Args:
        images: ``(B, C, H, W)``.
        top: ``(B,)`` first row of each window.
        left: ``(B,)`` first column of each window.
        size: ``(h, w)`` of the windows.

    Examples:
        >>> x = torch.arange(16).view(1, 1, 4, 4)
        >>> gather_windows(x, torch.tensor([1]), torch.tensor([2]), (2, 2)).flatten().tolist()
        [6, 7, 10, 11]
    """
    h, w = size
    B, C = images.shape[:2]
    dev = images.device
    rows = top.view(B, 1, 1, 1) + torch.arange(h, device=dev).view(1, 1, h, 1)
    cols = left.view(B, 1, 1, 1) + torch.arange(w, device=dev).view(1, 1, 1, w)
    batch = torch.arange(B, device=dev).view(B, 1, 1, 1)
    channel = torch.arange(C, device=dev).view(1, C, 1, 1)
    # four broadcast index tensors: the result is (B, C, h, w), laid out as a plain tensor
    return images[batch, channel, rows, cols]


def place_in_canvases(images: Tensor, size: int, dx: Tensor, dy: Tensor) -> Tensor:
    """:func:`place_in_canvas` for a batch, each image with its own shift, in a fixed few ops.

    The images are padded with ``size`` zeros on every side, and each canvas is one window of
    its padded image (:func:`gather_windows`): the same pixels, moved, as the per-image
    function pastes, and zeros elsewhere (pixels shifted past the border are cut off there
    too). An offset that puts the whole image off the canvas is clamped to one that still
    does, so any shift is accepted without a host read.

    Args:
        images: ``(B, C, H, W)``.
        size: Canvas side length.
        dx: ``(B,)`` integer shifts to the right.
        dy: ``(B,)`` integer shifts downwards.

    Returns:
        ``(B, C, size, size)``, the images' dtype.

    Examples:
        >>> x = torch.ones(2, 1, 2, 2)
        >>> out = place_in_canvases(x, 4, torch.tensor([0, 1]), torch.tensor([0, -1]))
        >>> out[1, 0].tolist()  # centred at rows 1-2, columns 1-2; one right, one up
        [[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
    """
    H, W = images.shape[-2:]
    # The image's first row and column on the canvas, where -H (-W) and size are already
    # wholly off it: the canvas of image b is then rows [size - top_b, 2 size - top_b) of the
    # image padded by size, inside the padded image for every clamped offset.
    top = ((size - H) // 2 + dy.to(images.device)).clamp(-H, size)
    left = ((size - W) // 2 + dx.to(images.device)).clamp(-W, size)
    padded = F.pad(images, (size, size, size, size))
    return gather_windows(padded, size - top, size - left, (size, size))


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
