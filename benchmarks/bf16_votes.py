"""Error of votes from bfloat16 inputs (``votes_in_bf16``) at CoCa's and SparseCaps' paper shapes.

For the class/latent capsule layer of each ``paper`` preset (``src/selfcaps/configs/
<method>_paper.yaml``: the model section, the batch size and, for SparseCaps, the canvas), the
network is built as the method builds it (``create_model`` with the dataset's channels and
size) at its initial weights, in ``eval()`` mode, and a batch of random images (standard
normal for CoCa, whose inputs are normalised; uniform in [0, 1] for SparseCaps' canvas) goes
through the backbone and primary capsules to give the children ``u``. Then, against float64
(``einsum`` votes; the layer itself run in float64 for the parent poses), it prints for
float32 votes (the default) and for bfloat16-input votes (``votes_in_bf16(True)``):

* votes: relative error of each vote vector ``|u_hat - u_hat64| / |u_hat64|``, max and mean,
  and the element errors in units of ``S = sum_k |W_k||u_k|``, max and mean (the bound of
  ``tests/test_bf16_votes.py`` is ``2^-7 + 2^-16 + gamma_K``: 7.8e-3);
* parent poses after routing (the fused ``DenseCaps`` forward, float32 routing): relative
  error of each parent capsule, max and mean.

Everything runs on the CPU; no timing is reported (on the CPU the bfloat16-input votes are a
float32 GEMM of rounded inputs, no faster).

    python benchmarks/bf16_votes.py [--methods coca sparsecaps] [--batch N] [--chunk 16]
        [--threads 1] [--seed 0]
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch
import yaml
from torch import Tensor

import selfcaps
from _common import set_threads
from selfcaps.caps import DenseCaps, child_votes, flatten_caps, votes_in_bf16
from selfcaps.caps.fused_routing import bf16_vote_inputs
from selfcaps.data.registry import dataset_info

F64 = torch.float64
CONFIGS = Path(selfcaps.__file__).parent / "configs"
#: method: (attribute of its capsule layer, images for the children)
LAYERS = {"coca": "class_caps", "sparsecaps": "latent"}


def paper_network(method: str) -> tuple[torch.nn.Module, DenseCaps, int, tuple[int, int, int]]:
    """The method's network at its paper preset, its capsule layer, batch size and input shape."""
    cfg: dict[str, Any] = yaml.safe_load((CONFIGS / f"{method}_paper.yaml").read_text())
    kwargs = dict(cfg["model"])
    name = kwargs.pop("name")
    info = dataset_info(cfg["data"]["name"])
    side = int(cfg.get("augment", {}).get("canvas") or info.image_size[0])
    kwargs["in_chans"] = info.channels
    if method == "sparsecaps":
        kwargs.update(image_size=side, num_classes=info.num_classes)
    net = selfcaps.create_model(name, **kwargs).eval()
    batch = int(cfg["data"]["batch_size"])
    return net, getattr(net, LAYERS[method]), batch, (info.channels, side, side)


@torch.no_grad()
def children(method: str, net: torch.nn.Module, images: Tensor) -> Tensor:
    """Primary capsules ``(B, N, Din)`` of ``images``: the inputs of the vote product."""
    if method == "coca":
        return flatten_caps(net.primary(net.forward_backbone(images)))
    return flatten_caps(net.primary(torch.relu(net.conv1(images))))


def rel_vectors(x: Tensor, ref: Tensor) -> Tensor:
    """Relative error of each vector (last dimension): ``|x - ref| / |ref|``."""
    return (x.to(F64) - ref).norm(dim=-1) / ref.norm(dim=-1)


class Stats:
    """Running max and mean of relative errors."""

    def __init__(self) -> None:
        self.max, self.total, self.count = 0.0, 0.0, 0

    def add(self, err: Tensor) -> None:
        self.max = max(self.max, float(err.max()))
        self.total, self.count = self.total + float(err.sum()), self.count + err.numel()

    def __str__(self) -> str:
        return f"max {self.max:.2e}  mean {self.total / self.count:.2e}"


@torch.no_grad()
def measure(layer: DenseCaps, u: Tensor, chunk: int) -> dict[str, Stats]:
    """Vote and parent-pose errors of float32 and bfloat16-input votes against float64."""
    stats = {key: Stats() for key in ("votes32", "votes16", "scaled16", "poses32", "poses16")}
    w, M = layer.weight, layer.out_caps
    w64 = w.to(F64)
    layer64 = DenseCaps(layer.in_caps, layer.in_dim, M, layer.out_dim, layer.iters).double()
    layer64.weight.copy_(w64)
    for i in range(0, u.shape[0], chunk):
        x = u[i : i + chunk]
        B, N, _ = x.shape
        ref = torch.einsum("bnk,nke->bne", x.to(F64), w64).reshape(B, N, M, -1)
        scale = torch.einsum("bnk,nke->bne", x.to(F64).abs(), w64.abs()).reshape(B, N, M, -1)
        v32 = child_votes(x, w, M)
        v16 = child_votes(*bf16_vote_inputs(x, w), M)  # what votes_in_bf16 routes
        stats["votes32"].add(rel_vectors(v32, ref))
        stats["votes16"].add(rel_vectors(v16, ref))
        stats["scaled16"].add((v16.to(F64) - ref).abs() / scale)
        poses64 = layer64(x.to(F64))
        stats["poses32"].add(rel_vectors(layer(x), poses64))
        with votes_in_bf16(True):
            stats["poses16"].add(rel_vectors(layer(x), poses64))
    return stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--methods", nargs="+", default=list(LAYERS), choices=list(LAYERS))
    parser.add_argument("--batch", type=int, default=None, help="default: the preset's")
    parser.add_argument("--chunk", type=int, default=16, help="samples per float64 pass")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    set_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s), seed {args.seed}, CPU")
    for method in args.methods:
        torch.manual_seed(args.seed)
        net, layer, batch, shape = paper_network(method)
        batch = args.batch or batch
        images = torch.randn(batch, *shape) if method == "coca" else torch.rand(batch, *shape)
        u = children(method, net, images)
        B, N, K = u.shape
        print(
            f"\n{method} (paper preset): votes GEMM {N} x [({B} x {K}) @ ({K} x "
            f"{layer.out_caps * layer.out_dim})], {layer.iters} routing iterations"
        )
        s = measure(layer, u, args.chunk)
        print(f"  votes float32       vs float64: {s['votes32']}   (per vote vector)")
        print(f"  votes bf16 inputs   vs float64: {s['votes16']}   (per vote vector)")
        print(
            f"  votes bf16 inputs, element error / sum|W||u|: {s['scaled16']}"
            f"   (bound 2^-7 + 2^-16 + gamma_K = {2**-7 + 2**-16 + K * 2**-24:.2e})"
        )
        print(f"  poses float32 votes vs float64: {s['poses32']}   (per parent capsule)")
        print(f"  poses bf16 votes    vs float64: {s['poses16']}   (per parent capsule)")


if __name__ == "__main__":
    main()
