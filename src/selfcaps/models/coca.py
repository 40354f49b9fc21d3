"""CoCa's network: a Siamese capsule network for contrastive learning.

From "Capsule Network based Contrastive Learning of Unsupervised Visual
Representations" (Panwar, 2022; reference code github.com/Harsh9524/CoCa).

Architecture (paper Table I, matched to the reference code):

* backbone: six 3x3 convolutions without bias, each followed by BatchNorm and
  ReLU; channels ``planes * (1, 2, 2, 4, 4, 8)`` = 16, 32, 32, 64, 64, 128;
  strides 1, 2, 1, 2, 1, 2, so a 32x32 (or 28x28) image becomes 128 x 4 x 4;
* primary capsules: a 3x3 convolution 128 -> 512 without bias, BatchNorm,
  reshaped to 32 types x 16-D at each of the 4x4 positions (512 capsules), squash;
* class capsules: 10 capsules x 16-D, fully connected from all 512 primary
  capsules, transform matrices N(0, 0.1), 3 iterations of dynamic routing with
  the softmax over the 10 parents, logits reset to zero at every forward,
  gradients through all iterations;
* the contrastive embedding is the L2-normalised vector of the 10 class
  capsule lengths.

The reference initialises convolutions with ``kaiming_uniform_`` (gain
``sqrt(2)``) and BatchNorm with weight 1 and bias 0; we do the same. Its
``DynamicRouting2d`` orders the children position-major, ours type-major
(``selfcaps.caps`` memory order): a permutation of the children of a fully
connected layer, so the two define the same family of networks.

Parameters: the paper gives "780K" (Table II) and "734,800" (section III.B),
which is this network without its routing matrices; the reference network, like
this one, has about 2.05M, of which the routing matrices are
512 x 10 x 16 x 16 = 1.31M. ``selfcaps profile coca`` prints the true figures.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from selfcaps.caps import DenseCaps, PrimaryCaps2d, caps_length, flatten_caps
from selfcaps.models._registry import register_model

__all__ = ["CoCaNet", "coca"]


def _conv_bn_relu(cin: int, cout: int, stride: int) -> list[nn.Module]:
    return [
        nn.Conv2d(cin, cout, kernel_size=3, stride=stride, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    ]


def _init_reference(m: nn.Module) -> None:
    if isinstance(m, nn.Conv2d | nn.Linear):
        nn.init.kaiming_uniform_(m.weight)
    elif isinstance(m, nn.BatchNorm2d):
        nn.init.ones_(m.weight)
        nn.init.zeros_(m.bias)


class CoCaNet(nn.Module):
    """CoCa's capsule network (see the module docstring).

    Args:
        in_chans: Image channels (3 for CIFAR, 1 for MNIST).
        planes: Width of the first convolution; the backbone ends with ``8 * planes``.
        num_caps: Primary capsule types.
        caps_dim: Capsule dimension (primary and class capsules).
        num_class_caps: Class capsules (the embedding dimension).
        routing_iters: Dynamic routing iterations.
        routing_init_std: Standard deviation of the N(0, std) routing matrices.
        feature_size: Spatial size of the backbone output (4 for 28x28 and 32x32 inputs).

    Examples:
        >>> net = CoCaNet(in_chans=1)
        >>> x = torch.randn(2, 1, 28, 28)
        >>> net(x).shape, net.forward_features(x).shape, net.forward_capsules(x).shape
        (torch.Size([2, 10]), torch.Size([2, 2048]), torch.Size([2, 10, 16]))
    """

    def __init__(
        self,
        in_chans: int = 3,
        planes: int = 16,
        num_caps: int = 32,
        caps_dim: int = 16,
        num_class_caps: int = 10,
        routing_iters: int = 3,
        routing_init_std: float = 0.1,
        feature_size: int = 4,
    ) -> None:
        super().__init__()
        widths = [planes, 2 * planes, 2 * planes, 4 * planes, 4 * planes, 8 * planes]
        strides = [1, 2, 1, 2, 1, 2]
        layers: list[nn.Module] = []
        cin = in_chans
        for w, s in zip(widths, strides, strict=True):
            layers += _conv_bn_relu(cin, w, s)
            cin = w
        self.backbone = nn.Sequential(*layers)
        self.primary = PrimaryCaps2d(
            cin, num_caps, caps_dim, kernel_size=3, padding=1, bias=False, batchnorm=True
        )
        self.apply(_init_reference)
        self.class_caps = DenseCaps(
            num_caps * feature_size**2,
            caps_dim,
            num_class_caps,
            caps_dim,
            iters=routing_iters,
            init="normal",
            init_std=routing_init_std,
        )
        self.in_chans, self.feature_size = in_chans, feature_size
        self.num_features = cin * feature_size**2
        self.num_class_caps, self.caps_dim = num_class_caps, caps_dim

    def _check_input(self, x: Tensor) -> None:
        if x.dim() != 4 or x.shape[1] != self.in_chans:
            raise ValueError(
                f"CoCaNet expects images (B, {self.in_chans}, H, W), got {tuple(x.shape)}"
            )

    def forward_backbone(self, x: Tensor) -> Tensor:
        """Backbone feature map ``(B, 8 * planes, 4, 4)``."""
        self._check_input(x)
        f = self.backbone(x)
        if f.shape[-2:] != (self.feature_size, self.feature_size):
            raise ValueError(
                f"input {tuple(x.shape[-2:])} gives a {tuple(f.shape[-2:])} feature map; "
                f"this network expects {self.feature_size}x{self.feature_size} "
                "(e.g. 28x28 or 32x32 images)"
            )
        return f

    def forward_features(self, x: Tensor) -> Tensor:
        """The flattened backbone feature ``(B, num_features)`` (what the reference's kNN uses)."""
        return torch.flatten(self.forward_backbone(x), 1)

    def capsules_from_backbone(self, f: Tensor) -> Tensor:
        """Class capsule poses ``(B, num_class_caps, caps_dim)`` from a backbone feature map."""
        return self.class_caps(flatten_caps(self.primary(f)))

    def forward_capsules(self, x: Tensor) -> Tensor:
        """Class capsule poses ``(B, num_class_caps, caps_dim)``."""
        return self.capsules_from_backbone(self.forward_backbone(x))

    @staticmethod
    def embedding(capsules: Tensor) -> Tensor:
        """The contrastive embedding: L2-normalised class-capsule lengths, ``(B, M)``."""
        return F.normalize(caps_length(capsules), dim=-1)

    def forward(self, x: Tensor) -> Tensor:
        """The contrastive embedding of images ``x``."""
        return self.embedding(self.forward_capsules(x))


@register_model
def coca(**kwargs: object) -> CoCaNet:
    """CoCa's capsule network with the paper's widths (planes 16, 32 x 16-D primary capsules).

    Args:
        **kwargs: Overrides of :class:`CoCaNet`'s arguments.
    """
    return CoCaNet(**kwargs)  # type: ignore[arg-type]
