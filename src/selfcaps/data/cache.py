"""On-disk cache of decoded arrays (``.npz``), for formats that are slow to decode.

A cache entry is one uncompressed ``.npz`` file in :func:`~selfcaps.data.paths.cache_dir`
(``SELFCAPS_CACHE``, default ``~/.cache/selfcaps``) named after a hash of its key.
The key is a JSON-able dict that must change whenever the decoded arrays would
(for a folder of images: its absolute path, file count, total size, newest
modification time, and the decoding options). Entries are written atomically
(temporary file + ``os.replace``), so concurrent processes never see half a file;
an unreadable entry is discarded with a warning and rebuilt; a cache directory
that cannot be written only costs the speed-up (with a warning), never the data.
Each entry written is reported on stderr with its size; the first of a process also
says how much the whole cache holds and how to see and free it (``selfcaps cache
--list`` / ``--clear``, :func:`cache_entries`, :func:`clear_cache`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from selfcaps.data.paths import cache_dir

__all__ = ["cache_entries", "cache_path", "cached_arrays", "clear_cache", "files_fingerprint"]

Arrays = dict[str, np.ndarray]
_KEY = "__key__"
#: Names of the files this module writes: entries and the temporaries of interrupted writes.
_ENTRY = re.compile(r"^[a-z0-9_]+-[0-9a-f]{24}\.npz$")
_TEMPORARY = re.compile(r"^\.[a-z0-9_]+-[0-9a-f]{24}\.npz\..*\.tmp$")
_reported = False  # whether this process has said where it caches


def files_fingerprint(directory: Path, stats: Sequence[os.stat_result]) -> dict[str, Any]:
    """What identifies a folder's contents cheaply: path, file count, total size, newest mtime.

    Args:
        directory: The folder (made absolute).
        stats: ``os.stat`` of every file that will be decoded.

    Returns:
        A JSON-able dict.
    """
    return {
        "path": str(Path(directory).absolute()),
        "count": len(stats),
        "total_size": sum(s.st_size for s in stats),
        "mtime_max_ns": max((s.st_mtime_ns for s in stats), default=0),
    }


def cache_path(kind: str, key: Mapping[str, Any]) -> Path:
    """The cache file for ``key``: ``<cache_dir>/<kind>-<sha256(key)[:24]>.npz``."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    return cache_dir() / f"{kind}-{digest}.npz"


def cached_arrays(
    kind: str, key: Mapping[str, Any], build: Callable[[], Arrays], enabled: bool = True
) -> Arrays:
    """Arrays from the cache entry for ``key``, or ``build()`` them and store them.

    Args:
        kind: Prefix of the cache file name (e.g. ``"imagefolder"``).
        key: JSON-able dict identifying the arrays.
        build: Computes the arrays (a dict of numpy arrays, no object dtypes).
        enabled: If false, just ``build()``.

    Returns:
        The arrays.
    """
    if not enabled:
        return build()
    key_json = json.dumps(key, sort_keys=True)
    path = cache_path(kind, key)
    arrays = _load(path, key_json) if path.exists() else None
    if arrays is None:
        arrays = build()
        _save(path, arrays, key_json)
    return arrays


def _load(path: Path, key_json: str) -> Arrays | None:
    try:
        with np.load(path, allow_pickle=False) as npz:
            if str(npz[_KEY]) != key_json:
                return None  # a different key with the same hash prefix: rebuild
            return {name: npz[name] for name in npz.files if name != _KEY}
    except Exception as exc:
        warnings.warn(
            f"discarding unreadable cache file {path} ({type(exc).__name__}: {exc}); rebuilding it",
            stacklevel=3,
        )
        path.unlink(missing_ok=True)
        return None


def _save(path: Path, arrays: Arrays, key_json: str) -> None:
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **{_KEY: np.array(key_json)}, **arrays)
        os.replace(tmp, path)
        _report_write(path)
    except OSError as exc:
        warnings.warn(
            f"could not write cache file {path} ({exc}); continuing without it", stacklevel=3
        )
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)


def _megabytes(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def _report_write(path: Path) -> None:
    """Say on stderr what was cached where (the first time: the whole cache and its commands)."""
    global _reported
    line = f"selfcaps: cached {_megabytes(path.stat().st_size)} of decoded data in {path}"
    if not _reported:
        total = sum(size for _, size in cache_entries())
        line += (
            f" (the cache {path.parent} now holds {_megabytes(total)}; $SELFCAPS_CACHE "
            "moves it; `selfcaps cache --list` shows it, `selfcaps cache --clear` frees it)"
        )
        _reported = True
    print(line, file=sys.stderr, flush=True)


def cache_entries(directory: Path | None = None) -> list[tuple[Path, int]]:
    """The files of the cache (entries and left-over temporaries) with their sizes in bytes.

    Only files named as this module names them are listed: a cache directory shared
    with other programs keeps theirs.

    Args:
        directory: The cache directory (default: :func:`~selfcaps.data.paths.cache_dir`).

    Returns:
        ``(path, bytes)`` sorted by name; empty if the directory does not exist.
    """
    directory = cache_dir() if directory is None else Path(directory)
    if not directory.is_dir():
        return []
    return [
        (p, p.stat().st_size)
        for p in sorted(directory.iterdir())
        if p.is_file() and (_ENTRY.match(p.name) or _TEMPORARY.match(p.name))
    ]


def clear_cache(directory: Path | None = None) -> tuple[int, int]:
    """Delete the files :func:`cache_entries` lists.

    Returns:
        ``(files deleted, bytes freed)``.
    """
    files, freed = 0, 0
    for path, size in cache_entries(directory):
        path.unlink(missing_ok=True)
        files, freed = files + 1, freed + size
    return files, freed
