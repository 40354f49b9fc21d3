"""Which code produced a run: the git commit of the selfcaps checkout that ran it."""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["NOT_A_CHECKOUT", "git_commit"]

#: What :func:`git_commit` returns for an installed package (or without git).
NOT_A_CHECKOUT = "not a git checkout"


def _git(package: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["git", "-C", str(package), *args], capture_output=True, text=True, timeout=30
    )


def git_commit(package: Path | None = None) -> str:
    """The commit of the git checkout ``selfcaps`` is imported from.

    Args:
        package: The ``selfcaps`` package directory (default: this one).

    Returns:
        The short commit hash, with ``+dirty`` when tracked files have uncommitted
        changes, or :data:`NOT_A_CHECKOUT` when the package is not a file tracked by a
        git repository (an installed wheel, a copy, a virtualenv inside some other
        repository) or git is not available.
    """
    package = package or Path(__file__).resolve().parents[1]
    try:
        if _git(package, "ls-files", "--error-unmatch", "__init__.py").returncode != 0:
            return NOT_A_CHECKOUT
        head = _git(package, "rev-parse", "--short=12", "HEAD")
        if head.returncode != 0:
            return NOT_A_CHECKOUT
        dirty = _git(package, "status", "--porcelain", "--untracked-files=no").stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return NOT_A_CHECKOUT
    return head.stdout.strip() + ("+dirty" if dirty else "")
