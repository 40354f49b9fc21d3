"""Value checks of the configuration keys, without importing torch.

``selfcaps run`` checks a configuration before it creates the run directory and
before it imports torch and Lightning (several seconds), so a bad value is
refused at once. :mod:`.shared` checks the keys every method has; each method
with keys of its own names in its record (``MethodRecord.config_check``) a
function ``check(cfg)`` (for the shipped methods, in a module here) that raises
:class:`ValueError` naming the key, the value and what is expected, and the
method class's ``validate_config`` calls the same function. The option tuples
these checks accept are defined here (or, when a record's command-line flag lists
them too, such as SparseCaps' variants, in the record) and imported by the modules
that use them, so the two cannot drift apart.
"""

from __future__ import annotations

from typing import Any

from selfcaps.config.checks import shared
from selfcaps.records import get_record, load_object

__all__ = ["check_config", "check_method_config"]


def check_method_config(method: str, cfg: Any) -> None:
    """Check the method-specific keys of a configuration (torch is not imported).

    Args:
        method: A method name (``coca``, ``encapnet``, ``mcae``, ``poe``, ``sparsecaps``, or a
            plugin's).
        cfg: The merged configuration (an OmegaConf ``DictConfig``).

    Raises:
        ValueError: A key has a value the method refuses (the message names the key), or an
            unknown method.

    Examples:
        >>> from omegaconf import OmegaConf
        >>> cfg = OmegaConf.create({"model": {"backbone": "vit", "mask_ratio": 1.5}})
        >>> check_method_config("mcae", cfg)
        Traceback (most recent call last):
        ...
        ValueError: model.mask_ratio: expected a fraction in (0, 1), got 1.5
    """
    spec = get_record(method).config_check
    if spec is not None:
        load_object(spec)(cfg)


def check_config(method: str, cfg: Any) -> None:
    """Check the shared keys (:mod:`.shared`), then the method's own.

    Raises:
        ValueError: The first bad key; the message names it.
    """
    shared.check(cfg)
    check_method_config(method, cfg)
