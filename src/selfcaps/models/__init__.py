"""Networks, one file per method family, behind a timm-style registry."""

from selfcaps.models import coca as _coca  # noqa: F401  (registers its models)
from selfcaps.models import encapnet as _encapnet  # noqa: F401  (registers its models)
from selfcaps.models import mcae as _mcae  # noqa: F401  (registers its models)
from selfcaps.models import poe as _poe  # noqa: F401  (registers its models)
from selfcaps.models import sparsecaps as _sparsecaps  # noqa: F401
from selfcaps.models._registry import create_model, list_models, register_model

__all__ = ["create_model", "list_models", "register_model"]
