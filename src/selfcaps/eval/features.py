"""Running a frozen network over a dataset to collect ``(features, labels)``."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
from torch import Tensor

from selfcaps.eval._loaders import Data, as_loader, images_and_targets
from selfcaps.eval._modes import ModuleArg, eval_mode, modules_of

__all__ = ["extract_features"]


def extract_features(
    fn: Callable[[Tensor], Tensor],
    data: Data,
    batch_size: int = 256,
    device: str | torch.device = "cpu",
    module: ModuleArg = None,
) -> tuple[Tensor, Tensor]:
    """Features ``fn(images)`` and labels of every sample, in order, without gradients.

    While it runs, the module behind ``fn`` (``fn`` itself if it is a module, the
    owner of a bound method such as ``model.forward_features``) is in ``eval()``
    mode; afterwards every submodule gets its previous mode back. For any other
    callable (a lambda, a function) pass ``module=`` — otherwise a warning says
    that BatchNorm and dropout may still be in training mode.

    Args:
        fn: Maps a batch of images to features of any shape ``(B, ...)``.
        data: A dataset of ``(image, target, ...)`` samples (read in order, one
            process) or a ``DataLoader`` (used as is; do not shuffle it if the
            order matters to you).
        batch_size: Batch size when ``data`` is a dataset.
        device: Where the images go before ``fn``; ``fn``'s module must already be there.
        module: Module(s) to put in ``eval()`` mode instead of the one found in ``fn``
            (an empty tuple: none, and no warning).

    Returns:
        ``features`` ``(N, D)`` float32 on the CPU (each sample's output flattened)
        and ``labels`` ``(N,)`` long.

    Examples:
        >>> from torch.utils.data import TensorDataset
        >>> net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3))
        >>> data = TensorDataset(torch.randn(10, 2, 2), torch.arange(10) % 2)
        >>> features, labels = extract_features(net, data, batch_size=4)
        >>> features.shape, labels.tolist()
        (torch.Size([10, 3]), [0, 1, 0, 1, 0, 1, 0, 1, 0, 1])
    """
    modules = modules_of(fn, module)
    if module is None and not modules:
        warnings.warn(
            "extract_features found no nn.Module behind fn; pass module=... so that "
            "BatchNorm and dropout run in eval mode (module=() to silence this)",
            stacklevel=2,
        )
    features, labels = [], []
    with torch.no_grad(), eval_mode(modules):
        for batch in as_loader(data, batch_size):
            images, targets = images_and_targets(batch)
            out = fn(images.to(device))
            features.append(out.reshape(out.shape[0], -1).float().cpu())
            labels.append(targets.cpu())
    if not features:
        raise ValueError("data is empty")
    return torch.cat(features), torch.cat(labels)
