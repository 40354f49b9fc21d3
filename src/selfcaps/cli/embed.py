"""``selfcaps embed RUN_DIR --out FILE``: a trained run's features of a split, written to a file.

What is computed and the three formats (``.npz``, ``.safetensors``, ``.npy``) are described
in :mod:`selfcaps.run.embed`; this module holds the flags and writes the file atomically.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from selfcaps.config.loading import ConfigError
from selfcaps.run.embed import FORMATS

__all__ = ["add_embed_arguments", "cmd_embed"]


def add_embed_arguments(p: argparse.ArgumentParser) -> None:
    """Flags of ``selfcaps embed``."""
    p.add_argument("run_dir", type=Path, help="a run directory written by run/pretrain")
    p.add_argument(
        "--out",
        type=Path,
        required=True,
        help=f"output file; its suffix picks the format: {', '.join(FORMATS)}",
    )
    p.add_argument("--data", help="dataset to embed (default: the run's)")
    p.add_argument("--split", default="test", choices=["train", "val", "test"])
    p.add_argument("--data-root", help="dataset root (default: the run's)")
    p.add_argument("--checkpoint", default="best", choices=["best", "last"])
    p.add_argument(
        "--feature",
        action="append",
        metavar="KIND",
        help="keep only this feature kind (repeatable; default: every kind of the method)",
    )
    p.add_argument("--threads", type=int, metavar="N", help="torch intra-op threads")
    p.add_argument("--no-progress", action="store_true", help="no progress bars on stderr")


def _check_out(out: Path) -> None:
    if out.suffix not in FORMATS:
        raise ConfigError(
            f"--out {out}: expected a file ending in {', '.join(FORMATS)}, "
            f"got {out.suffix or 'no suffix'}"
        )
    from selfcaps.engine.atomic import check_writable

    if out.is_dir():
        raise ConfigError(f"--out {out}: is a directory; expected a file")
    check_writable(out.parent)


def cmd_embed(args: argparse.Namespace) -> int:
    """Write the features of a dataset split computed by a trained run."""
    from selfcaps.run.evaluate import resolved_run_config

    resolved_run_config(args.run_dir, args.data_root)  # not a run directory: said first
    _check_out(args.out)
    from selfcaps.engine.atomic import atomic_write_bytes
    from selfcaps.engine.progress import set_progress
    from selfcaps.run.embed import embed_split, encode_features

    set_progress(not args.no_progress)
    arrays, labels, metadata = embed_split(
        args.run_dir,
        args.split,
        args.data,
        args.data_root,
        args.checkpoint,
        args.feature,
        args.threads,
    )
    atomic_write_bytes(args.out, encode_features(arrays, labels, args.out.suffix, metadata))
    shapes = ", ".join(f"{k} {tuple(v.shape)}" for k, v in arrays.items())
    print(f"{args.out}: {len(labels)} {metadata['dataset']} {args.split} images; {shapes}; labels")
    return 0
