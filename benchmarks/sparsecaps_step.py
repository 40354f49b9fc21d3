"""SparseCaps: what one training step costs at the paper's width, relative to the ``quick`` width.

To plan runs at the paper's width "for as many steps as a few hours allow", this
prints the measured seconds per training step (forward, reconstruction loss, routing
support, mask, boosting update, backward, Adam) of the ``quick`` network and of the
``paper`` network (conv1 256 filters, 32 primary types: 4,608 children instead of 576)
at the same batch size, interleaved round by round so that machine noise hits both,
and the median ratio paper / quick: the one comparable figure. From the paper step's
time it also prints how many paper-width steps ``--hours`` of this machine allow, and
how long the paper's 30,000 steps of 128 would take.

    python benchmarks/sparsecaps_step.py [--batch 32] [--threads 1] [--rounds 3] [--hours 3]
"""

from __future__ import annotations

import argparse

import torch

from _common import interleaved_ratio, load_average, set_threads
from selfcaps.config.loading import load_config
from selfcaps.methods.base import build_optimizer
from selfcaps.methods.sparsecaps.method import SparseCaps


def make_step(preset: str, x: torch.Tensor) -> tuple[SparseCaps, object]:
    """One training step of ``preset``'s network and optimiser on the batch ``x``."""
    torch.manual_seed(0)
    method = SparseCaps(load_config("sparsecaps", preset, [("data.name", "mnist")])).train()
    opt = build_optimizer(method.parameters(), method.cfg.optim)
    y = torch.zeros(x.shape[0], dtype=torch.long)

    def step() -> None:
        loss, _ = method.compute_loss((x, y))
        opt.zero_grad()
        loss.backward()
        opt.step()

    return method, step


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--hours", type=float, default=3.0)
    args = p.parse_args()
    set_threads(args.threads)
    x = torch.rand(args.batch, 1, 40, 40)
    quick, quick_step = make_step("quick", x)
    paper, paper_step = make_step("paper", x)
    nets = {"quick": quick, "paper": paper}
    sizes = {name: sum(q.numel() for q in m.parameters()) for name, m in nets.items()}
    t_paper, t_quick, ratio = interleaved_ratio(paper_step, quick_step, rounds=args.rounds)
    steps = args.hours * 3600 / t_paper
    full = 30_000 * t_paper * 128 / args.batch / 3600
    print(
        f"SparseCaps training step, batch {args.batch}, {torch.get_num_threads()} thread(s), "
        f"load {load_average():.1f}\n"
        f"  quick ({sizes['quick']:,} parameters): {t_quick:.3f} s/step\n"
        f"  paper ({sizes['paper']:,} parameters): {t_paper:.3f} s/step\n"
        f"  paper / quick (median of {args.rounds} interleaved rounds): {ratio:.1f}x\n"
        f"  {args.hours:g} hours allow about {steps:,.0f} paper-width steps of {args.batch}; "
        f"the paper's 30,000 steps of 128 would take about {full:,.0f} hours"
    )


if __name__ == "__main__":
    main()
