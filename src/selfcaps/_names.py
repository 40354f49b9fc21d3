"""Errors for unknown names (models, methods, datasets) that suggest the closest valid one."""

from __future__ import annotations

import difflib

__all__ = ["closest_names", "unknown_name_error"]


def closest_names(name: str, choices: list[str], n: int = 1, cutoff: float = 0.6) -> list[str]:
    """The valid names closest to ``name``, ignoring case (``CoCa`` finds ``coca``).

    A choice equal to ``name`` but for case comes first; the rest are ranked by
    :func:`difflib.get_close_matches` on the lower-cased names.

    Examples:
        >>> closest_names("CoCa", ["coca", "poe"])
        ['coca']
        >>> closest_names("lr", ["optim.lr", "optim.name", "seed"], n=3)
        []
    """
    lower = {c.lower(): c for c in choices}
    same = [lower[name.lower()]] if name.lower() in lower else []
    close = difflib.get_close_matches(name.lower(), list(lower), n=n, cutoff=cutoff)
    return (same + [lower[c] for c in close if lower[c] not in same])[:n]


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
    close = closest_names(name, choices)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return ValueError(f"unknown {kind} {name!r}.{hint} Valid choices: {', '.join(sorted(choices))}")
