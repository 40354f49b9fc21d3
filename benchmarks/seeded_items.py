"""Cost of seeding each training image's transform: ``torch.manual_seed`` vs the CPU generator.

Every training image is transformed under a generator seeded by ``(seed, epoch, index)``
(:class:`selfcaps.data.datamodule.SeededTransformDataset`). ``torch.manual_seed`` also
seeds every accelerator; in a CUDA build of torch whose CUDA is not initialised (any CPU run
of the default wheel) each call formats the Python stack for CUDA's lazy initialisation, so
its cost grows with the stack's depth. The items are fetched at ``--depth`` extra Python
frames (a Lightning training loop's data fetch is about 60 deep) through one CIFAR-10-sized
random transform, both ways, interleaved; prints the per-item time of each and the ratio.

    python benchmarks/seeded_items.py [--items 2000] [--depth 60] [--rounds 5]
"""

from __future__ import annotations

import argparse

import torch
from torch.utils.data import TensorDataset

from _common import interleaved_ratio, load_average, set_threads
from selfcaps.data import SimCLRTransform
from selfcaps.data.datamodule import SeededTransformDataset, mix_seed


class ManualSeedDataset(SeededTransformDataset):
    """The former per-item seeding, through ``torch.manual_seed``."""

    def __getitem__(self, key):
        epoch, index = key
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(mix_seed(self.seed, epoch, index))
            return self._item(index)


def at_depth(depth: int, fn):
    return fn() if depth == 0 else at_depth(depth - 1, fn)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--items", type=int, default=2000)
    p.add_argument("--depth", type=int, default=60)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    set_threads(1)
    images = torch.rand(64, 3, 32, 32)
    base = TensorDataset(images, torch.zeros(64, dtype=torch.long))
    transform = SimCLRTransform(32, channels=3)
    new = SeededTransformDataset(base, transform, seed=0)
    old = ManualSeedDataset(base, transform, seed=0)

    def fetch(ds):
        return lambda: at_depth(args.depth, lambda: [ds[(0, i % 64)] for i in range(args.items)])

    t_old, t_new, ratio = interleaved_ratio(fetch(old), fetch(new), args.rounds)
    print(
        f"per item, {args.depth} frames deep, 1 thread (load average {load_average():.1f}): "
        f"torch.manual_seed {1e3 * t_old / args.items:.3f} ms, CPU generator "
        f"{1e3 * t_new / args.items:.3f} ms; seeding the CPU generator only is {ratio:.2f}x "
        f"faster (torch {torch.__version__}, CUDA built: {torch.backends.cuda.is_built()})"
    )


if __name__ == "__main__":
    main()
