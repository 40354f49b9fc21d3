"""Running a frozen network over a dataset to collect ``(features, labels)``.

:func:`extract_features` for a callable that returns one tensor per batch (a timm-style
``forward_features``), :func:`extract_named_features` for one that returns several named
features (a method's ``features``: ``{"backbone": ..., "capsule": ...}``). Both read the
data in order, without gradients, with the network in ``eval()`` mode.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import Tensor

from selfcaps.eval._loaders import Data, as_loader, images_and_targets
from selfcaps.eval._modes import ModuleArg, eval_mode, modules_of

__all__ = ["extract_features", "extract_named_features"]


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
    for out, targets in _outputs(fn, data, batch_size, device, modules):
        features.append(_flat(out))
        labels.append(targets)
    if not features:
        raise ValueError("data is empty")
    return torch.cat(features), torch.cat(labels)


def extract_named_features(
    fn: Callable[[Tensor], dict[str, Tensor]],
    data: Data,
    kinds: Sequence[str],
    module: ModuleArg = None,
    device: str | torch.device | None = None,
    batch_size: int = 256,
    desc: str | None = None,
) -> tuple[dict[str, Tensor], Tensor]:
    """Named features ``fn(images)[kind]`` of every sample, in order, and the labels.

    As :func:`extract_features`, for a callable that returns several features per batch,
    such as a method's ``features`` (``{"backbone": (B, D), "capsule": (B, N, D)}``).

    Args:
        fn: Maps a batch of images to ``{kind: (B, ...) features}``.
        data: A dataset of ``(image, target, ...)`` samples or a ``DataLoader``.
        kinds: The kinds to keep.
        module: Module(s) to put in ``eval()`` mode (default: the one behind ``fn``).
        device: Where the images go (default: the device of the first module's parameters).
        batch_size: Batch size when ``data`` is a dataset.
        desc: A progress bar on stderr with this title (``selfcaps.engine.progress``;
            ``None``: no bar).

    Returns:
        ``({kind: (N, D) float32 CPU features}, (N,) long labels)``.

    Examples:
        >>> from torch.utils.data import TensorDataset
        >>> net = torch.nn.Linear(4, 3)
        >>> fn = lambda x: {"a": net(x), "b": x}
        >>> data = TensorDataset(torch.randn(5, 4), torch.arange(5))
        >>> feats, labels = extract_named_features(fn, data, ["a"], module=net, batch_size=2)
        >>> {k: tuple(v.shape) for k, v in feats.items()}, labels.tolist()
        ({'a': (5, 3)}, [0, 1, 2, 3, 4])
    """
    modules = modules_of(fn, module)
    if device is None:
        params = [p for m in modules for p in m.parameters()]
        device = params[0].device if params else "cpu"
    if desc is not None:
        n = len(getattr(data, "dataset", data))
        desc = f"{desc} of {n} images" if n else desc
    feats: dict[str, list[Tensor]] = {k: [] for k in kinds}
    labels = []
    for out, targets in _outputs(fn, data, batch_size, device, modules, desc):
        for k in kinds:
            feats[k].append(_flat(out[k]))
        labels.append(targets)
    if not labels:
        raise ValueError("data is empty")
    return {k: torch.cat(v) for k, v in feats.items()}, torch.cat(labels)


def _flat(out: Tensor) -> Tensor:
    """A batch of outputs as ``(B, D)`` float32 on the CPU."""
    return out.reshape(out.shape[0], -1).float().cpu()


def _outputs(
    fn: Callable[[Tensor], Any],
    data: Data,
    batch_size: int,
    device: str | torch.device,
    modules: Sequence[torch.nn.Module],
    desc: str | None = None,
) -> Iterator[tuple[Any, Tensor]]:
    """``(fn(images), targets)`` per batch, without gradients, ``modules`` in ``eval()`` mode."""
    batches = as_loader(data, batch_size)
    if desc is not None:
        from selfcaps.engine.progress import progress

        batches = progress(batches, desc)
    with torch.no_grad(), eval_mode(modules):
        for batch in batches:
            images, targets = images_and_targets(batch)
            yield fn(images.to(device)), targets.cpu()
