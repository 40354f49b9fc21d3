"""Capsule layers as ``nn.Module``s.

Memory order (used by every layer and method in selfcaps):

* A **capsule map** is a tensor ``(B, T, H, W, D)``: ``T`` capsule types at each
  of ``H x W`` positions, each a ``D``-vector. Convolution channels are grouped
  type-major, ``channel = t * D + d``.
* A **capsule sequence** ``(B, N, D)`` is a flattened map in **type-major**
  order: child ``n = t * (H * W) + h * W + w`` (:func:`flatten_caps`).
* Sequences of positions (MCAE) are ``(B, L, T, D)`` with activations
  ``(B, L, T)``: position-major, types inside.
* Conv capsule layers unfold a ``k x k`` neighbourhood into ``T * k * k``
  children ordered type-major, then kernel offset (row-major).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from selfcaps.caps.functional import squash
from selfcaps.caps.fused_routing import bf16_vote_inputs, fused_dense_routing
from selfcaps.caps.routing import Agreement, Normalize, dynamic_routing, self_routing

__all__ = [
    "ConvCaps2d",
    "DenseCaps",
    "PrimaryCaps2d",
    "SelfRouting1d",
    "SelfRouting2d",
    "SelfRoutingDense",
    "child_votes",
    "flatten_caps",
    "route_in_autocast_dtype",
    "unfold_caps",
    "use_fused_routing",
    "votes_in_bf16",
]

Init = Literal["normal", "kaiming", "xavier"]

#: How the dense capsule layers route, read at every call; each context manager below sets one.
_ROUTING = {"fused": True, "autocast_dtype": False, "votes_bf16": False}


@contextlib.contextmanager
def _routing_setting(name: str, enabled: bool) -> Iterator[None]:
    """Set ``_ROUTING[name]`` to ``enabled`` inside the block, and back afterwards."""
    previous, _ROUTING[name] = _ROUTING[name], enabled
    try:
        yield
    finally:
        _ROUTING[name] = previous


@contextlib.contextmanager
def use_fused_routing(enabled: bool) -> Iterator[None]:
    """Switch the capsule layers between the fused and the readable routing implementation.

    :class:`DenseCaps` and :class:`ConvCaps2d` use the fused implementation by
    default and ``dynamic_routing(child_votes(...))`` inside ``use_fused_routing(False)``.

    Both give the same values and gradients; the readable path is what FLOP counters
    and debuggers see op by op.

    Args:
        enabled: Use the fused implementation.
    """
    with _routing_setting("fused", enabled):
        yield


@contextlib.contextmanager
def route_in_autocast_dtype(enabled: bool) -> Iterator[None]:
    """Let the fused dense routing run in autocast's low precision instead of float32.

    By default :class:`DenseCaps` and :class:`ConvCaps2d` route in float32 under autocast
    (``bf16-mixed``): the votes, the routing iterations and their gradients. Inside
    ``route_in_autocast_dtype(True)`` they run in autocast's dtype, which is faster on a CPU
    with native bfloat16 and less exact (``trainer.routing_precision: autocast``). Outside
    autocast it changes nothing.

    Args:
        enabled: Route in autocast's dtype.
    """
    with _routing_setting("autocast_dtype", enabled):
        yield


@contextlib.contextmanager
def votes_in_bf16(enabled: bool) -> Iterator[None]:
    r"""Compute the votes of :class:`DenseCaps` and :class:`ConvCaps2d` from bfloat16 inputs.

    Inside ``votes_in_bf16(True)`` the vote product :math:`\hat u_{j|i} = W_{ij} u_i`
    (Sabour et al. eq. 2), the layers' large GEMM, takes bfloat16 inputs with float32
    accumulation and a float32 result; the routing iterations (softmax, eq. 3; squash, eq. 1;
    agreement) and all gradients stay float32. Off by default, and then nothing changes.

    What is rounded: each element of ``u_i`` and ``W_ij``, to the nearest bfloat16 (8
    significant bits: relative error at most :math:`2^{-8}`). What is not: the products
    (two 8-bit significands multiply exactly in float32's 24), their sum (float32), the
    votes (float32). Per element, with ``K = in_dim`` and :math:`\gamma_K = K 2^{-24}/(1 - K
    2^{-24})`, :math:`|\hat u - W u| \le (2^{-7} + 2^{-16} + \gamma_K (1 + 2^{-8})^2)
    \sum_k |W_k| |u_k|`.
    The gradient is the float32 gradient of the routing at the rounded inputs, passed to
    ``u`` and ``W`` unchanged (straight-through); the gradient GEMMs stay float32.

    Kernels: on CUDA with ``torch.bmm(..., out_dtype=torch.float32)`` (recent torch) the fused
    routing's vote GEMM (forward, and its recomputation in backward) is one bfloat16
    tensor-core GEMM with a float32 output (float32 accumulation);
    ``torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction`` (True by default)
    lets cuBLAS use reduced-precision reductions (e.g. split-K partial sums) in bfloat16
    GEMMs, and ``False`` forbids them; whether it changes a GEMM with a float32 output is for
    a GPU run to show (the CUDA cases of ``tests/test_bf16_votes.py``). Everywhere else (the
    CPU, the readable path, older torch) the same votes are a float32 GEMM of the rounded
    inputs: equal up to the order of summation, and no faster. Torch's own bfloat16 ``bmm`` on
    the CPU also accumulates in float32 but rounds its result to bfloat16 (8 more bits lost),
    which is why it is not used; the CPU has no reduced-precision-reduction switch. With TF32
    allowed, that float32 GEMM loses nothing more: bfloat16 values fit TF32's 10-bit
    significand.

    Not affected: :meth:`DenseCaps.votes`, the self-routing layers, and routing in
    autocast's dtype (:func:`route_in_autocast_dtype`), whose votes are low-precision anyway.
    ``tests/test_bf16_votes.py`` checks all this against float64; ``benchmarks/bf16_votes.py``
    measures the error at CoCa's and SparseCaps' paper shapes.

    Args:
        enabled: Vote products from bfloat16 inputs.

    Examples:
        >>> layer = DenseCaps(32, 8, 4, 16)
        >>> u = torch.randn(2, 32, 8)
        >>> with votes_in_bf16(True):
        ...     v = layer(u)
        >>> v.dtype, bool((v - layer(u)).abs().max() > 0)
        (torch.float32, True)
    """
    with _routing_setting("votes_bf16", enabled):
        yield


def _route_dense(
    x: Tensor,
    weight: Tensor,
    out_caps: int,
    iters: int,
    agreement: Agreement,
    normalize: Normalize = "parents",
    detach_intermediate: bool = False,
) -> tuple[Tensor, Tensor]:
    if _ROUTING["fused"]:
        return fused_dense_routing(
            x,
            weight,
            out_caps,
            iters,
            agreement,
            normalize,
            detach_intermediate,
            float32_under_autocast=not _ROUTING["autocast_dtype"],
            votes_bf16=_ROUTING["votes_bf16"],
        )
    if _ROUTING["votes_bf16"]:
        x, weight = bf16_vote_inputs(x, weight)
    return dynamic_routing(
        child_votes(x, weight, out_caps), iters, agreement, detach_intermediate, normalize
    )


def flatten_caps(x: Tensor) -> Tensor:
    """Flatten a capsule map ``(B, T, H, W, D)`` to a sequence ``(B, T*H*W, D)`` (type-major).

    A 3-D tensor is returned unchanged.

    Args:
        x: Capsule map or capsule sequence.

    Returns:
        The capsule sequence.
    """
    if x.dim() == 3:
        return x
    if x.dim() != 5:
        raise ValueError(
            f"expected a capsule map (B, T, H, W, D) or (B, N, D), got {tuple(x.shape)}"
        )
    return x.reshape(x.shape[0], -1, x.shape[-1])


def child_votes(u: Tensor, weight: Tensor, out_caps: int) -> Tensor:
    r"""Votes :math:`\hat u_{j|i} = W_{ij} u_i` for all children, as one batched GEMM.

    The batch is folded into the GEMM's row dimension: for each child ``i`` the
    ``(B, Din)`` block of inputs is multiplied by ``W_i`` of shape
    ``(Din, M * Dout)``; ``torch.bmm`` does all children in one call. This is
    ``B`` times fewer, ``B`` times larger kernels than a per-sample mat-vec.

    Args:
        u: Child poses ``(B, N, Din)``.
        weight: ``(N, Din, M * Dout)``.
        out_caps: ``M``.

    Returns:
        Votes ``(B, N, M, Dout)`` (a permuted view of an ``(N, B, M, Dout)`` buffer).
    """
    B, N, Din = u.shape
    if weight.shape[0] != N or weight.shape[1] != Din:
        raise ValueError(
            f"expected children (N={weight.shape[0]}, D={weight.shape[1]}), "
            f"got input {tuple(u.shape)}"
        )
    out = torch.bmm(u.transpose(0, 1), weight)  # (N, B, M * Dout)
    return out.view(N, B, out_caps, -1).transpose(0, 1)


def unfold_caps(
    x: Tensor, kernel_size: tuple[int, int], stride: tuple[int, int], padding: tuple[int, int]
) -> tuple[Tensor, int, int]:
    """Unfold ``k x k`` neighbourhoods of a capsule map into children.

    Args:
        x: ``(B, T, H, W, D)`` capsule map, or ``(B, T, H, W)`` activations.
        kernel_size: ``(kh, kw)``.
        stride: ``(sh, sw)``.
        padding: ``(ph, pw)`` zero padding.

    Returns:
        ``(children, Ho, Wo)`` with children ``(B*Ho*Wo, T*kh*kw, D)`` (or
        ``(B*Ho*Wo, T*kh*kw)`` for activations), ordered type-major then
        kernel offset, batch-major then output position in the first dimension.
    """
    has_dim = x.dim() == 5
    if has_dim:
        B, T, H, W, D = x.shape
        flat = x.permute(0, 1, 4, 2, 3).reshape(B, T * D, H, W)
    elif x.dim() == 4:
        B, T, H, W = x.shape
        D = 1
        flat = x
    else:
        raise ValueError(f"expected (B, T, H, W, D) or (B, T, H, W), got {tuple(x.shape)}")
    kh, kw = kernel_size
    Ho = (H + 2 * padding[0] - kh) // stride[0] + 1
    Wo = (W + 2 * padding[1] - kw) // stride[1] + 1
    if Ho < 1 or Wo < 1:
        raise ValueError(
            f"kernel {kernel_size} with padding {padding} does not fit a {H}x{W} capsule map"
        )
    cols = F.unfold(flat, kernel_size, padding=padding, stride=stride)  # (B, T*D*kk, L)
    L = cols.shape[-1]
    cols = cols.view(B, T, D, kh * kw, L).permute(0, 4, 1, 3, 2)  # (B, L, T, kk, D)
    if has_dim:
        return cols.reshape(B * L, T * kh * kw, D), Ho, Wo
    return cols.reshape(B * L, T * kh * kw), Ho, Wo


def _pair(v: int | tuple[int, int]) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))


def _init_weight(weight: Tensor, init: Init, std: float, fan_in: int) -> None:
    if init == "normal":
        nn.init.normal_(weight, 0.0, std)
    elif init == "kaiming":
        nn.init.normal_(weight, 0.0, math.sqrt(2.0 / fan_in))
    elif init == "xavier":
        nn.init.normal_(weight, 0.0, math.sqrt(1.0 / fan_in))
    else:
        raise ValueError(f"init must be one of 'normal', 'kaiming', 'xavier', got {init!r}")


class PrimaryCaps2d(nn.Module):
    """Primary capsules: convolution, reshape to capsule types, squash (Sabour et al. 2017).

    Output is a capsule map ``(B, num_caps, H', W', caps_dim)``; channel
    ``t * caps_dim + d`` of the convolution becomes element ``d`` of type ``t``.

    Args:
        in_channels: Input channels.
        num_caps: Capsule types ``T``.
        caps_dim: Capsule dimension ``D``.
        kernel_size: Convolution kernel.
        stride: Convolution stride.
        padding: Convolution padding.
        bias: Convolution bias (CoCa uses none, followed by BatchNorm).
        batchnorm: BatchNorm2d after the convolution.
        activate: Apply squash (False returns the raw poses).

    Examples:
        >>> caps = PrimaryCaps2d(128, 32, 16, kernel_size=3, padding=1)
        >>> caps(torch.randn(2, 128, 4, 4)).shape
        torch.Size([2, 32, 4, 4, 16])
    """

    def __init__(
        self,
        in_channels: int,
        num_caps: int,
        caps_dim: int,
        kernel_size: int | tuple[int, int],
        stride: int | tuple[int, int] = 1,
        padding: int | tuple[int, int] = 0,
        bias: bool = True,
        batchnorm: bool = False,
        activate: bool = True,
    ) -> None:
        super().__init__()
        self.num_caps, self.caps_dim, self.activate = num_caps, caps_dim, activate
        self.conv = nn.Conv2d(
            in_channels, num_caps * caps_dim, kernel_size, stride=stride, padding=padding, bias=bias
        )
        self.bn = nn.BatchNorm2d(num_caps * caps_dim) if batchnorm else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        """Map ``(B, C, H, W)`` features to a ``(B, T, H', W', D)`` capsule map."""
        y = self.bn(self.conv(x))
        B, _, H, W = y.shape
        caps = y.view(B, self.num_caps, self.caps_dim, H, W).permute(0, 1, 3, 4, 2)
        return squash(caps) if self.activate else caps


class DenseCaps(nn.Module):
    r"""Fully connected capsule layer with per-(child, parent) matrices and dynamic routing.

    Votes :math:`\hat u_{j|i} = W_{ij} u_i` (Sabour et al. eq. 2) are batched
    GEMMs over children (the batch folded into the GEMM rows, never a
    per-sample mat-vec) and the parents come from dynamic routing
    (:func:`~selfcaps.caps.routing.dynamic_routing`); both are computed by the
    fused, cache-blocked :func:`~selfcaps.caps.fused_routing.fused_dense_routing`,
    which gives the same values and gradients in less time and memory. The weight is stored in GEMM
    layout ``(in_caps, in_dim, out_caps * out_dim)``, i.e.
    ``u_hat[b, i, j] = u[b, i] @ W[i, :, j*out_dim:(j+1)*out_dim]``.

    Args:
        in_caps: Children ``N``.
        in_dim: Child dimension.
        out_caps: Parents ``M``.
        out_dim: Parent dimension.
        iters: Routing iterations.
        agreement: ``"dot"`` or ``"cosine"``.
        normalize: Coupling normalisation, ``"parents"`` (Sabour) or ``"children"``.
        detach_intermediate: Stop gradients through all but the last iteration.
        init: ``"normal"`` (``N(0, init_std)``; CoCa uses 0.1), ``"kaiming"`` or ``"xavier"``.
        init_std: Standard deviation for ``init="normal"``.

    Examples:
        >>> layer = DenseCaps(512, 16, 10, 16, iters=3)
        >>> v, c = layer(torch.randn(4, 512, 16), return_coupling=True)
        >>> v.shape, c.shape
        (torch.Size([4, 10, 16]), torch.Size([4, 512, 10]))
    """

    def __init__(
        self,
        in_caps: int,
        in_dim: int,
        out_caps: int,
        out_dim: int,
        iters: int = 3,
        agreement: Agreement = "dot",
        normalize: Normalize = "parents",
        detach_intermediate: bool = False,
        init: Init = "normal",
        init_std: float = 0.1,
    ) -> None:
        super().__init__()
        self.in_caps, self.in_dim, self.out_caps, self.out_dim = in_caps, in_dim, out_caps, out_dim
        self.iters, self.agreement, self.normalize = iters, agreement, normalize
        self.detach_intermediate = detach_intermediate
        self.weight = nn.Parameter(torch.empty(in_caps, in_dim, out_caps * out_dim))
        _init_weight(self.weight, init, init_std, in_dim)

    def votes(self, u: Tensor) -> Tensor:
        """Predictions ``(B, N, M, Dout)`` for child poses ``(B, N, Din)`` or a capsule map."""
        return child_votes(flatten_caps(u), self.weight, self.out_caps)

    def forward(self, u: Tensor, return_coupling: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """Route children ``(B, N, Din)`` (or a capsule map) to parents ``(B, M, Dout)``.

        Args:
            u: Child capsules.
            return_coupling: Also return the final coupling coefficients ``(B, N, M)``.
        """
        v, c = _route_dense(
            flatten_caps(u),
            self.weight,
            self.out_caps,
            self.iters,
            self.agreement,
            self.normalize,
            self.detach_intermediate,
        )
        return (v, c) if return_coupling else v

    def extra_repr(self) -> str:
        """Sizes and routing settings, shown by ``print(model)``."""
        return (
            f"{self.in_caps}x{self.in_dim} -> {self.out_caps}x{self.out_dim}, iters={self.iters}, "
            f"agreement={self.agreement}, normalize={self.normalize}"
        )


class ConvCaps2d(nn.Module):
    """Convolutional capsule layer: dynamic routing over ``k x k`` neighbourhoods.

    Each output position routes the ``in_caps * k * k`` capsules of its input
    neighbourhood (:func:`unfold_caps`) to ``out_caps`` parents; the transform
    matrices are shared across positions.

    Args:
        in_caps: Input capsule types.
        in_dim: Input capsule dimension.
        out_caps: Output capsule types.
        out_dim: Output capsule dimension.
        kernel_size: Neighbourhood size.
        stride: Stride.
        padding: Zero padding (zero capsules vote zero).
        iters: Routing iterations.
        agreement: ``"dot"`` or ``"cosine"``.
        init: Weight initialisation (see :class:`DenseCaps`).
        init_std: Standard deviation for ``init="normal"``.

    Examples:
        >>> layer = ConvCaps2d(8, 8, 4, 16, kernel_size=3, stride=2)
        >>> layer(torch.randn(2, 8, 9, 9, 8)).shape
        torch.Size([2, 4, 4, 4, 16])
    """

    def __init__(
        self,
        in_caps: int,
        in_dim: int,
        out_caps: int,
        out_dim: int,
        kernel_size: int | tuple[int, int] = 3,
        stride: int | tuple[int, int] = 1,
        padding: int | tuple[int, int] = 0,
        iters: int = 3,
        agreement: Agreement = "dot",
        init: Init = "kaiming",
        init_std: float = 0.1,
    ) -> None:
        super().__init__()
        self.kernel_size, self.stride, self.padding = (
            _pair(kernel_size),
            _pair(stride),
            _pair(padding),
        )
        self.out_caps, self.out_dim, self.iters, self.agreement = (
            out_caps,
            out_dim,
            iters,
            agreement,
        )
        kk = self.kernel_size[0] * self.kernel_size[1]
        self.weight = nn.Parameter(torch.empty(in_caps * kk, in_dim, out_caps * out_dim))
        _init_weight(self.weight, init, init_std, in_dim)

    def forward(self, x: Tensor) -> Tensor:
        """Map a ``(B, T, H, W, D)`` capsule map to ``(B, out_caps, Ho, Wo, out_dim)``."""
        B = x.shape[0]
        children, Ho, Wo = unfold_caps(x, self.kernel_size, self.stride, self.padding)
        v, _ = _route_dense(children, self.weight, self.out_caps, self.iters, self.agreement)
        return v.view(B, Ho, Wo, self.out_caps, self.out_dim).permute(0, 3, 1, 2, 4)


class _SelfRoutingCore(nn.Module):
    """Parameters and routing shared by the self-routing layers (Hahn et al. 2019).

    ``children`` children of ``in_dim`` route to ``out_caps`` parents of
    ``out_dim``: pose matrices :math:`W^{pose}_{ij}` (Kaiming-normal) and
    routing matrices :math:`W^{route}_i` with biases, both routing parameters
    zero-initialised so that routing starts uniform.
    """

    def __init__(self, children: int, in_dim: int, out_caps: int, out_dim: int, eps: float) -> None:
        super().__init__()
        self.out_caps, self.out_dim, self.eps = out_caps, out_dim, eps
        self.weight_pose = nn.Parameter(torch.empty(children, in_dim, out_caps * out_dim))
        _init_weight(self.weight_pose, "kaiming", 0.0, in_dim)
        self.weight_route = nn.Parameter(torch.zeros(children, in_dim, out_caps))
        self.bias_route = nn.Parameter(torch.zeros(children, out_caps))

    def route(self, pose: Tensor, act: Tensor) -> tuple[Tensor, Tensor]:
        """Route ``(Bn, N, Din)`` poses and ``(Bn, N)`` activations to the parents."""
        u_hat = child_votes(pose, self.weight_pose, self.out_caps)
        logits = (
            torch.bmm(pose.transpose(0, 1), self.weight_route).transpose(0, 1) + self.bias_route
        )
        v, a, _ = self_routing(u_hat, act, logits, eps=self.eps)
        return v, a


class SelfRouting2d(nn.Module):
    """Convolutional self-routing capsule layer (Hahn et al. 2019).

    Argument names follow the reference implementation: ``A`` input types of
    dimension ``C`` route to ``B`` output types of dimension ``D``.

    Args:
        A: Input capsule types.
        B: Output capsule types.
        C: Input pose dimension.
        D: Output pose dimension.
        kernel_size: Neighbourhood size.
        stride: Stride.
        padding: Zero padding (padded children have zero activation).
        eps: Epsilon of the routing divisions.

    Examples:
        >>> layer = SelfRouting2d(8, 4, 16, 16, kernel_size=3, stride=1, padding=1)
        >>> pose, act = layer(torch.randn(2, 8, 5, 5, 16), torch.rand(2, 8, 5, 5))
        >>> pose.shape, act.shape
        (torch.Size([2, 4, 5, 5, 16]), torch.Size([2, 4, 5, 5]))
    """

    def __init__(
        self,
        A: int,
        B: int,
        C: int,
        D: int,
        kernel_size: int | tuple[int, int] = 3,
        stride: int | tuple[int, int] = 1,
        padding: int | tuple[int, int] = 0,
        eps: float = 1e-8,
    ) -> None:
        super().__init__()
        self.kernel_size, self.stride, self.padding = (
            _pair(kernel_size),
            _pair(stride),
            _pair(padding),
        )
        kk = self.kernel_size[0] * self.kernel_size[1]
        self.core = _SelfRoutingCore(A * kk, C, B, D, eps)

    def forward(self, pose: Tensor, act: Tensor) -> tuple[Tensor, Tensor]:
        """Map poses ``(N, A, H, W, C)`` and activations ``(N, A, H, W)`` to the next layer."""
        n = pose.shape[0]
        children, Ho, Wo = unfold_caps(pose, self.kernel_size, self.stride, self.padding)
        acts, _, _ = unfold_caps(act, self.kernel_size, self.stride, self.padding)
        v, a = self.core.route(children, acts)
        M, Dout = self.core.out_caps, self.core.out_dim
        return (
            v.view(n, Ho, Wo, M, Dout).permute(0, 3, 1, 2, 4),
            a.view(n, Ho, Wo, M).permute(0, 3, 1, 2),
        )


class SelfRouting1d(nn.Module):
    """Self-routing over a 1-D sequence of positions ``(B, L, A, C)``.

    With ``kernel_size=1`` (the default) routing is **point-wise**: the ``A``
    capsules at each position route only to the ``B`` capsules at the same
    position, with matrices shared across positions (MCAE's encoder). Larger
    kernels route over a window of neighbouring positions.

    Args:
        A: Input capsule types per position.
        B: Output capsule types per position.
        C: Input pose dimension.
        D: Output pose dimension.
        kernel_size: Window of positions.
        stride: Stride over positions.
        padding: Zero padding (zero activation).
        eps: Epsilon of the routing divisions.

    Examples:
        >>> layer = SelfRouting1d(16, 16, 8, 8)
        >>> pose, act = layer(torch.randn(2, 10, 16, 8), torch.rand(2, 10, 16))
        >>> pose.shape, act.shape
        (torch.Size([2, 10, 16, 8]), torch.Size([2, 10, 16]))
    """

    def __init__(
        self,
        A: int,
        B: int,
        C: int,
        D: int,
        kernel_size: int = 1,
        stride: int = 1,
        padding: int = 0,
        eps: float = 1e-8,
    ) -> None:
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.core = _SelfRoutingCore(A * kernel_size, C, B, D, eps)

    def forward(self, pose: Tensor, act: Tensor) -> tuple[Tensor, Tensor]:
        """Map poses ``(N, L, A, C)``, activations ``(N, L, A)`` to the next layer.

        Args:
            pose: Input poses.
            act: Input activations.
        """
        n, L, A, C = pose.shape
        if self.kernel_size == 1 and self.stride == 1 and self.padding == 0:
            v, a = self.core.route(pose.reshape(n * L, A, C), act.reshape(n * L, A))
            return v.view(n, L, *v.shape[1:]), a.view(n, L, -1)
        k, s, p = (1, self.kernel_size), (1, self.stride), (0, self.padding)
        children, _, Lo = unfold_caps(pose.permute(0, 2, 1, 3).unsqueeze(2), k, s, p)
        acts, _, _ = unfold_caps(act.permute(0, 2, 1).unsqueeze(2), k, s, p)
        v, a = self.core.route(children, acts)
        return v.view(n, Lo, *v.shape[1:]), a.view(n, Lo, -1)


class SelfRoutingDense(nn.Module):
    """Global self-routing: every output capsule receives votes from every input capsule.

    On a sequence of positions this is the layer whose "kernel size equals the
    sequence length" with separate matrices per (input position, output
    position): ``L_in * A`` children route to ``L_out * B`` parents. Inputs may
    be ``(N, L_in, A, C)`` sequences (then ``out_positions`` reshapes the
    output to ``(N, L_out, B, D)``) or flat ``(N, children, C)``.

    Args:
        in_caps: Total input capsules ``L_in * A``.
        out_caps: Total output capsules ``L_out * B``.
        C: Input pose dimension.
        D: Output pose dimension.
        out_positions: ``L_out`` for reshaping the output into a sequence (optional).
        eps: Epsilon of the routing divisions.

    Examples:
        >>> layer = SelfRoutingDense(4 * 8, 4 * 8, 8, 8, out_positions=4)
        >>> pose, act = layer(torch.randn(2, 4, 8, 8), torch.rand(2, 4, 8))
        >>> pose.shape, act.shape
        (torch.Size([2, 4, 8, 8]), torch.Size([2, 4, 8]))
    """

    def __init__(
        self,
        in_caps: int,
        out_caps: int,
        C: int,
        D: int,
        out_positions: int | None = None,
        eps: float = 1e-8,
    ) -> None:
        super().__init__()
        if out_positions is not None and out_caps % out_positions:
            raise ValueError(
                f"out_caps={out_caps} is not divisible by out_positions={out_positions}"
            )
        self.out_positions = out_positions
        self.core = _SelfRoutingCore(in_caps, C, out_caps, D, eps)

    def forward(self, pose: Tensor, act: Tensor) -> tuple[Tensor, Tensor]:
        """Route all input capsules to all output capsules."""
        n, C = pose.shape[0], pose.shape[-1]
        v, a = self.core.route(pose.reshape(n, -1, C), act.reshape(n, -1))
        if self.out_positions is None:
            return v, a
        Lo = self.out_positions
        return v.view(n, Lo, -1, v.shape[-1]), a.view(n, Lo, -1)
