"""The one error every configuration check raises."""

from __future__ import annotations

from typing import Any

__all__ = ["expect"]


def expect(ok: bool, key: str, expected: str, value: Any) -> None:
    """Raise ``ValueError("<key>: expected <expected>, got <value>")`` unless ``ok``.

    Examples:
        >>> expect(False, "model.mask_gamma", "a steepness > 0", -1)
        Traceback (most recent call last):
        ...
        ValueError: model.mask_gamma: expected a steepness > 0, got -1
    """
    if not ok:
        raise ValueError(f"{key}: expected {expected}, got {value!r}")
