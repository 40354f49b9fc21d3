"""One LightningModule per method: its training step, schedule and online monitors.

The method modules import torch and Lightning; this package imports them only
when a method class is asked for (:func:`get_method`, ``CapsuleMethod``), so that
listing the methods and checking a name costs nothing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from selfcaps.methods.flags import CliFlag

if TYPE_CHECKING:
    from selfcaps.methods.base import CapsuleMethod, NonFiniteError

__all__ = ["CapsuleMethod", "CliFlag", "NonFiniteError", "get_method", "list_methods"]

#: Method name -> (module, class). ``get_method(name).name == name`` is checked by a test.
_METHODS: dict[str, tuple[str, str]] = {
    "coca": ("selfcaps.methods.coca", "CoCa"),
    "encapnet": ("selfcaps.methods.encapnet", "EncapNetMethod"),
    "mcae": ("selfcaps.methods.mcae", "MCAE"),
    "poe": ("selfcaps.methods.poe", "PoE"),
    "sparsecaps": ("selfcaps.methods.sparsecaps", "SparseCaps"),
}


def list_methods() -> list[str]:
    """Names of the implemented methods (without importing them).

    Examples:
        >>> list_methods()
        ['coca', 'encapnet', 'mcae', 'poe', 'sparsecaps']
    """
    return sorted(_METHODS)


def get_method(name: str) -> type[CapsuleMethod]:
    """The method class registered under ``name`` (imports its module).

    Raises:
        ValueError: Unknown name (the message lists the valid ones and the closest match).
    """
    if name not in _METHODS:
        from selfcaps._names import unknown_name_error

        raise unknown_name_error("method", name, list(_METHODS))
    module, cls = _METHODS[name]
    return getattr(importlib.import_module(module), cls)


def __getattr__(name: str) -> Any:
    if name in ("CapsuleMethod", "NonFiniteError"):
        from selfcaps.methods import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
