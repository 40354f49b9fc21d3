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


def make_step(net: torch.nn.Module, x1: torch.Tensor, x2: torch.Tensor, style: str):
    opt = torch.optim.Adam(net.parameters(), lr=1e-3, weight_decay=1e-6)
    loss_fn = NTXentLoss(temperature=0.2)
    b = x1.shape[0]

    def step() -> None:
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


def pairs_per_second(step, batch: int, rounds: int) -> float:
    step()
    best = math.inf
    for _ in range(rounds):
        t0 = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - t0)
    return batch / best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--reference-repo", help="checkout of github.com/Harsh9524/CoCa to time too")
    args = p.parse_args()
    set_threads(args.threads)
    torch.manual_seed(0)
    x1, x2 = torch.randn(args.batch, 3, 32, 32), torch.randn(args.batch, 3, 32, 32)

    ours = CoCaNet()
    step = make_step(ours, x1, x2, "ours")
    with use_fused_routing(False), FlopCounterMode(display=False) as fc:
        step()
    flops_per_step = fc.get_total_flops()
    peak = gemm_peak_flops()

    ref = ReferenceStyleCoCa()
    results = {
        "selfcaps": pairs_per_second(step, args.batch, args.rounds),
        "reference-style": pairs_per_second(
            make_step(ref, x1, x2, "reference-style"), args.batch, max(1, args.rounds - 1)
        ),
    }
    if args.reference_repo:
        sys.path.insert(0, args.reference_repo)
        convnet = importlib.import_module("convnet")
        real = convnet.ConvNet(16, 32, 16, 1)
        results["reference repo"] = pairs_per_second(
            make_step(real, x1, x2, "repo"), args.batch, max(1, args.rounds - 1)
        )
    flops_per_pair = flops_per_step / args.batch
    print(
        f"CoCa training step, batch {args.batch} pairs of 32x32x3, {torch.get_num_threads()} "
        f"threads; {flops_per_pair / 1e6:.0f} MFLOP per pair (fwd+bwd, GEMM/conv only); "
        f"GEMM peak {peak / 1e9:.1f} GFLOP/s"
    )
    for name, pps in results.items():
        print(
            f"  {name:<16} {pps:8.1f} pairs/s   {100 * pps * flops_per_pair / peak:5.1f}% of peak"
        )
    ratio = results["selfcaps"] / results["reference-style"]
    print(
        f"speed-up over the reference-style step: {ratio:.1f}x  (target >= 5x); "
        f"selfcaps at {100 * results['selfcaps'] * flops_per_pair / peak:.0f}% of GEMM peak "
        "(target >= 30%)"
    )


if __name__ == "__main__":
    main()
