"""DenseCaps forward+backward against a per-sample mat-vec reference (CoCa's class capsules).

Layer: 512 children of 16-D -> 10 parents of 16-D, 3 routing iterations,
batch 128, float32, 2 threads. The reference is written here in the style of
the public CoCa / self-routing code: the transform matrices broadcast against
every sample, ``torch.matmul(W[kkA, BD, C], pose[b, l, kkA, C, 1])``, then
routing with element-wise products and sums.

Prints the speed-up ratio (reference time / DenseCaps time; target >= 8x),
measured by alternating the two in the same run, and the peak memory of one
forward pass of each.

    python benchmarks/routing.py [--batch 128] [--threads 2] [--rounds 7]
"""

from __future__ import annotations

import argparse

import torch

from _common import interleaved_ratio, peak_rss_increase, saved_for_backward_bytes, set_threads
from selfcaps.caps import DenseCaps, squash


class ReferenceClassCaps(torch.nn.Module):
    """Per-sample mat-vec votes and textbook routing, as in the reference code."""

    def __init__(self, kkA: int, B: int, C: int, D: int, iters: int = 3) -> None:
        super().__init__()
        self.B, self.D, self.iters = B, D, iters
        self.W = torch.nn.Parameter(torch.randn(kkA, B * D, C) * 0.1)

    def forward(self, pose: torch.Tensor) -> torch.Tensor:
        b, kkA, _ = pose.shape
        pose = pose.view(b, 1, kkA, -1, 1)  # (b, l=1, kkA, C, 1)
        u_hat = torch.matmul(self.W, pose).view(b, kkA, self.B, self.D)
        logits = torch.zeros(b, kkA, self.B)
        for i in range(self.iters):
            c = torch.softmax(logits, dim=2)
            v = squash((c.unsqueeze(-1) * u_hat).sum(dim=1))
            if i < self.iters - 1:
                logits = logits + (u_hat * v.unsqueeze(1)).sum(dim=-1)
        return v


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args()
    set_threads(args.threads)
    torch.manual_seed(0)
    N, C, M, D = 512, 16, 10, 16
    ours = DenseCaps(N, C, M, D, iters=3)
    ref = ReferenceClassCaps(N, M, C, D, iters=3)
    x = torch.randn(args.batch, N, C, requires_grad=True)

    def step(layer: torch.nn.Module) -> None:
        layer(x).sum().backward()

    t_ref, t_ours, ratio = interleaved_ratio(lambda: step(ref), lambda: step(ours), args.rounds)
    mem = {}
    for name, layer in (("DenseCaps", ours), ("reference", ref)):
        mem[name] = (
            peak_rss_increase(lambda layer=layer: layer(x)),
            saved_for_backward_bytes(lambda layer=layer: layer(x)),
        )
    print(
        f"CoCa class capsules: {N}x{C} -> {M}x{D}, 3 iterations, batch {args.batch}, "
        f"float32, {torch.get_num_threads()} threads"
    )
    print(f"  reference (per-sample mat-vec): {t_ref * 1e3:8.1f} ms forward+backward")
    print(f"  DenseCaps:                      {t_ours * 1e3:8.1f} ms forward+backward")
    for name, (peak, saved) in mem.items():
        peak_s = f"{peak / 2**20:.1f} MiB" if peak is not None else "n/a"
        print(
            f"  {name:<10} forward: peak RSS increase {peak_s}, "
            f"saved for backward {saved / 2**20:.1f} MiB"
        )
    print(
        f"speed-up (reference / DenseCaps, median of {args.rounds} interleaved rounds): "
        f"{ratio:.1f}x  (target >= 8x)"
    )


if __name__ == "__main__":
    main()
