"""selfcaps: capsule networks that learn without labels."""

__version__ = "0.1.0"

from selfcaps.models import create_model, list_models

__all__ = ["__version__", "create_model", "list_models"]
