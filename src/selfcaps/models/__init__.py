"""Networks, one file per method family, behind a timm-style registry.

Importing this package imports the module named by every method's record
(``MethodRecord.model_module``), which registers its networks with
:func:`register_model`; a plugin's networks are registered the same way.
"""

from selfcaps.models._registry import (
    create_model,
    import_model_modules,
    list_models,
    register_model,
)

import_model_modules()

__all__ = ["create_model", "list_models", "register_model"]
