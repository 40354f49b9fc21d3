r"""SparseCaps' network: a capsule autoencoder made sparse by ranking its latent capsules.

From "Sparse Unsupervised Capsules Generalize Better" (Rawlinson, Ahmed and
Kowadlo, 2018; reference code github.com/ProjectAGI/sparse-unsupervised-capsules,
TensorFlow, built on Sabour et al.'s capsules code).

Geometry (Sabour et al. 2017, as in the reference code):

* ``conv1``: 9x9 convolution, 256 filters, stride 1, valid, ReLU;
* primary capsules: 9x9 convolution, stride 2, valid, 32 types x 8-D, squash
  (6x6 positions for a 28x28 input, 12x12 for the 40x40 canvas);
* latent capsules: ``L = 16`` capsules x 16-D, fully connected from every
  primary capsule, 3 iterations of dynamic routing (transform matrices N(0, 0.1));
* decoder: the (masked) latent capsules, flattened, through FC 512 ReLU ->
  FC 1024 ReLU -> FC pixels, sigmoid.

Sparsening (paper section 2.2):

* routing support :math:`\psi_{jk}` of latent capsule ``j`` for sample ``k``
  (:func:`routing_support`), from the final coupling coefficients;
* boosted support :math:`z_{jk} = \psi_{jk} g_j` (eq. 1), rank :math:`r_{jk}`
  of ``j`` among the ``L`` capsules of sample ``k``, 0 = most support (eq. 2),
  mask :math:`m_{jk} = e^{-\gamma r_{jk} / (L - 1)}` with values below a
  threshold set to zero (eq. 3), decoder input :math:`v'_j = m_{jk} v_j` (eq. 4)
  (:func:`rank_capsules`, :func:`sparse_mask`);
* lifetime boosting (eqs. 5-7, Algorithm 1) of the boost values :math:`g_j`
  from the frequency with which each capsule wins (:class:`LifetimeBoost`).

Variants (``variant``): ``"sparse"`` (the method), ``"dense"`` (no mask: the
paper's failing ablation) and ``"supervised"`` (SUPCAPS, Sabour et al.'s
CapsNet: one latent capsule per class, the decoder sees only the label's
capsule in training and the longest capsule otherwise).

Deliberate differences from the reference code: the latent layer has no
bias (the TF code adds a learned bias before the squash; Sabour et al.'s paper
has none), the primary capsules are a plain convolution (the TF code's
one-iteration "routing" there divides the convolution by the 32 types, a
re-parameterisation), and layers other than the routing matrices keep
PyTorch's default initialisation.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from selfcaps.caps import DenseCaps, PrimaryCaps2d, caps_length
from selfcaps.config.checks.sparsecaps import SUPPORTS, VARIANTS
from selfcaps.models._registry import register_model

__all__ = [
    "LifetimeBoost",
    "SparseCapsNet",
    "SparseCapsOutput",
    "rank_capsules",
    "routing_support",
    "sparse_mask",
    "sparsecaps",
    "winner_frequency",
]

Variant = Literal["sparse", "dense", "supervised"]
Support = Literal["paper", "chunk"]


def routing_support(coupling: Tensor, num_types: int, mode: Support = "paper") -> Tensor:
    r"""Routing support :math:`\psi_{jk}` of each latent capsule (paper section 2.2).

    ``mode="paper"`` (the paper's definition): the coupling coefficients
    :math:`c_{ij}` of the final routing iteration, maximised over the primary
    capsule types at each position and summed over positions,
    :math:`\psi_j = \sum_{p} \max_{t} c_{(t, p), j}`. Children are in selfcaps'
    type-major order ``i = t * P + p`` (``selfcaps.caps.layers``).

    ``mode="chunk"`` (the reference code): it reshapes the type-major children
    as if they were position-major, so its "max over types" is a maximum over
    chunks of ``num_types`` consecutive children (mostly neighbouring positions
    of one type), :math:`\psi_j = \sum_{q} \max_{0 \le s < T} c_{qT + s, j}`.

    Args:
        coupling: ``(B, N, L)`` coefficients, ``N = num_types * positions``.
        num_types: Primary capsule types ``T``.
        mode: ``"paper"`` or ``"chunk"``.

    Returns:
        ``(B, L)``.

    Examples:
        >>> c = torch.softmax(torch.randn(2, 3 * 4, 5), dim=-1)
        >>> routing_support(c, 3).shape
        torch.Size([2, 5])
    """
    B, N, L = coupling.shape
    if N % num_types:
        raise ValueError(f"{N} children are not a whole number of {num_types} types")
    if mode == "paper":
        return coupling.view(B, num_types, N // num_types, L).amax(dim=1).sum(dim=1)
    if mode == "chunk":
        return coupling.view(B, N // num_types, num_types, L).amax(dim=2).sum(dim=1)
    raise ValueError(f"support mode must be one of {SUPPORTS}, got {mode!r}")


def rank_capsules(z: Tensor) -> Tensor:
    """Rank :math:`r_{jk}` of each capsule within its sample, 0 = largest (eq. 2).

    Ties go to the lower index (as ``tf.nn.top_k`` in the reference code).

    Args:
        z: ``(B, L)`` boosted support.

    Returns:
        ``(B, L)`` int64 ranks, a permutation of ``0 .. L-1`` per row.

    Examples:
        >>> rank_capsules(torch.tensor([[0.2, 0.9, 0.5]]))
        tensor([[2, 0, 1]])
    """
    order = torch.argsort(z, dim=1, descending=True, stable=True)
    return torch.argsort(order, dim=1)


def sparse_mask(ranks: Tensor, gamma: float = 12.0, threshold: float = 0.01) -> Tensor:
    r"""Mask :math:`m_{jk} = e^{-\gamma r_{jk} / (L - 1)}`, zero below ``threshold`` (eq. 3).

    Args:
        ranks: ``(B, L)`` ranks from :func:`rank_capsules`.
        gamma: Steepness :math:`\gamma` (12 in the paper).
        threshold: Mask values below this are set to 0 (0.01 in the paper).

    Returns:
        ``(B, L)`` float mask; the top-ranked capsule gets 1.

    Examples:
        >>> sparse_mask(torch.tensor([[0, 1, 2, 3]]))
        tensor([[1.0000, 0.0183, 0.0000, 0.0000]])
    """
    L = ranks.shape[1]
    m = torch.exp(-gamma * ranks.float() / max(L - 1, 1))
    return torch.where(m < threshold, torch.zeros_like(m), m)


def winner_frequency(ranks: Tensor) -> Tensor:
    r"""Fraction of the batch in which each capsule has rank 0 (eq. 5, divided by ``K`` only).

    Eq. 5 divides the count by :math:`K \cdot J`; like the reference code
    (``winning_frequency``) this divides by the batch size ``K`` alone, so that
    the frequencies sum to 1 and the paper's bounds 0.04 .. 0.1 bracket the
    uniform 1/16 ("calculating the uniform frequency as a midpoint", section 4).

    Args:
        ranks: ``(B, L)``.

    Returns:
        ``(L,)`` frequencies summing to 1.
    """
    return (ranks == 0).float().mean(dim=0)


class LifetimeBoost(nn.Module):
    r"""Lifetime boosting of the latent capsules (eqs. 5-7, Algorithm 1).

    After every training batch, the frequency :math:`f_j` with which capsule
    ``j`` had rank 0 (eq. 5) updates an exponential moving average
    :math:`\mu_j \leftarrow \alpha \mu_j + (1 - \alpha) f_j` (eqs. 6-7; as in the
    reference code, the first batch initialises :math:`\mu_j = f_j`). Every
    ``every`` batches the boost values change (Algorithm 1):
    :math:`g_j \mathrel{+}= d` if :math:`\mu_j < \mu_{min}`, and
    :math:`g_j \leftarrow \max(1, g_j - d)` if :math:`\mu_j > \mu_{max}`.
    Capsules that rarely win get more support, so that all of them learn.

    All state is held in buffers (saved in checkpoints and ``state_dict``):
    ``boost`` (:math:`g`, starts at 1), ``freq_ema`` (:math:`\mu`), ``batches``
    (updates so far) and ``ema_started``.

    Args:
        num_caps: Latent capsules ``L``.
        ema_decay: :math:`\alpha` (0.99).
        every: ``N``, batches between boost updates (50).
        step: :math:`d` (0.1).
        min_freq: :math:`\mu_{min}` (paper 0.04; reference code 0.03).
        max_freq: :math:`\mu_{max}` (paper 0.1; reference code 0.12).
    """

    boost: Tensor
    freq_ema: Tensor
    batches: Tensor
    ema_started: Tensor

    def __init__(
        self,
        num_caps: int,
        ema_decay: float = 0.99,
        every: int = 50,
        step: float = 0.1,
        min_freq: float = 0.04,
        max_freq: float = 0.1,
    ) -> None:
        super().__init__()
        if not 0.0 <= ema_decay < 1.0:
            raise ValueError(f"ema_decay must be in [0, 1), got {ema_decay}")
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        if not 0.0 <= min_freq <= max_freq <= 1.0:
            raise ValueError(f"need 0 <= min_freq <= max_freq <= 1, got {min_freq}, {max_freq}")
        self.ema_decay, self.every, self.step = ema_decay, every, step
        self.min_freq, self.max_freq = min_freq, max_freq
        self.register_buffer("boost", torch.ones(num_caps))
        self.register_buffer("freq_ema", torch.zeros(num_caps))
        self.register_buffer("batches", torch.zeros((), dtype=torch.long))
        self.register_buffer("ema_started", torch.zeros((), dtype=torch.bool))

    @torch.no_grad()
    def update(self, freq: Tensor) -> None:
        """One batch of Algorithm 1: EMA of the winner frequencies, boosting every ``every``.

        Args:
            freq: ``(L,)`` winner frequencies of the batch (:func:`winner_frequency`).
        """
        freq = freq.to(self.freq_ema)
        # Branch-free (nothing read on the host): the first batch starts the EMA, and the
        # boost changes only on every ``every``-th batch.
        ema = self.freq_ema * self.ema_decay + (1.0 - self.ema_decay) * freq
        self.freq_ema.copy_(torch.where(self.ema_started, ema, freq))
        self.ema_started.fill_(True)
        self.batches += 1
        due = self.batches % self.every == 0
        self.boost.copy_(torch.where(due, self._boosted(), self.boost))

    @torch.no_grad()
    def apply_boost(self) -> None:
        """Algorithm 1: raise the boost of rare winners, lower (not below 1) that of common ones."""
        self.boost.copy_(self._boosted())

    def _boosted(self) -> Tensor:
        g = torch.where(self.freq_ema < self.min_freq, self.boost + self.step, self.boost)
        lowered = torch.clamp(g - self.step, min=1.0)
        return torch.where(self.freq_ema > self.max_freq, lowered, g)

    def extra_repr(self) -> str:
        """The settings."""
        return (
            f"alpha={self.ema_decay}, every={self.every}, d={self.step}, "
            f"mu_min={self.min_freq}, mu_max={self.max_freq}"
        )


@dataclass
class SparseCapsOutput:
    r"""Everything one forward pass computes.

    Attributes:
        capsules: Latent capsules ``v`` ``(B, L, D)``.
        support: Routing support :math:`\psi` ``(B, L)`` (no gradient).
        ranks: Ranks of the boosted support ``(B, L)``.
        mask: What multiplied the capsules for the decoder ``(B, L)``.
        recon: Reconstruction ``(B, C, H, W)`` in ``[0, 1]``.
    """

    capsules: Tensor
    support: Tensor
    ranks: Tensor
    mask: Tensor
    recon: Tensor


def _conv_out(size: int, kernel: int, stride: int) -> int:
    return (size - kernel) // stride + 1


class SparseCapsNet(nn.Module):
    r"""SparseCaps' capsule autoencoder (see the module docstring).

    Args:
        in_chans: Image channels.
        image_size: Side of the (square) input; 40 for the paper's canvas.
        variant: ``"sparse"``, ``"dense"`` or ``"supervised"``.
        num_classes: Classes (the number of latent capsules of ``"supervised"``).
        conv_channels: Filters of ``conv1`` (256).
        conv_kernel: Kernel of ``conv1`` (9).
        primary_types: Primary capsule types ``T`` (32).
        primary_dim: Primary capsule dimension (8).
        primary_kernel: Kernel of the primary capsules' convolution (9).
        primary_stride: Its stride (2).
        latent_caps: Latent capsules ``L`` of the unsupervised variants (16).
        latent_dim: Latent capsule dimension (16).
        routing_iters: Dynamic routing iterations (3).
        routing_init_std: Standard deviation of the N(0, std) routing matrices (0.1).
        decoder_widths: Hidden widths of the decoder (512, 1024).
        support: Routing support definition, ``"paper"`` or ``"chunk"`` (:func:`routing_support`).
        mask_gamma: :math:`\gamma` of eq. 3 (12).
        mask_threshold: Mask values below this become 0 (0.01).
        boost_ema: :math:`\alpha` of eqs. 6-7 (0.99).
        boost_every: ``N`` of Algorithm 1 (50).
        boost_step: :math:`d` of Algorithm 1 (0.1).
        boost_min_freq: :math:`\mu_{min}` (0.04).
        boost_max_freq: :math:`\mu_{max}` (0.1).

    Examples:
        >>> net = SparseCapsNet(conv_channels=16, primary_types=4, image_size=28).eval()
        >>> out = net(torch.rand(2, 1, 28, 28))
        >>> out.capsules.shape, out.recon.shape, net.num_features
        (torch.Size([2, 16, 16]), torch.Size([2, 1, 28, 28]), 256)
    """

    def __init__(
        self,
        in_chans: int = 1,
        image_size: int = 40,
        variant: Variant = "sparse",
        num_classes: int = 10,
        conv_channels: int = 256,
        conv_kernel: int = 9,
        primary_types: int = 32,
        primary_dim: int = 8,
        primary_kernel: int = 9,
        primary_stride: int = 2,
        latent_caps: int = 16,
        latent_dim: int = 16,
        routing_iters: int = 3,
        routing_init_std: float = 0.1,
        decoder_widths: tuple[int, ...] | list[int] = (512, 1024),
        support: Support = "paper",
        mask_gamma: float = 12.0,
        mask_threshold: float = 0.01,
        boost_ema: float = 0.99,
        boost_every: int = 50,
        boost_step: float = 0.1,
        boost_min_freq: float = 0.04,
        boost_max_freq: float = 0.1,
    ) -> None:
        super().__init__()
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
        if support not in SUPPORTS:
            raise ValueError(f"support must be one of {SUPPORTS}, got {support!r}")
        self.in_chans, self.image_size, self.variant = in_chans, image_size, variant
        self.support_mode, self.mask_gamma = support, mask_gamma
        self.mask_threshold = mask_threshold
        self.primary_types = primary_types
        side = _conv_out(_conv_out(image_size, conv_kernel, 1), primary_kernel, primary_stride)
        if side < 1:
            raise ValueError(f"a {image_size}x{image_size} input is too small for this network")
        self.positions = side * side
        self.num_caps = num_classes if variant == "supervised" else latent_caps
        self.caps_dim = latent_dim
        self.conv1 = nn.Conv2d(in_chans, conv_channels, conv_kernel)
        self.primary = PrimaryCaps2d(
            conv_channels, primary_types, primary_dim, primary_kernel, stride=primary_stride
        )
        self.latent = DenseCaps(
            primary_types * self.positions,
            primary_dim,
            self.num_caps,
            latent_dim,
            iters=routing_iters,
            init="normal",
            init_std=routing_init_std,
        )
        widths = [self.num_caps * latent_dim, *decoder_widths]
        layers: list[nn.Module] = []
        for a, b in itertools.pairwise(widths):
            layers += [nn.Linear(a, b), nn.ReLU(inplace=True)]
        layers += [nn.Linear(widths[-1], in_chans * image_size * image_size), nn.Sigmoid()]
        self.decoder = nn.Sequential(*layers)
        self.boosting = LifetimeBoost(
            self.num_caps, boost_ema, boost_every, boost_step, boost_min_freq, boost_max_freq
        )
        self.num_features = self.num_caps * latent_dim

    def _check_input(self, x: Tensor) -> None:
        expected = (self.in_chans, self.image_size, self.image_size)
        if x.dim() != 4 or tuple(x.shape[1:]) != expected:
            raise ValueError(
                f"SparseCapsNet expects images (B, {', '.join(map(str, expected))}), "
                f"got {tuple(x.shape)}"
            )

    def encode(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Latent capsules ``(B, L, D)`` and the routing support ``(B, L)`` of images ``x``."""
        self._check_input(x)
        primary = self.primary(F.relu(self.conv1(x)))
        v, c = self.latent(primary, return_coupling=True)
        return v, routing_support(c.detach(), self.primary_types, self.support_mode)

    def rank(self, support: Tensor) -> Tensor:
        r"""Ranks of the boosted support :math:`z = \psi g` (eqs. 1-2)."""
        return rank_capsules(support * self.boosting.boost)

    def feature_mask(self, capsules: Tensor, ranks: Tensor) -> Tensor:
        """The mask of the ``masked`` evaluation feature (no labels).

        Eq. 3 for the unsupervised variants (also for ``"dense"``, which does not
        train with it); the longest capsule for ``"supervised"`` (Sabour et al.'s
        test-time masking).
        """
        if self.variant == "supervised":
            return F.one_hot(caps_length(capsules).argmax(1), self.num_caps).to(capsules)
        return sparse_mask(ranks, self.mask_gamma, self.mask_threshold).to(capsules)

    def decoder_mask(self, capsules: Tensor, ranks: Tensor, labels: Tensor | None) -> Tensor:
        """What multiplies the capsules before the decoder (eq. 4).

        ``"sparse"``: eq. 3; ``"dense"``: ones; ``"supervised"``: the label's
        capsule when ``labels`` are given, else the longest capsule.
        """
        if self.variant == "dense":
            return torch.ones_like(ranks, dtype=capsules.dtype)
        if self.variant == "supervised" and labels is not None:
            return F.one_hot(labels, self.num_caps).to(capsules)
        return self.feature_mask(capsules, ranks)

    def decode(self, masked: Tensor) -> Tensor:
        """Reconstruction ``(B, C, H, W)`` from masked capsules ``(B, L, D)``."""
        flat = self.decoder(masked.flatten(1))
        return flat.view(-1, self.in_chans, self.image_size, self.image_size)

    def forward(self, x: Tensor, labels: Tensor | None = None) -> SparseCapsOutput:
        """Encode, rank, mask and reconstruct images ``x``.

        Args:
            x: Images ``(B, C, H, W)`` in ``[0, 1]``.
            labels: Class indices; used only by the ``"supervised"`` variant's mask.
        """
        v, psi = self.encode(x)
        ranks = self.rank(psi)
        mask = self.decoder_mask(v, ranks, labels)
        return SparseCapsOutput(v, psi, ranks, mask, self.decode(v * mask.unsqueeze(-1)))

    def forward_features(self, x: Tensor) -> Tensor:
        """The unmasked latent capsules, flattened: ``(B, num_features)``."""
        return self.encode(x)[0].flatten(1)


@register_model
def sparsecaps(**kwargs: object) -> SparseCapsNet:
    """SparseCaps' network with the paper's geometry (40x40 input, 16 latent capsules x 16-D).

    Args:
        **kwargs: Overrides of :class:`SparseCapsNet`'s arguments.
    """
    return SparseCapsNet(**kwargs)  # type: ignore[arg-type]
