"""What MCAE's whole protocol would cost on this CPU: step times measured, epochs projected.

Times training steps of a preset's network (the steps of ``mcae_step.py``: random
50% masking, decoder, masked-patch MSE, backward, the preset's optimiser; class
capsules, cross-entropy, backward, optimiser) and evaluation passes (``eval()``, no
gradients: the validation and test passes) on random CIFAR-10-sized batches,
interleaved step by step with the same steps of a reference preset (``quick``) whose
epochs were timed on an idle machine. Both wall time and this process's CPU time are
recorded; the CPUs here are shared, and under load both are inflated (wall time by
waiting, CPU time by cache and memory contention), so the projection to an idle core
is the reference's idle epoch time times the ratio of the two presets' CPU times
measured in the same run. The direct projection from the CPU times under load is
printed too.

An epoch is ``--train-images`` // batch steps (the training loader drops the last
partial batch) plus one validation pass over ``--val-images``. The protocol is
``--pretrain-epochs`` pretraining epochs then ``--finetune-epochs`` finetuning epochs
for the pretrained arm and the same finetuning alone for the scratch arm, each ending
with one test pass over ``--test-images``. Data loading and augmentation are not
timed (they are in the reference's idle epoch times).

    python benchmarks/mcae_protocol_cost.py --preset paper --threads 1
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import torch

from _common import load_average, set_threads
from mcae_step import make_steps
from selfcaps.config.loading import load_config


def interleaved(fns: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Mean CPU seconds of each callable over ``rounds`` rounds that call each once in turn.

    One warm-up call each first. Wall seconds are kept under ``"<name> wall"``.
    """
    for fn in fns.values():
        fn()
    cpu: dict[str, list[float]] = {name: [] for name in fns}
    wall: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            w0, c0 = time.perf_counter(), time.process_time()
            fn()
            wall[name].append(time.perf_counter() - w0)
            cpu[name].append(time.process_time() - c0)
    out = {name: statistics.mean(v) for name, v in cpu.items()}
    return out | {f"{name} wall": statistics.mean(v) for name, v in wall.items()}


def build(preset: str, x: torch.Tensor, y: torch.Tensor) -> dict[str, Callable[[], object]]:
    """A preset's pretraining and finetuning steps and its two evaluation passes."""
    cfg = load_config("mcae", preset)
    model = dict(cfg.model)
    model.pop("name")
    kwargs = {**model, "img_size": 32, "in_chans": 3, "num_classes": 10}
    steps = make_steps(kwargs, cfg.optim, x, y)
    pre, ft = steps["nets"]["pretrain"], steps["nets"]["finetune"]

    def train(step: Callable[[], None], net: torch.nn.Module) -> Callable[[], None]:
        return lambda: (net.train(), step())

    @torch.no_grad()
    def pretrain_forward() -> None:
        pre.eval().forward_pretrain(x)

    @torch.no_grad()
    def classify() -> None:
        ft.eval()(x)

    return {
        "pretrain": train(steps["pretrain"], pre),
        "finetune": train(steps["finetune"], ft),
        "pretrain_forward": pretrain_forward,
        "classify": classify,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="paper", help="MCAE preset whose network to time")
    p.add_argument("--reference", default="quick", help="preset timed idle, interleaved")
    p.add_argument(
        "--reference-minutes",
        type=float,
        nargs=2,
        default=(1.70, 1.24),
        metavar=("PRETRAIN", "FINETUNE"),
        help="the reference's idle minutes per epoch (default: quick's sizes on all 45,000 "
        "CIFAR-10 images, one thread, docs/methods/mcae.md: 34.0 minutes for 20 pretraining "
        "epochs, 9.7 to 10.1 for 8 finetuning epochs)",
    )
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--pretrain-steps", type=int, default=12, help="timed rounds")
    p.add_argument("--finetune-steps", type=int, default=36, help="timed rounds")
    p.add_argument("--forward-batches", type=int, default=4, help="timed rounds")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--train-images", type=int, default=45_000)
    p.add_argument("--val-images", type=int, default=5_000)
    p.add_argument("--test-images", type=int, default=10_000)
    p.add_argument("--pretrain-epochs", type=int, default=50, help="the paper's 50")
    p.add_argument("--finetune-epochs", type=int, default=350, help="the paper's 350")
    args = p.parse_args()
    set_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(args.batch, 3, 32, 32, generator=g)
    y = torch.randint(0, 10, (args.batch,), generator=g)
    nets = {"target": build(args.preset, x, y), "ref": build(args.reference, x, y)}
    load0, t0 = load_average(), time.perf_counter()
    times: dict[str, float] = {}
    for phase, rounds in (
        ("pretrain", args.pretrain_steps),
        ("finetune", args.finetune_steps),
        ("pretrain_forward", args.forward_batches),
        ("classify", args.forward_batches),
    ):
        measured = interleaved({k: v[phase] for k, v in nets.items()}, rounds)
        times |= {f"{phase} {k}": v for k, v in measured.items()}
    print(
        f"MCAE `{args.preset}` vs `{args.reference}` on {args.batch} x 3x32x32, "
        f"{torch.get_num_threads()} thread(s); {args.pretrain_steps} pretraining and "
        f"{args.finetune_steps} finetuning steps, {args.forward_batches} evaluation batches "
        f"each, interleaved; load average {load0:.1f} -> {load_average():.1f} on "
        f"{os.cpu_count()} CPUs; {(time.perf_counter() - t0) / 60:.1f} minutes"
    )
    print(f"  seconds per batch of {args.batch}: {args.preset} CPU (wall) | {args.reference}")
    for phase in ("pretrain", "finetune", "pretrain_forward", "classify"):
        print(
            f"    {phase:<17}{times[f'{phase} target']:8.2f} ({times[f'{phase} target wall']:6.2f})"
            f" | {times[f'{phase} ref']:6.2f} ({times[f'{phase} ref wall']:6.2f})"
        )

    steps = args.train_images // args.batch
    val, test = args.val_images / args.batch, args.test_images / args.batch

    def epoch(net: str, step: str, forward: str) -> float:
        return steps * times[f"{step} {net}"] + val * times[f"{forward} {net}"]

    epochs, ratio = {}, {}
    for phase, forward, idle in (
        ("pretrain", "pretrain_forward", args.reference_minutes[0]),
        ("finetune", "classify", args.reference_minutes[1]),
    ):
        cpu = epoch("target", phase, forward)
        ratio[phase] = cpu / epoch("ref", phase, forward)
        epochs[phase] = (ratio[phase] * idle * 60, cpu)
        print(
            f"  a {phase} epoch ({steps} steps + {args.val_images:,} validation images): "
            f"{ratio[phase]:.2f}x the reference's -> {epochs[phase][0] / 60:.1f} minutes on "
            f"an idle core ({idle} x {ratio[phase]:.2f}); {cpu / 60:.1f} CPU minutes under load"
        )
    # The test pass (one per arm) is scaled to an idle core like a finetuning epoch.
    test_cpu = test * times["classify target"]
    idle_per_cpu = epochs["finetune"][0] / epochs["finetune"][1]
    n_pre, n_ft = args.pretrain_epochs, args.finetune_epochs
    print("  the protocol, hours on an idle core (CPU hours under load):")
    total = [0.0, 0.0]
    for label, pre in (
        (f"pretrained ({n_pre} + {n_ft} epochs)", n_pre),
        (f"scratch (0 + {n_ft})", 0),
    ):
        arm = [pre * epochs["pretrain"][i] + n_ft * epochs["finetune"][i] for i in (0, 1)]
        arm = [arm[0] + test_cpu * idle_per_cpu, arm[1] + test_cpu]
        total = [a + b for a, b in zip(total, arm, strict=True)]
        print(f"    {label:<30}{arm[0] / 3600:8.1f} ({arm[1] / 3600:.1f})")
    print(f"    {'both arms':<30}{total[0] / 3600:8.1f} ({total[1] / 3600:.1f})")


if __name__ == "__main__":
    main()
