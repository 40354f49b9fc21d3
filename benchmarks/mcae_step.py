"""MCAE training steps per second (pretraining and finetuning) and the fraction of GEMM peak.

Pretraining step: random masking of 50% of the patches, backbone, primary capsules,
encoder on the visible positions, capsule decoder on all positions, masked-patch
MSE, backward, optimiser step. Finetuning step: the same network without the decoder
on the unmasked image, class capsules, cross-entropy of the averaged class activations,
backward, optimiser step. The optimiser is the preset's (``quick``: Adam). Input: a
batch of 32x32x3 images (CIFAR-10 size); the network has
the sizes of the chosen preset (``quick`` by default; ``paper`` is the GPU preset,
whose decoder alone has 72M parameters).

FLOPs are counted with ``torch.utils.flop_counter`` (convolutions and matrix
products of forward and backward, the network's nominal work); element-wise
operations (routing softmax and weighted sums, BatchNorm, GELU) are not counted.
The GEMM peak is a 2048^3 fp32 matmul measured in the same run. The machine's
load average is printed because these CPUs are shared.

The encoder's and decoder's self-routing layers run fused by default (their votes
are never stored); ``pretrain (readable)`` times the same step through the readable
``SelfRoutingDense`` path, interleaved round by round with the fused step so that
machine noise hits both, and prints the median ratio.

    python benchmarks/mcae_step.py [--batch 128] [--threads 2] [--rounds 3] [--preset quick]
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from _common import gemm_peak_flops, interleaved_ratio, load_average, set_threads
from selfcaps.config.loading import load_config
from selfcaps.losses import class_nll, masked_patch_mse
from selfcaps.methods.base import build_optimizer
from selfcaps.models.mcae import MCAENet


def make_steps(kwargs: dict, optim: Any, x: torch.Tensor, y: torch.Tensor) -> dict:
    """The two training steps, each with its own network and the preset's optimiser."""
    torch.manual_seed(0)
    pre_net = MCAENet(**kwargs)
    ft_net = MCAENet(**kwargs, decoder=False)
    pre_opt = build_optimizer(pre_net.parameters(), optim)
    ft_opt = build_optimizer(ft_net.parameters(), optim)

    def pretrain() -> None:
        loss = masked_patch_mse(pre_net.forward_pretrain(x))
        pre_opt.zero_grad()
        loss.backward()
        pre_opt.step()

    def pretrain_readable() -> None:
        pre_net.use_fused_routing(False)
        try:
            pretrain()
        finally:
            pre_net.use_fused_routing(True)

    def finetune() -> None:
        loss = class_nll(ft_net(x), y)
        ft_opt.zero_grad()
        loss.backward()
        ft_opt.step()

    params = {
        "pretrain": sum(p.numel() for p in pre_net.parameters()),
        "finetune": sum(p.numel() for p in ft_net.parameters()),
    }
    return {
        "pretrain": pretrain,
        "pretrain_readable": pretrain_readable,
        "finetune": finetune,
        "params": params,
        "nets": {"pretrain": pre_net, "finetune": ft_net},
    }


def steps_per_second(step, rounds: int) -> float:
    step()
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - t0)
    return 1.0 / best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--preset", default="quick", help="MCAE preset whose model sizes to use")
    args = p.parse_args()
    set_threads(args.threads)
    cfg = load_config("mcae", args.preset)
    model = dict(cfg.model)
    model.pop("name")
    kwargs = {**model, "img_size": 32, "in_chans": 3, "num_classes": 10}
    g = torch.Generator().manual_seed(0)
    x = torch.randn(args.batch, 3, 32, 32, generator=g)
    y = torch.randint(0, 10, (args.batch,), generator=g)
    steps = make_steps(kwargs, cfg.optim, x, y)
    flops = {}
    for name in ("pretrain", "finetune"):
        with FlopCounterMode(display=False) as fc:
            steps[name]()
        flops[name] = fc.get_total_flops()
    peak = gemm_peak_flops()
    load = load_average()
    print(
        f"MCAE ({args.preset} preset sizes) on {args.batch} x 3x32x32, "
        f"{torch.get_num_threads()} threads, {cfg.optim.name}; GEMM peak {peak / 1e9:.1f} GFLOP/s; "
        f"load average {load:.1f} on {os.cpu_count()} CPUs"
    )
    for name in ("pretrain", "finetune"):
        sps = steps_per_second(steps[name], args.rounds)
        print(
            f"  {name:<9} {sps:6.2f} steps/s  {sps * args.batch:7.1f} images/s  "
            f"{flops[name] / args.batch / 1e6:6.1f} MFLOP/image  "
            f"{100 * sps * flops[name] / peak:5.1f}% of GEMM peak  "
            f"({steps['params'][name] / 1e6:.2f}M parameters)"
        )

    slow, _, ratio = interleaved_ratio(steps["pretrain_readable"], steps["pretrain"], args.rounds)
    print(
        f"  pretrain (readable routing) {1 / slow:6.2f} steps/s; fused is "
        f"{ratio:.2f}x faster (median of {args.rounds} interleaved rounds)"
    )


if __name__ == "__main__":
    main()
