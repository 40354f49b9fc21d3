"""MCAE's network: a self-routing capsule network with a masked-patch capsule decoder.

From "Masked Capsule Autoencoders" (Everett, Zhong, Leontidis, TMLR 2025). The
paper names no code of its own and we found none; this follows the paper (section
3, Figs. 1-3, eqs. 1-5). Where it states nothing (widths, the mask token's
activation, BatchNorm placement) the choice is ours and marked so below.

Pipeline of :meth:`MCAENet.forward_pretrain` (pretraining)::

    image -> random masking (MAE style) -> backbone -> primary capsules per position
          -> keep the visible positions only -> encoder (point-wise self-routing)
          -> decoder: mask token at every masked position, global capsule layer,
             one linear layer shared by all positions -> patch pixels

and of :meth:`MCAENet.forward` (finetuning / classification)::

    image -> backbone -> primary capsules -> encoder -> class capsules
          -> class activations averaged over positions

* **Sequence of positions.** The backbone's ``h x w`` grid is flattened row-major
  into ``L = h * w`` positions (``l = row * w + col``, paper Fig. 2); capsules are
  ``(B, L, A, D)`` poses with ``(B, L, A)`` activations (``selfcaps.caps`` order).
* **Backbones.** ``convmixer``: timm's ``ConvMixer`` (depth 4) whose stem is a
  patch embedding with kernel = stride = patch size. Primary capsules are ``1x1``
  convolutions: poses ``BN(conv(f))``, activations ``sigmoid(BN(conv(f)))``
  (Hahn et al. 2019). How masked patches are kept out of it, ``mask_mode``:

  - ``"removed"`` (default; section 3.1: masking "in the same way as in the Masked
    Autoencoder", "removing all capsules at a specific location"): the masked
    positions take no part in the computation, as if cut out of the image. The
    stem embeds every patch on its own (section 3.4); its output is zeroed at the
    masked positions, and so is every block's, so each depthwise convolution sums
    over visible neighbours only (a masked neighbour counts as the zero padding at
    the image's border: a sparse convolution on the visible positions), and every
    BatchNorm in training mode takes its statistics over the visible positions
    only. A visible position's features are then those of the same network run on
    the visible patches alone (tested against timm's plain ConvMixer on the
    visible half of an image).
  - ``"pixels_zeroed"`` (ours, the former behaviour): the *pixels* of masked patches
    are set to zero (the dataset mean after normalisation) before the backbone. No
    masked *content* reaches a feature, but each zeroed patch is embedded like an
    image patch and the ``kernel_size`` depthwise convolutions carry that embedding
    into the visible features around it (and into the BatchNorm statistics): the
    "replacing masked regions with 0's" that section 3.1 sets aside.

  ``vit``: timm's ViT blocks (depth 4, no class token) on patch tokens of width
  ``primary_caps * caps_dim``; masked tokens are removed *before* the blocks
  (MAE); a token is reshaped into the poses and ``sigmoid(Linear(token))`` gives
  the activations.
* **Masking** (:func:`random_masking`): a random ``floor(L * (1 - mask_ratio))``
  positions are kept, the rest are removed from the sequence (no zero filling);
  ``ids_restore`` puts them back in order.
* **Encoder**: ``encoder_layers`` point-wise self-routing layers
  (:class:`~selfcaps.caps.SelfRouting1d`, kernel 1, paper eqs. 1-3) of
  ``encoder_caps`` capsules, each followed by BatchNorm of the poses (as in Hahn
  et al.'s SR-CapsNet).
* **Decoder**: one learnable mask token (section 3.2: "a shared vector of the same
  dimension as our capsule vectors"; its activation, a learnable softmax, is ours)
  is inserted at every masked position; a global self-routing layer
  (:class:`~selfcaps.caps.SelfRoutingDense`: every output position receives votes
  from every input position, "setting the kernel size to match the sequence
  length") gives ``decoder_caps`` capsules per position, whose poses are
  batch-normalised (ours, as the encoder's); "a single linear layer" (Fig. 1) maps
  each position's poses to the patch's pixels. ``decoder_linear="per_position"``
  (ours) gives every position its own linear layer instead. The global layer's
  routing is computed by :func:`~selfcaps.caps.fused_self_routing.fused_self_routing`,
  which never stores its ``(B, L*A, L*caps, D)`` votes (set ``decoder.fused = False``
  for the readable path). Self-routing makes the activations of the global layer
  sum to one over all ``L * decoder_caps`` parents, so they shrink with ``L``; the
  linear layer reads the poses.
* **Target** (eq. 4: "the actual pixel values of the masked patches"): with
  ``target="pixels"`` (default) the decoder regresses the input with its
  normalisation undone (``pixel_mean`` / ``pixel_std``); ``"normalized"`` (ours)
  regresses the normalised input itself. For ``"pixels"`` the linear layer's output
  ``y`` is read in normalised units, ``pred = y * pixel_std + pixel_mean`` per
  channel: the composition is still a single affine layer, but it starts at the
  dataset mean (ours: with the plain layer, whose outputs start near 0 with a
  spread of about 0.6 against pixel values of mean 0.47 and spread 0.25, Adam at
  lr 1e-3 left the masked-patch MSE at 0.228 after two ``quick`` epochs, worse than
  predicting the mean colour, 0.063).
* **Classifier**: point-wise self-routing to one capsule per class, activations
  only (eqs. 1-2); they sum to one over the classes at each position, so their
  mean over positions is a distribution over classes, and the cross-entropy
  (eq. 5) is ``-log`` of the true class's averaged activation. No class poses are
  computed: nothing uses them.

The decoder's global layer has ``L * encoder_caps * caps_dim * L * decoder_caps *
decoder_dim`` pose parameters (quadratic in ``L``): keep ``L`` near 64 (patch 4
on 32x32 images, patch 8 on 64x64).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from typing import Literal, NamedTuple

import torch
from torch import Tensor, nn

from selfcaps.caps import SelfRouting1d, SelfRoutingDense
from selfcaps.caps.chunking import cpu_path
from selfcaps.caps.fused_self_routing import fused_self_routing
from selfcaps.models._registry import register_model

__all__ = [
    "MASK_MODES",
    "CapsuleDecoder",
    "CapsuleEncoder",
    "ClassCapsules",
    "ConvMixerPrimaryCaps",
    "MCAENet",
    "MaskedReconstruction",
    "Masking",
    "ViTPrimaryCaps",
    "gather_positions",
    "mcae",
    "patchify",
    "random_masking",
    "restore_positions",
    "unpatchify",
]

Backbone = Literal["convmixer", "vit"]
MaskMode = Literal["removed", "pixels_zeroed"]
MASK_MODES: tuple[str, ...] = ("removed", "pixels_zeroed")
DecoderLinear = Literal["shared", "per_position"]
Target = Literal["pixels", "normalized"]


# --------------------------------------------------------------------------- sequences
class Masking(NamedTuple):
    """A random masking of ``L`` positions per sample.

    Attributes:
        ids_keep: ``(B, K)`` indices of the visible positions, in the order they are kept.
        ids_restore: ``(B, L)``: position ``l`` of the full sequence is entry
            ``ids_restore[b, l]`` of ``cat([visible, masked])``.
        mask: ``(B, L)`` bool, True where the position is masked.
    """

    ids_keep: Tensor
    ids_restore: Tensor
    mask: Tensor


def random_masking(
    batch: int,
    length: int,
    mask_ratio: float,
    device: torch.device | str | None = None,
    generator: torch.Generator | None = None,
) -> Masking:
    """MAE-style random masking: keep ``floor(length * (1 - mask_ratio))`` random positions.

    Each sample's positions are ranked by uniform noise; the lowest-ranked are
    kept. At least one position is always kept.

    Args:
        batch: ``B``.
        length: ``L``.
        mask_ratio: Fraction of positions to mask, in ``[0, 1)``.
        device: Where to build the indices.
        generator: RNG for the noise (default: the global one).

    Returns:
        The :class:`Masking`.

    Examples:
        >>> m = random_masking(2, 8, 0.5, generator=torch.Generator().manual_seed(0))
        >>> m.ids_keep.shape, int(m.mask.sum())
        (torch.Size([2, 4]), 8)
    """
    if not 0.0 <= mask_ratio < 1.0:
        raise ValueError(f"mask_ratio must be in [0, 1), got {mask_ratio}")
    keep = max(1, int(length * (1.0 - mask_ratio)))
    rng_device = generator.device if generator is not None else device
    noise = torch.rand(batch, length, generator=generator, device=rng_device).to(device)
    ids_shuffle = noise.argsort(dim=1)
    ids_restore = ids_shuffle.argsort(dim=1)
    mask = torch.ones(batch, length, dtype=torch.bool, device=noise.device)
    mask[:, :keep] = False
    return Masking(ids_shuffle[:, :keep], ids_restore, mask.gather(1, ids_restore))


def gather_positions(x: Tensor, ids: Tensor) -> Tensor:
    """``x[b, ids[b]]`` for a sequence ``x`` of shape ``(B, L, ...)`` and indices ``(B, K)``."""
    idx = ids.view(*ids.shape, *([1] * (x.dim() - 2))).expand(*ids.shape, *x.shape[2:])
    return x.gather(1, idx)


def restore_positions(visible: Tensor, token: Tensor, ids_restore: Tensor) -> Tensor:
    """Insert ``token`` at the masked positions and restore the original order.

    Args:
        visible: ``(B, K, ...)`` values at the kept positions (in ``ids_keep`` order).
        token: ``(...)`` value inserted at every masked position.
        ids_restore: ``(B, L)`` from :func:`random_masking`.

    Returns:
        ``(B, L, ...)``.
    """
    B, K = visible.shape[:2]
    L = ids_restore.shape[1]
    fill = token.to(visible.dtype).expand(B, L - K, *visible.shape[2:])
    return gather_positions(torch.cat([visible, fill], dim=1), ids_restore)


def patchify(images: Tensor, patch_size: int) -> Tensor:
    """Images ``(B, C, H, W)`` to patches ``(B, L, p * p * C)``, positions row-major.

    Position ``l = row * (W // p) + col``; inside a patch the pixels are ordered
    ``(dy, dx, channel)`` (as in MAE).
    """
    B, C, H, W = images.shape
    p = patch_size
    if H % p or W % p:
        raise ValueError(f"image size {H}x{W} is not a multiple of the patch size {p}")
    x = images.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 3, 5, 1)
    return x.reshape(B, (H // p) * (W // p), p * p * C)


def unpatchify(patches: Tensor, patch_size: int, grid: tuple[int, int], channels: int) -> Tensor:
    """Inverse of :func:`patchify`: ``(B, L, p * p * C)`` to ``(B, C, h * p, w * p)``."""
    B = patches.shape[0]
    (h, w), p = grid, patch_size
    x = patches.reshape(B, h, w, p, p, channels).permute(0, 5, 1, 3, 2, 4)
    return x.reshape(B, channels, h * p, w * p)


def _pixel_mask(mask: Tensor, grid: tuple[int, int], patch_size: int) -> Tensor:
    """``(B, L)`` position mask to a ``(B, 1, H, W)`` pixel mask."""
    m = mask.view(mask.shape[0], 1, *grid).to(torch.float32)
    return m.repeat_interleave(patch_size, dim=2).repeat_interleave(patch_size, dim=3)


# --------------------------------------------------------------------------- primary capsules
def _check_mask_mode(mask_mode: str) -> None:
    if mask_mode not in MASK_MODES:
        raise ValueError(f"mask_mode must be one of {', '.join(MASK_MODES)}, got {mask_mode!r}")


def _batch_norm_visible(bn: nn.Module, f: Tensor, visible: Tensor) -> Tensor:
    """``bn(f)`` whose training statistics cover the visible positions only.

    Args:
        bn: A ``BatchNorm2d``.
        f: ``(B, C, h, w)`` features.
        visible: ``(B, h, w)`` bool, True at the positions that take part.

    Returns:
        ``(B, C, h, w)``; in training mode the masked positions hold 0. With running
        statistics (eval mode) BatchNorm is element-wise and ``bn(f)`` is returned.
    """
    if not bn.training and getattr(bn, "running_mean", None) is not None:
        return bn(f)
    if not cpu_path(f):
        return _batch_norm_masked_moments(bn, f, visible)
    rows = f.permute(0, 2, 3, 1)[visible]  # (N visible, C)
    rows = bn(rows[:, :, None, None]).flatten(1)  # statistics (and running ones) over N
    out = f.new_zeros(f.shape[0], f.shape[2], f.shape[3], f.shape[1])
    return out.index_put((visible,), rows).permute(0, 3, 1, 2)


def _batch_norm_masked_moments(bn: nn.Module, f: Tensor, visible: Tensor) -> Tensor:
    """:func:`_batch_norm_visible` without boolean indexing, for an accelerator.

    The visible positions' mean and biased variance as sums weighted by the mask (the
    same numbers up to float rounding, with no host read of how many positions are
    visible), normalised, scaled and shifted as ``BatchNorm2d`` does; the running statistics
    take the unbiased variance and the module's momentum (``None``: the cumulative mean).
    """
    w = visible.unsqueeze(1).to(f.dtype)  # (B, 1, h, w)
    n = w.sum()
    mean = (f * w).sum(dim=(0, 2, 3)) / n
    centred = (f - mean.view(1, -1, 1, 1)) * w
    var = centred.pow(2).sum(dim=(0, 2, 3)) / n
    out = centred * torch.rsqrt(var + bn.eps).view(1, -1, 1, 1)
    if bn.affine:
        out = out * bn.weight.view(1, -1, 1, 1) + bn.bias.view(1, -1, 1, 1) * w
    if bn.track_running_stats and bn.running_mean is not None:
        with torch.no_grad():
            bn.num_batches_tracked.add_(1)
            m = (
                1.0 / bn.num_batches_tracked.to(f.dtype)
                if bn.momentum is None
                else torch.tensor(bn.momentum, dtype=f.dtype, device=f.device)
            )
            unbiased = var.detach() * n / (n - 1).clamp_min(1)
            bn.running_mean.lerp_(mean.detach().to(bn.running_mean.dtype), m)
            bn.running_var.lerp_(unbiased.to(bn.running_var.dtype), m)
    return out


def _run_visible(layers: Iterable[nn.Module], f: Tensor, visible: Tensor) -> Tensor:
    """Apply ``layers`` in order, BatchNorms through :func:`_batch_norm_visible`."""
    for layer in layers:
        norm = isinstance(layer, nn.BatchNorm2d)
        f = _batch_norm_visible(layer, f, visible) if norm else layer(f)
    return f


class ConvMixerPrimaryCaps(nn.Module):
    """timm ``ConvMixer`` (patch-embedding stem) + point-wise primary capsules.

    Args:
        in_chans: Image channels.
        patch_size: Stem kernel and stride.
        dim: ConvMixer width.
        depth: ConvMixer blocks.
        kernel_size: Depthwise kernel of the blocks.
        primary_caps: Capsules per position ``A``.
        caps_dim: Pose dimension ``D``.
        mask_mode: ``"removed"`` (masked positions take no part, the paper's section
            3.1) or ``"pixels_zeroed"`` (ours: masked pixels set to 0 before the
            backbone); see the module docstring.
    """

    def __init__(
        self,
        in_chans: int,
        patch_size: int,
        dim: int,
        depth: int,
        kernel_size: int,
        primary_caps: int,
        caps_dim: int,
        mask_mode: MaskMode = "removed",
    ) -> None:
        super().__init__()
        _check_mask_mode(mask_mode)
        from timm.models.convmixer import ConvMixer  # timm imports all its models: lazily

        self.mixer = ConvMixer(
            dim, depth, kernel_size=kernel_size, patch_size=patch_size, in_chans=in_chans,
            num_classes=0, global_pool="",
        )  # fmt: skip
        self.pose = nn.Sequential(nn.Conv2d(dim, primary_caps * caps_dim, 1), nn.BatchNorm2d(
            primary_caps * caps_dim))  # fmt: skip
        self.act = nn.Sequential(nn.Conv2d(dim, primary_caps, 1), nn.BatchNorm2d(primary_caps))
        self.patch_size, self.primary_caps, self.caps_dim = patch_size, primary_caps, caps_dim
        self.mask_mode = mask_mode
        self.num_features = dim

    def _grid(self, x: Tensor) -> tuple[int, int]:
        """``(h, w)`` positions of the feature map of images ``x``."""
        return x.shape[-2] // self.patch_size, x.shape[-1] // self.patch_size

    def _visible(self, x: Tensor, masking: Masking) -> Tensor:
        """``(B, h, w)`` bool: True at the visible positions."""
        return ~masking.mask.view(x.shape[0], *self._grid(x))

    def _features_removed(self, x: Tensor, visible: Tensor) -> Tensor:
        """The ConvMixer on the visible positions only (``mask_mode="removed"``).

        Features are zeroed at the masked positions after the stem and after every
        block, so the depthwise convolutions read zeros there (a sparse convolution on
        the visible positions); BatchNorm statistics cover the visible positions only.
        """
        keep = visible.unsqueeze(1).to(x.dtype)
        mixer = self.mixer
        f = _run_visible(mixer.stem, x, visible) * keep
        for block in mixer.blocks:  # Residual(depthwise, GELU, BN), 1x1 conv, GELU, BN
            residual, *pointwise = block
            f = _run_visible(residual.fn, f, visible) + f  # depthwise reads zeros where masked
            f = _run_visible(pointwise, f, visible) * keep  # point-wise: zero the masked again
        return f

    def features(self, x: Tensor, masking: Masking | None) -> Tensor:
        """The backbone feature map ``(B, dim, h, w)``, masked as ``mask_mode`` says.

        With ``mask_mode="removed"`` the masked positions of the map hold 0.
        """
        if masking is None:
            return self.mixer.forward_features(x)
        if self.mask_mode == "removed":
            return self._features_removed(x, self._visible(x, masking))
        pixels = _pixel_mask(masking.mask, self._grid(x), self.patch_size)
        return self.mixer.forward_features(x * (1.0 - pixels.to(x.dtype)))

    def forward(self, x: Tensor, masking: Masking | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """``(poses (B, K, A, D), activations (B, K, A), backbone (B, K, dim))`` of kept positions.

        Without ``masking`` every position is kept (``K = L``).
        """
        f = self.features(x, masking)
        B = f.shape[0]
        if masking is not None and self.mask_mode == "removed":
            visible = self._visible(x, masking)
            pose, act = _run_visible(self.pose, f, visible), _run_visible(self.act, f, visible)
        else:
            pose, act = self.pose(f), self.act(f)
        pose = pose.flatten(2).transpose(1, 2)  # (B, L, A*D)
        act = torch.sigmoid(act).flatten(2).transpose(1, 2)  # (B, L, A)
        feat = f.flatten(2).transpose(1, 2)
        if masking is not None:
            pose, act, feat = (gather_positions(t, masking.ids_keep) for t in (pose, act, feat))
        return pose.reshape(B, -1, self.primary_caps, self.caps_dim), act, feat


class ViTPrimaryCaps(nn.Module):
    """timm ViT blocks on patch tokens; a token of width ``A * D`` is reshaped into poses.

    Masked tokens are removed after the patch embedding and position embedding,
    before the blocks (MAE). Activations are ``sigmoid(Linear(token))``.

    Args:
        img_size: Image side.
        in_chans: Image channels.
        patch_size: Patch side.
        depth: Transformer blocks.
        num_heads: Attention heads (must divide ``primary_caps * caps_dim``).
        primary_caps: Capsules per position ``A``.
        caps_dim: Pose dimension ``D``.
    """

    def __init__(
        self,
        img_size: int,
        in_chans: int,
        patch_size: int,
        depth: int,
        num_heads: int,
        primary_caps: int,
        caps_dim: int,
    ) -> None:
        super().__init__()
        width = primary_caps * caps_dim
        if width % num_heads:
            raise ValueError(
                f"the ViT token width primary_caps * caps_dim = {width} is not divisible by "
                f"num_heads = {num_heads}"
            )
        from timm.models.vision_transformer import VisionTransformer

        self.vit = VisionTransformer(
            img_size=img_size, patch_size=patch_size, in_chans=in_chans, num_classes=0,
            global_pool="", embed_dim=width, depth=depth, num_heads=num_heads,
            class_token=False,
        )  # fmt: skip
        self.act = nn.Linear(width, primary_caps)
        self.primary_caps, self.caps_dim = primary_caps, caps_dim
        self.num_features = width

    def forward(self, x: Tensor, masking: Masking | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """``(poses (B, K, A, D), activations (B, K, A), tokens (B, K, A * D))``."""
        v = self.vit
        tokens = v.pos_drop(v.patch_embed(x) + v.pos_embed)
        if masking is not None:
            tokens = gather_positions(tokens, masking.ids_keep)
        tokens = v.norm(v.blocks(v.norm_pre(tokens)))
        B, K, _ = tokens.shape
        pose = tokens.reshape(B, K, self.primary_caps, self.caps_dim)
        return pose, torch.sigmoid(self.act(tokens)), tokens


# --------------------------------------------------------------------------- capsule layers
def _self_routing(core: nn.Module, pose: Tensor, act: Tensor) -> tuple[Tensor, Tensor]:
    """:func:`fused_self_routing` with the parameters of a self-routing layer's ``core``.

    Args:
        core: The ``core`` of a :class:`~selfcaps.caps.SelfRouting1d` (kernel 1) or
            :class:`~selfcaps.caps.SelfRoutingDense`.
        pose: Child poses ``(B, N, C)``.
        act: Child activations ``(B, N)``.
    """
    return fused_self_routing(
        pose, act, core.weight_pose, core.weight_route, core.bias_route, core.eps
    )


class CapsuleEncoder(nn.Module):
    """Point-wise self-routing layers (paper eqs. 1-3), each followed by BatchNorm of the poses.

    Args:
        in_caps: Primary capsules per position.
        caps: Capsules per position of every layer.
        caps_dim: Pose dimension (kept through the layers).
        layers: Number of layers.

    Attributes:
        fused: Route with :func:`~selfcaps.caps.fused_self_routing.fused_self_routing`
            (default; every position is a sample of ``A`` children); False uses the
            readable :class:`~selfcaps.caps.SelfRouting1d` forward. Same values and
            gradients (tested in float64).
    """

    def __init__(self, in_caps: int, caps: int, caps_dim: int, layers: int) -> None:
        super().__init__()
        sizes = [in_caps] + [caps] * layers
        self.layers = nn.ModuleList(
            SelfRouting1d(a, b, caps_dim, caps_dim) for a, b in itertools.pairwise(sizes)
        )
        self.norms = nn.ModuleList(nn.BatchNorm1d(caps * caps_dim) for _ in range(layers))
        self.fused = True

    def forward(self, pose: Tensor, act: Tensor) -> tuple[Tensor, Tensor]:
        """Map ``(B, K, A, D)`` poses and ``(B, K, A)`` activations; positions never mix."""
        for layer, norm in zip(self.layers, self.norms, strict=True):
            if self.fused:
                B, K, A, D = pose.shape
                v, a = _self_routing(layer.core, pose.reshape(B * K, A, D), act.reshape(B * K, A))
                pose, act = v.reshape(B, K, *v.shape[1:]), a.reshape(B, K, -1)
            else:
                pose, act = layer(pose, act)
            shape = pose.shape
            pose = norm(pose.reshape(-1, shape[2] * shape[3])).view(shape)
        return pose, act


class CapsuleDecoder(nn.Module):
    """Mask token, global self-routing layer, BatchNorm of its poses, linear layer to pixels.

    Args:
        positions: ``L``.
        in_caps: Encoder capsules per position.
        in_dim: Encoder pose dimension.
        caps: Decoder capsules per position.
        caps_dim: Decoder pose dimension.
        patch_pixels: Outputs per position (``p * p * C``).
        linear: ``"shared"`` (the paper's Fig. 1, "decoded by a single linear layer to
            the original patch dimensions": one ``nn.Linear`` applied at every position)
            or ``"per_position"`` (ours: a separate linear layer per position, ``L``
            times the parameters).

    Attributes:
        fused: Route with :func:`~selfcaps.caps.fused_self_routing.fused_self_routing`
            (default), which never stores the ``L * A x L * caps`` vote tensor; False
            uses the readable :class:`~selfcaps.caps.SelfRoutingDense` forward. Both
            compute the same values and gradients (tested in float64).
    """

    def __init__(
        self,
        positions: int,
        in_caps: int,
        in_dim: int,
        caps: int,
        caps_dim: int,
        patch_pixels: int,
        linear: DecoderLinear = "shared",
    ) -> None:
        super().__init__()
        if linear not in ("shared", "per_position"):
            raise ValueError(f"linear must be 'shared' or 'per_position', got {linear!r}")
        self.mask_pose = nn.Parameter(torch.empty(in_caps, in_dim))
        nn.init.normal_(self.mask_pose, std=0.02)
        # softmax(0) = 1 / in_caps: the scale of an encoder position's activations,
        # which sum to one over its capsules (eq. 2).
        self.mask_act_logits = nn.Parameter(torch.zeros(in_caps))
        self.route = SelfRoutingDense(
            positions * in_caps, positions * caps, in_dim, caps_dim, out_positions=positions
        )
        self.norm = nn.BatchNorm1d(caps * caps_dim)
        self.linear, self.fused = linear, True
        fan_in = caps * caps_dim
        if linear == "shared":
            self.head = nn.Linear(fan_in, patch_pixels)
        else:
            bound = 1.0 / math.sqrt(fan_in)  # nn.Linear's initialisation, per position
            self.weight = nn.Parameter(torch.empty(positions, fan_in, patch_pixels).uniform_(
                -bound, bound))  # fmt: skip
            self.bias = nn.Parameter(torch.empty(positions, patch_pixels).uniform_(-bound, bound))

    def _route(self, pose: Tensor, act: Tensor) -> Tensor:
        """Poses ``(B, L, caps, caps_dim)`` of the global self-routing layer."""
        if not self.fused:
            return self.route(pose, act)[0]
        B = pose.shape[0]
        v, _ = _self_routing(
            self.route.core, pose.reshape(B, -1, pose.shape[-1]), act.reshape(B, -1)
        )
        return v.reshape(B, self.route.out_positions, -1, v.shape[-1])

    def forward(self, pose: Tensor, act: Tensor, ids_restore: Tensor) -> Tensor:
        """Visible ``(B, K, A, D)`` poses and activations to patch pixels ``(B, L, P)``."""
        full_pose = restore_positions(pose, self.mask_pose, ids_restore)
        full_act = restore_positions(act, torch.softmax(self.mask_act_logits, 0), ids_restore)
        out_pose = self._route(full_pose, full_act)  # (B, L, caps, caps_dim)
        B, L = out_pose.shape[:2]
        flat = self.norm(out_pose.reshape(B * L, -1)).view(B, L, -1)
        if self.linear == "shared":
            return self.head(flat)
        return torch.baddbmm(self.bias.unsqueeze(1), flat.transpose(0, 1), self.weight).transpose(
            0, 1
        )


class ClassCapsules(nn.Module):
    r"""Point-wise self-routing to one capsule per class: activations only, averaged over positions.

    At each position the encoder's ``A`` capsules route to the classes with
    :math:`c_{ij} = \operatorname{softmax}_j(W^{route}_i u_i + b_i)` (eq. 1) and
    the class activations are :math:`a_j = \sum_i c_{ij} a_i / \sum_i a_i` (eq. 2);
    their mean over positions is the prediction (paper section 3.2: the class layer
    "averages the activations of each capsule type across all spatial positions").
    The class *poses* of eq. 3 are not computed: nothing reads them (the loss, eq. 5,
    is on the averaged activations), so the layer holds no pose matrices.

    Args:
        in_caps: Encoder capsules per position.
        in_dim: Encoder pose dimension.
        num_classes: Class capsules.
        eps: Epsilon of the division of eq. 2.
    """

    def __init__(self, in_caps: int, in_dim: int, num_classes: int, eps: float = 1e-8) -> None:
        super().__init__()
        # Zero-initialised like every self-routing layer's routing parameters: uniform start.
        self.weight_route = nn.Parameter(torch.zeros(in_caps, in_dim, num_classes))
        self.bias_route = nn.Parameter(torch.zeros(in_caps, num_classes))
        self.eps = eps

    def forward(self, pose: Tensor, act: Tensor) -> Tensor:
        """Class probabilities ``(B, num_classes)`` from poses and activations of every position."""
        logits = torch.einsum("blad,adk->blak", pose, self.weight_route) + self.bias_route
        c = torch.softmax(logits, dim=-1)  # eq. 1
        class_act = (c * act.unsqueeze(-1)).sum(2) / (act.sum(2, keepdim=True) + self.eps)
        return class_act.mean(dim=1)


# --------------------------------------------------------------------------- network
class MaskedReconstruction(NamedTuple):
    """Output of :meth:`MCAENet.forward_pretrain`.

    Attributes:
        pred: ``(B, L, P)`` predicted pixels of every patch.
        target: ``(B, L, P)`` the input's patches.
        mask: ``(B, L)`` bool, True where masked.
    """

    pred: Tensor
    target: Tensor
    mask: Tensor


class MCAENet(nn.Module):
    """Masked Capsule Autoencoder (see the module docstring).

    Args:
        img_size: Input side (square images; a multiple of ``patch_size``).
        in_chans: Image channels.
        num_classes: Class capsules of the finetuning head.
        backbone: ``"convmixer"`` or ``"vit"``.
        patch_size: Patch side (the ConvMixer stem's kernel and stride).
        dim: ConvMixer width (ignored by the ViT, whose width is ``primary_caps * caps_dim``).
        depth: Backbone blocks.
        kernel_size: ConvMixer depthwise kernel.
        num_heads: ViT attention heads.
        primary_caps: Primary capsules per position.
        caps_dim: Pose dimension of the primary and encoder capsules.
        encoder_layers: Point-wise self-routing layers.
        encoder_caps: Capsules per position of each encoder layer.
        decoder_caps: Capsules per position of the decoder's global layer.
        decoder_dim: Their pose dimension.
        decoder_linear: ``"shared"`` (the paper's single linear layer) or
            ``"per_position"`` (ours), see :class:`CapsuleDecoder`.
        mask_ratio: Default fraction of masked positions in :meth:`forward_pretrain`.
        mask_mode: How the ConvMixer keeps masked patches out: ``"removed"`` (the
            paper's section 3.1: they take no part in the computation) or
            ``"pixels_zeroed"`` (ours: their pixels are zeroed before the backbone);
            see the module docstring. The ViT always removes masked tokens.
        target: What the decoder regresses: ``"pixels"`` (paper eq. 4, "the actual pixel
            values": the input with the normalisation ``x * pixel_std + pixel_mean``
            undone) or ``"normalized"`` (ours: the network's normalised input).
        pixel_mean: Per-channel mean the input was normalised with (``None``: the input
            holds the pixel values already).
        pixel_std: Per-channel standard deviation of that normalisation.
        decoder: Build the decoder (False for a finetuned classifier, which drops it).

    Examples:
        >>> net = MCAENet(img_size=16, patch_size=4, dim=16, primary_caps=4, caps_dim=4,
        ...               encoder_caps=4, decoder_caps=2, decoder_dim=4)
        >>> x = torch.randn(2, 3, 16, 16)
        >>> out = net.forward_pretrain(x)
        >>> out.pred.shape, int(out.mask.sum()), net(x).shape
        (torch.Size([2, 16, 48]), 16, torch.Size([2, 10]))
    """

    def __init__(
        self,
        img_size: int = 32,
        in_chans: int = 3,
        num_classes: int = 10,
        backbone: Backbone = "convmixer",
        patch_size: int = 4,
        dim: int = 256,
        depth: int = 4,
        kernel_size: int = 9,
        num_heads: int = 4,
        primary_caps: int = 16,
        caps_dim: int = 16,
        encoder_layers: int = 3,
        encoder_caps: int = 16,
        decoder_caps: int = 4,
        decoder_dim: int = 16,
        decoder_linear: DecoderLinear = "shared",
        mask_ratio: float = 0.5,
        mask_mode: MaskMode = "removed",
        target: Target = "pixels",
        pixel_mean: Sequence[float] | None = None,
        pixel_std: Sequence[float] | None = None,
        decoder: bool = True,
    ) -> None:
        super().__init__()
        if img_size % patch_size:
            raise ValueError(f"img_size {img_size} is not a multiple of patch_size {patch_size}")
        if target not in ("pixels", "normalized"):
            raise ValueError(f"target must be 'pixels' or 'normalized', got {target!r}")
        self.target = target
        mean = torch.zeros(in_chans) if pixel_mean is None else torch.tensor(pixel_mean)
        std = torch.ones(in_chans) if pixel_std is None else torch.tensor(pixel_std)
        if mean.shape != (in_chans,) or std.shape != (in_chans,):
            raise ValueError(
                f"pixel_mean / pixel_std need {in_chans} values (one per channel), got "
                f"{pixel_mean} / {pixel_std}"
            )
        # Not in the state dict: they come with the data, not with training.
        self.register_buffer("pixel_mean", mean.float().view(1, -1, 1, 1), persistent=False)
        self.register_buffer("pixel_std", std.float().view(1, -1, 1, 1), persistent=False)
        self.img_size, self.in_chans, self.patch_size = img_size, in_chans, patch_size
        self.grid = (img_size // patch_size, img_size // patch_size)
        self.num_positions = self.grid[0] * self.grid[1]
        self.mask_ratio = mask_ratio
        self.backbone: ConvMixerPrimaryCaps | ViTPrimaryCaps
        if backbone == "convmixer":
            self.backbone = ConvMixerPrimaryCaps(
                in_chans, patch_size, dim, depth, kernel_size, primary_caps, caps_dim, mask_mode
            )
        elif backbone == "vit":
            _check_mask_mode(mask_mode)
            self.backbone = ViTPrimaryCaps(
                img_size, in_chans, patch_size, depth, num_heads, primary_caps, caps_dim
            )
        else:
            raise ValueError(f"backbone must be 'convmixer' or 'vit', got {backbone!r}")
        self.encoder = CapsuleEncoder(primary_caps, encoder_caps, caps_dim, encoder_layers)
        self.decoder = (
            CapsuleDecoder(
                self.num_positions, encoder_caps, caps_dim, decoder_caps, decoder_dim,
                patch_size * patch_size * in_chans, decoder_linear,
            )
            if decoder
            else None
        )  # fmt: skip
        self.class_caps = ClassCapsules(encoder_caps, caps_dim, num_classes)
        self.num_classes = num_classes
        self.num_features = self.backbone.num_features

    def use_fused_routing(self, enabled: bool) -> MCAENet:
        """Route the encoder and decoder fused (default) or through the readable layers.

        Both give the same values and gradients; the readable path is what tests
        compare against and what FLOP counters see op by op.
        """
        self.encoder.fused = enabled
        if self.decoder is not None:
            self.decoder.fused = enabled
        return self

    def _check_input(self, x: Tensor, exact: bool) -> None:
        ok = x.dim() == 4 and x.shape[1] == self.in_chans
        if exact:
            ok = ok and tuple(x.shape[-2:]) == (self.img_size, self.img_size)
        if not ok:
            size = f"{self.img_size}, {self.img_size}" if exact else "H, W"
            raise ValueError(
                f"MCAENet expects images (B, {self.in_chans}, {size}), got {tuple(x.shape)}"
            )

    def encode(self, x: Tensor, masking: Masking | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """Encoder capsules of the kept positions: ``(poses, activations, backbone features)``."""
        self._check_input(x, exact=masking is not None or isinstance(self.backbone, ViTPrimaryCaps))
        pose, act, feat = self.backbone(x, masking)
        pose, act = self.encoder(pose, act)
        return pose, act, feat

    def forward_pretrain(
        self,
        x: Tensor,
        mask_ratio: float | None = None,
        generator: torch.Generator | None = None,
    ) -> MaskedReconstruction:
        """Mask, encode the visible positions, decode every patch.

        Args:
            x: Images ``(B, C, img_size, img_size)``.
            mask_ratio: Fraction of masked positions (default: the network's).
            generator: RNG of the masking (default: the global RNG).
        """
        if self.decoder is None:
            raise RuntimeError("this MCAENet was built without its decoder (decoder=False)")
        ratio = self.mask_ratio if mask_ratio is None else mask_ratio
        masking = random_masking(x.shape[0], self.num_positions, ratio, x.device, generator)
        pose, act, _ = self.encode(x, masking)
        pred = self.decoder(pose, act, masking.ids_restore)
        if self.target == "pixels":
            # The linear layer's outputs are read in the input's normalised units and mapped to
            # pixel values: still one affine map of the poses (Fig. 1), but it starts near the
            # dataset mean instead of 0 (see the module docstring).
            P = pred.shape[-1]
            std = self.pixel_std.to(pred.dtype).flatten().repeat(P // self.in_chans)
            mean = self.pixel_mean.to(pred.dtype).flatten().repeat(P // self.in_chans)
            pred = pred * std + mean
        return MaskedReconstruction(
            pred, patchify(self.target_images(x), self.patch_size), masking.mask
        )

    def target_images(self, x: Tensor) -> Tensor:
        """What the decoder regresses for input ``x``: its pixel values, or ``x`` itself."""
        if self.target == "normalized":
            return x
        return x * self.pixel_std.to(x.dtype) + self.pixel_mean.to(x.dtype)

    def forward_features(self, x: Tensor) -> Tensor:
        """Backbone features averaged over positions, ``(B, num_features)``."""
        return self.encode(x)[2].mean(dim=1)

    def capsule_features(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Encoder ``(poses (B, L, A, D), activations (B, L, A))`` of every position."""
        pose, act, _ = self.encode(x)
        return pose, act

    def forward(self, x: Tensor) -> Tensor:
        """Class probabilities ``(B, num_classes)`` (class activations averaged over positions)."""
        return self.class_caps(*self.capsule_features(x))

    def reconstruct(self, out: MaskedReconstruction) -> tuple[Tensor, Tensor]:
        """Images ``(masked input, reconstruction with the visible patches pasted in)``.

        Both are in the target's space (:meth:`target_images`): pixel values for
        ``target="pixels"``.
        """
        keep = (~out.mask).unsqueeze(-1).to(out.pred.dtype)
        masked = unpatchify(out.target * keep, self.patch_size, self.grid, self.in_chans)
        pasted = out.pred * (1 - keep) + out.target * keep
        return masked, unpatchify(pasted, self.patch_size, self.grid, self.in_chans)


@register_model
def mcae(**kwargs: object) -> MCAENet:
    """MCAE with the ConvMixer backbone (see :class:`MCAENet` for the arguments).

    Args:
        **kwargs: Overrides of :class:`MCAENet`'s arguments.
    """
    return MCAENet(**kwargs)  # type: ignore[arg-type]
