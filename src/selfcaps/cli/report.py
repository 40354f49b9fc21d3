"""``selfcaps report``: its flags and the command (:mod:`selfcaps.results.report` does the work)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from selfcaps.results.registry import DEFAULT_REGISTRY, arm_config_hash, check_hashes, load_registry
from selfcaps.results.report import doc_files, update_files

__all__ = ["add_report_arguments", "cmd_report"]


def add_report_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of ``selfcaps report``."""
    p.add_argument("--root", type=Path, default=Path("."), help="repository root (default: .)")
    p.add_argument(
        "--check",
        action="store_true",
        help="change nothing; exit 1 if a generated table is out of date or a row is stale",
    )
    p.add_argument(
        "--hash",
        nargs="+",
        metavar=("METHOD PRESET", "KEY=VALUE"),
        help="print the config hash of METHOD PRESET [key=value ...] (for a new row) and exit",
    )


def cmd_report(args: argparse.Namespace) -> int:
    """``selfcaps report``: regenerate (or ``--check``) the docs' tables from the registry."""
    if args.hash:
        if len(args.hash) < 2:
            print("selfcaps report --hash: give METHOD PRESET [key=value ...]", file=sys.stderr)
            return 2
        print(arm_config_hash(args.hash[0], args.hash[1], args.hash[2:]))
        return 0
    rows = load_registry(args.root / DEFAULT_REGISTRY)
    problems = check_hashes(rows)
    outdated = update_files(rows, doc_files(args.root), check=args.check)
    for p in problems:
        print(f"stale: {p}", file=sys.stderr)
    if args.check:
        for f in outdated:
            print(f"out of date: {f} (run `selfcaps report`)", file=sys.stderr)
        return 1 if problems or outdated else 0
    for f in outdated:
        print(f"updated {f}")
    return 1 if problems else 0
