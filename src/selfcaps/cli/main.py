"""Entry point of the ``selfcaps`` command: subcommand dispatch and error reporting."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from selfcaps import __version__
from selfcaps.models import list_models


def _cmd_list(args: argparse.Namespace) -> int:
    for name in list_models(args.pattern):
        print(name)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The top-level argument parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="selfcaps",
        description="Capsule networks that learn without labels.",
    )
    parser.add_argument("--version", action="version", version=f"selfcaps {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    p_list = sub.add_parser("list", help="list registered models")
    p_list.add_argument("pattern", nargs="?", default="*", help="shell-style filter, e.g. 'coca*'")
    p_list.set_defaults(func=_cmd_list)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``selfcaps`` command.

    Args:
        argv: Arguments (default: ``sys.argv[1:]``).

    Returns:
        The process exit code.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
