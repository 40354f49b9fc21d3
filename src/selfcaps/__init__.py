"""selfcaps: capsule networks that learn without labels.

``selfcaps.create_model``, ``selfcaps.list_models`` and ``selfcaps.load_run``
import the networks (and torch) on first use, so that ``import selfcaps`` and the
command line's ``--version`` / ``--help`` stay fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from selfcaps import _moved
from selfcaps._version import __version__

_moved.install()  # old module paths of the 0.2 restructuring warn and keep working

if TYPE_CHECKING:
    from selfcaps.models import create_model, list_models
    from selfcaps.run.trained import load_run

__all__ = ["__version__", "create_model", "list_models", "load_run"]


def __getattr__(name: str) -> Any:
    if name in ("create_model", "list_models"):
        from selfcaps import models

        return getattr(models, name)
    if name == "load_run":
        from selfcaps.run.trained import load_run

        return load_run
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
