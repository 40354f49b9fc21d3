"""One LightningModule per method: its training step, schedule and online monitors."""

from __future__ import annotations

from selfcaps.methods.base import CapsuleMethod, CliFlag, NonFiniteError
from selfcaps.methods.coca import CoCa
from selfcaps.methods.encapnet import EncapNetMethod
from selfcaps.methods.mcae import MCAE
from selfcaps.methods.poe import PoE
from selfcaps.methods.sparsecaps import SparseCaps
from selfcaps.models._registry import unknown_name_error

__all__ = ["CapsuleMethod", "CliFlag", "NonFiniteError", "get_method", "list_methods"]

_METHODS: dict[str, type[CapsuleMethod]] = {
    m.name: m for m in (CoCa, SparseCaps, MCAE, EncapNetMethod, PoE)
}


def list_methods() -> list[str]:
    """Names of the implemented methods."""
    return sorted(_METHODS)


def get_method(name: str) -> type[CapsuleMethod]:
    """The method class registered under ``name``.

    Raises:
        ValueError: Unknown name (the message lists the valid ones and the closest match).
    """
    if name not in _METHODS:
        raise unknown_name_error("method", name, list(_METHODS))
    return _METHODS[name]
