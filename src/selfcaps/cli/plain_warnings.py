"""selfcaps' own warnings on the console: one plain line each, once.

Python prints a warning as ``path:line: UserWarning: message`` followed by the source
line, and again wherever another call site raises it. A command-line user needs the
message: :func:`install` prints the warnings selfcaps raises as
``selfcaps: warning: message`` on stderr, each text once per process; warnings of
other packages keep Python's format. While a caller records warnings
(``warnings.catch_warnings(record=True)``, ``pytest.warns``), they go to its record.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

__all__ = ["install", "installed", "is_ours"]

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


def _recording() -> bool:
    """Whether a ``catch_warnings(record=True)`` collects the warnings (its list's append)."""
    impl = getattr(warnings, "_showwarnmsg_impl", None)
    return getattr(impl, "__name__", "_showwarnmsg_impl") != "_showwarnmsg_impl"


@contextlib.contextmanager
def installed() -> Iterator[None]:
    """:func:`install` for the duration of a ``with`` block (a command), then Python's again."""
    before = warnings.showwarning
    install()
    try:
        yield
    finally:
        warnings.showwarning = before


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
        if not is_ours(filename) or _recording():
            return python_format(message, category, filename, lineno, file, line)
        text = str(message)
        if text not in shown:
            shown.add(text)
            print(f"selfcaps: warning: {text}", file=file or sys.stderr, flush=True)
        return None

    warnings.showwarning = show
