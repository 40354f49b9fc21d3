"""One LightningModule per method: its training step, schedule and online monitors.

The method modules import torch and Lightning; this package imports them only
when a method class is asked for (:func:`get_method`, ``CapsuleMethod``), so that
listing the methods and checking a name costs nothing: both read the methods'
records (:mod:`selfcaps.records`), which name each class as ``"module:Class"``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from selfcaps.records import get_record, list_records, load_object

if TYPE_CHECKING:
    from selfcaps.methods.base import CapsuleMethod, NonFiniteError

__all__ = ["CapsuleMethod", "NonFiniteError", "get_method", "list_methods"]


def list_methods() -> list[str]:
    """Names of the methods (from their records, without importing them).

    Examples:
        >>> list_methods()
        ['coca', 'encapnet', 'mcae', 'poe', 'sparsecaps']
    """
    return [r.name for r in list_records()]


def get_method(name: str) -> type[CapsuleMethod]:
    """The method class of the record ``name`` (imports its module).

    Raises:
        ValueError: Unknown name (the message lists the valid ones and the closest match),
            or a record whose class has another ``name``.
    """
    record = get_record(name)
    cls = load_object(record.method)
    if getattr(cls, "name", None) != name:
        raise ValueError(
            f"method record {name!r}: {record.method} has name {getattr(cls, 'name', None)!r}, "
            f"expected {name!r}"
        )
    return cls


def __getattr__(name: str) -> Any:
    if name in ("CapsuleMethod", "NonFiniteError"):
        from selfcaps.methods import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
