"""The ``selfcaps`` command."""

from selfcaps.cli.main import main

__all__ = ["main"]
