"""Where data lives: the data root, the cache directory, and locating a dataset's files.

The data root is, in order: the ``root`` argument (``--data-root`` on the command
line), else the ``SELFCAPS_DATA`` environment variable, else ``./data``. Every
dataset records which of these it used (``root_source``) so that a missing-file
error can say so.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from selfcaps.data.errors import DatasetNotFoundError, DownloadNotSupportedError

__all__ = ["cache_dir", "locate_files", "resolve_data_root", "resolve_root"]

DATA_ENV = "SELFCAPS_DATA"
CACHE_ENV = "SELFCAPS_CACHE"
DEFAULT_ROOT = "./data"


def resolve_root(
    root: str | Path | None = None, root_source: str | None = None
) -> tuple[Path, str]:
    """The data root and a description of where it came from.

    Args:
        root: An explicit root, or ``None`` to use ``SELFCAPS_DATA`` or ``./data``.
        root_source: How the caller got ``root`` (e.g. ``"--data-root"``); used only
            when ``root`` is given.

    Returns:
        ``(absolute root, source)``.

    Examples:
        >>> resolve_root("/tmp/data", "--data-root")
        (PosixPath('/tmp/data'), '--data-root')
    """
    if root is not None:
        return Path(root).expanduser().absolute(), root_source or "the root argument"
    env = os.environ.get(DATA_ENV)
    if env:
        return Path(env).expanduser().absolute(), f"the environment variable {DATA_ENV}={env}"
    return Path(DEFAULT_ROOT).absolute(), (
        f"the default {DEFAULT_ROOT} (no root argument / --data-root, {DATA_ENV} unset)"
    )


def cache_dir() -> Path:
    """The cache directory: ``SELFCAPS_CACHE`` if set, else ``~/.cache/selfcaps``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "selfcaps"


def locate_files(
    dataset: str,
    root: Path,
    root_source: str,
    wanted: Mapping[str, Sequence[Path]],
    download: bool = False,
) -> dict[str, Path]:
    """Find one existing path per wanted file, or fail listing everything that was tried.

    Args:
        dataset: Name used in the error message.
        root: The data root (for the error message).
        root_source: Where the root came from (for the error message).
        wanted: For each logical file, its candidate paths in order of preference.
        download: The dataset's ``download`` argument; ``True`` is refused.

    Returns:
        For each logical file, the first candidate that exists.

    Raises:
        DownloadNotSupportedError: If ``download`` is true.
        DatasetNotFoundError: If any logical file has no existing candidate; the
            message lists the candidates of every missing file.
    """
    if download:
        raise DownloadNotSupportedError(dataset, [c[0] for c in wanted.values() if c])
    found: dict[str, Path] = {}
    missing: list[Path] = []
    for key, candidates in wanted.items():
        hit = next((p for p in candidates if p.exists()), None)
        if hit is None:
            missing.extend(candidates)
        else:
            found[key] = hit
    if missing:
        raise DatasetNotFoundError(dataset, missing, root, root_source)
    return found


def resolve_data_root(cli_value: str | None, cfg_value: str | None) -> tuple[str, str]:
    """The dataset root and where it came from (for error messages).

    The command line's ``--data-root`` first, then ``SELFCAPS_DATA``, then the
    configuration's ``data.root``, then ``./data``.

    Examples:
        >>> resolve_data_root("/data", "cfg")
        ('/data', '--data-root')
    """
    if cli_value:
        return cli_value, "--data-root"
    if os.environ.get(DATA_ENV):
        return os.environ[DATA_ENV], f"${DATA_ENV}"
    if cfg_value:
        return cfg_value, "data.root"
    return DEFAULT_ROOT, f"default ({DEFAULT_ROOT})"
