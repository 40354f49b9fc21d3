"""Finding the ``nn.Module`` behind a callable and running it in ``eval()`` mode."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from torch import nn

__all__ = ["eval_mode", "modules_of"]

ModuleArg = nn.Module | Sequence[nn.Module] | None


def modules_of(fn: Callable[..., Any], module: ModuleArg = None) -> list[nn.Module]:
    """The modules to switch to ``eval()`` while ``fn`` runs.

    Args:
        fn: A module, a bound method of a module (``model.forward_features``), a
            ``functools.partial`` of either, or any other callable.
        module: Overrides the search: a module or a sequence of modules (an empty
            sequence means "none").

    Returns:
        ``module`` as a list if given, else the module found in ``fn`` (or ``[]``).
    """
    if module is not None:
        return [module] if isinstance(module, nn.Module) else list(module)
    while isinstance(fn, functools.partial):
        fn = fn.func
    owner = fn if isinstance(fn, nn.Module) else getattr(fn, "__self__", None)
    return [owner] if isinstance(owner, nn.Module) else []


@contextmanager
def eval_mode(modules: Sequence[nn.Module]) -> Iterator[None]:
    """Put ``modules`` in ``eval()`` mode, then restore every submodule's own ``training`` flag.

    Restoring per submodule (not just ``module.train(was_training)``) keeps deliberately
    mixed states, such as a frozen BatchNorm inside a training network, intact.

    Args:
        modules: The modules.

    Examples:
        >>> net = nn.Sequential(nn.Linear(2, 2), nn.Dropout()).train()
        >>> net[1].eval()  # doctest: +ELLIPSIS
        Dropout(...)
        >>> with eval_mode([net]):
        ...     print(net.training, net[1].training)
        False False
        >>> net.training, net[1].training
        (True, False)
    """
    flags = [(m, m.training) for top in modules for m in top.modules()]
    try:
        for top in modules:
            top.eval()
        yield
    finally:
        for m, training in flags:
            m.training = training
