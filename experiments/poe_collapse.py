"""PoE capsules: stage 2's collapse step by step (the mechanism in docs/methods/poe.md).

Loads a run directory's autoencoder (any run that finished stage 1), draws a fresh capsule
encoder ``W`` as stage 2 starts it (``model.init_std``), and runs Algorithm 1 with the run's
``cd`` settings (SGD with momentum and L2, ``cd.lr_encoder`` decayed per epoch, the sparsity
term if the run has one) on shuffled batches of the run's training split (``data.batch_size``).
Every ``--every`` steps it prints, on that step's batch: the mean length ``|z_j|`` of the
capsules' total input, their mean on-probability (squashed length ``|z|^2 / (1 + |z|^2)``),
the size of Algorithm 1's model (negative) term relative to its data (positive) term; and on
256 fixed training images (as the run logs after every stage-2 epoch): ``W``'s share on the
top eigenvector of the primaries' uncentred second moment and the capsule-pair similarity of
``W`` (:func:`selfcaps.methods.poe.collapse.collapse_stats`). It also prints that second
moment's top eigenvalue as a share of its trace and the second eigenvalue over the first.
JSON on stdout.

Usage::

    PYTHONPATH=src python experiments/poe_collapse.py RUN_DIR [--data-root DIR]
        [--steps 60] [--every 10] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from selfcaps.data import EvalTransform
from selfcaps.data.datamodule import TransformDataset
from selfcaps.losses.contrastive_divergence import encoder_cd_terms, sparsity_term
from selfcaps.methods.poe.collapse import COLLAPSE_IMAGES, collapse_stats, spread_images
from selfcaps.run.evaluate import load_run_dir


def _norm_ratio(a: torch.Tensor, b: torch.Tensor) -> float:
    """``|a| / |b|`` (0 when both vanish)."""
    nb = float(b.norm())
    return float(a.norm()) / nb if nb > 0 else 0.0


def main() -> None:
    """Replay stage 2 from a fresh W; print the trajectory as JSON."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dir", type=Path)
    p.add_argument("--data-root", default=None)
    p.add_argument("--checkpoint", default="last", help="best or last (default)")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--every", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    method, dm = load_run_dir(args.run_dir, args.data_root, checkpoint=args.checkpoint)
    cfg = method.cfg
    net, cd = method.poe.eval(), cfg.cd
    torch.manual_seed(args.seed)
    with torch.no_grad():
        net.encoder.weight.normal_(0.0, float(cfg.model.init_std))
    opt = torch.optim.SGD(
        net.encoder.parameters(),
        lr=float(cd.lr_encoder),
        momentum=float(cd.momentum),
        weight_decay=float(cd.weight_decay),
    )
    train = dm.split("train")
    fixed = spread_images(train, COLLAPSE_IMAGES)
    g = torch.Generator().manual_seed(args.seed)
    batch = int(cfg.data.batch_size)
    loader = DataLoader(
        TransformDataset(train, EvalTransform()), batch, shuffle=True, generator=g, drop_last=True
    )
    per_epoch = len(loader)
    rows: list[dict[str, float]] = []
    step = 0
    spectrum: dict[str, float] = {}
    while step <= args.steps:
        for x_img, _ in loader:
            if step > args.steps:
                break
            for group in opt.param_groups:
                group["lr"] = float(cd.lr_encoder) * float(cd.lr_decay) ** (step // per_epoch)
            with torch.no_grad():
                x = net.code_to_capsules(net.ae.encode(x_img))
                positive, negative, ch = encoder_cd_terms(net.encoder, x)
                update = 2.0 * (positive - negative)
                if float(cd.sparsity):
                    target = float(cd.sparsity_target)
                    update += float(cd.sparsity) * sparsity_term(x, ch.z, ch.c, target)
                if step % args.every == 0:
                    stats = {k: float(v) for k, v in collapse_stats(net, fixed).items()}
                    spectrum = {k: stats.pop(k) for k in ("primaries_top_eig_share",
                                                          "primaries_eig_ratio")}  # fmt: skip
                    n2 = ch.z.pow(2).sum(-1)
                    rows.append({
                        "step": step,
                        "z_length": float(n2.sqrt().mean()),
                        "on_probability": float((n2 / (1 + n2)).mean()),
                        "model_over_data_term": _norm_ratio(negative, positive),
                        **stats,
                    })  # fmt: skip
            net.encoder.weight.grad = -update
            opt.step()
            step += 1
    out = {
        "run_dir": str(args.run_dir),
        "train_images": len(train),
        "batch_size": batch,
        "steps_per_epoch": per_epoch,
        "fixed_images": len(fixed),
        **spectrum,
        "trajectory": rows,
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
