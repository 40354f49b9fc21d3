"""EncapNet's feedback agreement unit: higher capsules regenerate lower ones (section 3.2, Fig. 3).

A unit holds

* a generator ``g_psi``: a "deconvolutional" capConv, ``ConvTranspose2d``
  (3x3, stride 2 when the higher map is half the lower map's size, else 1),
  BatchNorm and ReLU; when ``encapsulated`` the transposed convolution itself is
  grouped by capsule type (type t of the higher layer generates type t of the
  lower one) and its output squashed per capsule; it maps the higher capsules to
  the lower layer's shape;
* a feature extractor ``f_phi`` shared by both inputs: two 3x3 stride-2
  convolutions (channels ``C -> C/4 -> 1``) with BatchNorm and ReLU, reducing
  a ``C x H x W`` map to ``H/4 * W/4`` numbers (reference code ``critic``);
  ``extractor=False`` compares the flattened maps directly;
* a divergence between the two batches of features
  (:class:`~selfcaps.losses.sinkhorn.SinkhornDivergence` or
  :class:`~selfcaps.losses.sinkhorn.KLDivergence`).

Units are training-time regularisers: the network does not own them, so
neither its parameters nor its inference path change when they are used.

Off the CPU path (an accelerator) :func:`feedback_features` computes every unit's
features in fewer kernel launches, with the same values, gradients and BatchNorm state:
generators whose outputs have one shape share one ReLU and one squash (stacked along the
batch: both act per sample), each extractor runs each convolution once on its two inputs
stacked along the batch (while each BatchNorm still normalises each input with its own
statistics, in the CPU path's order), and the BatchNorms' batch counts are added in one op.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from selfcaps.caps.chunking import cpu_path
from selfcaps.caps.master_aide import (
    batch_norm,
    channels_last_conv,
    count_batches,
    deferred_counters,
    relu_squash_channels,
)

__all__ = ["CapsuleDeconv2d", "FeedbackAgreement", "feature_extractor", "feedback_features"]


class CapsuleDeconv2d(nn.Module):
    """The generator ``g_psi``: transposed convolution, BatchNorm, ReLU, squash if encapsulated.

    Args:
        in_channels: Channels of the higher capsules.
        out_channels: Channels of the lower capsules.
        upsample: 2 doubles the spatial size (stride 2), 1 keeps it.
        num_caps: Capsule types (the transposed convolution's groups, and squash); ``None`` = not
            encapsulated (a plain deconvolution, the reference code's default).

    Examples:
        >>> import torch
        >>> g = CapsuleDeconv2d(64, 32, upsample=2, num_caps=8)
        >>> g(torch.randn(2, 64, 4, 4)).shape
        torch.Size([2, 32, 8, 8])
    """

    def __init__(
        self, in_channels: int, out_channels: int, upsample: int, num_caps: int | None
    ) -> None:
        super().__init__()
        if upsample not in (1, 2):
            raise ValueError(f"upsample must be 1 or 2, got {upsample}")
        groups = num_caps or 1
        if in_channels % groups or out_channels % groups:
            raise ValueError(
                f"{in_channels} -> {out_channels} channels do not split into {groups} capsule types"
            )
        self.num_caps = num_caps
        self.deconv = nn.ConvTranspose2d(
            in_channels,
            out_channels,
            3,
            stride=upsample,
            padding=1,
            output_padding=upsample - 1,
            groups=groups,
            bias=False,
        )
        self.bn = nn.BatchNorm2d(out_channels)

    def preactivation(self, z: Tensor, count: bool = True) -> Tensor:
        """``BN(deconv(z))``: the generator before its ReLU and squash.

        Args:
            z: Higher capsules ``(B, C_hi, h, w)``.
            count: ``False`` leaves the BatchNorm's batch count to the caller
                (:func:`~selfcaps.caps.master_aide.batch_norm`).
        """
        return batch_norm(self.bn, channels_last_conv(self.deconv, z), count)

    def activate(self, x: Tensor) -> Tensor:
        """ReLU, then squash per capsule when encapsulated (acts on each sample alone)."""
        return relu_squash_channels(x, self.num_caps) if self.num_caps else x.relu()

    def forward(self, z: Tensor) -> Tensor:
        """Higher capsules ``(B, C_hi, h, w)`` -> ``(B, C_lo, h * upsample, w * upsample)``."""
        return self.activate(self.preactivation(z))


def feature_extractor(channels: int) -> nn.Sequential:
    """``f_phi``: ``C -> C/4 -> 1`` channels, two stride-2 3x3 convolutions with BN and ReLU."""
    mid = max(1, channels // 4)
    return nn.Sequential(
        nn.Conv2d(channels, mid, 3, stride=2, padding=1, bias=False),
        nn.BatchNorm2d(mid),
        nn.ReLU(),
        nn.Conv2d(mid, 1, 3, stride=2, padding=1, bias=False),
        nn.BatchNorm2d(1),
        nn.ReLU(),
        nn.Flatten(),
    )


class FeedbackAgreement(nn.Module):
    """``D(f_phi(g_psi(higher)), f_phi(lower))``: one feedback agreement unit.

    Args:
        higher_shape: ``(C, H, W)`` of the higher capsules (convolution layout).
        lower_shape: ``(C, H, W)`` of the lower capsules; ``H`` is the higher ``H``
            or twice it.
        divergence: Compares two ``(B, d)`` feature batches (generated, lower).
        num_caps: Capsule types of an encapsulated generator (``None``: plain deconvolution).
        extractor: Use ``f_phi`` (else compare the flattened maps).

    Examples:
        >>> import torch
        >>> from selfcaps.losses import SinkhornDivergence
        >>> unit = FeedbackAgreement((64, 4, 4), (32, 8, 8), SinkhornDivergence(), num_caps=8)
        >>> unit(torch.randn(6, 64, 4, 4), torch.randn(6, 32, 8, 8)).shape
        torch.Size([])
    """

    def __init__(
        self,
        higher_shape: tuple[int, int, int],
        lower_shape: tuple[int, int, int],
        divergence: nn.Module,
        num_caps: int | None = None,
        extractor: bool = True,
    ) -> None:
        super().__init__()
        (c_hi, h_hi, w_hi), (c_lo, h_lo, w_lo) = higher_shape, lower_shape
        if (h_lo, w_lo) not in ((h_hi, w_hi), (2 * h_hi, 2 * w_hi)):
            raise ValueError(
                f"lower capsules {lower_shape} must have the size of the higher ones "
                f"{higher_shape} or twice it"
            )
        self.generator = CapsuleDeconv2d(c_hi, c_lo, h_lo // h_hi, num_caps)
        self.extractor = feature_extractor(c_lo) if extractor else nn.Flatten()
        self.divergence = divergence

    def features(self, higher: Tensor, lower: Tensor) -> tuple[Tensor, Tensor]:
        """``(f_phi(g_psi(higher)), f_phi(lower))``: the feature batches the divergence compares."""
        if not cpu_path(higher):
            return feedback_features([self], [(higher, lower)])[0]
        return self.extractor(self.generator(higher)), self.extractor(lower)

    def extract_pair(self, generated: Tensor, lower: Tensor) -> tuple[Tensor, Tensor]:
        """``(f_phi(generated), f_phi(lower))`` with each convolution run once on both.

        The two inputs are stacked along the batch for the convolutions and the ReLUs (which
        act per sample); each BatchNorm normalises the two halves one after the other, as two
        calls of ``f_phi`` do (each with its own batch statistics, and its running statistics
        updated first by the generated half, then by the lower one). The BatchNorms leave their
        batch counts (two each) to the caller (:meth:`batch_counts`).
        """
        if not isinstance(self.extractor, nn.Sequential):
            return self.extractor(generated), self.extractor(lower)
        conv1, bn1, _, conv2, bn2, _, _ = self.extractor
        h = conv1(torch.cat([generated, lower]))
        h = torch.cat([batch_norm(bn1, half, False) for half in h.chunk(2)]).relu()
        h = conv2(h)
        h = torch.cat([batch_norm(bn2, half, False) for half in h.chunk(2)]).relu()
        gen, low = h.flatten(1).chunk(2)  # chunks: one cat in backward, not two pads and a sum
        return gen, low

    def batch_counts(self) -> tuple[list[Tensor], list[int]]:
        """The batch counters :func:`feedback_features` defers, and the calls of each.

        The generator's BatchNorm runs once a step, each extractor BatchNorm twice.
        """
        gen, ext = deferred_counters(self.generator), deferred_counters(self.extractor)
        return gen + ext, [1] * len(gen) + [2] * len(ext)

    def forward(self, higher: Tensor, lower: Tensor) -> Tensor:
        """The divergence between regenerated and actual lower capsules (scalar)."""
        return self.divergence(*self.features(higher, lower))


def feedback_features(
    units: Sequence[FeedbackAgreement], pairs: Sequence[tuple[Tensor, Tensor]]
) -> list[tuple[Tensor, Tensor]]:
    """Every unit's :meth:`FeedbackAgreement.features` of its ``(higher, lower)`` pair.

    On the CPU path unit by unit. Off it (module docstring): each generator's
    ``BN(deconv(higher))``, then one ReLU and squash per group of generators with equal
    output shapes and capsule types (their outputs stacked along the batch), each unit's
    extractor on its two inputs at once (:meth:`FeedbackAgreement.extract_pair`), and every
    BatchNorm's batch count in one op. The same values, gradients and module state as unit by
    unit, up to float rounding.

    Args:
        units: Feedback agreement units.
        pairs: Their ``(higher, lower)`` capsules, one pair per unit.

    Returns:
        Per unit, ``(f_phi(g_psi(higher)), f_phi(lower))``.
    """
    if cpu_path(pairs[0][0]):
        return [u.features(h, lo) for u, (h, lo) in zip(units, pairs, strict=True)]
    pre = [
        u.generator.preactivation(h, count=False) for u, (h, _) in zip(units, pairs, strict=True)
    ]
    groups: dict[tuple[object, ...], list[int]] = {}
    for i, (u, z) in enumerate(zip(units, pre, strict=True)):
        groups.setdefault((tuple(z.shape), u.generator.num_caps), []).append(i)
    generated: list[Tensor] = list(pre)
    for members in groups.values():
        stacked = torch.cat([pre[i] for i in members]) if len(members) > 1 else pre[members[0]]
        out = units[members[0]].generator.activate(stacked)
        for i, part in zip(members, out.chunk(len(members)), strict=True):
            generated[i] = part
    feats = [u.extract_pair(g, lo) for u, g, (_, lo) in zip(units, generated, pairs, strict=True)]
    counters: list[Tensor] = []
    times: list[int] = []
    for u in units:
        c, t = u.batch_counts()
        counters += c
        times += t
    count_batches(counters, times)
    return feats
