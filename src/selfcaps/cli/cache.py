"""``selfcaps cache --list`` / ``--clear``: where decoded datasets are cached, and freeing it.

Formats that are slow to decode (PNG folders such as CIFAR-10's and image folders,
the generated affNIST-like test set) are decoded once and kept as ``.npz`` files in
the cache directory, ``$SELFCAPS_CACHE`` or ``~/.cache/selfcaps``
(:mod:`selfcaps.data.cache`). Answers without importing torch.
"""

from __future__ import annotations

import argparse
from datetime import datetime

from selfcaps.data.cache import cache_entries, clear_cache
from selfcaps.data.paths import cache_dir

__all__ = ["add_cache_arguments", "cmd_cache"]


def add_cache_arguments(p: argparse.ArgumentParser) -> None:
    """Flags of ``selfcaps cache``."""
    what = p.add_mutually_exclusive_group()
    what.add_argument(
        "--list", action="store_true", help="each cached file with its size (the default)"
    )
    what.add_argument("--clear", action="store_true", help="delete the cached files")


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def cmd_cache(args: argparse.Namespace) -> int:
    """Print the cache (``--list``) or delete it (``--clear``); only selfcaps' own files."""
    directory = cache_dir()
    if args.clear:
        files, freed = clear_cache(directory)
        print(f"deleted {files} cached files from {directory}, {_mb(freed)} freed")
        return 0
    entries = cache_entries(directory)
    print(f"cache directory: {directory} ($SELFCAPS_CACHE, default ~/.cache/selfcaps)")
    for path, size in entries:
        when = datetime.fromtimestamp(path.stat().st_mtime).strftime("%Y-%m-%d %H:%M")
        print(f"  {size / 1e6:10.1f} MB  {when}  {path.name}")
    total = sum(size for _, size in entries)
    print(f"{len(entries)} files, {_mb(total)} in all; `selfcaps cache --clear` frees them")
    return 0
