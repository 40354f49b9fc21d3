"""Entry point of the ``selfcaps`` command: subcommand dispatch and error reporting.

Errors a user can fix (an unknown name or key, a bad value, missing or corrupt
data, an unreadable checkpoint) are printed as one ``selfcaps: error: ...``
line on stderr with exit code 2; a run stopped by a non-finite loss exits 3.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from selfcaps import __version__
from selfcaps.models import list_models


def _cmd_list(args: argparse.Namespace) -> int:
    from selfcaps.cli.config import list_presets
    from selfcaps.data import list_datasets
    from selfcaps.methods import list_methods

    if args.what == "models":
        print("\n".join(list_models(args.pattern)))
    elif args.what == "methods":
        presets = list_presets()
        for m in list_methods():
            print(f"{m:<12} presets: {', '.join(presets.get(m, []))}")
    elif args.what == "datasets":
        print("\n".join(list_datasets()))
    return 0


def _quiet_third_party() -> None:
    """Silence messages that say nothing about the user's run (Lightning tips, deprecations)."""
    import logging
    import warnings

    warnings.filterwarnings("ignore", message=".*LeafSpec.*is deprecated")
    warnings.filterwarnings("ignore", message="The number of training batches .* is smaller")
    warnings.filterwarnings("ignore", message=".*`training_step` returned `None`")  # skipped steps
    # our batch transforms live in the LightningModule on purpose (they need its RNG seeding)
    warnings.filterwarnings("ignore", message="You have overridden `on_after_batch_transfer`")
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        logging.getLogger(name).setLevel(logging.WARNING)


def build_parser() -> argparse.ArgumentParser:
    """The top-level argument parser with every subcommand."""
    from selfcaps.cli.bench import add_bench_arguments, cmd_bench
    from selfcaps.cli.evaluate import (
        add_eval_arguments,
        add_profile_arguments,
        cmd_eval,
        cmd_profile,
    )
    from selfcaps.cli.run import add_run_arguments, cmd_pretrain, cmd_run

    parser = argparse.ArgumentParser(
        prog="selfcaps", description="Capsule networks that learn without labels."
    )
    parser.add_argument("--version", action="version", version=f"selfcaps {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("list", help="list models, methods (with presets) or datasets")
    p.add_argument("what", nargs="?", default="models", choices=["models", "methods", "datasets"])
    p.add_argument("--pattern", default="*", help="shell-style filter for models, e.g. 'coca*'")
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser("run", help="pretrain, evaluate, write a run directory")
    add_run_arguments(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("pretrain", help="train only (checkpoints and weights, no evaluation)")
    add_run_arguments(p)
    p.set_defaults(func=cmd_pretrain)

    p = sub.add_parser("eval", help="evaluate a run directory with a protocol")
    add_eval_arguments(p)
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("profile", help="parameters and FLOPs of a method's network")
    add_profile_arguments(p)
    p.set_defaults(func=cmd_profile)

    p = sub.add_parser("bench", help="all methods on their datasets, same budget, one report")
    add_bench_arguments(p)
    p.set_defaults(func=cmd_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``selfcaps`` command.

    Args:
        argv: Arguments (default: ``sys.argv[1:]``).

    Returns:
        The process exit code.
    """
    from selfcaps.cli.config import ConfigError
    from selfcaps.methods import NonFiniteError
    from selfcaps.methods.io import CheckpointError

    _quiet_third_party()
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # key=value overrides may come anywhere on the line, before or after options.
    overrides = [x for x in extra if "=" in x and not x.startswith("-")]
    unknown = [x for x in extra if x not in overrides]
    if unknown or (overrides and not hasattr(args, "overrides")):
        parser.error(f"unrecognized arguments: {' '.join(unknown or overrides)}")
    if overrides:
        args.overrides = list(args.overrides) + overrides
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except NonFiniteError as e:
        print(f"selfcaps: error: {e}", file=sys.stderr)
        return 3
    except (ConfigError, CheckpointError, OSError) as e:  # missing data, unwritable output, ...
        print(f"selfcaps: error: {e}", file=sys.stderr)
        return 2
    except ValueError as e:  # unknown names and invalid values from the library
        print(f"selfcaps: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
