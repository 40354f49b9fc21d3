"""Digests of each method's weights after a few CPU training steps: did the arithmetic move?

Run at two commits and compare the lines: equal digests mean the two trees train bit for bit the
same on this machine (what a speed-up for accelerators must leave unchanged on a CPU). Each
method trains its ``quick`` preset (on a subset of its training split) for a few steps with one
thread, seed 0, no validation; PoE runs one short epoch of each of its three stages.

    python benchmarks/cpu_digest.py --data-root DIR [--methods coca ...]
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from typing import Any

import lightning as L
import torch
from torch import nn

from _method_steps import METHODS, build_method, default_data_root, fit_steps, quiet_lightning
from selfcaps.caps.chunking import Sizing, sized_for

#: Per method: preset overrides and training steps (``None``: PoE's three one-epoch stages).
CASES: dict[str, tuple[list[tuple[str, Any]], int | None]] = {
    "coca": ([("data.train_subset", 2048)], 6),
    "sparsecaps": ([("data.train_subset", 2048)], 6),
    "mcae": ([("data.train_subset", 2048)], 6),
    "encapnet": ([("data.train_subset", 2048), ("trainer.max_time", None)], 4),
    "poe": (
        [("data.train_subset", 512), ("model.stage_epochs", [1, 1, 1]), ("trainer.epochs", 3)],
        None,
    ),
}


def digest(module: nn.Module) -> str:
    """SHA-256 (16 hex digits) of every parameter and buffer, by name, as raw bytes."""
    h = hashlib.sha256()
    for name, value in sorted(module.state_dict().items()):
        h.update(name.encode())
        h.update(value.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def trained_digest(
    name: str, data_root: str | None, seed: int = 0, extra=(), sizing: Sizing = "cpu"
) -> str:
    """Train ``name`` as :data:`CASES` says, the hot loops sized for ``sizing``, and return
    :func:`digest` of the module."""
    overrides, steps = CASES[name]
    overrides = [*overrides, ("monitor.knn_every_n_epochs", 0), *extra]
    method, dm = build_method(name, "quick", overrides, data_root, seed=seed)
    with sized_for(sizing):
        _train(method, dm, steps)
    return digest(method)


def _train(method: L.LightningModule, dm: Any, steps: int | None) -> None:
    """:data:`CASES`' training: ``steps`` steps, or PoE's three one-epoch stages (``None``)."""
    if steps is None:
        trainer = L.Trainer(
            accelerator="cpu", max_epochs=3, limit_val_batches=0, num_sanity_val_steps=0,
            logger=False, enable_checkpointing=False, enable_progress_bar=False,
            enable_model_summary=False, use_distributed_sampler=False,
        )  # fmt: skip
        trainer.fit(method, datamodule=dm)
    else:
        fit_steps(method, dm, steps)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    p.add_argument("--data-root", default=default_data_root())
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--sizing",
        default="cpu",
        choices=["cpu", "accelerator"],
        help="hot loops sized as on this CPU (default) or as on a GPU",
    )
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    quiet_lightning()
    for name in args.methods:
        print(name, trained_digest(name, args.data_root, args.seed, sizing=args.sizing), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
