"""On-disk cache of decoded arrays (``.npz``), for formats that are slow to decode.

A cache entry is one uncompressed ``.npz`` file in :func:`~selfcaps.data.paths.cache_dir`
(``SELFCAPS_CACHE``, default ``~/.cache/selfcaps``) named after a hash of its key.
The key is a JSON-able dict that must change whenever the decoded arrays would
(for a folder of images: its absolute path, file count, total size, newest
modification time, and the decoding options). Entries are written atomically
(temporary file + ``os.replace``), so concurrent processes never see half a file;
an unreadable entry is discarded with a warning and rebuilt; a cache directory
that cannot be written only costs the speed-up (with a warning), never the data.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from selfcaps.data.paths import cache_dir

__all__ = ["cache_path", "cached_arrays", "files_fingerprint"]

Arrays = dict[str, np.ndarray]
_KEY = "__key__"


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
    except OSError as exc:
        warnings.warn(
            f"could not write cache file {path} ({exc}); continuing without it", stacklevel=3
        )
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
