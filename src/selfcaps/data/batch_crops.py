"""Random crops drawn per image, applied to whole uint8 batches on the device (MCAE's augmentation).

MCAE's training transform (paper section 4.2) is one random crop and a conversion:
``RandomResizedCrop(size, scale=(0.8, 1))`` (bilinear, antialiased) or, for smallNORB,
``RandomCrop(size)``, then ``ToDtype(float32, scale=True)`` and ``Normalize`` or
:class:`~selfcaps.data.transforms.PerImageStandardize`. :class:`BatchCropTransform` wraps
that ``v2.Compose`` and runs it two ways:

* **Per image** (``transform(image)``): the ``Compose`` itself, unchanged. This is the
  CPU path: :class:`~selfcaps.data.datamodule.SeededTransformDataset` calls it under the
  generator seeded by ``(seed, epoch, index)``, and every CPU run is what it was.
* **Per batch, on the device** (``transform((images, params))``), when the training runs on
  an accelerator (:attr:`batches_on_accelerator`; the data module decides,
  :meth:`~selfcaps.data.datamodule.SelfcapsDataModule.batched_train_transform`). The loader
  workers only draw each image's crop box, :meth:`item_params`, under the same per-image
  generator: it calls the crop step's own ``make_params``, which is the only draw the
  ``Compose`` makes, so an image gets exactly the box the per-image path gives it (same
  generator, same order of draws). The loader then collates uint8 images and ``(B, 4)``
  boxes, and :meth:`apply` crops, resamples, converts and normalises the batch on its
  device in a fixed number of ops, with no host read.

Resampling: the per-image path resizes the uint8 crop with torch's native uint8 kernel
(``antialias=True``, on CPUs with AVX2 or AVX-512 and on ARM64, as torchvision chooses):
the triangle filter's weights of each output pixel, normalised, become int16 fixed-point
numbers with ``p`` fraction bits (the most that keep the largest weight below ``2^15``);
the rows are resampled first, rounded half up to uint8, then the columns, rounded again.
:func:`uint8_resized_crop` does exactly that for a batch, with the weights as matrices
(:func:`~selfcaps.data.batch_transforms._aa_weights`, restricted to each crop box) and the
integer sums in float64, where they are exact in any order; so the images equal the
per-image path's bit for bit (the tests check it). Where torchvision resizes in float
instead (other CPUs) it rounds once, half to even, and pixels near a half-integer differ
by one grey level. ``RandomCrop`` is an exact gather; per-image standardisation reduces
over a batch's images in another order, so it agrees to float rounding (~1e-6).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torchvision.transforms import v2

from selfcaps.data.affine import gather_windows
from selfcaps.data.batch_transforms import _aa_weights, _is_bilinear
from selfcaps.data.transforms import PerImageStandardize

__all__ = ["BatchCropTransform", "on_device_crops", "uint8_resized_crop"]

_UINT8_MAX = 255
#: Bits of torch's int16 resampling weights: at most 22, and the largest weight below 2^15.
_MAX_PRECISION, _INT16_LIMIT = 22, 2**15


def _fixed_point(weights: Tensor) -> tuple[Tensor, Tensor]:
    """Each image's resampling matrix as torch's uint8 kernel quantises it.

    Args:
        weights: ``(B, out, in)`` normalised float64 weights of one pass.

    Returns:
        ``(round(weights * 2^p), 2^p)``, with per-image ``p`` ``(B, 1, 1)``: the number of
        ``p' = 0, 1, ...`` (at most 22) for which ``int(0.5 + max weight * 2^(p' + 1))``
        stays below ``2^15`` (weights are non-negative: ``v + 0.5`` truncated is a rounding).
    """
    largest = weights.amax(dim=(1, 2), keepdim=True)
    bits = torch.arange(_MAX_PRECISION, dtype=weights.dtype, device=weights.device)
    below = torch.floor(largest * torch.exp2(bits + 1) + 0.5) < _INT16_LIMIT  # (B, 1, 22)
    scale = torch.exp2(below.sum(dim=2, keepdim=True).to(weights.dtype))
    return torch.floor(weights * scale + 0.5), scale


def _shift(x: Tensor, scale: Tensor) -> Tensor:
    """``(acc + 2^(p-1)) >> p`` clamped to uint8: the kernel's rounding of integer sums ``x``."""
    scale = scale.unsqueeze(1)
    return torch.floor((x + scale / 2) / scale).clamp_(0, _UINT8_MAX)


def uint8_resized_crop(
    images: Tensor, top: Tensor, left: Tensor, height: Tensor, width: Tensor, size: tuple[int, int]
) -> Tensor:
    """Per-image ``F.resized_crop(..., antialias=True)`` of uint8 images, as torch's CPU kernel.

    Module docstring: int16 fixed-point weights, rows then columns, each pass rounded half
    up to ``[0, 255]``. A pass whose crop side equals the output side has weight 1 on one
    pixel and returns it unchanged, as the kernel (or torchvision's early return) does.

    Args:
        images: uint8 ``(B, C, H, W)``.
        top: ``(B,)`` crop rows.
        left: ``(B,)`` crop columns.
        height: ``(B,)`` crop heights.
        width: ``(B,)`` crop widths.
        size: Output ``(height, width)``.

    Returns:
        Integer-valued float64 ``(B, C, *size)``.

    Examples:
        >>> x = torch.tensor([[[[0, 255]]]], dtype=torch.uint8)
        >>> one, zero = torch.ones(1, dtype=torch.long), torch.zeros(1, dtype=torch.long)
        >>> uint8_resized_crop(x, zero, zero, one, 2 * one, (1, 4)).flatten().tolist()
        [0.0, 64.0, 191.0, 255.0]
    """
    B, _, H, W = images.shape
    f64 = torch.float64
    if (H, size[0]) == (W, size[1]):  # square: both passes' weights in one go (half the ops)
        both = _aa_weights(torch.cat([top, left]), torch.cat([height, width]), H, size[0], f64)
        (wy, wx), (sy, sx) = (t.split(B) for t in _fixed_point(both))
    else:
        wy, sy = _fixed_point(_aa_weights(top, height, H, size[0], f64))
        wx, sx = _fixed_point(_aa_weights(left, width, W, size[1], f64))
    x = _shift(images.to(f64) @ wx.transpose(1, 2).unsqueeze(1), sx)  # (B, C, H, out_w)
    return _shift(wy.unsqueeze(1) @ x, sy)


def _crop_step(pipeline: v2.Compose) -> v2.Transform:
    """The pipeline's crop, checked to be the only random step and one :meth:`apply` reproduces.

    Raises:
        TypeError: A step :class:`BatchCropTransform` cannot apply to a batch.
    """
    steps = list(pipeline.transforms)
    crop = steps[0] if steps else None
    if isinstance(crop, v2.RandomResizedCrop):
        if not (_is_bilinear(crop.interpolation) and crop.antialias):
            raise TypeError(f"only bilinear antialiased resized crops: {crop!r}")
    elif isinstance(crop, v2.RandomCrop):
        if crop.padding is not None or crop.pad_if_needed:
            raise TypeError(f"only crops without padding: {crop!r}")
    else:
        raise TypeError(f"the pipeline does not start with a random crop: {pipeline!r}")
    to_float = steps[1] if len(steps) > 1 else None
    if not (
        isinstance(to_float, v2.ToDtype) and to_float.dtype == torch.float32 and to_float.scale
    ):
        raise TypeError(f"the crop is not followed by ToDtype(float32, scale=True): {pipeline!r}")
    for step in steps[2:]:
        if not isinstance(step, v2.Normalize | PerImageStandardize):
            raise TypeError(f"BatchCropTransform cannot apply the step {step!r} to a batch")
    return crop


class BatchCropTransform:
    """A random-crop pipeline run per image on a CPU, per batch on an accelerator (module doc).

    Args:
        pipeline: ``v2.Compose([crop, ToDtype(float32, scale=True), *normalisation])`` with
            ``crop`` a bilinear antialiased ``RandomResizedCrop`` or an unpadded
            ``RandomCrop``, and ``normalisation`` ``Normalize`` and/or
            :class:`~selfcaps.data.transforms.PerImageStandardize` steps.

    Raises:
        TypeError: Another pipeline (:func:`on_device_crops` leaves such a one as it is).

    Examples:
        >>> crop = v2.RandomResizedCrop(8, scale=(0.8, 1.0), antialias=True)
        >>> t = BatchCropTransform(v2.Compose([crop, v2.ToDtype(torch.float32, scale=True)]))
        >>> img = torch.randint(0, 256, (1, 8, 8), dtype=torch.uint8)
        >>> _ = torch.manual_seed(0)
        >>> box = t.item_params(img)
        >>> _ = torch.manual_seed(0)
        >>> torch.equal(t((img[None], box[None]))[0], t(img))
        True
    """

    #: The data module applies :meth:`apply` to whole batches on an accelerator.
    batches_on_accelerator: bool = True

    def __init__(self, pipeline: v2.Compose) -> None:
        self.crop = _crop_step(pipeline)
        self.pipeline = pipeline
        self.size = (int(self.crop.size[0]), int(self.crop.size[-1]))

    def item_params(self, image: Tensor) -> Tensor:
        """The crop box ``[top, left, height, width]`` (int64) the per-image path draws for it.

        The crop step's own ``make_params``, from the global CPU generator: the draws, and
        their order, of ``pipeline(image)``, which makes no other random draw.
        """
        p = self.crop.make_params([image])
        return torch.tensor([p["top"], p["left"], p["height"], p["width"]], dtype=torch.int64)

    def apply(self, images: Tensor, params: Tensor) -> Tensor:
        """The pipeline on a uint8 batch ``(B, C, H, W)`` with its boxes ``(B, 4)``, on its device.

        Returns:
            Float ``(B, C, *size)``: every image as ``pipeline`` makes it from that box
            (module docstring).
        """
        box = params.to(images.device)
        top, left, height, width = box.unbind(1)
        if isinstance(self.crop, v2.RandomResizedCrop):
            x = uint8_resized_crop(images, top, left, height, width, self.size).to(torch.float32)
        else:
            x = gather_windows(images, top, left, self.size).to(torch.float32)
        x = x.mul_(1.0 / _UINT8_MAX)  # as ToDtype(float32, scale=True) computes it
        for step in self.pipeline.transforms[2:]:
            if isinstance(step, v2.Normalize):
                mean = torch.as_tensor(step.mean, dtype=x.dtype, device=x.device)
                std = torch.as_tensor(step.std, dtype=x.dtype, device=x.device)
                x = x.sub_(mean.view(1, -1, 1, 1)).div_(std.view(1, -1, 1, 1))
            else:  # PerImageStandardize takes a batch image by image
                x = step(x)
        return x

    def __call__(self, x: Any, generator: torch.Generator | None = None) -> Tensor:
        """``pipeline(x)`` for one image; :meth:`apply` for a collated ``(images, boxes)`` batch.

        ``generator`` (passed by the training engine) is not used: the boxes came drawn.
        """
        if isinstance(x, list | tuple):
            images, params = x
            return self.apply(images, params)
        return self.pipeline(x)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.pipeline!r})"


def on_device_crops(pipeline: v2.Compose) -> v2.Compose | BatchCropTransform:
    """``pipeline`` as a :class:`BatchCropTransform` when it is one; else ``pipeline`` itself.

    Examples:
        >>> to_float = v2.ToDtype(torch.float32, scale=True)
        >>> type(on_device_crops(v2.Compose([v2.RandomCrop(4), to_float]))).__name__
        'BatchCropTransform'
        >>> type(on_device_crops(v2.Compose([v2.RandomCrop(4), v2.ColorJitter(0.4)]))).__name__
        'Compose'
    """
    try:
        return BatchCropTransform(pipeline)
    except TypeError:
        return pipeline
