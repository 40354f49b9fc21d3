"""selfcaps' own warnings on the console: one plain line each, once.

Python prints a warning as ``path:line: UserWarning: message`` followed by the source
line, and again wherever another call site raises it. A command-line user needs the
message: :func:`install` prints the warnings selfcaps raises as
``selfcaps: warning: message`` on stderr, each text once per process; warnings of
other packages keep Python's format.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any, TextIO

__all__ = ["install", "is_ours"]

_PACKAGE = Path(__file__).resolve().parents[1]


def is_ours(filename: str) -> bool:
    """Whether a warning was raised from selfcaps' own code.

    Examples:
        >>> is_ours(str(_PACKAGE / "data" / "affnist.py")), is_ours("/usr/lib/torch/nn.py")
        (True, False)
    """
    try:
        return Path(filename).resolve().is_relative_to(_PACKAGE)
    except (OSError, ValueError):
        return False


def install() -> None:
    """Show selfcaps' warnings as plain lines, each text once (module docstring)."""
    shown: set[str] = set()
    python_format = warnings.showwarning

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> Any:
        if not is_ours(filename):
            return python_format(message, category, filename, lineno, file, line)
        text = str(message)
        if text not in shown:
            shown.add(text)
            print(f"selfcaps: warning: {text}", file=file or sys.stderr, flush=True)
        return None

    warnings.showwarning = show
