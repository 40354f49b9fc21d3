"""EncapNet's capsule layers: the master/aide capsule convolution, its modules and ``CapFC``.

From "Neural Network Encapsulation" (Li et al., ECCV 2018; reference code
github.com/hli2020/nn_encapsulation). Routing is replaced by one supervised
pass through two branches (paper section 3.1, Fig. 1c):

* the **master** branch sees only the capsule's own type: a grouped
  convolution, one group per capsule type (kernel ``k1``);
* the **aide** branch sees every lower capsule type: an ungrouped convolution
  with a larger kernel (``k2 = k1 + 4`` in the reference code);
* learned coefficients ``m1``, ``m2`` (one per capsule and position, from a
  grouped 3x3 convolution) mix them (paper eq. 6):
  ``u = m1 * master + m2 * aide``, then BatchNorm, ReLU and squash per capsule.

**Memory order.** These layers work on convolution tensors ``(B, T*D, H, W)``
with channels grouped type-major, ``channel = t * D + d`` (the order of
:mod:`selfcaps.caps.layers`); :func:`channels_to_caps` turns one into the
capsule map ``(B, T, H, W, D)`` used elsewhere in selfcaps.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from selfcaps.caps.chunking import cpu_path
from selfcaps.caps.functional import SQUASH_EPS, float16_in_float32, squash
from selfcaps.caps.fused_squash import relu_squash_capsules, squash_capsules

__all__ = [
    "CapFC",
    "CapsuleModule",
    "CoefficientSource",
    "MasterAideConv2d",
    "SkipMode",
    "batch_norm",
    "caps_to_channels",
    "channels_last_conv",
    "channels_to_caps",
    "count_batches",
    "deferred_counters",
    "relu_squash_channels",
    "squash_channels",
]

#: Where the mixing coefficients come from (paper Table 3 "master/aide v1/v2/v3", plus the two
#: wirings of the reference code): ``"v1"`` both from the master activation, ``"v2"`` both from
#: the aide activation, ``"v3"`` both from the two together; ``"own"`` each from its own branch
#: (reference ``capConvRoute4``), ``"cross"`` each from the other branch (``capConvRoute3``).
CoefficientSource = Literal["v1", "v2", "v3", "own", "cross"]
#: Skip connections inside a :class:`CapsuleModule` (see there).
SkipMode = Literal["none", "module", "layerwise"]

_SOURCES = ("v1", "v2", "v3", "own", "cross")
_SKIPS = ("none", "module", "layerwise")


@float16_in_float32
def squash_channels(x: Tensor, num_caps: int) -> Tensor:
    """Squash each capsule of a convolution tensor ``(B, T*D, H, W)`` (type-major channels).

    The same map as :func:`~selfcaps.caps.squash` (Sabour eq. 1, safe norm),
    computed with fewer passes over memory: ``v = s * |s|^2 / ((1 + |s|^2) sqrt(|s|^2 + eps))``.
    Should ``|s|^2`` overflow (entries above ~1e19) or be NaN, it falls back
    to :func:`~selfcaps.caps.squash`, which rescales first. Off the CPU path (no host read)
    it always rescales, with a hand-written backward
    (:func:`~selfcaps.caps.fused_squash.squash_capsules`). The memory
    format (e.g. channels-last) is kept. Float16 is computed in float32, as
    :mod:`selfcaps.caps.functional` does (``eps`` vanishes in float16).

    Args:
        x: Convolution output.
        num_caps: Capsule types ``T``.

    Returns:
        Same shape; every ``D``-vector ``x[b, t*D:(t+1)*D, h, w]`` squashed.

    Examples:
        >>> v = squash_channels(torch.tensor([3.0, 4.0]).view(1, 2, 1, 1), num_caps=1)
        >>> round(float(v.flatten().norm()), 4)
        0.9615
    """
    B, C, H, W = x.shape
    if C % num_caps:
        raise ValueError(f"{C} channels do not split into {num_caps} capsule types")
    caps = x.view(B, num_caps, C // num_caps, H, W)
    if not cpu_path(x):  # branch-free: no host read (it rescales, so never overflows)
        return squash_capsules(caps, dim=2).view(B, C, H, W)
    n2 = caps.pow(2).sum(dim=2, keepdim=True)
    if not bool(torch.isfinite(n2).all()):
        return squash(caps, dim=2).view(B, C, H, W)
    return (caps * (n2 / ((1.0 + n2) * torch.sqrt(n2 + SQUASH_EPS)))).view(B, C, H, W)


def relu_squash_channels(z: Tensor, num_caps: int) -> Tensor:
    """``squash_channels(ReLU(z))`` of a BatchNorm output ``z`` (how every capConv ends).

    Off the CPU path, one function with a hand-written backward and no overflow rescaling
    (:func:`~selfcaps.caps.fused_squash.relu_squash_capsules`), the same values up to rounding.
    """
    if cpu_path(z):
        return squash_channels(torch.relu(z), num_caps)
    return relu_squash_capsules([z], num_caps).view(z.shape)


def _defers(bn: nn.Module) -> bool:
    """Whether ``bn``'s batch count can be deferred: training, tracked, fixed momentum.

    With ``momentum=None`` the update factor is ``1 / num_batches_tracked``, so the count
    must be current when the BatchNorm runs; such a module always counts itself.
    """
    return (
        isinstance(bn, nn.modules.batchnorm._BatchNorm)
        and bn.training
        and bn.track_running_stats
        and bn.momentum is not None
    )


def batch_norm(bn: nn.Module, x: Tensor, count: bool = True) -> Tensor:
    """``bn(x)``; with ``count=False`` it leaves ``num_batches_tracked`` to the caller.

    A training BatchNorm adds 1 to its ``num_batches_tracked`` on every call, one
    launch each on an accelerator. With ``count=False`` (and a fixed momentum, see
    :func:`deferred_counters`) the same normalisation and running-statistics update run,
    and the caller adds the counts of many BatchNorms in one op (:func:`count_batches`);
    after the step the module state is the same.

    Args:
        bn: A BatchNorm module.
        x: Its input.
        count: Increment ``num_batches_tracked`` here (as ``bn(x)`` does).
    """
    if count or not _defers(bn):
        return bn(x)
    return F.batch_norm(
        x, bn.running_mean, bn.running_var, bn.weight, bn.bias, True, bn.momentum, bn.eps
    )


def deferred_counters(module: nn.Module) -> list[Tensor]:
    """``num_batches_tracked`` of the BatchNorms in ``module`` that :func:`batch_norm` defers."""
    return [m.num_batches_tracked for m in module.modules() if _defers(m)]


def count_batches(counters: list[Tensor], times: int | list[int] = 1) -> None:
    """Add ``times`` to every counter (one op for all: ``torch._foreach_add_``).

    Args:
        counters: ``num_batches_tracked`` buffers (:func:`deferred_counters`).
        times: Calls made per counter (one number for all, or one per counter).
    """
    if counters:
        torch._foreach_add_(counters, times)


def channels_last_conv(conv: nn.Module, x: Tensor) -> Tensor:
    """Apply a (grouped) convolution in channels-last memory format; return a contiguous result.

    PyTorch's CPU grouped convolutions are 2-6x slower in NCHW than in
    channels-last, their backward up to 20x (few channels per group); the two
    copies cost far less. The values are those of ``conv(x)``. Off the CPU path the copies
    are two kernel launches each way and buy nothing, so it is ``conv(x)`` itself there.

    Args:
        conv: A convolution module (typically ``groups > 1``).
        x: ``(B, C, H, W)`` input.
    """
    if not cpu_path(x):
        return conv(x)
    return conv(x.contiguous(memory_format=torch.channels_last)).contiguous()


def channels_to_caps(x: Tensor, num_caps: int) -> Tensor:
    """``(B, T*D, H, W)`` convolution tensor -> ``(B, T, H, W, D)`` capsule map."""
    B, C, H, W = x.shape
    return x.view(B, num_caps, C // num_caps, H, W).permute(0, 1, 3, 4, 2)


def caps_to_channels(x: Tensor) -> Tensor:
    """``(B, T, H, W, D)`` capsule map -> ``(B, T*D, H, W)`` convolution tensor."""
    B, T, H, W, D = x.shape
    return x.permute(0, 1, 4, 2, 3).reshape(B, T * D, H, W)


class _BnReluSquash(nn.Module):
    """BatchNorm, ReLU and squash per capsule: how every capConv ends."""

    def __init__(self, num_caps: int, channels: int) -> None:
        super().__init__()
        self.num_caps = num_caps
        self.bn = nn.BatchNorm2d(channels)

    def forward(self, x: Tensor, count: bool = True) -> Tensor:
        return relu_squash_channels(batch_norm(self.bn, x, count), self.num_caps)


def _interleave(a: Tensor, b: Tensor, num_caps: int) -> Tensor:
    """Concatenate two type-major tensors per capsule type: ``(B, T*(Da+Db), H, W)``."""
    B, _, H, W = a.shape
    both = torch.cat([a.view(B, num_caps, -1, H, W), b.view(B, num_caps, -1, H, W)], dim=2)
    return both.view(B, -1, H, W)


def _coefficient_inputs(source: str, a_master: Tensor, a_aide: Tensor) -> tuple[Tensor, Tensor]:
    """The inputs of the ``m1`` and ``m2`` convolutions for a one-branch ``source`` (not ``v3``)."""
    return {
        "v1": (a_master, a_master),
        "v2": (a_aide, a_aide),
        "own": (a_master, a_aide),
        "cross": (a_aide, a_master),
    }[source]


class MasterAideConv2d(nn.Module):
    r"""capConv: master and aide branches mixed by learned coefficients (paper eq. 6, Fig. 1c).

    With ``aide=True`` (the paper's master/aide, Table 1 row f)::

        a_master = squash(ReLU(BN(conv_grouped_k1(x))))     # one group per capsule type
        a_aide   = squash(ReLU(BN(conv_k2(x))))             # all capsule types, k2 = k1 + 4
        m1, m2   = coefficient convolutions of `coefficients`'s source (one value per capsule)
        s        = m1 * a_master + m2 * a_aide  (+ skip)     # eq. 6
        out      = squash(ReLU(BN(s)))

    With ``aide=False`` (master only, Table 1 row e) ``s = conv_grouped_k1(x) (+ skip)``.
    Each branch's BatchNorm-ReLU-squash before mixing follows the reference
    code (``capConvRoute3/4``); the paper's eq. 6 mixes the two branch outputs.
    Coefficients come from a grouped 3x3 convolution (one output channel per
    capsule type) and are broadcast over the capsule's ``D`` dimensions; they are
    not squashed through a sigmoid (as in the reference). Their biases start at
    1, so an untrained layer is close to the plain sum of the two branches.

    Args:
        num_caps: Capsule types ``T`` (in and out).
        in_dim: Input capsule dimension.
        out_dim: Output capsule dimension.
        kernel_size: Master kernel ``k1`` (3 for Type I, 1 for Type II).
        stride: Stride of both branches (2 merges positions).
        aide: Use the aide branch and the coefficients (else master only).
        coefficients: Source of ``m1``, ``m2`` (:data:`CoefficientSource`; ``"v3"`` default).
        aide_extra: ``k2 = k1 + aide_extra`` (4 in the reference code).

    Examples:
        >>> layer = MasterAideConv2d(num_caps=4, in_dim=2, out_dim=4, kernel_size=3, stride=2)
        >>> layer(torch.randn(2, 8, 8, 8)).shape
        torch.Size([2, 16, 4, 4])
    """

    def __init__(
        self,
        num_caps: int,
        in_dim: int,
        out_dim: int,
        kernel_size: int = 3,
        stride: int = 1,
        aide: bool = True,
        coefficients: CoefficientSource = "v3",
        aide_extra: int = 4,
    ) -> None:
        super().__init__()
        if coefficients not in _SOURCES:
            raise ValueError(f"coefficients must be one of {_SOURCES}, got {coefficients!r}")
        if kernel_size % 2 == 0 or aide_extra % 2:
            raise ValueError("kernel_size must be odd and aide_extra even (same padding)")
        T, cin, cout = num_caps, num_caps * in_dim, num_caps * out_dim
        self.num_caps, self.in_dim, self.out_dim, self.stride = num_caps, in_dim, out_dim, stride
        self.aide, self.coefficients = aide, coefficients
        self.master = nn.Conv2d(
            cin, cout, kernel_size, stride, kernel_size // 2, groups=T, bias=False
        )
        if aide:
            k2 = kernel_size + aide_extra
            self.aide_conv = nn.Conv2d(cin, cout, k2, stride, k2 // 2, bias=False)
            self.master_act = _BnReluSquash(T, cout)
            self.aide_act = _BnReluSquash(T, cout)
            c_coef = 2 * cout if coefficients == "v3" else cout
            self.coef_master = nn.Conv2d(c_coef, T, 3, 1, 1, groups=T)
            self.coef_aide = nn.Conv2d(c_coef, T, 3, 1, 1, groups=T)
            for conv in (self.coef_master, self.coef_aide):
                nn.init.ones_(conv.bias)
        self.out_act = _BnReluSquash(T, cout)

    def _coefficients(self, a_master: Tensor, a_aide: Tensor) -> tuple[Tensor, Tensor]:
        if self.coefficients == "v3":
            first = second = _interleave(a_master, a_aide, self.num_caps)
        else:
            first, second = _coefficient_inputs(self.coefficients, a_master, a_aide)
        m1 = channels_last_conv(self.coef_master, first)
        return m1, channels_last_conv(self.coef_aide, second)

    def mix(self, x: Tensor) -> Tensor:
        """The pre-activation ``s`` of eq. 6 (before the skip and the last BN-ReLU-squash)."""
        if not self.aide:
            return channels_last_conv(self.master, x)
        if not cpu_path(x):
            return self._mix_joint(x)
        a_master = self.master_act(channels_last_conv(self.master, x))
        a_aide = self.aide_act(self.aide_conv(x))
        m1, m2 = self._coefficients(a_master, a_aide)
        B, C, H, W = a_master.shape
        T = self.num_caps
        s = m1.unsqueeze(2) * a_master.view(B, T, -1, H, W)
        s = s + m2.unsqueeze(2) * a_aide.view(B, T, -1, H, W)
        return s.view(B, C, H, W)

    def _mix_joint(self, x: Tensor, count: bool = True) -> Tensor:
        """:meth:`mix` in fewer ops (the accelerator path; equal up to float rounding).

        The two branches' BatchNorm outputs are laid side by side per capsule type,
        ``(B, T, 2, D, H, W)`` (master, aide): one ReLU and one squash (over ``D``) act on
        both, the tensor is already the interleaved input of the ``v3`` coefficients, and eq. 6
        is one product and one sum over the branch axis. ``count=False``: the two BatchNorms
        leave their batch counts to the caller (:func:`batch_norm`).
        """
        T = self.num_caps
        z_master = batch_norm(self.master_act.bn, self.master(x), count)
        z_aide = batch_norm(self.aide_act.bn, self.aide_conv(x), count)
        B, C, H, W = z_master.shape
        both = relu_squash_capsules([z_master, z_aide], T)
        if self.coefficients == "v3":
            first = second = both.view(B, 2 * C, H, W)
        else:
            a_master, a_aide = (both[:, :, i].reshape(B, C, H, W) for i in (0, 1))
            first, second = _coefficient_inputs(self.coefficients, a_master, a_aide)
        m = torch.stack([self.coef_master(first), self.coef_aide(second)], dim=2)  # (B, T, 2, H, W)
        return (m.unsqueeze(3) * both).sum(2).view(B, C, H, W)

    def forward(self, x: Tensor, skip: Tensor | None = None, count: bool = True) -> Tensor:
        """Map ``(B, T*in_dim, H, W)`` capsules to ``(B, T*out_dim, H', W')``.

        Args:
            x: Input capsules (type-major channels).
            skip: Added to the pre-activation before the last BatchNorm (a module's skip).
            count: Off the CPU path, ``False`` leaves the BatchNorms' batch counts to the
                caller (:func:`count_batches` of :func:`deferred_counters`); ``True`` adds
                them here in one op. The CPU path always counts as ``nn.BatchNorm2d`` does.
        """
        if cpu_path(x):
            s = self.mix(x)
            if skip is not None:
                s = s + skip
            return self.out_act(s)
        s = self._mix_joint(x, count=False) if self.aide else self.master(x)
        if skip is not None:
            s = s + skip
        out = self.out_act(s, count=False)
        if count:
            count_batches(deferred_counters(self))
        return out

    def extra_repr(self) -> str:
        """Sizes and variant, shown by ``print(model)``."""
        kind = f"master/aide ({self.coefficients})" if self.aide else "master only"
        return f"{self.num_caps} types, {self.in_dim} -> {self.out_dim} dims, {kind}"


class CapsuleModule(nn.Module):
    """One Type I capConv and ``num_type2`` Type II capConvs, with skip connections.

    * **Type I** raises the capsule dimension ``in_dim -> out_dim`` (master kernel
      3, stride 2 merges positions; stride 1 in a network's first module);
    * **Type II** keeps the shape and adds depth (master kernel 1).

    Skip connections (``skip``; Table 3 cases 5-7 compare such choices):

    * ``"none"``;
    * ``"module"`` (reference default ``CapConv2(residual=[True, True])``): the
      Type I layer adds a projection of the module input (a 3x3 convolution
      over all channels with the layer's stride, when the shape changes), and
      the last Type II layer adds the Type I output;
    * ``"layerwise"``: as ``"module"``, but every Type II layer adds its own input.

    Skips are added to the pre-activation, before the layer's BatchNorm.

    Args:
        num_caps: Capsule types ``T``.
        in_dim: Input capsule dimension.
        out_dim: Output capsule dimension.
        stride: Type I stride.
        num_type2: Type II layers.
        aide: Master/aide capConvs (else master only).
        coefficients: See :class:`MasterAideConv2d`.
        skip: See above.

    Examples:
        >>> m = CapsuleModule(num_caps=4, in_dim=2, out_dim=4, stride=2, num_type2=2)
        >>> out, taps = m(torch.randn(2, 8, 8, 8), return_taps=True)
        >>> out.shape, [tuple(t.shape[1:]) for t in taps]
        (torch.Size([2, 16, 4, 4]), [(8, 8, 8), (16, 4, 4), (16, 4, 4), (16, 4, 4)])
    """

    def __init__(
        self,
        num_caps: int,
        in_dim: int,
        out_dim: int,
        stride: int = 2,
        num_type2: int = 2,
        aide: bool = True,
        coefficients: CoefficientSource = "v3",
        skip: SkipMode = "module",
    ) -> None:
        super().__init__()
        if skip not in _SKIPS:
            raise ValueError(f"skip must be one of {_SKIPS}, got {skip!r}")
        self.skip = skip
        T = num_caps
        self.type1 = MasterAideConv2d(T, in_dim, out_dim, 3, stride, aide, coefficients)
        self.type2 = nn.ModuleList(
            MasterAideConv2d(T, out_dim, out_dim, 1, 1, aide, coefficients)
            for _ in range(num_type2)
        )
        self.projection: nn.Module | None = None
        if skip != "none" and (in_dim != out_dim or stride != 1):
            self.projection = nn.Conv2d(T * in_dim, T * out_dim, 3, stride, 1, bias=False)

    def forward(
        self, x: Tensor, return_taps: bool = False, count: bool = True
    ) -> Tensor | tuple[Tensor, list[Tensor]]:
        """Capsules ``(B, T*in_dim, H, W)`` -> ``(B, T*out_dim, H/stride, W/stride)``.

        Args:
            x: Input capsules.
            return_taps: Also return ``[input, Type I output, Type II outputs...]`` (what
                the feedback agreement units compare).
            count: Off the CPU path, ``False`` leaves the BatchNorms' batch counts to the
                caller; ``True`` adds all of the module's in one op (see
                :meth:`MasterAideConv2d.forward`).
        """
        defer = not cpu_path(x)
        taps = [x]
        skip = None
        if self.skip != "none":
            skip = self.projection(x) if self.projection is not None else x
        y = self.type1(x, skip, count=not defer)
        taps.append(y)
        first = y
        for i, layer in enumerate(self.type2):
            add = None
            if self.skip == "layerwise":
                add = y
            elif self.skip == "module" and i == len(self.type2) - 1:
                add = first
            y = layer(y, add, count=not defer)
            taps.append(y)
        if defer and count:
            count_batches(deferred_counters(self))
        return (y, taps) if return_taps else y


class CapFC(nn.Module):
    r"""Capsule fully connected layer: one linear map per capsule dimension, then squash.

    .. math::
        v_{j,d} = \operatorname{squash}\Big(\sum_i W_{d,i,j}\, u_{i,d}\Big)_d

    for input capsules ``u_i`` (``N`` of them, dimension ``D``) and output
    capsules ``v_j``: the class capsules of EncapNet (reference ``CapFC``,
    ``fc_manner="default"``). Weights start uniform in ``±1/sqrt(N)``.

    Args:
        in_caps: Input capsules ``N``.
        out_caps: Output capsules (classes).
        caps_dim: Capsule dimension ``D`` (in and out).

    Examples:
        >>> fc = CapFC(512, 10, 16)
        >>> fc(torch.randn(2, 512, 16)).shape
        torch.Size([2, 10, 16])
    """

    def __init__(self, in_caps: int, out_caps: int, caps_dim: int) -> None:
        super().__init__()
        self.in_caps, self.out_caps, self.caps_dim = in_caps, out_caps, caps_dim
        self.weight = nn.Parameter(torch.empty(caps_dim, in_caps, out_caps))
        bound = in_caps**-0.5
        nn.init.uniform_(self.weight, -bound, bound)

    def forward(self, u: Tensor) -> Tensor:
        """Input capsules ``(B, N, D)`` -> class capsules ``(B, out_caps, D)``."""
        if u.dim() != 3 or u.shape[1:] != (self.in_caps, self.caps_dim):
            raise ValueError(
                f"CapFC expects capsules (B, {self.in_caps}, {self.caps_dim}), got {tuple(u.shape)}"
            )
        s = torch.bmm(u.permute(2, 0, 1).contiguous(), self.weight).permute(1, 2, 0)
        return squash(s) if cpu_path(s) else squash_capsules(s)

    def extra_repr(self) -> str:
        """Sizes, shown by ``print(model)``."""
        return f"{self.in_caps} -> {self.out_caps} capsules of {self.caps_dim}"
