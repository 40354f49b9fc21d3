"""selfcaps: capsule networks that learn without labels.

``selfcaps.create_model`` and ``selfcaps.list_models`` import the networks (and
torch) on first use, so that ``import selfcaps`` and the command line's
``--version`` / ``--help`` stay fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from selfcaps.models import create_model, list_models

__all__ = ["__version__", "create_model", "list_models"]


def __getattr__(name: str) -> Any:
    if name in ("create_model", "list_models"):
        from selfcaps import models

        return getattr(models, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
