"""Products of expert capsules: the network of Hauser's PoE capsules (section 4.1, Fig. 1).

From "Training products of expert capsules with mixing by dynamic routing"
(M. Hauser, 2019, arXiv:1907.11643; no public code). The network has three
parts, trained one after the other by ``selfcaps.methods.poe``:

* a **tied-weight convolutional autoencoder** (stage 1): conv 9x9, 1 -> 128,
  leaky ReLU; conv 9x9, 128 -> 128, stride 2, leaky ReLU (28x28 -> 6x6x128);
  dropout on the code while it is trained; the decoder applies the transposed
  filters of the two convolutions (tied weights) with their own biases, a leaky
  ReLU between them and a sigmoid output;
* **primary capsules**: the 6x6x128 code grouped into 16 types x 8-D at each
  of the 36 positions (576 capsules, type-major as everywhere in selfcaps),
  squashed; :func:`~selfcaps.caps.unsquash` (eq. 6) inverts this exactly;
* a **capsule encoder** ``W_ij`` (576 x 8-D -> 20 x 16-D, stage 2) and a
  **capsule decoder** ``U_ji`` (20 x 16-D -> 576 x 8-D, stage 3), both
  :class:`RoutedCaps` layers: routing-by-agreement with cosine agreement and,
  by default, the paper's normalisation over children (``sum_i c_ij = 1``) for both;
  ``decoder_normalize`` sets U's apart (the ``center_parents_sparse`` preset of
  :mod:`selfcaps.methods.poe` routes W over parents and U over children).

Generation (section 4.2, Fig. 1): for capsule ``j`` draw ``s ~ N(0, I_16)``, "with the
other 19 capsules having 0 as their input"; squash, "dynamically route with the U_ji's to the
8-dimensional decoded capsule space, unsquash and reshape", and decode. ``generation="paper"``
(the default) does this literally: all 20 capsules, 19 of them zero, are routed through ``U``.
With cosine agreement and coefficients normalised over the 20 children, a zero capsule agrees
with nothing (cosine 0) and the active one fully (cosine 1), so after the three iterations the
active capsule's coefficient is ``e^2 / (e^2 + 19) = 0.280`` for every primary capsule (logits
0, 1, 2 over the iterations; tested by hand): its vote enters at 0.28 of its full size. In
training the 20 capsules are all on and each takes about 1/20, so a generated capsule's vote is
about 5.6 times its share in training, not smaller. ``generation="alone"`` (ours) routes only
capsule ``j``'s votes (coefficient 1). With ``normalize="parents"`` (a per-child softmax) the
zero capsules never change the active one's coefficients and both readings give the same
images. Restricted-domain sampling reflects each draw into the half-space of the mean
direction of capsule ``j`` over the training set (buffer :attr:`PoECapsNet.hemisphere`,
filled during stage 3).

**Centred codes** (``center=True``; off by default, a deviation from the paper):
the primary capsules are ``squash(code - m)`` and generation decodes
``unsquash(x) + m``, where ``m`` is the mean code of the training set
(buffer :attr:`PoECapsNet.code_mean`, measured during the first epoch of stage 2,
see :meth:`PoECapsNet.observe_codes`). The autoencoder's codes come out of a
leaky ReLU: most entries are its small negative values and the few large ones positive,
so every image's primary capsules point in nearly the same directions (the mean capsule
over images is about 90% as long as a typical one; ``experiments/poe_generation_readings.py``),
and without centring the data term of Algorithm 1 grows every
``W_ij`` along the mean code and every input gets the same capsules (measured
in docs/methods/poe.md). This is the centring trick for Boltzmann machines (Montavon and
Mueller, "Deep Boltzmann machines and the centering trick", 2012).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from selfcaps.caps import DenseCaps, dynamic_routing, squash, unsquash
from selfcaps.caps.routing import Agreement, Normalize
from selfcaps.models._registry import register_alias, register_model

#: How a single capsule is decoded: the paper's (the others routed with input 0) or ours.
Generation = Literal["paper", "alone"]

__all__ = ["PoECapsNet", "RoutedCaps", "TiedConvAutoencoder", "poe"]


class TiedConvAutoencoder(nn.Module):
    """Two-layer convolutional autoencoder whose decoder uses the encoder's filters.

    Args:
        in_chans: Image channels.
        image_size: Side of the square input images (the decoder restores it).
        channels: Channels of both convolutions.
        kernel_size: Kernel side of both convolutions.
        stride: Stride of the second convolution.
        negative_slope: Slope of the leaky ReLUs.
        dropout: Dropout probability on the code while training.

    Examples:
        >>> ae = TiedConvAutoencoder()
        >>> x = torch.rand(2, 1, 28, 28)
        >>> ae.encode(x).shape, ae.decode(ae.encode(x)).shape
        (torch.Size([2, 128, 6, 6]), torch.Size([2, 1, 28, 28]))
    """

    def __init__(
        self,
        in_chans: int = 1,
        image_size: int = 28,
        channels: int = 128,
        kernel_size: int = 9,
        stride: int = 2,
        negative_slope: float = 0.01,
        dropout: float = 0.2,
    ) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_chans, channels, kernel_size)
        self.conv2 = nn.Conv2d(channels, channels, kernel_size, stride=stride)
        self.dec_bias2 = nn.Parameter(torch.zeros(channels))
        self.dec_bias1 = nn.Parameter(torch.zeros(in_chans))
        self.dropout = nn.Dropout(dropout)
        self.stride, self.negative_slope = stride, negative_slope
        mid = image_size - kernel_size + 1
        self.code_size = (mid - kernel_size) // stride + 1
        if self.code_size < 1:
            raise ValueError(
                f"images of side {image_size} are too small for two {kernel_size}x"
                f"{kernel_size} convolutions"
            )
        # output_padding restores the rows the strided convolution dropped.
        self.output_padding = mid - ((self.code_size - 1) * stride + kernel_size)
        self.in_chans, self.image_size = in_chans, image_size

    def encode(self, x: Tensor) -> Tensor:
        """The code ``(B, channels, s, s)`` of images ``(B, C, H, W)`` in ``[0, 1]``."""
        if x.dim() != 4 or x.shape[1:] != (self.in_chans, self.image_size, self.image_size):
            raise ValueError(
                f"expected images (B, {self.in_chans}, {self.image_size}, {self.image_size}), "
                f"got {tuple(x.shape)}"
            )
        h = F.leaky_relu(self.conv1(x), self.negative_slope)
        return F.leaky_relu(self.conv2(h), self.negative_slope)

    def decode(self, code: Tensor) -> Tensor:
        """Images in ``[0, 1]`` from codes, through the transposed (tied) filters."""
        h = F.conv_transpose2d(
            code,
            self.conv2.weight,
            self.dec_bias2,
            stride=self.stride,
            output_padding=self.output_padding,
        )
        h = F.leaky_relu(h, self.negative_slope)
        return torch.sigmoid(F.conv_transpose2d(h, self.conv1.weight, self.dec_bias1))

    def forward(self, x: Tensor) -> Tensor:
        """Reconstruction of ``x`` (dropout on the code in training mode)."""
        return self.decode(self.dropout(self.encode(x)))


class RoutedCaps(DenseCaps):
    r"""A :class:`~selfcaps.caps.DenseCaps` layer with the extra uses Algorithm 1 needs.

    Children ``i`` vote :math:`\hat u_{j|i} = W_{ij} x_i` for parents ``j``;
    routing-by-agreement gives :math:`c_{ij}`, :math:`z_j = \sum_i c_{ij} W_{ij} x_i` and
    :math:`x_j = \mathrm{squash}(z_j)` (:meth:`route`); :meth:`forward_with` recomputes
    :math:`z_j` for given coefficients and :meth:`transpose` is the reconstruction
    :math:`\tilde z_i = \sum_j c_{ij} W_{ij}^\top x_j`. The weight keeps ``DenseCaps``'s GEMM
    layout ``(N, in_dim, M * out_dim)``; :attr:`matrices` views it as ``(N, M, out_dim,
    in_dim)`` (``matrices[i, j]`` is :math:`W_{ij}`). Defaults are the paper's: cosine
    agreement, coefficients normalised over children (``sum_i c_ij = 1``), and Algorithm 1's
    "W ~ N(0, 0.01)" read as a standard deviation of 0.01 (``init_std``; read as a variance,
    the standard deviation is 0.1: ``init_std=0.1``).

    Args:
        in_caps: Children ``N``.
        in_dim: Child capsule size.
        out_caps: Parents ``M``.
        out_dim: Parent capsule size.
        iters: Routing iterations.
        agreement: ``"cosine"`` (the paper) or ``"dot"`` (Sabour et al.).
        normalize: ``"children"`` (the paper) or ``"parents"`` (Sabour et al.).
        init_std: Standard deviation of the initial weights.
    """

    def __init__(
        self,
        in_caps: int,
        in_dim: int,
        out_caps: int,
        out_dim: int,
        iters: int = 3,
        agreement: Agreement = "cosine",
        normalize: Normalize = "children",
        init_std: float = 0.01,
    ) -> None:
        super().__init__(
            in_caps, in_dim, out_caps, out_dim, iters, agreement, normalize, init_std=init_std
        )

    @property
    def matrices(self) -> Tensor:
        """The weight as matrices ``W_ij``: a ``(N, M, out_dim, in_dim)`` view."""
        return self.weight.view(self.in_caps, self.in_dim, self.out_caps, self.out_dim).permute(
            0, 2, 3, 1
        )

    def route(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Route children ``x`` ``(B, N, in_dim)``: ``(z, squash(z), c)``, ``c`` ``(B, N, M)``."""
        u_hat = self.votes(x)
        v, c = dynamic_routing(
            u_hat, self.iters, agreement=self.agreement, normalize=self.normalize
        )
        return torch.einsum("bnm,bnmd->bmd", c, u_hat), v, c

    def forward_with(self, x: Tensor, c: Tensor) -> Tensor:
        r"""Parents' total input :math:`z_j = \sum_i c_{ij} W_{ij} x_i` for given coefficients."""
        return torch.einsum("bnm,bnmd->bmd", c, self.votes(x))

    def transpose(self, y: Tensor, c: Tensor) -> Tensor:
        r"""Children's total input :math:`\tilde z_i = \sum_j c_{ij} W_{ij}^\top y_j`."""
        n, m = self.in_caps, self.out_caps
        cy = (c.unsqueeze(-1) * y.unsqueeze(1)).permute(1, 0, 2, 3).reshape(n, -1, m * self.out_dim)
        return torch.bmm(cy, self.weight.transpose(1, 2)).transpose(0, 1)

    def forward(self, x: Tensor) -> Tensor:  # type: ignore[override]
        """Parent capsules ``squash(z)`` of children ``x``."""
        return self.route(x)[1]


class PoECapsNet(nn.Module):
    """Hauser's products of expert capsules (see the module docstring).

    Args:
        in_chans: Image channels.
        image_size: Image side (28 for MNIST / Fashion-MNIST).
        channels: Channels of the autoencoder (``channels / caps_dim`` capsule types).
        kernel_size: Kernel side of the autoencoder's convolutions.
        negative_slope: Leaky ReLU slope.
        dropout: Dropout on the autoencoder's code during stage 1.
        caps_dim: Primary capsule size (8).
        num_caps: Capsules of the capsule layer (20).
        out_dim: Their size (16).
        routing_iters: Routing iterations of both capsule layers.
        agreement: ``"cosine"`` or ``"dot"``.
        normalize: ``"children"`` or ``"parents"`` (see :class:`RoutedCaps`) for the encoder
            ``W`` and, unless ``decoder_normalize`` is given, the decoder ``U``.
        decoder_normalize: The decoder's normalisation, if it differs from ``normalize``.
        init_std: Initial weight standard deviation of ``W`` and ``U`` (Algorithm 1's
            "N(0, 0.01)": 0.01 if the 0.01 is the standard deviation, 0.1 if the variance).
        center: Subtract the training set's mean code before squashing (module
            docstring); the paper does not.
        generation: ``"paper"`` (the other capsules are routed with input 0) or
            ``"alone"`` (only the sampled capsule is routed); see the module docstring.

    Examples:
        >>> net = PoECapsNet().eval()
        >>> x = torch.rand(2, 1, 28, 28)
        >>> net.primary_capsules(x).shape, net.encode(x)[0].shape, net.reconstruct(x).shape
        (torch.Size([2, 576, 8]), torch.Size([2, 20, 16]), torch.Size([2, 1, 28, 28]))
    """

    def __init__(
        self,
        in_chans: int = 1,
        image_size: int = 28,
        channels: int = 128,
        kernel_size: int = 9,
        negative_slope: float = 0.01,
        dropout: float = 0.2,
        caps_dim: int = 8,
        num_caps: int = 20,
        out_dim: int = 16,
        routing_iters: int = 3,
        agreement: Agreement = "cosine",
        normalize: Normalize = "children",
        init_std: float = 0.01,
        center: bool = False,
        decoder_normalize: Normalize | None = None,
        generation: Generation = "paper",
    ) -> None:
        super().__init__()
        if generation not in ("paper", "alone"):
            raise ValueError(f"generation: expected 'paper' or 'alone', got {generation!r}")
        if channels % caps_dim:
            raise ValueError(f"channels ({channels}) must be a multiple of caps_dim ({caps_dim})")
        self.ae = TiedConvAutoencoder(
            in_chans, image_size, channels, kernel_size, negative_slope=negative_slope,
            dropout=dropout,
        )  # fmt: skip
        s = self.ae.code_size
        self.caps_dim, self.num_primary = caps_dim, channels // caps_dim * s * s
        routing = {"iters": routing_iters, "agreement": agreement, "init_std": init_std}
        self.encoder = RoutedCaps(
            self.num_primary, caps_dim, num_caps, out_dim, normalize=normalize, **routing
        )
        self.decoder = RoutedCaps(
            num_caps, out_dim, self.num_primary, caps_dim,
            normalize=decoder_normalize or normalize, **routing,
        )  # fmt: skip
        #: Mean pose of each capsule over the training set (restricted-domain sampling).
        self.register_buffer("hemisphere", torch.zeros(num_caps, out_dim))
        self.center, self.generation = center, generation
        #: Mean code of the training set ``(channels, s, s)`` (``center=True``) and the
        #: number of images it is the mean of (float64, so that it can keep counting).
        self.register_buffer("code_mean", torch.zeros(channels, s, s))
        self.register_buffer("code_count", torch.zeros((), dtype=torch.float64))
        self.num_caps, self.out_dim = num_caps, out_dim
        self.num_features = num_caps * out_dim

    # ------------------------------------------------------------ primary capsules
    @torch.no_grad()
    def observe_codes(self, code_sum: Tensor, count: int | Tensor) -> None:
        """Fold ``count`` more codes (their sum ``(channels, s, s)``) into :attr:`code_mean`.

        ``count`` may be an integer tensor on the device: nothing is read on the host.

        The running mean of every code observed so far, exact in any batch order:
        ``m <- m + (sum - count * m) / (n + count)``.
        """
        n = self.code_count + count
        delta = (code_sum.double() - count * self.code_mean.double()) / n
        self.code_mean.add_(delta.to(self.code_mean.dtype))
        self.code_count.copy_(n)

    def code_to_capsules(self, code: Tensor) -> Tensor:
        """``(B, T*D, s, s)`` code -> squashed primary capsules ``(B, T*s*s, D)`` (type-major).

        With ``center``, the code minus :attr:`code_mean` is squashed.
        """
        if self.center:
            code = code - self.code_mean
        b, ch, h, w = code.shape
        d = self.caps_dim
        caps = code.reshape(b, ch // d, d, h, w).permute(0, 1, 3, 4, 2)
        return squash(caps.reshape(b, -1, d))

    def capsules_to_code(self, caps: Tensor) -> Tensor:
        """Inverse of :meth:`code_to_capsules`: unsquash (eq. 6), reshape, add the mean."""
        b, d, s = caps.shape[0], self.caps_dim, self.ae.code_size
        z = unsquash(caps).reshape(b, -1, s, s, d).permute(0, 1, 4, 2, 3)
        z = z.reshape(b, -1, s, s)
        return z + self.code_mean if self.center else z

    def primary_capsules(self, x: Tensor) -> Tensor:
        """Squashed primary capsules ``(B, 576, 8)`` of images ``x``."""
        return self.code_to_capsules(self.ae.encode(x))

    # ------------------------------------------------------------- encode / decode
    def encode(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Capsules ``(B, 20, 16)`` of images and the routing coefficients ``c``."""
        _, y, c = self.encoder.route(self.primary_capsules(x))
        return y, c

    def decode_capsules(self, y: Tensor) -> Tensor:
        """Images from capsules ``(B, 20, 16)``: route through ``U``, unsquash, decode."""
        _, v, _ = self.decoder.route(y)
        return self.ae.decode(self.capsules_to_code(v))

    def reconstruct(self, x: Tensor) -> Tensor:
        """Images through the whole model: encoder, ``W``, ``U``, decoder."""
        return self.decode_capsules(self.encode(x)[0])

    def forward_features(self, x: Tensor) -> Tensor:
        """Flattened capsule poses ``(B, num_features)``."""
        return self.encode(x)[0].flatten(1)

    def forward(self, x: Tensor) -> Tensor:
        """Same as :meth:`forward_features`."""
        return self.forward_features(x)

    # ------------------------------------------------------------------ generation
    @property
    def hemisphere_measured(self) -> bool:
        """Whether stage 3 has measured the capsules' mean poses (restricted sampling)."""
        return bool((self.hemisphere != 0).any())

    def draws(self, n: int, generator: torch.Generator, restricted: bool = False) -> Tensor:
        """``n`` draws ``N(0, I)`` per capsule, ``(n, num_caps, out_dim)``, drawn on the CPU.

        With ``restricted``, each draw ``s`` for capsule ``j`` with ``s . m_j < 0`` is
        reflected across the hyperplane orthogonal to ``m_j`` (the capsule's mean pose,
        :attr:`hemisphere`): ``s - 2 (s . m) m / |m|^2``. The reflection keeps the
        distribution's shape on the visited half of the sphere (section 4.2).

        Raises:
            ValueError: ``restricted`` before the hemisphere was measured (no stage 3).
        """
        s = torch.randn(n, self.num_caps, self.out_dim, generator=generator)
        if not restricted:
            return s
        m = self.hemisphere.detach().cpu().float()
        norm2 = m.pow(2).sum(-1)
        if not bool((norm2 > 0).all()):
            raise ValueError(
                "restricted sampling needs the capsules' mean poses, measured during stage 3 "
                "(the decoder stage); this model has not been trained that far"
            )
        dot = (s * m).sum(-1, keepdim=True)
        reflected = s - 2 * dot / norm2.unsqueeze(-1) * m
        return torch.where(dot < 0, reflected, s)

    @torch.no_grad()
    def generate(self, capsule: int, draws: Tensor) -> Tensor:
        """Images from draws ``(n, out_dim)`` for one capsule, every other capsule zero.

        ``generation="paper"``: the 20 capsules (19 of them 0) are squashed and routed
        through ``U`` (:meth:`decode_capsules`). ``"alone"``: only capsule ``j``'s votes are
        routed. See the module docstring for the coefficients each gives.
        """
        if not 0 <= capsule < self.num_caps:
            raise IndexError(f"capsule {capsule} out of range [0, {self.num_caps})")
        if self.generation == "paper":
            y = draws.new_zeros(draws.shape[0], self.num_caps, self.out_dim)
            y[:, capsule] = squash(draws)
            return self.decode_capsules(y)
        dec = self.decoder
        # votes of capsule j alone, (n, 1, 576, 8): its row of the GEMM-layout weight
        u_hat = (squash(draws) @ dec.weight[capsule]).view(-1, 1, dec.out_caps, dec.out_dim)
        v, _ = dynamic_routing(u_hat, dec.iters, agreement=dec.agreement, normalize=dec.normalize)
        return self.ae.decode(self.capsules_to_code(v))

    @torch.no_grad()
    def sample_grid(self, rows: int = 4, seed: int = 0, restricted: bool = False) -> Tensor:
        """``rows`` samples of every capsule, ``(rows * num_caps, C, H, W)``, row-major.

        Column ``j`` holds capsule ``j``'s samples (the paper's Fig. 2). Deterministic
        for a given ``seed`` (the draws come from a CPU generator).
        """
        g = torch.Generator().manual_seed(seed)
        s = self.draws(rows, g, restricted).to(self.hemisphere.device)
        imgs = torch.stack([self.generate(j, s[:, j]) for j in range(self.num_caps)], dim=1)
        return imgs.flatten(0, 1)


@register_model
def poe(**kwargs: object) -> PoECapsNet:
    """Hauser's PoE capsule network with the paper's sizes (576 x 8-D -> 20 x 16-D).

    Named as the method (``selfcaps run poe``); ``poe_capsnet``, its former name, still
    builds it (run directories written before the rename name it in ``config.json``).

    Args:
        **kwargs: Overrides of :class:`PoECapsNet`'s arguments.
    """
    return PoECapsNet(**kwargs)  # type: ignore[arg-type]


register_alias("poe_capsnet", "poe")
