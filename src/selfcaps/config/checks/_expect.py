"""The one error every configuration check raises, and the check of one key by a predicate."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from omegaconf import OmegaConf

__all__ = ["check", "expect", "one_of"]


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


def one_of(cfg: Any, key: str, choices: tuple[Any, ...], expected: str | None = None) -> None:
    """:func:`check` that the value of ``key`` is one of ``choices``.

    Args:
        cfg: The configuration.
        key: Dotted key.
        choices: The accepted values.
        expected: How the message names them (default: ``"a | b | c"``).

    Examples:
        >>> cfg = OmegaConf.create({"model": {"variant": "desne"}})
        >>> one_of(cfg, "model.variant", ("sparse", "dense"))
        Traceback (most recent call last):
        ...
        ValueError: model.variant: expected sparse | dense, got 'desne'
    """
    names = expected if expected is not None else " | ".join(str(c) for c in choices)
    check(cfg, key, lambda v: v in choices, names)
