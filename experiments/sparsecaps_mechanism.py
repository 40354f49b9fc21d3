"""SparseCaps' mechanism, sparse and dense side by side: the paper's Figures 3, 4 and 5.

Reads two finished runs (``model.safetensors`` and ``config.json`` of a
``--variant sparse`` and a ``--variant dense`` run of the same preset), encodes
test images with each network in eval mode and draws:

* ``sparsecaps_fig3_support.png``: routing support ranked per image, relative to
  rank 0, averaged over MNIST test images (paper Fig. 3), both networks on one axis;
* ``sparsecaps_fig4_rank_frequency.png``: how often each latent capsule takes each
  rank over affNIST test images (paper Fig. 4: "over 10,000 affNIST test images"),
  sparse left, dense right;
* ``sparsecaps_fig5_equivariance.png``: each parameter of the most active capsule of
  one MNIST test digit swept from -1 to 1 in steps of 0.2 (paper Fig. 5), sparse
  left, dense right.

The statistics and figure specifications are the method's own
(:mod:`selfcaps.methods.sparsecaps.figures`); this script only loads, encodes and places
the panels side by side. It prints, per network, the last point of the Fig. 3
curve and each capsule's share of rank 0 in Fig. 4.

Example:
    python experiments/sparsecaps_mechanism.py --sparse RUNS/sparse_seed0 \
        --dense RUNS/dense_seed0 --data-root DIR --out docs/figures
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch
from safetensors.torch import load_file
from torch.utils.data import DataLoader, Subset

import selfcaps
from selfcaps.data import get_dataset
from selfcaps.data.datamodule import TransformDataset
from selfcaps.methods.sparsecaps.figures import (
    equivariance_sweep,
    rank_frequency,
    rank_frequency_plot,
    ranked_support,
    support_plot,
)
from selfcaps.methods.sparsecaps.method import CanvasTransform
from selfcaps.models.sparsecaps import SparseCapsNet
from selfcaps.viz.figures import Figure
from selfcaps.viz.render import render_figure


def load_network(run: Path) -> SparseCapsNet:
    """The network of a finished run, in eval mode."""
    cfg = json.loads((run / "config.json").read_text())
    net = selfcaps.create_model(cfg["model"], **cfg["model_kwargs"])
    net.load_state_dict(load_file(run / "model.safetensors"))
    if not isinstance(net, SparseCapsNet):
        raise ValueError(f"{run}: not a SparseCaps run (model {cfg['model']!r})")
    return net.eval()


@torch.no_grad()
def support_and_ranks(
    net: SparseCapsNet, ds: object, count: int, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Routing support and ranks of ``count`` seeded random images of ``ds`` (centred)."""
    n = len(ds)  # type: ignore[arg-type]
    idx = torch.randperm(n, generator=torch.Generator().manual_seed(seed))[: min(count, n)]
    part = TransformDataset(Subset(ds, idx.tolist()), CanvasTransform(net.image_size))  # type: ignore[arg-type]
    support, ranks = [], []
    for x, _ in DataLoader(part, batch_size=250):
        _, psi = net.encode(x)
        support.append(psi)
        ranks.append(net.rank(psi))
    return torch.cat(support), torch.cat(ranks)


def side_by_side(specs: list[Figure], out: Path) -> None:
    """Render each specification and place the images left to right in one PNG."""
    with tempfile.TemporaryDirectory() as tmp:
        images = []
        for i, spec in enumerate(specs):
            path = Path(tmp) / f"{i}.png"
            render_figure(spec, path)
            images.append(plt.imread(path)[..., :3])
    height = max(im.shape[0] for im in images)
    padded = [
        np.pad(im, ((0, height - im.shape[0]), (0, 0), (0, 0)), constant_values=1.0)
        for im in images
    ]
    out.parent.mkdir(parents=True, exist_ok=True)
    plt.imsave(out, np.concatenate(padded, axis=1))


def main(argv: list[str] | None = None) -> int:
    """Draw the three side-by-side figures."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sparse", type=Path, required=True, help="run directory of a sparse run")
    p.add_argument("--dense", type=Path, required=True, help="run directory of a dense run")
    p.add_argument("--data-root", type=Path, help="holds MNIST/raw (else mnist5k's digits)")
    p.add_argument("--images", type=int, default=10000, help="test images per statistic")
    p.add_argument("--out", type=Path, required=True, help="directory for the PNGs")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    root = str(args.data_root) if args.data_root else None
    digits = "mnist" if root else "mnist5k"
    mnist = get_dataset(digits, root=root, split="test")
    affnist = get_dataset("affnist_like", root=root, split="test")
    nets = {"sparse": load_network(args.sparse), "dense": load_network(args.dense)}
    curves, rank_specs, sweeps = {}, [], []
    x, label = mnist[0]
    image = CanvasTransform(nets["sparse"].image_size)(x)
    for name, net in nets.items():
        support, _ = support_and_ranks(net, mnist, args.images)
        curves[name] = ranked_support(support)
        _, ranks = support_and_ranks(net, affnist, args.images)
        what = f"{name}, {ranks.shape[0]} affnist_like test images"
        freq = rank_frequency(ranks)
        rank_specs.append(rank_frequency_plot(freq, what))
        wins = {j: round(100 * float(f), 1) for j, f in enumerate(freq[:, 0]) if f > 0}
        last = float(curves[name][-1])
        print(f"{name}: last-rank support / rank 0 {last:.3f}; rank-0 share % by capsule {wins}")
        with torch.no_grad():
            sweeps.append(equivariance_sweep(net, image, int(label)))
    render_figure(support_plot(curves, args.images), args.out / "sparsecaps_fig3_support.png")
    side_by_side(rank_specs, args.out / "sparsecaps_fig4_rank_frequency.png")
    side_by_side(sweeps, args.out / "sparsecaps_fig5_equivariance.png")
    for name in ("fig3_support", "fig4_rank_frequency", "fig5_equivariance"):
        print(args.out / f"sparsecaps_{name}.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
