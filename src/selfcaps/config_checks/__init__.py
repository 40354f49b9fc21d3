"""Value checks of the configuration keys, without importing torch.

``selfcaps run`` checks a configuration before it creates the run directory and
before it imports torch and Lightning (several seconds), so a bad value is
refused at once. :mod:`.shared` checks the keys every method has; each method
with keys of its own has a module here whose ``check(cfg)`` raises
:class:`ValueError` naming the key, the value and what is expected, and the
method class's ``validate_config`` calls the same function. The option tuples
these checks accept (e.g. SparseCaps' variants) are defined here and imported by
the modules that use them, so the two cannot drift apart.
"""

from __future__ import annotations

import importlib
from typing import Any

from selfcaps.config_checks import shared

__all__ = ["check_config", "check_method_config"]

#: Methods with keys of their own; the others have only the shared keys.
_MODULES = ("encapnet", "mcae", "poe", "sparsecaps")


def check_method_config(method: str, cfg: Any) -> None:
    """Check the method-specific keys of a configuration (torch is not imported).

    Args:
        method: A method name (``coca``, ``encapnet``, ``mcae``, ``poe``, ``sparsecaps``).
        cfg: The merged configuration (an OmegaConf ``DictConfig``).

    Raises:
        ValueError: A key has a value the method refuses; the message names the key.

    Examples:
        >>> from omegaconf import OmegaConf
        >>> cfg = OmegaConf.create({"model": {"backbone": "vit", "mask_ratio": 1.5}})
        >>> check_method_config("mcae", cfg)
        Traceback (most recent call last):
        ...
        ValueError: model.mask_ratio: expected a fraction in (0, 1), got 1.5
    """
    if method in _MODULES:
        importlib.import_module(f"{__name__}.{method}").check(cfg)


def check_config(method: str, cfg: Any) -> None:
    """Check the shared keys (:mod:`.shared`), then the method's own.

    Raises:
        ValueError: The first bad key; the message names it.
    """
    shared.check(cfg)
    check_method_config(method, cfg)
