"""Creating a run directory late, and removing it when a failed run left it empty.

``selfcaps run`` checks everything it can (configuration, data, network) before it
creates anything; :func:`can_create` checks the output location without creating
it, :func:`make_run_dir` creates it and reports which directories are new, and
:func:`remove_if_empty` removes those again if a failure left no file in them.
:func:`run_finished` tells a finished run from one a stop signal interrupted (both
have a ``metrics.json``; :func:`stopped_by_signal` reads the latter).
:func:`resume_argv` spells the arguments that continue a run; callers that bring runs to
their end use :func:`args_to_run`, which skips a finished run, resumes an interrupted one
(a checkpoint and no finished ``metrics.json``) and starts any other.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from selfcaps.engine.atomic import check_writable

__all__ = [
    "SELFCAPS_COMMAND",
    "args_to_run",
    "can_create",
    "make_run_dir",
    "remove_if_empty",
    "resume_argv",
    "run_finished",
    "stopped_by_signal",
]


#: The command that runs ``selfcaps`` in this Python (its interpreter, its ``selfcaps``): the
#: prefix of every subprocess a runner starts, so that a runner and its runs share one install.
SELFCAPS_COMMAND: tuple[str, ...] = (sys.executable, "-m", "selfcaps")


def _metrics(run_dir: Path) -> dict | None:
    """The run's ``metrics.json`` as a dict, or None if it is missing or unreadable."""
    path = Path(run_dir) / "metrics.json"
    if not path.is_file():
        return None
    try:
        metrics = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return metrics if isinstance(metrics, dict) else None


def run_finished(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a finished run: a ``metrics.json`` not written by a stop signal.

    A run stopped by SIGTERM or SIGINT writes ``metrics.json`` with ``stopped_by: signal``
    and no evaluation; ``--resume`` finishes it. An unreadable ``metrics.json`` counts as
    not finished.
    """
    return _finished(_metrics(run_dir))


def _finished(metrics: dict | None) -> bool:
    """Whether a run's ``metrics.json`` (None: none readable) says it finished."""
    return metrics is not None and metrics.get("stopped_by") != "signal"


def stopped_by_signal(run_dir: Path) -> dict | None:
    """The ``metrics.json`` of a run that a stop signal interrupted, or None for any other run.

    Examples:
        >>> stopped_by_signal(Path("/nonexistent")) is None
        True
    """
    metrics = _metrics(run_dir)
    return metrics if metrics is not None and metrics.get("stopped_by") == "signal" else None


def resume_argv(method: str, run_dir: Path | str, *, command: str = "run") -> list[str]:
    """The ``selfcaps`` arguments that continue the run in ``run_dir`` from its last checkpoint.

    The one spelling of a resume, for the commands a run prints and the runners that resume.

    Examples:
        >>> resume_argv("coca", "runs/a b", command="pretrain")
        ['pretrain', 'coca', '--out', 'runs/a b', '--resume']
    """
    return [command, method, "--out", str(run_dir), "--resume"]


def args_to_run(
    method: str, run_dir: Path, fresh: Sequence[str], *, resume_extra: Sequence[str] = ()
) -> list[str] | None:
    """The ``selfcaps`` arguments that bring the run in ``run_dir`` to its end, or ``None``.

    ``None`` when the run finished (:func:`run_finished`); :func:`resume_argv` with
    ``--no-progress`` and ``resume_extra`` (a budget such as ``--max-time``) when it was
    interrupted after a checkpoint; otherwise ``fresh``, the arguments that start it.
    ``metrics.json`` is read once.

    Examples:
        >>> args_to_run("coca", Path("/nonexistent"), ["run", "coca", "--out", "/nonexistent"])
        ['run', 'coca', '--out', '/nonexistent']
    """
    if _finished(_metrics(run_dir)):
        return None
    if (Path(run_dir) / "checkpoints" / "last.ckpt").is_file():
        return [*resume_argv(method, run_dir), "--no-progress", *resume_extra]
    return list(fresh)


def _missing_ancestors(path: Path) -> tuple[Path, list[Path]]:
    """The nearest existing ancestor of ``path`` (or itself) and the directories below it."""
    missing: list[Path] = []
    p = path.absolute()
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    return p, missing[::-1]


def can_create(directory: Path) -> None:
    """Raise unless ``directory`` exists as a writable directory or could be created.

    Raises:
        NotADirectoryError / PermissionError: Naming the path that is in the way.
    """
    existing, _ = _missing_ancestors(directory)
    if not existing.is_dir():
        raise NotADirectoryError(
            20, f"cannot write the output directory {directory}: {existing} is a file"
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        raise PermissionError(
            13, f"cannot write the output directory {directory}: {existing} is not writable"
        )


def make_run_dir(directory: Path) -> list[Path]:
    """Create ``directory`` (and its parents) and check that it can be written.

    Returns:
        The directories that did not exist before, outermost first.
    """
    _, missing = _missing_ancestors(directory)
    check_writable(directory)
    return missing


def remove_if_empty(created: list[Path]) -> list[Path]:
    """Remove the directories of ``created`` that hold no file (innermost first).

    A directory is removed only if nothing but empty directories is inside it,
    so a failed run's files (its log, a checkpoint) are never touched.

    Args:
        created: Directories a run created, outermost first (:func:`make_run_dir`).

    Returns:
        The directories removed.
    """
    removed: list[Path] = []
    for top in reversed(created):
        if not top.is_dir() or any(f.is_file() or f.is_symlink() for f in top.rglob("*")):
            continue
        for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            d.rmdir()
        top.rmdir()
        removed.append(top)
    return removed
