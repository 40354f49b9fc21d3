"""Paths as the tests print them: relative to the repository root, never absolute.

A skip reason or message that names a file outside the repository (the shared data, the
papers' text) names it as ``../shared/...``, so that it reads the same on every machine.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The repository root (the folder holding ``tests/``).
REPO = Path(__file__).resolve().parents[1]


def from_repo(path: Path | str) -> str:
    """``path`` relative to the repository root, with ``..`` for what lies outside it.

    Examples:
        >>> from_repo(REPO / "docs" / "index.md")
        'docs/index.md'
        >>> from_repo(REPO.parent / "shared" / "papers" / "003.txt")
        '../shared/papers/003.txt'
    """
    return Path(os.path.relpath(Path(path).resolve(), REPO)).as_posix()
