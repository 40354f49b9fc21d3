"""SimCLR views of a whole batch at once: the recipe of :class:`SimCLRTransform`, vectorised.

:class:`SimCLRTransform` augments one image at a time through
``torchvision.transforms.v2``; at MNIST and CIFAR sizes most of its time is
per-call overhead. :class:`BatchSimCLRTransform` applies the same recipe (it *is*
a ``SimCLRTransform``: same constructor, same channel-dependent defaults, and it
reads its parameters from the per-image pipeline that constructor builds) to a
``(B, C, H, W)`` batch in a few dozen tensor operations, on the batch's device,
with per-sample random parameters drawn from a ``torch.Generator``.

Every step reproduces torchvision's functional op on float images (the tests
compare whole views, image by image, with ``F.resized_crop``, ``F.horizontal_flip``,
``F.rotate``, ``F.adjust_*``, ``F.rgb_to_grayscale``, ``F.gaussian_blur`` and ``F.normalize``
applied in the sampled order with the sampled factors; they agree to ~1e-6).
Against the per-image uint8 pipeline the differences are:

* **Random stream.** The parameters follow the same distributions, including
  ``ColorJitter``'s random order of the four adjustments (drawn per sample) and
  ``RandomResizedCrop``'s sampler (10 candidate boxes per image, the first
  valid one, else torchvision's central fallback crop), but are drawn
  differently (one ``torch.rand`` per call, and a second one for the rotation angles
  when the recipe rotates), so a seed gives other views than
  ``SimCLRTransform`` under the same seed.
* **No uint8 rounding between steps.** ``SimCLRTransform`` crops, jitters,
  grays and blurs uint8 images, rounding (crop, blur) or truncating (jitter,
  grayscale) to integers after every step; here everything after the
  conversion to float stays float. On a CIFAR-like image with the default
  recipe, the uint8 pipeline differs from the same pipeline on float input (same
  parameters) by 0.005 on average (1.3/255) and by up to 0.03 (8/255, where later
  jitter steps amplify earlier rounding), and is darker on average by about
  0.005 (truncation): the batched views do not have that bias.
* **Float input** in ``[0, 1]`` is accepted as well as uint8 (as ``v2`` does).

Crops are resampled bilinearly (``align_corners=False``, clamped to the crop
box as ``F.resized_crop`` clamps to the cropped tensor): with one
``F.grid_sample`` when no crop can be larger than the output (output size at
least the image size, as in every selfcaps preset), where antialiasing changes
nothing; otherwise with separable filter matrices that reproduce torch's
``antialias=True`` bilinear kernel, so downscaling crops match too.

Brightness, contrast and saturation are one fused blend per position of the
jitter order (each sample doing at most one of them there, the others left
exactly unchanged). Hue, the expensive step, runs once per sample: the batch
is sorted by the position of each sample's hue so that it applies to
contiguous slices, which costs one host read (``.tolist()``) per view and chunk:
that is the CPU path. On an accelerator (:mod:`selfcaps.caps.chunking`) nothing is
read on the host: hue runs on the whole batch at each of the four positions and is
kept where it is due (four times the arithmetic, a handful of kernels), and the
batch is never chunked. On a CPU, batches larger than ``chunk_size`` (256) are
processed in chunks to bound the temporaries; results do not depend on it.

A sample's parameters depend only on the generator's state and the sample's
position in the batch: on CPU ``torch.rand`` fills in order, so the first ``k``
images of a batch get the same views whatever the batch size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from itertools import accumulate
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torchvision.transforms import v2

from selfcaps.caps.chunking import cpu_path
from selfcaps.data.transforms import SimCLRTransform

__all__ = [
    "BatchSimCLRTransform",
    "SimCLRParams",
    "SimCLRRecipe",
    "adjust_hue",
    "gaussian_blur",
    "resized_crop",
    "rotate",
]

#: torchvision's luma weights (``rgb_to_grayscale``).
GRAY_WEIGHTS = (0.2989, 0.587, 0.114)
#: Crop boxes ``RandomResizedCrop`` tries before its central fallback.
CROP_TRIES = 10
#: Order of the colour-jitter operations in :attr:`SimCLRParams.order`.
JITTER_OPS = ("brightness", "contrast", "saturation", "hue")

# Columns of the per-(sample, view) uniform draws.
_AREA = slice(0, CROP_TRIES)
_LOG_RATIO = slice(CROP_TRIES, 2 * CROP_TRIES)
_TOP, _LEFT, _FLIP, _JITTER = range(2 * CROP_TRIES, 2 * CROP_TRIES + 4)
_ORDER = slice(_JITTER + 1, _JITTER + 5)
_FACTORS = slice(_JITTER + 5, _JITTER + 9)
_GRAY, _BLUR, _SIGMA = range(_JITTER + 9, _JITTER + 12)
_DRAWS = _SIGMA + 1


def _is_bilinear(mode: Any) -> bool:
    return getattr(mode, "value", mode) == "bilinear"


_HSV_OFFSETS = torch.tensor([5.0, 3.0, 1.0]).view(1, 3, 1, 1)


def _is_plain_rotation(step: v2.RandomRotation) -> bool:
    """A symmetric bilinear rotation about the centre, same size, black fill.

    Only ``fill=0``: ``fill=None`` (no coverage mask) and per-type dicts blend the border
    differently from :func:`rotate`.
    """
    lo, hi = step.degrees
    return (
        lo == -hi
        and _is_bilinear(step.interpolation)
        and not step.expand
        and step.center is None
        and step.fill in (0, 0.0)  # a dict, a sequence or None compares unequal
    )


def rotate(images: Tensor, angle: Tensor) -> Tensor:
    """Each image rotated by its own ``angle`` (degrees, counter-clockwise) about its centre.

    ``torchvision.transforms.v2.functional.rotate`` with bilinear interpolation and black
    fill, for a batch: the inverse rotation samples the source with ``grid_sample``
    (``align_corners=False``, pixel units so that non-square images rotate rigidly), and,
    as torchvision's fill does, the result is multiplied by the sampled coverage of the
    image (a bilinearly rotated field of ones), so border pixels fade to the fill.

    Args:
        images: Float ``(B, C, H, W)``.
        angle: ``(B,)`` angles in degrees.

    Returns:
        ``(B, C, H, W)``.
    """
    b, _, h, w = images.shape
    rad = torch.deg2rad(angle.to(images.dtype))
    cos, sin = torch.cos(rad), torch.sin(rad)
    theta = torch.zeros(b, 2, 3, dtype=images.dtype, device=images.device)
    # output (x, y) in pixels from the centre -> source pixels: the inverse rotation; in
    # grid_sample's normalised units x scales by 2 / w and y by 2 / h.
    theta[:, 0, 0], theta[:, 0, 1] = cos, -sin * (h / w)
    theta[:, 1, 0], theta[:, 1, 1] = sin * (w / h), cos
    grid = F.affine_grid(theta, [b, 1, h, w], align_corners=False)
    ones = torch.ones(b, 1, h, w, dtype=images.dtype, device=images.device)
    both = F.grid_sample(torch.cat([images, ones], 1), grid, "bilinear", "zeros", False)
    return both[:, :-1] * both[:, -1:]


def _per_sample(values: Tensor, like: Tensor) -> Tensor:
    """``(B,)`` values as ``(B, 1, 1, 1)`` in ``like``'s dtype and device."""
    return values.to(like.device, like.dtype).view(-1, 1, 1, 1)


def _luma(images: Tensor) -> Tensor:
    """``(B, 1, H, W)`` grayscale of RGB images, computed as ``F.rgb_to_grayscale`` does."""
    r, g, b = images.split(1, dim=1)
    return (
        torch.mul(r, GRAY_WEIGHTS[0]).add_(g, alpha=GRAY_WEIGHTS[1]).add_(b, alpha=GRAY_WEIGHTS[2])
    )


def adjust_hue(images: Tensor, factor: Tensor) -> Tensor:
    """Per-sample ``F.adjust_hue``: rotate the HSV hue by ``factor`` turns (1 channel: unchanged).

    RGB -> HSV exactly as torchvision computes hue; back to RGB with the
    closed form ``max - chroma * clamp(min(k, 4 - k), 0, 1)``,
    ``k = (n + 6 h) mod 6`` for ``n = 5, 3, 1`` (R, G, B), which equals
    torchvision's sector table without a gather. Value and chroma are unchanged.

    Args:
        images: Float ``(B, C, H, W)`` in ``[0, 1]``.
        factor: ``(B,)`` hue shifts in ``[-0.5, 0.5]``.

    Returns:
        The adjusted images.

    Examples:
        >>> red = torch.tensor([1.0, 0.0, 0.0]).view(1, 3, 1, 1)
        >>> adjust_hue(red, torch.tensor([1 / 3])).flatten()  # red -> green
        tensor([0., 1., 0.])
    """
    if images.shape[1] == 1:
        return images
    r, g, b = images.split(1, dim=1)
    maxc = torch.maximum(r, g)
    maxc = torch.maximum(maxc, b, out=maxc)
    chroma = torch.minimum(r, g)
    chroma = torch.minimum(chroma, b, out=chroma).neg_().add_(maxc)
    # torchvision divides by 1 where chroma == 0; then every max - channel is 0 anyway
    chroma = chroma.clamp_(min=torch.finfo(chroma.dtype).tiny)
    rc, gc, bc = (maxc - images).div_(chroma).split(1, dim=1)
    # torchvision's sector choice (red if max == r, else green if max == g, else blue)
    # with its 0/1-mask products, which are exact and much faster than torch.where on CPU
    not_r, is_g = maxc != r, maxc == g
    h = (bc - gc).mul_(~not_r)
    h.addcmul_((rc - bc).add_(2.0), is_g & not_r)
    h.addcmul_((gc - rc).add_(4.0), not_r.logical_and_(is_g.logical_not_()))
    # h is in sixths of a turn, in (-1, 5]; k = (h + 6 factor + n) mod 6 for n = 5, 3, 1
    k = h.add_(_per_sample(factor, h).mul(6.0)) + _HSV_OFFSETS.to(h.device, h.dtype)
    k = k.sub_(torch.div(k, 6.0).floor_().mul_(6.0))
    # min(k, 4 - k) == 2 - |k - 2|; channel = max - chroma * clamp(min(k, 4 - k), 0, 1)
    k = k.sub_(2.0).abs_().neg_().add_(2.0).clamp_(0.0, 1.0)
    return k.mul_(chroma).neg_().add_(maxc)


def _gaussian_kernels(kernel_size: int, sigma: Tensor) -> Tensor:
    """``(B, kernel_size)`` normalised 1-D Gaussians, as torchvision builds them."""
    lim = (kernel_size - 1) / (2.0 * math.sqrt(2.0))
    x = torch.linspace(-lim, lim, steps=kernel_size, dtype=sigma.dtype, device=sigma.device)
    return torch.softmax(-((x / sigma.view(-1, 1)) ** 2), dim=1)


def gaussian_blur(images: Tensor, kernel_size: tuple[int, int], sigma: Tensor) -> Tensor:
    """Per-sample ``F.gaussian_blur`` (reflect padding), as two 1-D passes of weighted shifts.

    Args:
        images: Float ``(B, C, H, W)``.
        kernel_size: Odd ``(kx, ky)`` (torchvision's order: width first).
        sigma: ``(B,)`` standard deviations, the same along both axes.

    Returns:
        The blurred images.

    Examples:
        >>> x = torch.zeros(1, 1, 5, 5)
        >>> x[0, 0, 2, 2] = 1.0
        >>> y = gaussian_blur(x, (3, 3), torch.tensor([1.0]))
        >>> round(float(y.sum()), 4), bool(y[0, 0, 2, 2] < 1)
        (1.0, True)
    """
    sigma = sigma.to(images.device, images.dtype)
    kx, ky = kernel_size
    return _separable_blur(images, _gaussian_kernels(kx, sigma), _gaussian_kernels(ky, sigma))


def _separable_blur(images: Tensor, wx: Tensor, wy: Tensor) -> Tensor:
    """Per-sample separable correlation with ``(B, kx)``, ``(B, ky)`` kernels; reflect padding."""
    _, _, H, W = images.shape
    kx, ky = wx.shape[1], wy.shape[1]
    x = F.pad(images, [kx // 2, kx // 2, ky // 2, ky // 2], mode="reflect")
    return _weighted_shifts(_weighted_shifts(x, wx, dim=3, size=W), wy, dim=2, size=H)


def _weighted_shifts(x: Tensor, weights: Tensor, dim: int, size: int) -> Tensor:
    """``sum_t weights[:, t] * x.narrow(dim, t, size)``: a per-sample 1-D correlation."""
    out = x.narrow(dim, 0, size) * _per_sample(weights[:, 0], x)
    for t in range(1, weights.shape[1]):
        out.addcmul_(x.narrow(dim, t, size), _per_sample(weights[:, t], x))
    return out


def _source_coords(
    start: Tensor, length: Tensor, out_size: int, dtype: torch.dtype, flip: Tensor | None = None
) -> Tensor:
    """``(B, out_size)`` source pixel coordinates of ``interpolate(crop, out_size)``.

    ``align_corners=False`` and clamped to the crop box, as
    ``F.interpolate(..., mode="bilinear")`` clamps to the cropped tensor's edges.
    """
    start, length = start.to(dtype).view(-1, 1), length.to(dtype).view(-1, 1)
    u = torch.arange(out_size, dtype=dtype, device=start.device)
    src = start + (u + 0.5) * (length / out_size) - 0.5
    src = torch.minimum(torch.maximum(src, start), start + length - 1)
    if flip is not None:
        src = torch.where(flip.view(-1, 1), src.flip(1), src)
    return src


def _aa_weights(
    start: Tensor,
    length: Tensor,
    in_size: int,
    out_size: int,
    dtype: torch.dtype,
    flip: Tensor | None = None,
) -> Tensor:
    """``(B, out_size, in_size)`` antialiased bilinear resampling matrices of crops.

    The triangle filter of ``F.interpolate(..., antialias=True)``: support
    ``max(scale, 1)`` with ``scale = length / out_size``, restricted to the crop and
    normalised; for ``scale <= 1`` it is plain bilinear interpolation.
    """
    start, length = start.to(dtype).view(-1, 1, 1), length.to(dtype).view(-1, 1, 1)
    dev = start.device
    scale = length / out_size
    support = scale.clamp(min=1.0)
    center = (torch.arange(out_size, dtype=dtype, device=dev).view(1, -1, 1) + 0.5) * scale
    j = torch.arange(in_size, dtype=dtype, device=dev).view(1, 1, -1) - start
    w = (1.0 - (j + 0.5 - center).abs() / support).clamp(min=0.0)
    w = w * ((j >= 0) & (j < length))
    w = w / w.sum(dim=2, keepdim=True)
    if flip is not None:
        w = torch.where(flip.view(-1, 1, 1), w.flip(1), w)
    return w


def resized_crop(
    images: Tensor,
    top: Tensor,
    left: Tensor,
    height: Tensor,
    width: Tensor,
    size: tuple[int, int],
    flip: Tensor | None = None,
) -> Tensor:
    """Per-sample ``F.resized_crop`` (bilinear, antialiased) followed by an optional flip.

    Args:
        images: Float ``(B, C, H, W)``.
        top: ``(B,)`` crop box rows (integers).
        left: ``(B,)`` crop box columns.
        height: ``(B,)`` crop box heights.
        width: ``(B,)`` crop box widths.
        size: Output ``(height, width)``.
        flip: ``(B,)`` booleans: mirror the result horizontally.

    Returns:
        ``(B, C, *size)``.

    Examples:
        >>> x = torch.arange(16.0).view(1, 1, 4, 4)
        >>> one = torch.ones(1, dtype=torch.long)
        >>> resized_crop(x, one, one, 2 * one, 2 * one, (2, 2), flip=torch.tensor([True]))
        tensor([[[[ 6.,  5.],
                  [10.,  9.]]]])
    """
    B, _, H, W = images.shape
    out_h, out_w = size
    dev = images.device
    top, left, height, width = (t.to(dev) for t in (top, left, height, width))
    flip = None if flip is None else flip.to(dev)
    if out_h >= H and out_w >= W:  # no crop is larger than the output: plain bilinear
        gy = _source_coords(top, height, out_h, images.dtype).mul_(2.0 / H).add_(1.0 / H - 1.0)
        gx = _source_coords(left, width, out_w, images.dtype, flip)
        gx = gx.mul_(2.0 / W).add_(1.0 / W - 1.0)
        grid = torch.stack(
            (
                gx.view(B, 1, out_w).expand(B, out_h, out_w),
                gy.view(B, out_h, 1).expand(B, out_h, out_w),
            ),
            dim=-1,
        )
        return F.grid_sample(images, grid, "bilinear", "border", align_corners=False)
    wy = _aa_weights(top, height, H, out_h, images.dtype)
    wx = _aa_weights(left, width, W, out_w, images.dtype, flip)
    return wy.unsqueeze(1) @ images @ wx.transpose(1, 2).unsqueeze(1)


class SimCLRParams(NamedTuple):
    """Per-sample random parameters of one view of a batch.

    Every field has length ``B``: crop box ``top``, ``left``, ``height``, ``width``
    (long); booleans ``flip``, ``jitter`` (colour jitter applied), ``gray``,
    ``blur``; jitter factors ``brightness``, ``contrast``, ``saturation``, ``hue``
    and blur ``sigma`` (float); ``order`` is ``(B, 4)``, indices into
    :data:`JITTER_OPS` in the order they are applied; ``angle``: rotation in degrees,
    counter-clockwise (``None`` when the recipe does not rotate).
    """

    top: Tensor
    left: Tensor
    height: Tensor
    width: Tensor
    flip: Tensor
    jitter: Tensor
    order: Tensor
    brightness: Tensor
    contrast: Tensor
    saturation: Tensor
    hue: Tensor
    gray: Tensor
    blur: Tensor
    sigma: Tensor
    angle: Tensor | None = None

    def to(self, device: torch.device | str) -> SimCLRParams:
        """The same parameters on ``device``."""
        return SimCLRParams(*(None if t is None else t.to(device) for t in self))


@dataclass(frozen=True)
class SimCLRRecipe:
    """The parameters of a per-image SimCLR pipeline, read from its ``v2`` steps."""

    size: tuple[int, int]
    scale: tuple[float, float]
    ratio: tuple[float, float]
    hf_prob: float = 0.0
    degrees: float = 0.0
    cj_prob: float = 0.0
    jitter: tuple[tuple[float, float] | None, ...] = (None, None, None, None)
    gray_prob: float = 0.0
    blur_prob: float = 0.0
    kernel_size: tuple[int, int] = (3, 3)
    sigmas: tuple[float, float] = (0.1, 2.0)
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None

    @classmethod
    def from_pipeline(cls, view: v2.Compose) -> SimCLRRecipe:
        """Read a ``SimCLRTransform`` view; raise on any step this module cannot vectorise.

        Args:
            view: One view of a :class:`SimCLRTransform` (``t.transforms[0]``).

        Returns:
            The recipe.

        Examples:
            >>> r = SimCLRRecipe.from_pipeline(SimCLRTransform(channels=1).transforms[0])
            >>> r.scale, r.hf_prob, r.jitter[2]
            ((0.5, 1.0), 0.0, None)
        """
        found: dict[str, Any] = {}
        for step in view.transforms:
            inner = step.transforms[0] if isinstance(step, v2.RandomApply) else None
            if isinstance(step, v2.RandomResizedCrop) and _is_bilinear(step.interpolation):
                found.update(size=tuple(step.size), scale=tuple(step.scale))
                found["ratio"] = tuple(step.ratio)
            elif isinstance(step, v2.RandomHorizontalFlip):
                found["hf_prob"] = step.p
            elif isinstance(step, v2.RandomRotation) and _is_plain_rotation(step):
                found["degrees"] = float(step.degrees[1])
            elif isinstance(inner, v2.ColorJitter) and len(step.transforms) == 1:
                found["cj_prob"] = step.p
                found["jitter"] = tuple(getattr(inner, op) for op in JITTER_OPS)
            elif isinstance(step, v2.RandomGrayscale):
                found["gray_prob"] = step.p
            elif isinstance(inner, v2.GaussianBlur) and len(step.transforms) == 1:
                found.update(blur_prob=step.p, kernel_size=tuple(inner.kernel_size))
                found["sigmas"] = tuple(inner.sigma)
            elif isinstance(step, v2.ToDtype) and step.dtype == torch.float32 and step.scale:
                pass
            elif isinstance(step, v2.Normalize):
                found.update(mean=tuple(step.mean), std=tuple(step.std))
            else:
                raise TypeError(f"BatchSimCLRTransform cannot vectorise the step {step!r}")
        if "size" not in found:
            raise TypeError("the pipeline has no bilinear RandomResizedCrop")
        return cls(**found)


def _crop_boxes(
    u: Tensor, height: int, width: int, scale: tuple[float, float], ratio: tuple[float, float]
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``RandomResizedCrop.make_params`` for every row of uniform draws ``u``."""
    u = u.double()
    area = height * width
    target = area * (scale[0] + (scale[1] - scale[0]) * u[:, _AREA])
    lo, hi = math.log(ratio[0]), math.log(ratio[1])
    aspect = torch.exp(lo + (hi - lo) * u[:, _LOG_RATIO])
    w = torch.sqrt(target * aspect).round()
    h = torch.sqrt(target / aspect).round()
    valid = (w > 0) & (w <= width) & (h > 0) & (h <= height)
    first = valid.to(torch.uint8).argmax(dim=1, keepdim=True)  # first valid try
    w, h = w.gather(1, first).squeeze(1), h.gather(1, first).squeeze(1)
    top = (u[:, _TOP] * (height - h + 1)).floor().clamp(max=height - h)
    left = (u[:, _LEFT] * (width - w + 1)).floor().clamp(max=width - w)
    # torchvision's fallback after 10 invalid tries: a central crop of clamped ratio
    in_ratio = width / height
    if in_ratio < min(ratio):
        fw, fh = width, round(width / min(ratio))
    elif in_ratio > max(ratio):
        fw, fh = round(height * max(ratio)), height
    else:
        fw, fh = width, height
    ok = valid.any(dim=1)
    top = torch.where(ok, top, float((height - fh) // 2))
    left = torch.where(ok, left, float((width - fw) // 2))
    h, w = torch.where(ok, h, float(fh)), torch.where(ok, w, float(fw))
    return top.long(), left.long(), h.long(), w.long()


def _jitter_step(x: Tensor, op: Tensor, p: SimCLRParams, on: tuple[bool, ...]) -> Tensor:
    """One position of the colour-jitter order: brightness, contrast or saturation, in place.

    All three are torchvision's ``_blend(x, G, f) = clamp(f x + (1 - f) G, 0, 1)``
    with ``G`` = 0, the mean of the grayscale image, or the grayscale image, so
    every sample gets one blend with its own ``f`` and ``G``. Samples doing
    anything else here (hue, or no jitter: ``op`` not in 0, 1, 2) get ``f = 1``,
    ``G = 0``, which leaves them exactly unchanged.
    """
    bright, contrast, sat = (op == k for k in range(3))
    f = torch.where(bright, p.brightness, 1.0)
    f = torch.where(contrast, p.contrast, f)
    f = _per_sample(torch.where(sat, p.saturation, f), x)
    if not (on[1] or on[2]):
        return x.mul_(f).clamp_(0.0, 1.0)
    gray = _luma(x) if x.shape[1] == 3 else x
    mean = gray.mean(dim=(1, 2, 3), keepdim=True) * _per_sample(contrast, x)
    target = gray * _per_sample(sat, x) + mean if on[2] else mean
    return x.mul_(f).addcmul_(target, 1.0 - f).clamp_(0.0, 1.0)


def _select(p: SimCLRParams, index: Tensor | slice) -> SimCLRParams:
    return SimCLRParams(*(None if t is None else t[index] for t in p))


class BatchSimCLRTransform(SimCLRTransform):
    """:class:`SimCLRTransform`'s recipe applied to a whole batch at once, on its device.

    Takes the constructor arguments of :class:`SimCLRTransform` (and its
    channel-dependent defaults); the recipe is read from the per-image pipeline
    that constructor builds, so the two cannot drift apart. Call it on a uint8
    (or ``[0, 1]`` float) batch ``(B, C, H, W)`` with a ``torch.Generator``
    (``None``: the global RNG) to get ``n_views`` float tensors
    ``(B, C, input_size, input_size)``; every sample gets its own crop, flip,
    jitter factors and order, grayscale and blur. A single image ``(C, H, W)``
    gives single views, so it also works as a per-image transform. Differences
    from the per-image pipeline: module docstring.

    :meth:`sample_params` and :meth:`apply` split a call in two, for forcing
    parameters. ``chunk_size`` (default 256) bounds how many images are
    processed at once.

    Examples:
        >>> t = BatchSimCLRTransform(input_size=28, channels=1, normalize=((0.1307,), (0.3081,)))
        >>> batch = torch.randint(0, 256, (8, 1, 28, 28), dtype=torch.uint8)
        >>> a, b = t(batch, torch.Generator().manual_seed(0))
        >>> a.shape, a.dtype, bool((a != b).any())
        (torch.Size([8, 1, 28, 28]), torch.float32, True)
    """

    chunk_size: int = 256
    #: Tells the training engine to apply this transform to whole batches (on the device).
    is_batch_transform: bool = True

    @cached_property
    def recipe(self) -> SimCLRRecipe:
        """The augmentation parameters, read from the per-image pipeline."""
        views = {id(v) for v in self.transforms}
        if len(views) != 1:
            raise TypeError("BatchSimCLRTransform needs the same pipeline for every view")
        return SimCLRRecipe.from_pipeline(self.transforms[0])

    def sample_params(
        self,
        batch_size: int,
        height: int,
        width: int,
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
    ) -> list[SimCLRParams]:
        """Per-sample random parameters of every view (one ``torch.rand`` call).

        The uniform draws come from ``generator`` on its own device (a CPU generator gives
        the same views on every machine) and move to ``device`` in one copy; every
        parameter is derived from them there.

        A recipe that rotates draws its angles with a second call, after the first, so
        that its other parameters are those of the same recipe without rotation.

        Args:
            batch_size: Number of images.
            height: Their height.
            width: Their width.
            generator: Source of randomness (``None``: the global RNG).
            device: Where the parameters are made (default: the generator's device).

        Returns:
            One :class:`SimCLRParams` per view.

        Examples:
            >>> t = BatchSimCLRTransform(input_size=32)
            >>> p = t.sample_params(4, 32, 32, torch.Generator().manual_seed(0))
            >>> len(p), p[0].height.shape, p[0].order.shape
            (2, torch.Size([4]), torch.Size([4, 4]))
        """
        draws, angles = self._draws(batch_size, generator, device)
        views = range(len(self.transforms))
        return [
            self._params(draws[:, v], None if angles is None else angles[:, v], height, width)
            for v in views
        ]

    def _draws(
        self,
        batch_size: int,
        generator: torch.Generator | None,
        device: torch.device | str | None,
    ) -> tuple[Tensor, Tensor | None]:
        """Uniform draws ``(B, views, k)`` and rotation angles ``(B, views)`` (or ``None``)."""
        r = self.recipe
        src = generator.device if generator is not None else torch.device("cpu")
        dev = torch.device(device) if device is not None else src
        draws = torch.rand(
            batch_size, len(self.transforms), _DRAWS, generator=generator, device=src
        ).to(dev)
        angles = None
        if r.degrees > 0:  # drawn after the others: recipes without rotation keep their views
            a = torch.rand(batch_size, len(self.transforms), generator=generator, device=src)
            angles = (2.0 * a.to(dev) - 1.0) * r.degrees
        return draws, angles

    def _params(self, u: Tensor, angle: Tensor | None, height: int, width: int) -> SimCLRParams:
        """The parameters of each row of uniform draws ``u`` ``(N, k)`` (one per image and view)."""
        r, dev = self.recipe, u.device
        identity = torch.tensor([1.0, 1.0, 1.0, 0.0], device=dev)
        lo = torch.tensor([j[0] if j else 0.0 for j in r.jitter], device=dev)
        hi = torch.tensor([j[1] if j else 0.0 for j in r.jitter], device=dev)
        enabled = torch.tensor([j is not None for j in r.jitter], device=dev)
        top, left, h, w = _crop_boxes(u, height, width, r.scale, r.ratio)
        factors = torch.where(enabled, lo + (hi - lo) * u[:, _FACTORS], identity)
        return SimCLRParams(
            top=top,
            left=left,
            height=h,
            width=w,
            flip=u[:, _FLIP] < r.hf_prob,
            jitter=u[:, _JITTER] < r.cj_prob,
            order=u[:, _ORDER].argsort(dim=1),
            brightness=factors[:, 0],
            contrast=factors[:, 1],
            saturation=factors[:, 2],
            hue=factors[:, 3],
            gray=u[:, _GRAY] < r.gray_prob,
            blur=u[:, _BLUR] < r.blur_prob,
            sigma=r.sigmas[0] + (r.sigmas[1] - r.sigmas[0]) * u[:, _SIGMA],
            angle=angle,
        )

    def apply(self, images: Tensor, params: SimCLRParams) -> Tensor:
        """One view of a batch under given parameters.

        Args:
            images: uint8 ``(B, C, H, W)``, or float in ``[0, 1]``.
            params: From :meth:`sample_params` (possibly edited with ``_replace``).

        Returns:
            Float ``(B, C, *size)``, normalised if the recipe normalises.

        Examples:
            >>> t = BatchSimCLRTransform(input_size=4, min_scale=1.0, hf_prob=0.0, cj_prob=0.0,
            ...                          gray_prob=0.0)
            >>> x = torch.randint(0, 256, (2, 3, 4, 4), dtype=torch.uint8)
            >>> (p,) = t.sample_params(2, 4, 4)[:1]
            >>> torch.allclose(t.apply(x, p), x / 255.0)
            True
        """
        p = params.to(images.device)
        batch, channels = images.shape[:2]
        if batch <= self.chunk_size or not cpu_path(images):  # whole batches on an accelerator
            return self._apply_chunk(images, p)
        out = torch.empty(batch, channels, *self.recipe.size, device=images.device)
        for start in range(0, batch, self.chunk_size):
            part = slice(start, start + self.chunk_size)
            out[part] = self._apply_chunk(images[part], _select(p, part))
        return out

    def _apply_chunk(self, images: Tensor, p: SimCLRParams) -> Tensor:
        r = self.recipe
        on = tuple(j is not None for j in r.jitter)
        order, bounds, hue_at = None, None, None
        if on[3] and not cpu_path(images):  # branch-free: hue where due, at each position
            hue_at = torch.where(p.jitter, (p.order == 3).to(torch.uint8).argmax(dim=1), 4)
        elif on[3]:  # hue on contiguous slices: sort the samples by the position of their hue
            hue_at = torch.where(p.jitter, (p.order == 3).to(torch.uint8).argmax(dim=1), 4)
            order = hue_at.argsort(stable=True)
            bounds = [0, *accumulate(torch.bincount(hue_at, minlength=5).tolist())]
            images, p = images[order], _select(p, order)
        x = images.to(torch.float32)
        if not images.is_floating_point():
            x = x.mul_(1.0 / torch.iinfo(images.dtype).max)
        x = resized_crop(x, p.top, p.left, p.height, p.width, r.size, p.flip)
        if p.angle is not None:
            x = rotate(x, p.angle)
        for position in range(len(JITTER_OPS)):
            if on[0] or on[1] or on[2]:
                x = _jitter_step(x, torch.where(p.jitter, p.order[:, position], -1), p, on)
            if bounds is not None and bounds[position + 1] > bounds[position]:
                part = slice(bounds[position], bounds[position + 1])
                x[part] = adjust_hue(x[part], p.hue[part])
            elif hue_at is not None:
                x = torch.where((hue_at == position).view(-1, 1, 1, 1), adjust_hue(x, p.hue), x)
        if x.shape[1] == 3 and r.gray_prob > 0:
            gray, w = _luma(x), _per_sample(p.gray, x)
            x = x.mul_(1.0 - w).addcmul_(gray, w)
        if r.blur_prob > 0:
            kernels = []
            for k in r.kernel_size:
                delta = torch.zeros(k, dtype=x.dtype, device=x.device)
                delta[k // 2] = 1.0
                sigma = p.sigma.to(x.device, x.dtype)
                kernels.append(torch.where(p.blur.view(-1, 1), _gaussian_kernels(k, sigma), delta))
            x = _separable_blur(x, *kernels)
        if r.mean is not None and r.std is not None:
            mean = torch.tensor(r.mean, dtype=x.dtype, device=x.device).view(1, -1, 1, 1)
            std = torch.tensor(r.std, dtype=x.dtype, device=x.device).view(1, -1, 1, 1)
            x = x.sub_(mean).div_(std)
        return x if order is None else torch.empty_like(x).index_copy_(0, order, x)

    def __call__(self, images: Tensor, generator: torch.Generator | None = None) -> list[Tensor]:
        """The views of a batch ``(B, C, H, W)`` (or of one image ``(C, H, W)``)."""
        if images.ndim == 3:
            return [v[0] for v in self(images.unsqueeze(0), generator)]
        if images.ndim != 4:
            raise ValueError(f"expected (B, C, H, W) or (C, H, W), got shape {tuple(images.shape)}")
        B, _, H, W = images.shape
        if not cpu_path(images):  # every view in one pass: the same draws, half the kernels
            draws, angles = self._draws(B, generator, images.device)
            V = draws.shape[1]
            joint = self._params(
                draws.transpose(0, 1).reshape(V * B, -1),
                None if angles is None else angles.t().reshape(V * B),
                H,
                W,
            )
            return list(self.apply(images.repeat(V, 1, 1, 1), joint).split(B))
        params = self.sample_params(B, H, W, generator, device=images.device)
        return [self.apply(images, p) for p in params]
