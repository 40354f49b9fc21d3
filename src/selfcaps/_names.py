"""Errors for unknown names (models, methods, datasets) that suggest the closest valid one."""

from __future__ import annotations

import difflib

__all__ = ["unknown_name_error"]


def unknown_name_error(kind: str, name: str, choices: list[str]) -> ValueError:
    """A ``ValueError`` naming an unknown ``kind``, the valid choices and the closest match.

    Args:
        kind: What was looked up ("model", "dataset", ...).
        name: The unknown name.
        choices: The valid names.

    Returns:
        The error, to be raised by the caller.

    Examples:
        >>> str(unknown_name_error("dataset", "cifar", ["cifar10", "mnist"]))
        "unknown dataset 'cifar'. Did you mean 'cifar10'? Valid choices: cifar10, mnist"
    """
    close = difflib.get_close_matches(name, choices, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return ValueError(f"unknown {kind} {name!r}.{hint} Valid choices: {', '.join(sorted(choices))}")
