"""Augmentations for self-supervised training and deterministic evaluation transforms.

All transforms take uint8 ``(C, H, W)`` tensors (what selfcaps datasets return)
and are built from ``torchvision.transforms.v2``. Following lightly, a
multi-view transform returns a **list** of views.

Single-channel data (``channels=1``: MNIST, Fashion-MNIST, affNIST, smallNORB)
gets a different SimCLR recipe by default, because parts of the colour recipe
are meaningless or harmful there:

* no saturation/hue jitter and no random grayscale (there is no colour);
* no horizontal flip: a mirrored digit is not a digit (and mirrored 2/5, 6/9-like
  shapes become other classes' look-alikes), so flip-invariance is the wrong prior;
* crops cover 50-100% of the image (``min_scale=0.5``) instead of 8-100%: an 8%
  crop of a 28x28 digit is about 8x8 pixels of stroke, which two views of the
  same digit rarely share, so the contrastive task stops being about the digit.

Brightness and contrast jitter (0.4 each, with ``cj_prob``) are kept.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch
from torch import Tensor
from torchvision.transforms import v2

__all__ = [
    "BatchEvalTransform",
    "DatasetTransforms",
    "EvalTransform",
    "MultiViewTransform",
    "Normalization",
    "PerImageStandardize",
    "SimCLRTransform",
    "default_transforms",
]

#: ``(mean, std)`` per channel, in ``[0, 1]`` units.
Normalization = tuple[Sequence[float], Sequence[float]]


def _to_float(normalize: Normalization | None) -> list[v2.Transform]:
    steps: list[v2.Transform] = [v2.ToDtype(torch.float32, scale=True)]
    if normalize is not None:
        steps.append(v2.Normalize(list(normalize[0]), list(normalize[1])))
    return steps


class MultiViewTransform:
    """Apply several transforms to one image and return the list of results (lightly's convention).

    Args:
        transforms: One transform per view.

    Examples:
        >>> views = MultiViewTransform([lambda x: x + 1, lambda x: x * 2])(torch.tensor(3))
        >>> [int(v) for v in views]
        [4, 6]
    """

    def __init__(self, transforms: Sequence[Callable[[Tensor], Any]]) -> None:
        self.transforms = list(transforms)

    def __call__(self, img: Tensor) -> list[Any]:
        """The views of ``img``."""
        return [t(img) for t in self.transforms]

    def __repr__(self) -> str:
        inner = ",\n".join(f"  {t!r}" for t in self.transforms)
        return f"{type(self).__name__}([\n{inner}\n])"


class SimCLRTransform(MultiViewTransform):
    """Two independently augmented views per image (SimCLR, Chen et al. 2020).

    Each view: ``RandomResizedCrop(input_size, scale=(min_scale, 1))``,
    ``RandomHorizontalFlip(hf_prob)``, optional ``RandomRotation(degrees)``,
    ``RandomApply(ColorJitter(...), cj_prob)``,
    ``RandomGrayscale(gray_prob)``, optional ``GaussianBlur`` (``blur_prob``),
    ``ToDtype(float32, scale=True)``, optional ``Normalize``. Colour-jitter
    arguments follow lightly: each strength is ``cj_strength * cj_<x>`` (the
    defaults give ``ColorJitter(0.4, 0.4, 0.4, 0.1)``, SimCLR's CIFAR setting).

    Arguments left at ``None`` take the recipe of ``channels`` (module docstring):
    ``min_scale`` 0.08 / 0.5, ``hf_prob`` 0.5 / 0.0, ``gray_prob`` 0.2 / 0.0 for
    3 / 1 channels; with 1 channel saturation and hue jitter are off.

    Args:
        input_size: Output side length.
        cj_prob: Probability of colour jitter.
        cj_strength: Scales all jitter strengths.
        cj_bright: Brightness jitter (times ``cj_strength``).
        cj_contrast: Contrast jitter (times ``cj_strength``).
        cj_sat: Saturation jitter (times ``cj_strength``; 3 channels only).
        cj_hue: Hue jitter (times ``cj_strength``; 3 channels only).
        min_scale: Smallest crop area, as a fraction of the image.
        gray_prob: Probability of converting to grayscale (3 channels only).
        blur_prob: Probability of Gaussian blur (kernel about 10% of ``input_size``).
        sigmas: Range of the blur's standard deviation.
        hf_prob: Probability of a horizontal flip.
        degrees: Rotate every view by an angle drawn uniformly from ``[-degrees, degrees]``
            (``RandomRotation``, bilinear, black corners) after the crop and flip; 0: no
            rotation (SimCLR's recipe has none; an option for digits, whose slant varies).
        normalize: ``(mean, std)``, or ``None`` for no normalisation.
        channels: 3 (colour) or 1 (grayscale).
        n_views: Number of views.

    Examples:
        >>> t = SimCLRTransform(input_size=28, channels=1, normalize=((0.1307,), (0.3081,)))
        >>> a, b = t(torch.randint(0, 256, (1, 28, 28), dtype=torch.uint8))
        >>> a.shape, a.dtype
        (torch.Size([1, 28, 28]), torch.float32)
    """

    def __init__(
        self,
        input_size: int = 32,
        cj_prob: float = 0.8,
        cj_strength: float = 0.5,
        cj_bright: float = 0.8,
        cj_contrast: float = 0.8,
        cj_sat: float = 0.8,
        cj_hue: float = 0.2,
        min_scale: float | None = None,
        gray_prob: float | None = None,
        blur_prob: float = 0.0,
        sigmas: tuple[float, float] = (0.1, 2.0),
        hf_prob: float | None = None,
        normalize: Normalization | None = None,
        channels: int = 3,
        n_views: int = 2,
        degrees: float = 0.0,
    ) -> None:
        if channels not in (1, 3):
            raise ValueError(f"channels must be 1 or 3, got {channels}")
        if not 0.0 <= degrees <= 180.0:
            raise ValueError(f"degrees: expected an angle in [0, 180], got {degrees}")
        colour = channels == 3
        min_scale = min_scale if min_scale is not None else (0.08 if colour else 0.5)
        hf_prob = hf_prob if hf_prob is not None else (0.5 if colour else 0.0)
        gray_prob = gray_prob if gray_prob is not None else (0.2 if colour else 0.0)
        jitter = v2.ColorJitter(
            brightness=cj_strength * cj_bright,
            contrast=cj_strength * cj_contrast,
            saturation=cj_strength * cj_sat if colour else 0.0,
            hue=cj_strength * cj_hue if colour else 0.0,
        )
        steps: list[v2.Transform] = [
            v2.RandomResizedCrop(input_size, scale=(min_scale, 1.0), antialias=True)
        ]
        if hf_prob > 0:
            steps.append(v2.RandomHorizontalFlip(hf_prob))
        if degrees > 0:
            bilinear = v2.InterpolationMode.BILINEAR
            steps.append(v2.RandomRotation(degrees, interpolation=bilinear, fill=0))
        if cj_prob > 0:
            steps.append(v2.RandomApply([jitter], p=cj_prob))
        if colour and gray_prob > 0:
            steps.append(v2.RandomGrayscale(gray_prob))
        if blur_prob > 0:
            kernel = max(3, int(0.1 * input_size) // 2 * 2 + 1)
            steps.append(v2.RandomApply([v2.GaussianBlur(kernel, sigma=sigmas)], p=blur_prob))
        view = v2.Compose(steps + _to_float(normalize))
        super().__init__([view] * n_views)


class EvalTransform:
    """Deterministic evaluation transform: optional resize, to float in ``[0, 1]``, normalise.

    Args:
        mean: Per-channel mean (``None``: no normalisation).
        std: Per-channel standard deviation.
        size: First resize the shorter side to this (antialiased) and centre-crop a
            square; ``None`` keeps the size.

    Examples:
        >>> EvalTransform((0.5,), (0.5,))(torch.full((1, 2, 2), 255, dtype=torch.uint8))
        tensor([[[1., 1.],
                 [1., 1.]]])
    """

    def __init__(
        self,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        size: int | None = None,
    ) -> None:
        if (mean is None) != (std is None):
            raise ValueError("give both mean and std, or neither")
        steps: list[v2.Transform] = (
            [v2.Resize(size, antialias=True), v2.CenterCrop(size)] if size else []
        )
        normalize = None if mean is None or std is None else (mean, std)
        self.transform = v2.Compose(steps + _to_float(normalize))

    def __call__(self, img: Tensor) -> Tensor:
        """The evaluation tensor for ``img``."""
        return self.transform(img)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.transform!r})"


class BatchEvalTransform(EvalTransform):
    """:class:`EvalTransform` applied by the training engine to whole batches, on their device.

    For a method whose training images take no random transform (PoE): the loader then only
    collates uint8 images, and the conversion runs as a couple of kernels on the device. Every
    step is element-wise (resize per image), so a batch gets exactly what image-by-image calls
    give. The generator the engine passes is not used.

    Examples:
        >>> t = BatchEvalTransform()
        >>> x = torch.randint(0, 256, (4, 1, 2, 2), dtype=torch.uint8)
        >>> torch.equal(t(x, None), torch.stack([EvalTransform()(i) for i in x]))
        True
    """

    #: Tells the training engine to apply this transform to whole batches (on the device).
    is_batch_transform: bool = True

    def __call__(self, img: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """The evaluation tensors of a batch ``(B, C, H, W)`` (or of one image)."""
        return self.transform(img)


class DatasetTransforms(NamedTuple):
    """The default training (two views) and evaluation transforms of a dataset."""

    train: SimCLRTransform
    eval: EvalTransform


def default_transforms(dataset_name: str, input_size: int | None = None) -> DatasetTransforms:
    """SimCLR training views and the evaluation transform for a registered dataset.

    Uses the dataset's channels and normalisation from
    :func:`~selfcaps.data.registry.dataset_info`.

    Args:
        dataset_name: A name accepted by :func:`~selfcaps.data.registry.get_dataset`.
        input_size: Side length the model sees; default: the dataset's image size
            (required for ``imagefolder:`` datasets, whose size is not known in advance).

    Returns:
        ``(train, eval)``.

    Examples:
        >>> t = default_transforms("mnist5k")
        >>> digit = torch.zeros(1, 28, 28, dtype=torch.uint8)
        >>> len(t.train(digit)), t.eval(digit).shape
        (2, torch.Size([1, 28, 28]))
    """
    from selfcaps.data.registry import dataset_info

    info = dataset_info(dataset_name)
    native = info.image_size[0] if info.image_size else None
    size = input_size or native
    if size is None:
        raise ValueError(
            f"the image size of {dataset_name!r} is not known in advance: pass input_size"
        )
    normalize = (info.mean, info.std)
    train = SimCLRTransform(input_size=size, normalize=normalize, channels=info.channels)
    evaluate = EvalTransform(info.mean, info.std, size=None if size == native else size)
    return DatasetTransforms(train, evaluate)


class PerImageStandardize:
    """Standardise each image to zero mean and unit variance (smallNORB, paper section 4.2).

    As ``tf.image.per_image_standardization``: the standard deviation is floored
    at ``1 / sqrt(pixels)`` so that constant images do not divide by zero. A batch
    ``(B, C, H, W)`` is standardised image by image (the batch crops of
    :mod:`selfcaps.data.batch_crops`).

    Examples:
        >>> x = PerImageStandardize()(torch.arange(4.0).view(1, 2, 2))
        >>> round(float(x.mean()), 6), round(float(x.std(unbiased=False)), 6)
        (0.0, 1.0)
    """

    def __call__(self, x: Tensor) -> Tensor:
        """The standardised image ``(C, H, W)``, or every image of a batch ``(B, C, H, W)``."""
        if x.dim() == 4:
            dims = (1, 2, 3)
            std = x.std(dim=dims, unbiased=False, keepdim=True)
            std = std.clamp_min(1.0 / math.sqrt(x[0].numel()))
            return (x - x.mean(dim=dims, keepdim=True)) / std
        std = x.std(unbiased=False).clamp_min(1.0 / math.sqrt(x.numel()))
        return (x - x.mean()) / std

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
