"""CoCa training steps: image pairs per second, and the fraction of this machine's GEMM peak.

One step = two views of a batch of 32x32 RGB images through the network, NT-Xent
(T = 0.2) on the normalised class-capsule lengths, backward, Adam. Compared, in the
same run, with a reference written here in the style of the public CoCa code: the
same layers, but class-capsule votes as per-sample broadcast mat-vecs
(``torch.matmul(W[kkA, BD, C], pose[b, l, kkA, C, 1])``), routing by element-wise
products, and one forward pass per view. ``--reference-repo PATH`` additionally
times the actual reference network from a checkout of github.com/Harsh9524/CoCa.

FLOPs are counted with ``torch.utils.flop_counter`` on the readable (unfused) path
of our step: convolutions and matrix products of forward and backward, the
network's nominal work. Element-wise operations (squash, softmax, BatchNorm) are
not counted. The GEMM peak is a 2048^3 fp32 matmul measured in the same run.

    python benchmarks/coca_step.py [--batch 128] [--threads 2] [--rounds 3]

``--cpu-time`` times steps in CPU seconds of this process instead of wall seconds: with one
thread, the time the step takes on an idle core, which a loaded shared machine cannot show on
the clock. ``--image 1x28`` uses MNIST-size images, ``--augment`` adds the batched SimCLR
augmentation of uint8 images to every step (as training does), ``--no-reference`` skips
the (slow) reference-style step.
"""

from __future__ import annotations

import argparse
import importlib
import math
import sys
import time

import torch
from torch.utils.flop_counter import FlopCounterMode

from _common import gemm_peak_flops, set_threads
from selfcaps.caps import squash, use_fused_routing
from selfcaps.data import BatchSimCLRTransform
from selfcaps.losses import NTXentLoss
from selfcaps.models.coca import CoCaNet


class ReferenceStyleCoCa(CoCaNet):
    """CoCaNet whose class capsules use per-sample broadcast mat-vec votes."""

    def capsules_from_backbone(self, f: torch.Tensor) -> torch.Tensor:
        pose = self.primary(f)  # (b, A, 4, 4, C)
        b, A, H, W, C = pose.shape
        pose = pose.permute(0, 2, 3, 1, 4).reshape(b, 1, H * W * A, C, 1)  # [b, l, kkA, C, 1]
        Wt = self.class_caps.weight.view(H * W * A, C, -1).transpose(1, 2)  # [kkA, BD, C]
        M, D = self.num_class_caps, self.caps_dim
        u_hat = torch.matmul(Wt, pose).view(b, H * W * A, M, D)
        logits = torch.zeros(b, H * W * A, M)
        for i in range(self.class_caps.iters):
            c = torch.softmax(logits, dim=2)
            v = squash((c.unsqueeze(-1) * u_hat).sum(dim=1))
            if i < self.class_caps.iters - 1:
                logits = logits + (u_hat * v.unsqueeze(1)).sum(-1)
        return v


def reference_ntxent(o1: torch.Tensor, o2: torch.Tensor, t: float) -> torch.Tensor:
    out = torch.cat([o1, o2])
    sim = torch.exp(out @ out.t() / t)
    n = out.shape[0]
    sim = sim.masked_select(~torch.eye(n, dtype=torch.bool)).view(n, -1)
    pos = torch.exp((o1 * o2).sum(-1) / t)
    pos = torch.cat([pos, pos])
    return (-torch.log(pos / sim.sum(-1))).mean()


def make_step(
    net: torch.nn.Module,
    x1: torch.Tensor,
    x2: torch.Tensor,
    style: str,
    augment: BatchSimCLRTransform | None = None,
    raw: torch.Tensor | None = None,
):
    opt = torch.optim.Adam(net.parameters(), lr=1e-3, weight_decay=1e-6)
    loss_fn = NTXentLoss(temperature=0.2)
    b = x1.shape[0]
    g = torch.Generator().manual_seed(0)

    def step() -> None:
        nonlocal x1, x2
        if augment is not None:
            x1, x2 = augment(raw, g)
        if style == "ours":
            z = net(torch.cat([x1, x2]))
            loss = loss_fn(z[:b], z[b:])
        elif style == "reference-style":
            loss = reference_ntxent(net(x1), net(x2), 0.2)
        else:  # the reference repository's ConvNet returns (feature, embedding)
            loss = reference_ntxent(net(x1)[1], net(x2)[1], 0.2)
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step


def pairs_per_second(step, batch: int, rounds: int, clock=time.perf_counter) -> float:
    step()
    best = math.inf
    for _ in range(rounds):
        t0 = clock()
        step()
        best = min(best, clock() - t0)
    return batch / best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--image", choices=["3x32", "1x28"], default="3x32")
    p.add_argument("--augment", action="store_true", help="batched SimCLR views in every step")
    p.add_argument("--cpu-time", action="store_true", help="time in CPU seconds, not wall")
    p.add_argument("--no-reference", action="store_true", help="time selfcaps' step only")
    p.add_argument("--reference-repo", help="checkout of github.com/Harsh9524/CoCa to time too")
    args = p.parse_args()
    set_threads(args.threads)
    torch.manual_seed(0)
    chans, size = (int(v) for v in args.image.split("x"))
    shape = (args.batch, chans, size, size)
    x1, x2 = torch.randn(shape), torch.randn(shape)
    raw = torch.randint(0, 256, shape, dtype=torch.uint8)
    augment = None
    if args.augment:
        augment = BatchSimCLRTransform(
            input_size=size, channels=chans, normalize=((0.5,) * chans, (0.25,) * chans)
        )
    clock = time.process_time if args.cpu_time else time.perf_counter

    def timed(net: torch.nn.Module, style: str, rounds: int) -> float:
        step = make_step(net, x1, x2, style, augment, raw)
        return pairs_per_second(step, args.batch, rounds, clock)

    ours = CoCaNet(in_chans=chans)
    with use_fused_routing(False), FlopCounterMode(display=False) as fc:
        make_step(CoCaNet(in_chans=chans), x1, x2, "ours")()
    flops_per_step = fc.get_total_flops()
    peak = math.nan if args.cpu_time else gemm_peak_flops()  # a wall-clock peak

    results = {"selfcaps": timed(ours, "ours", args.rounds)}
    if not args.no_reference:
        ref = ReferenceStyleCoCa(in_chans=chans)
        results["reference-style"] = timed(ref, "reference-style", max(1, args.rounds - 1))
    if args.reference_repo:
        sys.path.insert(0, args.reference_repo)
        convnet = importlib.import_module("convnet")
        real = convnet.ConvNet(16, 32, 16, 1)
        results["reference repo"] = timed(real, "repo", max(1, args.rounds - 1))
    flops_per_pair = flops_per_step / args.batch
    print(
        f"CoCa training step, batch {args.batch} pairs of {size}x{size}x{chans}"
        f"{' with batched augmentation' if augment else ''}, {torch.get_num_threads()} "
        f"threads, {'CPU' if args.cpu_time else 'wall'} time; {flops_per_pair / 1e6:.0f} MFLOP "
        f"per pair (fwd+bwd, GEMM/conv only); GEMM peak {peak / 1e9:.1f} GFLOP/s "
        "(wall clock; nan with --cpu-time)"
    )
    for name, pps in results.items():
        print(
            f"  {name:<16} {pps:8.1f} pairs/s   {100 * pps * flops_per_pair / peak:5.1f}% of peak"
        )
    if "reference-style" not in results:
        return
    ratio = results["selfcaps"] / results["reference-style"]
    print(
        f"speed-up over the reference-style step: {ratio:.1f}x  (target >= 5x); "
        f"selfcaps at {100 * results['selfcaps'] * flops_per_pair / peak:.0f}% of GEMM peak "
        "(target >= 30%)"
    )


if __name__ == "__main__":
    main()
