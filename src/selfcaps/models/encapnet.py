"""EncapNet's networks: ``encapnet18``, its ResNet-18-shaped counterpart, the Table 1 six-layer set.

From "Neural Network Encapsulation" (Li et al., ECCV 2018; reference code
github.com/hli2020/nn_encapsulation, configuration ``encapnet_set_OT``).

**encapnet18** (paper section 5.1 and Table 2): a 3x3 convolution to 32
channels (BN, ReLU), read as 32 capsule types of dimension 1; four modules,
each one Type I capConv (dimension ``x2``; stride 1, 2, 2, 2) and ``N = 3``
Type II capConvs, giving 32 types of dimension 2, 4, 8, 16 at 32x32, 16x16,
8x8, 4x4; ``CapFC`` from the 512 capsules of the last map to 10 class capsules
of dimension 16. The class score is the capsule length. Depth: the paper's
"18 layers (N = 3, n = 2)" with depth "2 + sum_i (N_i + 1)" over four modules.
The reference code (``encapnet_set_OT``) builds ``num_type2=2`` with the aide
branch in modules 3-4 only (preset ``reference``); the module dimensions and
strides are the reference code's (Table 2's body is not in the paper's text).

``variant="master"`` builds every capConv master-only (Table 1 row e, and the
reference code's default, where ``--withCapRoute`` is off); ``"master_aide"``
gives the capConvs of the modules in ``aide_modules`` an aide branch (default:
every module, as the paper's Table 3 case 4).

**Counterpart** (``encapnet18_resnet``): the same stem, stage widths
(``num_caps * dims`` = 64, 128, 256, 512) and strides, each stage two
torchvision ``BasicBlock``s (ResNet-18's 1 + 16 + 1 layers), global average
pooling and a linear classifier: same input and output shapes, scalar neurons.
Its ``forward_taps`` gives each stage's input and block outputs, so the
feedback units attach to it as to an EncapNet module (Table 3 cases a-b: the
unit on ResNet, with a plain deconvolution generator).

**Table 1 six-layer set** (paper Table 1; we build them on one layout so that
the rows differ only in the layers that make the point): layer 1 is a 3x3
convolution 3 -> 32 at full resolution; layers 2-5 have 64, 128, 256, 512
channels at strides 1, 2, 2, 2; layer 6 maps to the 10 classes:

* (a) ``table1_capnet_dynamic``: convolutions, primary capsules (32 x 8-D at 8x8),
  a convolutional capsule layer (3x3, stride 2, 32 x 16-D, 3 routing
  iterations) and class capsules by dynamic routing;
* (b) ``table1_capnet_em``: the same with EM routing (primary activations from
  a sigmoid convolution; the class score is the EM activation);
* (c) ``table1_cnn``: plain convolutions with BN and ReLU, a linear classifier;
* (e) ``table1_encapnet_master``: four master-only Type I capConvs and ``CapFC``;
* (f) ``table1_encapnet_master_aide``: the same with master/aide capConvs.

The reference code's CapNet (``capnet_default``) routes all 2048 primary
capsules to all 512 capsules of the next layer; at batch 128 its votes alone
take 8.6 GB, so our rows (a)-(b) route over 3x3 neighbourhoods instead
(``ConvCaps2d``), which is what convolutional capsule layers do.

Every network's ``forward`` returns class capsules ``(B, K, D)`` (score =
length; ``score_kind = "length"``), class activations ``(B, K)``
(``"activation"``, EM) or logits ``(B, K)`` (``"logit"``, CNNs).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint
from torchvision.models.resnet import BasicBlock

from selfcaps.caps import (
    CapFC,
    CapsuleModule,
    ConvCaps2d,
    DenseCaps,
    PrimaryCaps2d,
    child_votes,
    em_routing,
    flatten_caps,
    unfold_caps,
)
from selfcaps.caps.chunking import cpu_path
from selfcaps.caps.master_aide import (
    CoefficientSource,
    SkipMode,
    channels_to_caps,
    count_batches,
    deferred_counters,
)
from selfcaps.models._registry import register_model

__all__ = [
    "EMCaps",
    "EncapNet",
    "EncapResNet",
    "Table1CNN",
    "Table1CapNet",
    "encapnet",
    "encapnet18",
    "encapnet18_resnet",
    "table1_capnet_dynamic",
    "table1_capnet_em",
    "table1_capnet_em_procedure1",
    "table1_cnn",
    "table1_encapnet_master",
    "table1_encapnet_master_aide",
]

Variant = Literal["master", "master_aide"]
ScoreKind = Literal["length", "activation", "logit"]


def _conv_bn_relu(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)
    )


def _feature_size(input_size: int, strides: Sequence[int]) -> int:
    total = math.prod(strides)
    if input_size % total:
        raise ValueError(f"input_size {input_size} is not divisible by the total stride {total}")
    return input_size // total


def _init_encapnet(m: nn.Module) -> None:
    """Xavier-normal convolution weights, unit BatchNorm (as the reference's ``weights_init_cap``).

    The reference draws biases from N(0, 1); ours start at 0, and the mixing
    coefficients' at 1 (set by :class:`~selfcaps.caps.MasterAideConv2d`).
    """
    if isinstance(m, nn.Conv2d | nn.ConvTranspose2d):
        nn.init.xavier_normal_(m.weight)
    elif isinstance(m, nn.BatchNorm2d):
        nn.init.ones_(m.weight)
        nn.init.zeros_(m.bias)


class _ImageNet(nn.Module):
    """Input checks shared by the networks of this file."""

    in_chans: int
    input_size: int

    def _check_input(self, x: Tensor) -> None:
        expected = (self.in_chans, self.input_size, self.input_size)
        if x.dim() != 4 or tuple(x.shape[1:]) != expected:
            raise ValueError(
                f"{type(self).__name__} expects images (B, {', '.join(map(str, expected))}), "
                f"got {tuple(x.shape)}"
            )


class EncapNet(_ImageNet):
    """Encapsulated network: a stem, capsule modules of capConvs, ``CapFC`` (module docstring).

    Args:
        in_chans: Image channels.
        num_classes: Class capsules.
        input_size: Image side length (the class layer's size depends on it).
        num_caps: Capsule types ``T`` in every layer.
        dims: Capsule dimension after each module (the stem gives dimension 1).
        strides: Type I stride of each module.
        num_type2: Type II capConvs per module.
        variant: ``"master"`` or ``"master_aide"``.
        aide_modules: 1-based modules whose capConvs get the aide branch (``master_aide``;
            ``None``: every module).
        coefficients: Source of the mixing coefficients (``"v1"``, ``"v2"``, ``"v3"``,
            ``"own"``, ``"cross"``; see :class:`~selfcaps.caps.MasterAideConv2d`).
        skip: ``"none"``, ``"module"`` or ``"layerwise"`` (:class:`~selfcaps.caps.CapsuleModule`).

    Examples:
        >>> net = EncapNet(num_caps=4, dims=(2, 4), strides=(2, 2), input_size=16, aide_modules=[2])
        >>> net(torch.randn(2, 3, 16, 16)).shape
        torch.Size([2, 10, 4])
    """

    score_kind: ScoreKind = "length"

    def __init__(
        self,
        in_chans: int = 3,
        num_classes: int = 10,
        input_size: int = 32,
        num_caps: int = 32,
        dims: Sequence[int] = (2, 4, 8, 16),
        strides: Sequence[int] = (1, 2, 2, 2),
        num_type2: int = 3,
        variant: Variant = "master_aide",
        aide_modules: Sequence[int] | None = None,
        coefficients: CoefficientSource = "v3",
        skip: SkipMode = "module",
    ) -> None:
        super().__init__()
        if variant not in ("master", "master_aide"):
            raise ValueError(f"variant must be 'master' or 'master_aide', got {variant!r}")
        if len(dims) != len(strides) or not dims:
            raise ValueError(f"dims {list(dims)} and strides {list(strides)} must pair up")
        if aide_modules is None:
            aide_modules = range(1, len(dims) + 1)
        if bad := [m for m in aide_modules if not 1 <= m <= len(dims)]:
            raise ValueError(f"aide_modules {bad} are not modules 1..{len(dims)}")
        self.in_chans, self.input_size, self.num_caps = in_chans, input_size, num_caps
        self.variant = variant
        self.stem = _conv_bn_relu(in_chans, num_caps)
        in_dims = [1, *dims[:-1]]
        self.capsule_modules = nn.ModuleList(
            CapsuleModule(
                num_caps,
                d_in,
                d_out,
                stride,
                num_type2,
                aide=variant == "master_aide" and i + 1 in aide_modules,
                coefficients=coefficients,
                skip=skip,
            )
            for i, (d_in, d_out, stride) in enumerate(zip(in_dims, dims, strides, strict=True))
        )
        self.feature_size = _feature_size(input_size, strides)
        in_caps = num_caps * self.feature_size**2
        self.class_caps = CapFC(in_caps, num_classes, dims[-1])
        self.num_features = in_caps * dims[-1]
        self.apply(_init_encapnet)

    def tap_shapes(self) -> list[list[tuple[int, int, int]]]:
        """``(C, H, W)`` of every module's taps (see :meth:`forward_taps`), without running it."""
        shapes, size = [], self.input_size
        for module in self.capsule_modules:
            t1 = module.type1
            c_in, c_out = self.num_caps * t1.in_dim, self.num_caps * t1.out_dim
            out = (c_out, size // t1.stride, size // t1.stride)
            shapes.append([(c_in, size, size), *[out] * (1 + len(module.type2))])
            size //= t1.stride
        return shapes

    def forward_taps(self, x: Tensor) -> tuple[Tensor, list[list[Tensor]]]:
        """Class capsules and every module's taps ``[input, Type I out, Type II outs...]``."""
        self._check_input(x)
        y = self.stem(x)
        defer = not cpu_path(y)
        taps = []
        for module in self.capsule_modules:
            y, t = module(y, return_taps=True, count=not defer)
            taps.append(t)
        self._count_batches(defer)
        return self.class_caps(self._sequence(y)), taps

    def _count_batches(self, deferred: bool) -> None:
        """Add the capsule modules' deferred batch counts (off the CPU path), one op for all.

        See :func:`~selfcaps.caps.master_aide.count_batches`.
        """
        if deferred:
            count_batches(deferred_counters(self.capsule_modules))

    def _sequence(self, y: Tensor) -> Tensor:
        return flatten_caps(channels_to_caps(y, self.num_caps))

    def _body(self, x: Tensor) -> Tensor:
        self._check_input(x)
        y = self.stem(x)
        defer = not cpu_path(y)
        for module in self.capsule_modules:
            y = module(y, count=not defer)
        self._count_batches(defer)
        return y

    def forward_features(self, x: Tensor) -> Tensor:
        """The last module's capsules, flattened ``(B, num_features)``."""
        return self._body(x).flatten(1)

    def forward(self, x: Tensor) -> Tensor:
        """Class capsules ``(B, num_classes, dims[-1])``; their lengths are the class scores."""
        return self.class_caps(self._sequence(self._body(x)))


class EncapResNet(_ImageNet):
    """EncapNet's scalar counterpart from torchvision ``BasicBlock`` s (module docstring).

    Args:
        in_chans: Image channels.
        num_classes: Classes.
        input_size: Image side length (checked).
        stem_channels: Stem width (EncapNet: ``num_caps``).
        widths: Stage widths (EncapNet: ``num_caps * dims``).
        strides: Stage strides.
        blocks_per_stage: ``BasicBlock`` s per stage (2 for ResNet-18).

    Examples:
        >>> EncapResNet()(torch.randn(2, 3, 32, 32)).shape
        torch.Size([2, 10])
    """

    score_kind: ScoreKind = "logit"

    def __init__(
        self,
        in_chans: int = 3,
        num_classes: int = 10,
        input_size: int = 32,
        stem_channels: int = 32,
        widths: Sequence[int] = (64, 128, 256, 512),
        strides: Sequence[int] = (1, 2, 2, 2),
        blocks_per_stage: int = 2,
    ) -> None:
        super().__init__()
        self.in_chans, self.input_size = in_chans, input_size
        _feature_size(input_size, strides)
        self.stem_channels, self.widths = stem_channels, tuple(widths)
        self.strides, self.blocks_per_stage = tuple(strides), blocks_per_stage
        layers: list[nn.Module] = [_conv_bn_relu(in_chans, stem_channels)]
        cin = stem_channels
        for width, stride in zip(widths, strides, strict=True):
            for b in range(blocks_per_stage):
                s = stride if b == 0 else 1
                down = None
                if s != 1 or cin != width:
                    down = nn.Sequential(
                        nn.Conv2d(cin, width, 1, s, bias=False), nn.BatchNorm2d(width)
                    )
                layers.append(BasicBlock(cin, width, s, down))
                cin = width
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(cin, num_classes)
        self.num_features = cin

    def tap_shapes(self) -> list[list[tuple[int, int, int]]]:
        """``(C, H, W)`` of every stage's taps (see :meth:`forward_taps`), without running it."""
        shapes, cin, size = [], self.stem_channels, self.input_size
        for width, stride in zip(self.widths, self.strides, strict=True):
            out = (width, size // stride, size // stride)
            shapes.append([(cin, size, size), *[out] * self.blocks_per_stage])
            cin, size = width, size // stride
        return shapes

    def forward_taps(self, x: Tensor) -> tuple[Tensor, list[list[Tensor]]]:
        """Logits and every stage's taps ``[input, block 1 out, block 2 out, ...]``.

        The feedback units (paper section 3.2: "Our design of feedback agreement unit is not
        limited to the capsule framework"; Table 3 cases a-b on ResNet) read a stage as
        EncapNet's module: tap 0 is the stage input, tap ``i`` the output of its ``i``-th
        ``BasicBlock`` (``-1``: the stage output).
        """
        self._check_input(x)
        y = self.body[0](x)
        blocks = iter(self.body[1:])
        taps = []
        for _ in self.widths:
            stage = [y]
            for _ in range(self.blocks_per_stage):
                y = next(blocks)(y)
                stage.append(y)
            taps.append(stage)
        return self.head(y.mean(dim=(2, 3))), taps

    def forward_features(self, x: Tensor) -> Tensor:
        """Globally pooled last feature map ``(B, num_features)``."""
        self._check_input(x)
        return self.body(x).mean(dim=(2, 3))

    def forward(self, x: Tensor) -> Tensor:
        """Logits ``(B, num_classes)``."""
        return self.head(self.forward_features(x))


# ----------------------------------------------------------------- Table 1 set
_T1_WIDTHS = (64, 128, 256, 512)
_T1_STRIDES = (1, 2, 2, 2)


class Table1CNN(_ImageNet):
    """Table 1 row (c): six plain layers of EncapNet's shape (module docstring)."""

    score_kind: ScoreKind = "logit"

    def __init__(self, in_chans: int = 3, num_classes: int = 10, input_size: int = 32) -> None:
        super().__init__()
        self.in_chans, self.input_size = in_chans, input_size
        fs = _feature_size(input_size, _T1_STRIDES)
        chans = [32, *_T1_WIDTHS]
        self.body = nn.Sequential(
            _conv_bn_relu(in_chans, 32),
            *(_conv_bn_relu(a, b, s) for a, b, s in zip(chans, chans[1:], _T1_STRIDES)),
        )
        self.num_features = _T1_WIDTHS[-1] * fs * fs
        self.head = nn.Linear(self.num_features, num_classes)

    def forward_features(self, x: Tensor) -> Tensor:
        """The last feature map, flattened."""
        self._check_input(x)
        return self.body(x).flatten(1)

    def forward(self, x: Tensor) -> Tensor:
        """Logits ``(B, num_classes)``."""
        return self.head(self.forward_features(x))


class EMCaps(nn.Module):
    """Capsules by EM routing (Hinton et al. 2018), fully connected or over ``k x k`` windows.

    Votes are ``W_i u_i`` per child (vector poses, as the EncapNet reference
    code's ``CapLayer(route="EM")``), routed by
    :func:`~selfcaps.caps.em_routing`. To bound memory the rows (images x
    output positions) are processed in chunks under activation checkpointing:
    no vote-sized tensor of the whole batch is kept for backward (like the
    fused dynamic routing of :class:`~selfcaps.caps.ConvCaps2d`).

    Args:
        in_caps: Input capsule types (per position, or all of them when ``kernel_size=None``).
        in_dim: Input pose dimension.
        out_caps: Output capsule types.
        out_dim: Output pose dimension.
        kernel_size: Window size for a convolutional layer; ``None``: fully connected.
        stride: Window stride.
        padding: Zero padding (padded children have zero activation).
        iters: EM iterations.
        chunk_elements: Votes per checkpointed chunk.
        procedure1: Route by Procedure 1 as printed (fixed lambda = 1, uncentred costs)
            instead of the default centred costs with lambda annealed 0.01 -> 1
            (see :func:`~selfcaps.caps.em_routing`).
    """

    def __init__(
        self,
        in_caps: int,
        in_dim: int,
        out_caps: int,
        out_dim: int,
        kernel_size: int | None = None,
        stride: int = 1,
        padding: int = 0,
        iters: int = 3,
        chunk_elements: int = 1 << 21,
        procedure1: bool = False,
    ) -> None:
        super().__init__()
        kk = kernel_size**2 if kernel_size else 1
        self.procedure1 = procedure1
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.out_caps, self.out_dim, self.iters = out_caps, out_dim, iters
        self.weight = nn.Parameter(torch.randn(in_caps * kk, in_dim, out_caps * out_dim) * 0.1)
        self.beta_u = nn.Parameter(torch.zeros(out_caps))
        self.beta_a = nn.Parameter(torch.zeros(out_caps))
        self.chunk_rows = max(1, chunk_elements // (in_caps * kk * out_caps * out_dim))

    def _route(self, pose: Tensor, act: Tensor) -> tuple[Tensor, Tensor]:
        votes = child_votes(pose, self.weight, self.out_caps)
        if self.procedure1:
            mu, a, _ = em_routing(
                votes, act, self.beta_u, self.beta_a, self.iters, 1.0, centre_costs=False
            )
        else:
            mu, a, _ = em_routing(votes, act, self.beta_u, self.beta_a, self.iters)
        return mu, a

    def forward(self, pose: Tensor, act: Tensor) -> tuple[Tensor, Tensor]:
        """Route poses ``(B, T, H, W, D)`` with activations ``(B, T, H, W)``, or ``(B, N, ...)``.

        Returns:
            ``(poses, activations)``: ``(B, out_caps, Ho, Wo, out_dim)`` and
            ``(B, out_caps, Ho, Wo)``, or ``(B, out_caps, out_dim)`` and ``(B, out_caps)``.
        """
        B = pose.shape[0]
        if self.kernel_size:
            k, s, p = (self.kernel_size,) * 2, (self.stride,) * 2, (self.padding,) * 2
            children, Ho, Wo = unfold_caps(pose, k, s, p)
            acts, _, _ = unfold_caps(act, k, s, p)
        else:
            children, acts = flatten_caps(pose), act.reshape(B, -1)
        outs = []
        for c, a in zip(children.split(self.chunk_rows), acts.split(self.chunk_rows)):
            if torch.is_grad_enabled():
                outs.append(checkpoint(self._route, c, a, use_reentrant=False))
            else:
                outs.append(self._route(c, a))
        mu = torch.cat([o[0] for o in outs])
        a_out = torch.cat([o[1] for o in outs])
        if not self.kernel_size:
            return mu, a_out
        M, D = self.out_caps, self.out_dim
        return (
            mu.view(B, Ho, Wo, M, D).permute(0, 3, 1, 2, 4),
            a_out.view(B, Ho, Wo, M).permute(0, 3, 1, 2),
        )


class Table1CapNet(_ImageNet):
    """Table 1 rows (a) and (b): a six-layer CapNet with dynamic or EM routing (module docstring).

    Args:
        routing: ``"dynamic"``, ``"em"`` (centred costs, annealed lambda: the default of
            :func:`~selfcaps.caps.em_routing`) or ``"em_procedure1"`` (Procedure 1 as printed).
        in_chans: Image channels.
        num_classes: Class capsules.
        input_size: Image side length.
        iters: Routing iterations.
    """

    def __init__(
        self,
        routing: Literal["dynamic", "em", "em_procedure1"] = "dynamic",
        in_chans: int = 3,
        num_classes: int = 10,
        input_size: int = 32,
        iters: int = 3,
    ) -> None:
        super().__init__()
        if routing not in ("dynamic", "em", "em_procedure1"):
            raise ValueError(f"routing must be 'dynamic', 'em' or 'em_procedure1', got {routing!r}")
        self.routing, self.in_chans, self.input_size = routing, in_chans, input_size
        self.score_kind: ScoreKind = "length" if routing == "dynamic" else "activation"
        fs = _feature_size(input_size, _T1_STRIDES)
        self.body = nn.Sequential(
            _conv_bn_relu(in_chans, 32), _conv_bn_relu(32, 64), _conv_bn_relu(64, 128, 2)
        )
        em = routing != "dynamic"
        p1 = routing == "em_procedure1"
        self.primary = PrimaryCaps2d(
            128, 32, 8, 3, 2, 1, bias=False, batchnorm=True, activate=not em
        )
        n_class_in = 32 * fs * fs
        if em:
            self.primary_act = nn.Conv2d(128, 32, 3, 2, 1)
            self.caps = EMCaps(
                32, 8, 32, 16, kernel_size=3, stride=2, padding=1, iters=iters, procedure1=p1
            )
            self.class_caps = EMCaps(n_class_in, 16, num_classes, 16, iters=iters, procedure1=p1)
        else:
            self.caps = ConvCaps2d(32, 8, 32, 16, 3, 2, 1, iters=iters)
            self.class_caps = DenseCaps(n_class_in, 16, num_classes, 16, iters=iters)
        self.num_features = n_class_in * 16

    def forward_features(self, x: Tensor) -> Tensor:
        """Poses of the convolutional capsule layer, flattened."""
        return flatten_caps(self._capsules(x)[0]).flatten(1)

    def _capsules(self, x: Tensor) -> tuple[Tensor, Tensor | None]:
        self._check_input(x)
        f = self.body(x)
        pose = self.primary(f)
        if self.routing == "dynamic":
            return self.caps(pose), None
        return self.caps(pose, torch.sigmoid(self.primary_act(f)))

    def forward(self, x: Tensor) -> Tensor:
        """Class capsules ``(B, K, 16)`` (dynamic) or class activations ``(B, K)`` (EM)."""
        pose, act = self._capsules(x)
        if act is None:
            return self.class_caps(pose)
        return self.class_caps(pose, act)[1]


# ------------------------------------------------------------------ registry
@register_model
def encapnet(**kwargs: object) -> EncapNet:
    """An EncapNet of any size (:class:`EncapNet`'s arguments; the quick preset uses this)."""
    return EncapNet(**kwargs)  # type: ignore[arg-type]


@register_model
def encapnet18(**kwargs: object) -> EncapNet:
    """The paper's 18-layer EncapNet (section 5.1, Table 2); kwargs override."""
    return EncapNet(**kwargs)  # type: ignore[arg-type]


@register_model
def encapnet18_resnet(
    in_chans: int = 3,
    num_classes: int = 10,
    input_size: int = 32,
    num_caps: int = 32,
    dims: Sequence[int] = (2, 4, 8, 16),
    strides: Sequence[int] = (1, 2, 2, 2),
) -> EncapResNet:
    """EncapNet's ResNet-18-shaped counterpart, sized by EncapNet's shape arguments."""
    return EncapResNet(
        in_chans, num_classes, input_size, num_caps, [num_caps * d for d in dims], strides
    )


@register_model
def table1_capnet_dynamic(**kwargs: object) -> Table1CapNet:
    """Table 1 row (a): CapNet with dynamic routing."""
    return Table1CapNet("dynamic", **kwargs)  # type: ignore[arg-type]


@register_model
def table1_capnet_em(**kwargs: object) -> Table1CapNet:
    """Table 1 row (b): CapNet with EM routing."""
    return Table1CapNet("em", **kwargs)  # type: ignore[arg-type]


@register_model
def table1_capnet_em_procedure1(**kwargs: object) -> Table1CapNet:
    """Table 1 row (b) routed by Procedure 1 as printed (fixed lambda, uncentred costs)."""
    return Table1CapNet("em_procedure1", **kwargs)  # type: ignore[arg-type]


@register_model
def table1_cnn(**kwargs: object) -> Table1CNN:
    """Table 1 row (c): the plain CNN."""
    return Table1CNN(**kwargs)  # type: ignore[arg-type]


def _table1_encapnet(variant: Variant, **kwargs: object) -> EncapNet:
    return EncapNet(
        dims=(2, 4, 8, 16),
        strides=_T1_STRIDES,
        num_type2=0,
        variant=variant,
        aide_modules=(1, 2, 3, 4),
        skip="none",
        **kwargs,  # type: ignore[arg-type]
    )


@register_model
def table1_encapnet_master(**kwargs: object) -> EncapNet:
    """Table 1 row (e): four master-only Type I capConvs and ``CapFC``."""
    return _table1_encapnet("master", **kwargs)


@register_model
def table1_encapnet_master_aide(**kwargs: object) -> EncapNet:
    """Table 1 row (f): four master/aide Type I capConvs and ``CapFC``."""
    return _table1_encapnet("master_aide", **kwargs)
