"""timm-style model registry: ``register_model``, ``create_model``, ``list_models``."""

from __future__ import annotations

import fnmatch
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from torch import nn

from selfcaps._names import unknown_name_error
from selfcaps.records import list_records

__all__ = [
    "create_model",
    "import_model_modules",
    "list_models",
    "register_alias",
    "register_model",
    "unknown_name_error",
]

_MODELS: dict[str, Callable[..., nn.Module]] = {}
#: Former names that still build their model (``poe_capsnet`` -> ``poe``); not listed.
_ALIASES: dict[str, str] = {}
F = TypeVar("F", bound=Callable[..., nn.Module])
#: Model modules of method records already imported (each once).
_IMPORTED: set[str] = set()


def import_model_modules() -> None:
    """Import the model module of every method record (registers its networks), each once.

    Called on ``import selfcaps.models`` and again by :func:`list_models` and
    :func:`create_model`, so that a plugin found after :func:`selfcaps.records.refresh`
    registers its networks too.
    """
    for record in list_records():
        if record.model_module not in _IMPORTED:
            _IMPORTED.add(record.model_module)  # before the import: it re-enters this package
            importlib.import_module(record.model_module)


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


def register_alias(alias: str, name: str) -> None:
    """Let ``create_model(alias)`` build the registered model ``name`` (e.g. a former name).

    Args:
        alias: The extra name; :func:`list_models` does not show it.
        name: A registered model.
    """
    if name not in _MODELS:
        raise ValueError(f"cannot alias {alias!r} to {name!r}: no model {name!r} is registered")
    if alias in _MODELS or alias in _ALIASES:
        raise ValueError(f"model {alias!r} is already registered")
    _ALIASES[alias] = name


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
    import_model_modules()
    return sorted(n for n in _MODELS if fnmatch.fnmatch(n, pattern))


def create_model(
    name: str,
    pretrained: bool = False,
    checkpoint_path: str | Path | None = None,
    **kwargs: Any,
) -> nn.Module:
    """Build a registered model by name, optionally with trained weights (as timm does).

    Args:
        name: A name from :func:`list_models` (or a former name, see :func:`register_alias`).
        pretrained: selfcaps publishes no weights to download: ``True`` needs
            ``checkpoint_path``.
        checkpoint_path: Trained weights to load (strictly): a run directory (its best
            weights), a ``.safetensors`` file or a Lightning ``.ckpt``
            (:func:`selfcaps.models.weights.read_weights`). The model's arguments default
            to those in the weights' ``config.json``, when there is one; ``kwargs``
            override them.
        **kwargs: Passed to the model's constructor.

    Returns:
        The model in training mode, as PyTorch builds modules, with or without
        ``checkpoint_path``: call ``.eval()`` before computing features (batch norm, dropout).
        ``selfcaps.load_run`` gives a run's network in ``eval()`` mode.

    Raises:
        ValueError: An unknown name (the message lists the valid ones), or
            ``pretrained=True`` without ``checkpoint_path``.
        CheckpointError: Weights of another model, or a key or shape that does not fit
            (:func:`selfcaps.models.weights.load_network_state`).

    Examples:
        >>> net = create_model("coca", in_chans=1)
        >>> net.num_features > 0
        True
    """
    import_model_modules()
    name = _ALIASES.get(name, name)
    if name not in _MODELS:
        raise unknown_name_error("model", name, list(_MODELS))
    if checkpoint_path is None:
        if pretrained:
            raise ValueError(
                f"create_model({name!r}, pretrained=True): selfcaps publishes no weights to "
                "download; pass checkpoint_path= a run directory, a .safetensors or a .ckpt file"
            )
        return _MODELS[name](**kwargs)
    from selfcaps.models.weights import CheckpointError, load_network_state, read_weights

    weights = read_weights(checkpoint_path)
    saved = weights.model_config or {}
    if saved and _ALIASES.get(saved["model"], saved["model"]) != name:
        method = f" of a {saved['method']} run" if saved.get("method") else ""
        raise CheckpointError(
            f"{weights.path} holds the weights of model {saved['model']!r}{method}; "
            f"create_model was asked for {name!r}"
        )
    net = _MODELS[name](**{**saved.get("model_kwargs", {}), **kwargs})
    return load_network_state(net, weights.state_dict, weights.path)
