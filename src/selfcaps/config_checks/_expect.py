"""The one error every configuration check raises, and the check of one key by a predicate."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from omegaconf import OmegaConf

__all__ = ["check", "expect"]


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


def check(cfg: Any, key: str, ok: Callable[[Any], bool], expected: str) -> None:
    """:func:`expect` on the value of the dotted ``key``; a value ``ok`` cannot compare fails.

    Examples:
        >>> cfg = OmegaConf.create({"optim": {"lr": "abc"}})
        >>> check(cfg, "optim.lr", lambda v: v > 0, "a learning rate > 0")
        Traceback (most recent call last):
        ...
        ValueError: optim.lr: expected a learning rate > 0, got 'abc'
    """
    value = OmegaConf.select(cfg, key)
    try:
        good = bool(ok(value))
    except TypeError:
        good = False
    expect(good, key, expected, value)
