"""``selfcaps data get NAME --root DIR``: fetch a dataset's official files (the only download).

The files come from torchvision's own downloaders, mirrors and md5 checksums, with
torchvision's progress bar on stderr (:mod:`selfcaps.data.fetch`), and land where
``selfcaps run --data NAME --data-root DIR`` reads them. Files already there are not
fetched again. torch and torchvision are imported only when a download starts.
"""

from __future__ import annotations

import argparse
import sys

from selfcaps.data.errors import DatasetNotFoundError
from selfcaps.data.fetch import FETCHABLE
from selfcaps.data.layouts import check_files_present
from selfcaps.data.paths import resolve_root

__all__ = ["add_data_arguments", "cmd_data"]


def add_data_arguments(p: argparse.ArgumentParser) -> None:
    """Subcommands of ``selfcaps data``: ``get``."""
    sub = p.add_subparsers(dest="data_command", metavar="SUBCOMMAND", required=True)
    get = sub.add_parser(
        "get",
        help="download a dataset's official files (torchvision's mirrors and checksums)",
        description="Download a dataset's official files with torchvision's downloaders and "
        "md5 checksums, into the layout the selfcaps loaders read. Datasets: "
        + ", ".join(f"{n} ({s.size})" for n, s in FETCHABLE.items())
        + ".",
    )
    get.add_argument("name", metavar="NAME", help=f"one of: {', '.join(FETCHABLE)}")
    get.add_argument(
        "--root",
        help="data root to fill (default: $SELFCAPS_DATA, else ./data); created if missing",
    )


def _present(name: str, root: str) -> bool:
    try:
        check_files_present(name, root)
    except DatasetNotFoundError:
        return False
    return True


def cmd_data(args: argparse.Namespace) -> int:
    """Fetch ``args.name`` into ``args.root`` unless its files are there already."""
    from selfcaps.data.fetch import check_fetchable, fetch_dataset

    name = args.name
    check_fetchable(name)
    root, source = resolve_root(args.root, "--root")
    use = f"selfcaps run METHOD --data {name} --data-root {root}"
    if _present(name, str(root)):
        print(f"{name}: its files are already under {root}; nothing fetched. Use it: {use}")
        return 0
    print(f"fetching {name} ({FETCHABLE[name].size}) into {root} ({source})", file=sys.stderr)
    written = fetch_dataset(name, root)
    print(f"{name}: {len(written)} files written under {root}, checksums verified. Use it: {use}")
    return 0
