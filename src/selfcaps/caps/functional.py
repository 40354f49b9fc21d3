"""Element-wise capsule maps: the safe norm, ``squash`` and its inverse ``unsquash``.

Every capsule tensor in selfcaps keeps the capsule's vector in one dimension
(``dim``, the last one by default). The functions here never turn a NaN into a
number: a NaN anywhere in a capsule makes that capsule's output NaN.

Float16 inputs are computed in float32 and returned in float16: the epsilons under the square
roots (1e-12, 1e-20) are below the smallest float16 number, so in float16 they would vanish and
the zero vector would give ``0 / 0``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import Tensor

__all__ = ["caps_length", "safe_norm", "squash", "squashed_length", "unit_vector", "unsquash"]

SQUASH_EPS = 1e-12
UNSQUASH_EPS = 1e-20


def float16_in_float32(fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """``fn`` with a float16 first argument computed in float32, its result cast back."""

    @functools.wraps(fn)
    def wrapper(x: Tensor, *args: object, **kwargs: object) -> Tensor:
        if x.dtype == torch.float16:
            return fn(x.float(), *args, **kwargs).to(torch.float16)
        return fn(x, *args, **kwargs)

    return wrapper


@float16_in_float32
def safe_norm(x: Tensor, dim: int = -1, eps: float = SQUASH_EPS, keepdim: bool = False) -> Tensor:
    """Euclidean norm ``sqrt(sum(x^2) + eps)`` with a finite gradient at the zero vector.

    Computed as ``k * sqrt(sum((x/k)^2) + eps/k^2)`` with the detached scale
    ``k = max(1, max|x_i|)``, which is the same number but never overflows.

    Args:
        x: Input tensor.
        dim: Dimension holding the vector.
        eps: Added under the square root; bounds the gradient at zero by ``1/sqrt(eps)``.
        keepdim: Keep the reduced dimension.

    Returns:
        The norms, with ``dim`` removed unless ``keepdim``.

    Examples:
        >>> safe_norm(torch.tensor([3.0, 4.0]), eps=0.0)
        tensor(5.)
    """
    k = _overflow_scale(x, dim)
    n = k * torch.sqrt((x / k).pow(2).sum(dim=dim, keepdim=True) + eps * k.pow(-2))
    return n if keepdim else n.squeeze(dim)


def caps_length(x: Tensor, dim: int = -1) -> Tensor:
    """Capsule lengths ``|v|``: the probability that each capsule's entity is present.

    Args:
        x: Capsule tensor.
        dim: Dimension holding the capsule vector.

    Returns:
        The lengths, with ``dim`` removed.
    """
    return safe_norm(x, dim=dim)


@float16_in_float32
def squashed_length(v: Tensor, dim: int = -1, eps: float = SQUASH_EPS) -> Tensor:
    """:func:`caps_length` of squashed capsules, without the overflow rescaling.

    A :func:`squash` output has length below 1 (up to rounding), so no entry exceeds 1 in
    magnitude, :func:`safe_norm`'s scale ``max(1, max|v_i|)`` is 1, and ``sqrt(|v|^2 + eps)``
    is the same number, in 4 ops instead of 11 (and fewer in the backward): what an
    accelerator, which launches a kernel per op, is spared. Vectors with larger entries need
    :func:`caps_length`.

    Args:
        v: Squashed capsules.
        dim: Dimension holding the capsule vector.
        eps: Safe-norm epsilon.

    Returns:
        The lengths, with ``dim`` removed.

    Examples:
        >>> squashed_length(torch.tensor([[0.6, 0.8], [0.0, 0.0]]), eps=0.0)
        tensor([1., 0.])
    """
    return torch.sqrt((v * v).sum(dim=dim) + eps)


@float16_in_float32
def unit_vector(x: Tensor, dim: int = -1, eps: float = SQUASH_EPS) -> Tensor:
    """``x / safe_norm(x)``: the direction of each vector (zero stays zero, with a finite gradient).

    Args:
        x: Input tensor.
        dim: Dimension holding the vector.
        eps: Safe-norm epsilon.

    Returns:
        Unit vectors (or zero), same shape as ``x``.
    """
    return x / safe_norm(x, dim=dim, eps=eps, keepdim=True)


def _overflow_scale(x: Tensor, dim: int) -> Tensor:
    """A detached per-vector scale ``max(1, max_i |x_i|)`` that keeps ``sum(x^2)`` finite.

    Dividing by it before squaring lets the maps below accept any finite input
    (in float32, ``x^2`` overflows above 1.8e19). It is 1 for every vector whose
    entries are at most 1 in magnitude, where the formulas reduce exactly to the
    textbook ones, and it is detached because the maps are scale-invariant in
    the quantities it divides.
    """
    return x.detach().abs().amax(dim=dim, keepdim=True).clamp_min(1.0)


@float16_in_float32
def squash(s: Tensor, dim: int = -1, eps: float = SQUASH_EPS) -> Tensor:
    r"""Squash non-linearity of Sabour et al. 2017, eq. (1).

    .. math::
        v = \frac{|s|^2}{1 + |s|^2} \frac{s}{|s|}

    The norm is the safe norm ``sqrt(|s|^2 + eps)``, so the zero vector maps to
    zero with a zero (finite) gradient. Output lengths lie in ``[0, 1)`` (they
    round to 1 in float32 above about ``|s| = 4096``). Inputs of any finite
    magnitude are accepted: vectors with entries above 1 are rescaled internally
    before squaring so that ``|s|^2`` never overflows.

    Args:
        s: Capsule pre-activations (total inputs).
        dim: Dimension holding the capsule vector.
        eps: Safe-norm epsilon.

    Returns:
        Squashed capsules, same shape as ``s``.

    Examples:
        >>> v = squash(torch.tensor([[3.0, 4.0], [0.0, 0.0]]))
        >>> v.norm(dim=-1)
        tensor([0.9615, 0.0000])
    """
    k = _overflow_scale(s, dim)
    t = s / k
    n2 = t.pow(2).sum(dim=dim, keepdim=True)  # |s|^2 / k^2
    inv_k2 = k.pow(-2)
    # |s|^2/(1+|s|^2) / sqrt(|s|^2+eps) * s, written in t = s/k:
    return t * (n2 / (inv_k2 + n2)) / torch.sqrt(n2 + eps * inv_k2)


@float16_in_float32
def unsquash(v: Tensor, dim: int = -1, eps: float = UNSQUASH_EPS) -> Tensor:
    r"""Inverse of :func:`squash` (Hauser, products of expert capsules, eq. 6).

    With :math:`r = |v|`, :math:`|s| = \sqrt{r / (1 - r)}`, hence

    .. math::
        s = \frac{v}{\sqrt{r (1 - r)}}

    ``eps`` is added under both square roots; it is much smaller than
    :data:`SQUASH_EPS` because squash maps ``|s|`` to ``|v| ~ |s|^2`` near zero:
    ``unsquash(squash(s)) == s`` to 1e-8 relative for ``|s| >= 1e-3`` in float64.
    In float32 the round trip is limited by the resolution of ``1 - |v|`` (about
    6e-8), i.e. it degrades above ``|s| ~ 30``: squash saturates, and no inverse
    can recover what rounding removed. Vectors of length >= 1 (not squashed
    capsules) map to large finite vectors ``v / sqrt(eps)`` instead of inf.

    Args:
        v: Squashed capsules (lengths in ``[0, 1)``).
        dim: Dimension holding the capsule vector.
        eps: Safe-norm epsilon.

    Returns:
        Total inputs ``s`` with ``squash(s) == v``.

    Examples:
        >>> s = torch.tensor([0.5, -2.0, 1.0], dtype=torch.float64)
        >>> torch.allclose(unsquash(squash(s)), s)
        True
    """
    r = torch.sqrt(v.pow(2).sum(dim=dim, keepdim=True) + eps)
    return v / torch.sqrt((r * (1.0 - r)).clamp_min(0.0) + eps)
