"""SimCLR augmentation: per-image ``SimCLRTransform`` vs one ``BatchSimCLRTransform`` call.

For MNIST-size (1x28x28, the single-channel recipe) and CIFAR-size (3x32x32, the
colour recipe with ``ColorJitter(0.4, 0.4, 0.4, 0.1)``) uint8 images, both with
normalisation: the time per *pair* of views of ``SimCLRTransform`` called on each
image of a batch in a Python loop (what a DataLoader worker does), and of
``BatchSimCLRTransform`` called once on the whole batch, timed alternately in the
same run (``interleaved_ratio``) so that machine noise hits both. ``--blur`` adds
Gaussian blur with probability 0.5 to both.

On a shared 2-core machine under load, run with ``--threads 1`` or with
``OMP_WAIT_POLICY=PASSIVE``: with 2 threads, OpenMP's spinning workers compete
with the main thread and every parallel op can cost a scheduler time slice.

    PYTHONPATH=src python benchmarks/batch_augment.py [--batch 256] [--threads 2] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os

import torch

from _common import interleaved_ratio, load_average, set_threads
from selfcaps.data import BatchSimCLRTransform, SimCLRTransform

CASES = {
    "MNIST 1x28x28": dict(input_size=28, channels=1, normalize=((0.1307,), (0.3081,))),
    "CIFAR 3x32x32": dict(
        input_size=32,
        channels=3,
        normalize=((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    ),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--blur", action="store_true", help="blur_prob=0.5 in both pipelines")
    args = ap.parse_args()
    set_threads(args.threads)
    load = load_average()
    print(
        f"batch {args.batch}, {torch.get_num_threads()} threads, {args.rounds} rounds, "
        f"blur_prob {0.5 if args.blur else 0.0}, load average {load:.2f}, "
        f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}"
    )
    print(f"{'images':<15} {'per-image ms/pair':>18} {'batched ms/pair':>16} {'speed-up':>9}")
    for name, kwargs in CASES.items():
        extra = dict(blur_prob=0.5) if args.blur else {}
        per_image = SimCLRTransform(**kwargs, **extra)
        batched = BatchSimCLRTransform(**kwargs, **extra)
        c, s = kwargs["channels"], kwargs["input_size"]
        gen = torch.Generator().manual_seed(0)
        images = torch.randint(0, 256, (args.batch, c, s, s), dtype=torch.uint8, generator=gen)
        slow, fast, ratio = interleaved_ratio(
            lambda: [per_image(img) for img in images],  # noqa: B023
            lambda: batched(images, gen),  # noqa: B023
            rounds=args.rounds,
        )
        print(
            f"{name:<15} {slow / args.batch * 1e3:>18.3f} {fast / args.batch * 1e3:>16.4f} "
            f"{ratio:>8.1f}x"
        )


if __name__ == "__main__":
    main()
