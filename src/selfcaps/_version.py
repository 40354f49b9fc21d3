"""The version of selfcaps, in a module of its own so that the layers can read it.

``selfcaps.__version__`` is the same string; the library's modules import it from here, never
from the package itself, whose ``__init__`` is the entry point for users.
"""

__version__ = "0.2.0"
