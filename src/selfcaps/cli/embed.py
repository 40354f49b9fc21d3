"""``selfcaps embed RUN_DIR --out FILE``: a trained run's features of a dataset split, with labels.

The features are the method's own (what ``selfcaps eval`` probes: e.g. CoCa's
``backbone``, ``capsule`` and ``embedding``; ``--feature`` keeps some of them),
computed in ``eval()`` mode on every image of the split through the run's
deterministic evaluation transform. ``--data`` embeds another dataset than the
run's, provided its images have the shape the network takes.

Output, chosen by the suffix of ``--out`` (all readable without selfcaps or pickle):

* ``.npz``: one array per feature kind, ``(N, D)`` float32, and ``labels`` ``(N,)`` int64;
* ``.safetensors``: the same tensors, and the run, method, dataset, split and checkpoint in
  the file's metadata;
* ``.npy``: one structured array of ``N`` records with a ``labels`` field and one ``(D,)``
  float32 field per feature kind (``np.load(f)["backbone"]`` is ``(N, D)``).
"""

from __future__ import annotations

import argparse
import io
from pathlib import Path
from typing import Any

from selfcaps.cli.catalog import check_dataset_name
from selfcaps.cli.config import ConfigError
from selfcaps.cli.evaluate import resolved_run_config

__all__ = ["FORMATS", "add_embed_arguments", "cmd_embed", "encode_features"]

#: Output formats by the suffix of ``--out``.
FORMATS = (".npz", ".safetensors", ".npy")


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


def encode_features(
    features: dict[str, Any], labels: Any, suffix: str, metadata: dict[str, str]
) -> bytes:
    """The bytes of a feature file in the format of ``suffix`` (module docstring).

    Args:
        features: ``{kind: (N, D) float32 array}``.
        labels: ``(N,)`` integer labels.
        suffix: ``.npz``, ``.safetensors`` or ``.npy``.
        metadata: Strings stored by the formats that have metadata (``.safetensors``).
    """
    import numpy as np

    arrays = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in features.items()}
    labels = np.asarray(labels, dtype=np.int64)
    if suffix == ".safetensors":
        from safetensors.numpy import save

        return save({**arrays, "labels": labels}, metadata=metadata)
    buf = io.BytesIO()
    if suffix == ".npz":
        np.savez(buf, **arrays, labels=labels)
    else:
        fields = [(k, np.float32, v.shape[1:]) for k, v in arrays.items()]
        records = np.empty(len(labels), dtype=[("labels", np.int64), *fields])
        records["labels"] = labels
        for k, v in arrays.items():
            records[k] = v
        np.save(buf, records, allow_pickle=False)
    return buf.getvalue()


def _check_out(out: Path) -> None:
    if out.suffix not in FORMATS:
        raise ConfigError(
            f"--out {out}: expected a file ending in {', '.join(FORMATS)}, "
            f"got {out.suffix or 'no suffix'}"
        )
    from selfcaps.methods.atomic import check_writable

    if out.is_dir():
        raise ConfigError(f"--out {out}: is a directory; expected a file")
    check_writable(out.parent)


def cmd_embed(args: argparse.Namespace) -> int:
    """Write the features of a dataset split computed by a trained run."""
    cfg, root_source = resolved_run_config(args)
    _check_out(args.out)
    name = args.data or str(cfg.data.name)
    check_dataset_name(name)

    import torch
    from torch.utils.data import DataLoader

    from selfcaps import __version__
    from selfcaps.data import get_dataset
    from selfcaps.eval.progress import set_progress
    from selfcaps.methods.atomic import atomic_write_bytes
    from selfcaps.methods.evaluation import collect_features
    from selfcaps.methods.trained import load_method

    if args.threads:
        torch.set_num_threads(int(args.threads))
    elif cfg.trainer.get("threads"):
        torch.set_num_threads(int(cfg.trainer.threads))
    set_progress(not args.no_progress)
    method = load_method(args.run_dir, args.checkpoint, cfg)
    _, eval_tf = method.build_transforms()
    d = cfg.data
    extra = {"image_size": int(d.image_size)} if d.get("image_size") and name == d.name else {}
    ds = get_dataset(
        name,
        root=d.root,
        split=args.split,
        transform=eval_tf,
        val_fraction=float(d.val_fraction),
        root_source=root_source,
        **extra,
    )
    kinds = _kinds(method, args.feature)
    expected = tuple(method.example_input().shape[1:])
    got = tuple(ds[0][0].shape)
    if got != expected:
        raise ConfigError(
            f"--data {name}: its images are {got} after the run's evaluation transform; "
            f"the {method.name} network of {args.run_dir} takes {expected} ({d.name} images)"
        )
    loader = DataLoader(ds, batch_size=int(d.eval_batch_size), shuffle=False)
    feats, labels = collect_features(method, loader, method.features, kinds)
    metadata = {
        "run_dir": str(args.run_dir),
        "method": method.name,
        "dataset": name,
        "split": args.split,
        "checkpoint": args.checkpoint,
        "selfcaps_version": __version__,
    }
    arrays = {k: v.numpy() for k, v in feats.items()}
    atomic_write_bytes(args.out, encode_features(arrays, labels.numpy(), args.out.suffix, metadata))
    shapes = ", ".join(f"{k} {tuple(v.shape)}" for k, v in arrays.items())
    print(f"{args.out}: {len(labels)} {name} {args.split} images; {shapes}; labels")
    return 0


def _kinds(method: Any, requested: list[str] | None) -> list[str]:
    """The feature kinds to write: ``requested`` (checked against the method's), else all."""
    available = method.feature_kinds()
    bad = [k for k in requested or [] if k not in available]
    if bad:
        raise ConfigError(
            f"--feature: {bad[0]!r} is not a feature of {method.name}; "
            f"valid: {', '.join(available)}"
        )
    return list(dict.fromkeys(requested)) if requested else available
