r"""The squash of Sabour et al. (2017, eq. 1) with hand-written backwards, for the accelerator path.

On an accelerator every operator is a kernel launch, and autograd's backward of the squash
runs about two dozen of them. EncapNet's ``paper`` network squashes 36 times a step after a
BatchNorm and a ReLU, and once more for its class capsules, so the squash and its gradient are
written out here by hand, in as few operators as the arithmetic allows:

* :func:`squash_capsules`: the squash alone, overflow-safe for any finite input (it rescales
  each vector by its largest entry first): 12 ops forward, 9 backward;
* :func:`relu_squash_capsules`: ``squash(ReLU(z))`` of BatchNorm outputs, without the
  rescaling (the float types' range makes it unnecessary, below), the ReLU's mask applied
  inside the squash's backward, and one or more inputs laid side by side: 11 ops forward (one
  more to lay two inputs side by side), 6 backward, and each input's gradient written
  contiguous (no copy before the BatchNorm's backward).

Both compute float16 inputs in float32 (and return float16): there the safe norm's ``eps``
(1e-12) is below the smallest float16 number and would vanish, turning every zero capsule
(which a ReLU makes often) into ``0 / 0``.

With ``n = |s|^2``, ``e = n + eps``, ``r = e^{-1/2}``, ``d = 1 + n`` and ``q = r / d``, the
squash with the safe norm is ``v = f s`` with ``f = n q = F(n)``,
``F(n) = n / ((1 + n) sqrt(n + eps))``, and its vector-Jacobian product for ``g = dL/dv`` is

.. math::
    \frac{\partial L}{\partial s} = f g + 2 F'(n) (s \cdot g) s, \qquad
    F'(n) = \frac{q}{d} - \frac{f}{2 e}

(from ``F'/F = 1/n - 1/d - 1/(2e)``, and ``r - f = r / d``), which is why ``q`` is kept:
``F'`` then costs two operators.

**Why** :func:`relu_squash_capsules` **need not rescale.** ``n`` overflows when an entry of
``s`` passes ``sqrt(max / D)``: about 1.8e19 / sqrt(D) in float32, bfloat16 and float64
(``max`` >= 3.4e38). A BatchNorm's output is at most ``sqrt(N - 1) |gamma| + |beta|`` in
magnitude (``N`` values a channel: 131,072 at EncapNet's ``paper`` batch and input size), so
it overflows only with ``|gamma|`` above about 1e16; float16 values (at most 65504) are squared
in float32. Should ``n`` overflow anyway, the output is NaN, which the training step's
finiteness check reports.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from selfcaps.caps.functional import SQUASH_EPS, float16_in_float32

__all__ = ["relu_squash_capsules", "squash_capsules"]


class _SquashCapsules(torch.autograd.Function):
    r""":func:`squash_capsules`: the squash, rescaled so that ``|s|^2`` never overflows.

    With the detached scale ``k = max(1, max_i |s_i|)``, ``t = s / k``, ``n = |t|^2``,
    ``c = 1 / k^2``, ``d = n + c``, ``e = n + eps c`` and ``r = e^{-1/2}``, the squash of
    Sabour eq. 1 with the safe norm is ``v = f t`` with ``f = n r / d`` (the rescaled form of
    :func:`~selfcaps.caps.squash`). Its vector-Jacobian product is

    .. math::
        \frac{\partial L}{\partial s} = \frac{1}{k} \Big( f g
            + 2 \big(\tfrac{r - f}{d} - \tfrac{f}{2 e}\big) (t \cdot g)\, t \Big)

    for ``g = dL/dv`` (from ``dF/dq`` of ``F(q) = q / ((1 + q) sqrt(q + eps))``, ``q = |s|^2``;
    ``r^2 = 1 / e``): 9 ops backward, against autograd's two dozen. Once differentiable.
    """

    @staticmethod
    def forward(ctx: Any, s: Tensor, dim: int, eps: float) -> Tensor:
        """Squash ``s`` along ``dim`` (safe-norm ``eps``); keep what the backward needs."""
        k = torch.linalg.vector_norm(s, float("inf"), dim=dim, keepdim=True).clamp_min(1.0)
        t = s / k
        n = (t * t).sum(dim=dim, keepdim=True)
        c = k.pow(-2)
        e = torch.add(n, c, alpha=eps)
        r = torch.rsqrt(e)
        d = n + c
        f = n * r / d
        ctx.dim = dim
        ctx.save_for_backward(t, k, f, r, d, e)
        return t * f

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor, None, None]:
        """``dL/ds`` from ``g = dL/dv`` (the class docstring's formula)."""
        t, k, f, r, d, e = ctx.saved_tensors
        tg = (t * g).sum(dim=ctx.dim, keepdim=True)
        w = torch.addcdiv((r - f) / d, f, e, value=-0.5) * tg
        return torch.addcmul(f * g, w, t, value=2.0) / k, None, None


@float16_in_float32
def squash_capsules(s: Tensor, dim: int = -1, eps: float = SQUASH_EPS) -> Tensor:
    """Sabour eq. 1 with the safe norm, for any finite ``s``, with a hand-written backward.

    The values of :func:`~selfcaps.caps.squash` (up to float rounding) in 12 ops forward and 9
    backward, with no host read.

    Args:
        s: Capsule pre-activations.
        dim: Dimension holding the capsule vector.
        eps: Safe-norm epsilon.

    Examples:
        >>> squash_capsules(torch.tensor([[3.0, 4.0]])).norm(dim=-1)
        tensor([0.9615])
    """
    return _SquashCapsules.apply(s, dim, eps)


class _ReluSquashCapsules(torch.autograd.Function):
    """:func:`relu_squash_capsules` in a wide float type (the module docstring's formulas)."""

    @staticmethod
    def forward(ctx: Any, num_caps: int, eps: float, *parts: Tensor) -> Tensor:
        """``(B, T, len(parts), D, H, W)``: each part's capsules, ReLU'd and squashed over ``D``."""
        B, C, H, W = parts[0].shape
        views = [p.view(B, num_caps, 1, C // num_caps, H, W) for p in parts]
        s = torch.relu(views[0] if len(views) == 1 else torch.cat(views, dim=2))
        n = (s * s).sum(dim=3, keepdim=True)
        e = n + eps
        r = torch.rsqrt(e)
        d = n + 1.0
        q = r / d
        f = n * q
        slope = torch.addcdiv(q / d, f, e, value=-0.5)  # F'(n)
        ctx.save_for_backward(s, f, slope)
        return s * f

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor | None, ...]:
        """``dL/dz`` of every part: ``mask (f g) + 2 F'(n) (s . g) s`` (``s = 0`` where masked)."""
        s, f, slope = ctx.saved_tensors
        B, T, k, D, H, W = s.shape
        fg = torch.ops.aten.threshold_backward(f * g, s, 0)
        coef = slope * (s * g).sum(dim=3, keepdim=True)
        if k == 1:
            return None, None, torch.addcmul(fg, coef, s, value=2.0).view(B, T * D, H, W)
        if torch.compiler.is_compiling():  # the compiler takes no strided out=; it fuses the copies
            grad = torch.addcmul(fg, coef, s, value=2.0)
            return None, None, *(grad[:, :, i].reshape(B, T * D, H, W) for i in range(k))
        # written part-major, so that each part's gradient is contiguous (no copies)
        out = g.new_empty((k, B, T, D, H, W))
        torch.addcmul(fg, coef, s, value=2.0, out=out.permute(1, 2, 0, 3, 4, 5))
        return None, None, *(o.view(B, T * D, H, W) for o in out)


def relu_squash_capsules(parts: Sequence[Tensor], num_caps: int) -> Tensor:
    """``squash(ReLU(z))`` per capsule of BatchNorm outputs, laid side by side per capsule type.

    Each part is a convolution tensor ``(B, T*D, H, W)`` with type-major channels (as
    :func:`~selfcaps.caps.master_aide.squash_channels` takes). It runs without the overflow
    rescaling, the ReLU's mask inside the hand-written backward, float16 in float32 (module
    docstring), with no host read.

    Args:
        parts: One or more tensors of one shape and type (BatchNorm outputs).
        num_caps: Capsule types ``T``.

    Returns:
        ``(B, T, len(parts), D, H, W)``: ``out[:, t, i]`` is part ``i``'s capsule type ``t``.

    Examples:
        >>> z = torch.tensor([3.0, -1.0, 0.0, 4.0]).view(1, 4, 1, 1)
        >>> relu_squash_capsules([z], num_caps=2).flatten()
        tensor([0.9000, 0.0000, 0.0000, 0.9412])
    """
    first = parts[0]
    C = first.shape[1]
    if C % num_caps:
        raise ValueError(f"{C} channels do not split into {num_caps} capsule types")
    if any(p.shape != first.shape or p.dtype != first.dtype for p in parts):
        shapes = [(tuple(p.shape), p.dtype) for p in parts]
        raise ValueError(f"parts must share one shape and dtype, got {shapes}")
    if first.dtype == torch.float16:  # as float16_in_float32, for a list of parts
        out = _ReluSquashCapsules.apply(num_caps, SQUASH_EPS, *(p.float() for p in parts))
        return out.to(first.dtype)
    return _ReluSquashCapsules.apply(num_caps, SQUASH_EPS, *parts)
