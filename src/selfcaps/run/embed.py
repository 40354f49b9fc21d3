"""A trained run's features of a dataset split, with labels (``selfcaps embed``).

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

import io
from pathlib import Path
from typing import Any

from selfcaps.config.loading import ConfigError
from selfcaps.data.catalog import check_dataset_name
from selfcaps.run.evaluate import resolved_run_config

__all__ = ["FORMATS", "embed_split", "encode_features"]

#: Output formats by the suffix of the output file.
FORMATS = (".npz", ".safetensors", ".npy")


def embed_split(
    run_dir: Path,
    split: str = "test",
    data: str | None = None,
    data_root: str | None = None,
    checkpoint: str = "best",
    kinds: list[str] | None = None,
    threads: int | None = None,
) -> tuple[dict[str, Any], Any, dict[str, str]]:
    """The features of every image of a split computed by a trained run, in ``eval()`` mode.

    Args:
        run_dir: A run directory written by ``selfcaps run`` / ``pretrain``.
        split: ``train``, ``val`` or ``test``.
        data: Another dataset than the run's, whose images have the shape the network takes.
        data_root: Dataset root (default: the run's; ``SELFCAPS_DATA`` first).
        checkpoint: ``best`` or ``last``.
        kinds: The feature kinds to keep (default: every kind of the method).
        threads: Torch intra-op threads (default: the run's ``trainer.threads``).

    Returns:
        ``({kind: (N, D) float32 array}, (N,) int64 labels, metadata)``; the metadata names
        the run, method, dataset, split, checkpoint and selfcaps version.

    Raises:
        ConfigError: Not a run directory, an unknown dataset or feature kind, or images of
            another shape than the network takes.
    """
    cfg, root_source = resolved_run_config(Path(run_dir), data_root)
    name = data or str(cfg.data.name)
    check_dataset_name(name)

    import torch
    from torch.utils.data import DataLoader

    from selfcaps._version import __version__
    from selfcaps.data import get_dataset
    from selfcaps.eval.method_metrics import collect_features
    from selfcaps.run.trained import load_method

    if threads:
        torch.set_num_threads(int(threads))
    elif cfg.trainer.get("threads"):
        torch.set_num_threads(int(cfg.trainer.threads))
    method = load_method(run_dir, checkpoint, cfg)
    _, eval_tf = method.build_transforms()
    d = cfg.data
    extra = {"image_size": int(d.image_size)} if d.get("image_size") and name == d.name else {}
    ds = get_dataset(
        name,
        root=d.root,
        split=split,
        transform=eval_tf,
        val_fraction=float(d.val_fraction),
        root_source=root_source,
        **extra,
    )
    kinds = _kinds(method, kinds)
    expected = tuple(method.example_input().shape[1:])
    got = tuple(ds[0][0].shape)
    if got != expected:
        raise ConfigError(
            f"--data {name}: its images are {got} after the run's evaluation transform; "
            f"the {method.name} network of {run_dir} takes {expected} ({d.name} images)"
        )
    loader = DataLoader(ds, batch_size=int(d.eval_batch_size), shuffle=False)
    feats, labels = collect_features(method, loader, method.features, kinds)
    metadata = {
        "run_dir": str(run_dir),
        "method": method.name,
        "dataset": name,
        "split": split,
        "checkpoint": checkpoint,
        "selfcaps_version": __version__,
    }
    return {k: v.numpy() for k, v in feats.items()}, labels.numpy(), metadata


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
