"""A method's own ``selfcaps run`` flags (:attr:`MethodRecord.flags`), importable without torch.

The command line builds its parser from the records before anything heavy is
imported, so that ``selfcaps run sparsecaps --help`` answers at once and shows
only SparseCaps' flags. Each flag sets one configuration key; the method's
configuration check refuses a value out of range.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

__all__ = ["CliFlag", "on_off"]


@dataclass(frozen=True)
class CliFlag:
    """A method-specific command-line flag that sets a configuration key.

    Attributes:
        key: Dotted configuration key the flag sets.
        type: Converts the command-line string (``int``, ``float``, ``str``, :func:`on_off`).
        help: One line for ``--help``.
        choices: Valid values, if they are a fixed set.
    """

    key: str
    type: type
    help: str
    choices: tuple[str, ...] | None = None


def on_off(value: str) -> bool:
    """``on`` / ``off`` (any case) as a boolean.

    Examples:
        >>> on_off("on"), on_off("OFF")
        (True, False)
    """
    v = value.strip().lower()
    if v not in ("on", "off"):
        raise argparse.ArgumentTypeError(f"expected on or off, got {value!r}")
    return v == "on"
