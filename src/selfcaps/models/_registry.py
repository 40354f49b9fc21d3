"""timm-style model registry: ``register_model``, ``create_model``, ``list_models``."""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Callable
from typing import Any, TypeVar

from torch import nn

__all__ = ["create_model", "list_models", "register_model", "unknown_name_error"]

_MODELS: dict[str, Callable[..., nn.Module]] = {}
F = TypeVar("F", bound=Callable[..., nn.Module])


def unknown_name_error(kind: str, name: str, choices: list[str]) -> ValueError:
    """A ``ValueError`` naming an unknown ``kind``, the valid choices and the closest match.

    Args:
        kind: What was looked up ("model", "dataset", ...).
        name: The unknown name.
        choices: The valid names.

    Returns:
        The error, to be raised by the caller.
    """
    close = difflib.get_close_matches(name, choices, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return ValueError(f"unknown {kind} {name!r}.{hint} Valid choices: {', '.join(sorted(choices))}")


def register_model(fn: F) -> F:
    """Register a model constructor under its function name (decorator).

    Args:
        fn: A function returning an ``nn.Module``.

    Returns:
        ``fn`` unchanged.
    """
    if fn.__name__ in _MODELS:
        raise ValueError(f"model {fn.__name__!r} is already registered")
    _MODELS[fn.__name__] = fn
    return fn


def list_models(pattern: str = "*") -> list[str]:
    """Names of the registered models matching a shell-style ``pattern``, sorted.

    Args:
        pattern: ``fnmatch`` pattern, e.g. ``"coca*"``.

    Returns:
        The matching names.

    Examples:
        >>> all(name.startswith("coca") for name in list_models("coca*"))
        True
    """
    return sorted(n for n in _MODELS if fnmatch.fnmatch(n, pattern))


def create_model(name: str, **kwargs: Any) -> nn.Module:
    """Build a registered model by name.

    Args:
        name: A name from :func:`list_models`.
        **kwargs: Passed to the model's constructor.

    Returns:
        The model.

    Raises:
        ValueError: For an unknown name (the message lists the valid ones).
    """
    if name not in _MODELS:
        raise unknown_name_error("model", name, list(_MODELS))
    return _MODELS[name](**kwargs)
