"""Atomic file writes with the permissions ``open()`` would give, and an early writability check.

Every file of a run directory is written to a temporary file in the same
directory, flushed to disk and then renamed over the target (``os.replace`` is
atomic on POSIX), so a crash or a full disk mid-write leaves the previous good
file (or no file), never a truncated one.

``tempfile.mkstemp`` creates its file ``0600``; the file is given the mode
``open(path, "w")`` would have given it (``0666`` minus the umask for a new file,
the old file's mode for a replaced one) before it is renamed, so a TensorBoard
server or a collaborator under another account can read a run as they can read
any other file of its owner. This module imports nothing heavy.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_text",
    "atomic_write_yaml",
    "check_writable",
    "current_umask",
    "update_json",
]


def current_umask() -> int:
    """The process's umask, read without changing it where the system allows.

    Linux reports it in ``/proc/self/status``; elsewhere it is read by setting and
    restoring it (``os.umask`` has no read-only form before Python 3.13).
    """
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _mode_for(path: Path) -> int:
    """The mode `open(path, "w")` leaves: the file's own if it exists, else 0666 & ~umask."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return 0o666 & ~current_umask()


def check_writable(directory: Path) -> None:
    """Fail early, with a clear message, if ``directory`` cannot be created or written.

    Args:
        directory: The directory a run will write.

    Raises:
        PermissionError / OSError: With the directory named in the message.
    """
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".write-test-"):
            pass
    except OSError as e:
        raise type(e)(
            e.errno, f"cannot write the output directory {directory}: {e.strerror}"
        ) from e


def atomic_write_bytes(path: Path | str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temporary file, fsync, rename).

    The file gets the permissions ``open()`` would give it (module docstring). On
    any error (e.g. the disk is full) the temporary file is removed and the
    previous content of ``path``, if any, is left untouched.

    Args:
        path: Target file.
        data: Content.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = _mode_for(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise type(e)(e.errno, f"could not write {path}: {e.strerror}") from e
        raise


def atomic_write_text(path: Path | str, text: str) -> None:
    """Write text atomically (see :func:`atomic_write_bytes`)."""
    atomic_write_bytes(path, text.encode())


def atomic_write_json(path: Path | str, obj: Any) -> None:
    """Write JSON atomically, refusing NaN and infinity (they are not valid JSON)."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n")


def atomic_write_yaml(path: Path | str, obj: Any) -> None:
    """Write YAML atomically (``yaml.safe_dump``: plain data only)."""
    atomic_write_text(path, yaml.safe_dump(obj, sort_keys=False))


@contextlib.contextmanager
def _directory_lock(directory: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``directory`` (no lock file is left behind).

    Where ``fcntl`` does not exist (Windows) this is a no-op: concurrent writers there can
    still lose one another's keys, never the file.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def update_json(path: Path | str, updates: dict[str, Any]) -> dict[str, Any]:
    """Merge ``updates`` into the JSON object at ``path`` (created if absent), atomically.

    The read-modify-write holds a lock on the file's directory, so two ``selfcaps eval``
    processes finishing together on one run both keep their keys; the write itself is
    :func:`atomic_write_json`.

    Returns:
        The merged object as written.

    Raises:
        ValueError: the file exists but does not hold a JSON object (path named).
    """
    path = Path(path)
    with _directory_lock(path.parent):
        merged: Any = json.loads(path.read_text()) if path.is_file() else {}
        if not isinstance(merged, dict):
            raise ValueError(f"{path}: expected a JSON object, got {type(merged).__name__}")
        merged.update(updates)
        atomic_write_json(path, merged)
    return merged
