"""The data side of a run: splits, loaders, and reproducible, resumable randomness.

Every random choice the data pipeline makes is a pure function of
``(seed, epoch, sample index)``:

* :class:`EpochSampler` shuffles with a generator seeded by ``(seed, epoch)``
  (a full permutation, or with ``data.shuffle_buffer`` the dataset read in order
  through a shuffle buffer, :func:`buffered_order`) and shards the order across
  processes itself (so Lightning's sampler replacement is switched off);
* :class:`SeededTransformDataset` applies the (random) training transform
  under a torch RNG seeded by ``(seed, epoch, index)``.

So an epoch's batches do not depend on what ran before it: a run resumed from
``last.ckpt`` after a crash sees exactly the batches the uninterrupted run saw,
whatever the number of workers; one resumed where a budget stopped it in the middle of
an epoch starts at the next batch of that epoch (:meth:`SelfcapsDataModule.resume_at`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from selfcaps.caps.chunking import sizing
from selfcaps.data import get_dataset

__all__ = [
    "EpochSampler",
    "SeededParamsDataset",
    "SeededTransformDataset",
    "SelfcapsDataModule",
    "TransformDataset",
    "buffered_order",
    "mix_seed",
    "seed_cpu_rng",
    "seeded_subset",
]


def mix_seed(*parts: int) -> int:
    """A 63-bit seed from integers (SplitMix64 mixing), stable across runs and platforms.

    Examples:
        >>> mix_seed(0, 1) == mix_seed(0, 1) != mix_seed(1, 0)
        True
    """
    h = 0x9E3779B97F4A7C15
    for p in parts:
        h ^= (int(p) + 0x9E3779B97F4A7C15 + ((h << 6) & 0xFFFFFFFFFFFFFFFF) + (h >> 2)) & (
            0xFFFFFFFFFFFFFFFF
        )
        h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9 & 0xFFFFFFFFFFFFFFFF
        h = (h ^ (h >> 27)) * 0x94D049BB133111EB & 0xFFFFFFFFFFFFFFFF
        h ^= h >> 31
    return h & 0x7FFFFFFFFFFFFFFF


def _dist_info() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def buffered_order(n: int, buffer: int, generator: torch.Generator) -> Iterator[int]:
    """``0 .. n-1`` read in order through a ``buffer``-slot shuffle buffer (tf.data's ``shuffle``).

    The buffer starts with the first ``buffer`` indices; each output is a uniformly
    chosen slot, refilled with the next index in order; once the indices run out, the
    buffer drains in random order. Every index comes out once, at most ``buffer - 1``
    places earlier than its position in order, so neighbouring items stay together
    (the SparseCaps reference code's stream of every shift of one digit after another).

    Args:
        n: Number of indices.
        buffer: Slots (1: no shuffling).
        generator: Source of randomness.

    Examples:
        >>> list(buffered_order(5, 1, torch.Generator()))
        [0, 1, 2, 3, 4]
        >>> sorted(buffered_order(100, 10, torch.Generator().manual_seed(0))) == list(range(100))
        True
    """
    slots = list(range(min(buffer, n)))
    upcoming = len(slots)
    while slots:
        draws = torch.rand(4096, generator=generator, dtype=torch.float64).tolist()
        for u in draws:
            if not slots:
                return
            j = min(int(u * len(slots)), len(slots) - 1)
            out = slots[j]
            if upcoming < n:
                slots[j] = upcoming
                upcoming += 1
            else:
                slots[j] = slots[-1]
                slots.pop()
            yield out


class EpochSampler(Sampler[tuple[int, int]]):
    """Yields ``(epoch, index)`` keys: a per-epoch seeded shuffle, sharded across processes.

    Args:
        n: Dataset length.
        seed: Run seed.
        shuffle: Shuffle (training) or keep order (evaluation).
        drop_last: Drop the samples that do not fill a whole per-process batch
            (``batch_size`` must then be given) so that every process gets the
            same number of full batches.
        batch_size: Per-process batch size, used with ``drop_last``.
        rank: Process rank (default: from ``torch.distributed``).
        world_size: Number of processes (default: from ``torch.distributed``).
        buffer: With ``shuffle``, read the dataset in order through a shuffle buffer of
            this many slots (:func:`buffered_order`) instead of a full permutation.
    """

    def __init__(
        self,
        n: int,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = False,
        batch_size: int = 1,
        rank: int | None = None,
        world_size: int | None = None,
        buffer: int | None = None,
    ) -> None:
        self.n, self.seed, self.shuffle, self.buffer = n, seed, shuffle, buffer
        self.drop_last, self.batch_size = drop_last, batch_size
        r, w = _dist_info()
        self.rank = r if rank is None else rank
        self.world_size = w if world_size is None else world_size
        self.epoch = 0
        self._resume: tuple[int, int] | None = None

    def resume_at(self, epoch: int, batches: int) -> None:
        """Start at ``epoch`` and leave out its first ``batches`` batches (a resumed run).

        Every iteration over that epoch starts there; :meth:`set_epoch` to another epoch
        ends the skipping.
        """
        self.epoch = epoch
        self._resume = (epoch, batches) if batches > 0 else None

    def set_epoch(self, epoch: int) -> None:
        """Called by Lightning at the start of every epoch."""
        if self._resume is not None and self._resume[0] != epoch:
            self._resume = None
        self.epoch = epoch

    def _indices(self) -> Iterable[int]:
        order: Iterable[int]
        if self.shuffle:
            g = torch.Generator().manual_seed(mix_seed(self.seed, self.epoch))
            if self.buffer:
                order = buffered_order(self.n, self.buffer, g)
            else:
                order = torch.randperm(self.n, generator=g).tolist()
        else:
            order = range(self.n)
        stop = len(self) if self.drop_last else None
        shard = islice(order, self.rank, None, self.world_size)
        skip = 0
        if self._resume is not None and self._resume[0] == self.epoch:
            skip = self._resume[1] * self.batch_size
        return islice(shard, skip, stop)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return ((self.epoch, i) for i in self._indices())

    def __len__(self) -> int:
        if self.drop_last:
            return (self.n // self.world_size) // self.batch_size * self.batch_size
        return len(range(self.rank, self.n, self.world_size))


class TransformDataset(Dataset):
    """A dataset of uint8 images with a deterministic transform; accepts ``(epoch, index)`` keys.

    Args:
        base: Dataset returning ``(image, target)``.
        transform: Applied to each image.
    """

    def __init__(self, base: Dataset, transform: Callable[[Any], Any] | None) -> None:
        self.base, self.transform = base, transform

    def __len__(self) -> int:
        return len(self.base)  # type: ignore[arg-type]

    def _item(self, index: int) -> tuple[Any, int]:
        img, target = self.base[index]
        return (self.transform(img) if self.transform is not None else img), int(target)

    def __getitem__(self, key: int | tuple[int, int]) -> tuple[Any, int]:
        return self._item(key[1] if isinstance(key, tuple) else key)


class SeededTransformDataset(TransformDataset):
    """Applies a random transform under an RNG seeded by ``(seed, epoch, index)``.

    Args:
        base: Dataset returning ``(image, target)``.
        transform: The random transform (e.g. ``SimCLRTransform``, returning views).
        seed: Run seed.
    """

    def __init__(self, base: Dataset, transform: Callable[[Any], Any], seed: int) -> None:
        super().__init__(base, transform)
        self.seed = seed

    def __getitem__(self, key: int | tuple[int, int]) -> tuple[Any, int]:
        epoch, index = key if isinstance(key, tuple) else (0, key)
        with torch.random.fork_rng(devices=[]):
            seed_cpu_rng(mix_seed(self.seed, epoch, index))
            return self._item(index)


class SeededParamsDataset(SeededTransformDataset):
    """uint8 images with the random parameters the transform draws for them, seeded as the parent.

    Under the generator seeded by ``(seed, epoch, index)``, ``transform.item_params(image)``
    makes the draws ``transform(image)`` would make (e.g.
    :class:`~selfcaps.data.batch_crops.BatchCropTransform`); the item is
    ``((image, params), target)``, and the transform applies the collated parameters to the
    whole batch on the device.
    """

    def _item(self, index: int) -> tuple[Any, int]:
        img, target = self.base[index]
        return (img, self.transform.item_params(img)), int(target)  # type: ignore[attr-defined]


#: Loader workers an accelerator run takes when ``data.num_workers`` is null (at most).
ACCELERATOR_WORKERS = 8


def on_accelerator(cfg: Any) -> bool:
    """Whether the run's ``trainer.accelerator`` trains on something other than a CPU."""
    kind = str(cfg.trainer.get("accelerator", "cpu"))
    if kind == "auto":
        return torch.cuda.is_available() or (
            hasattr(torch.backends, "mps") and torch.backends.mps.is_available()
        )
    return kind != "cpu"


def loader_kwargs(cfg: Any) -> dict[str, Any]:
    """``DataLoader`` worker settings of a run: workers, pinned memory, persistent workers.

    ``data.num_workers`` null: none on a CPU, where workers would take cores from the
    training itself; on an accelerator, one per core but one, at most
    :data:`ACCELERATOR_WORKERS`, with pinned memory (asynchronous copies to the device) and
    workers kept across epochs. Every item is transformed under its own seeded generator
    (:class:`SeededTransformDataset`), so the batches, and the run, do not depend on it.
    """
    workers = cfg.data.get("num_workers")
    accel = on_accelerator(cfg)
    if workers is None:
        workers = min(ACCELERATOR_WORKERS, max(0, (os.cpu_count() or 1) - 1)) if accel else 0
    workers = int(workers)
    return {
        "num_workers": workers,
        "pin_memory": accel and torch.cuda.is_available(),
        "persistent_workers": workers > 0,
    }


def seed_cpu_rng(seed: int) -> None:
    """Seed the CPU's global generator only, the one the data transforms draw from.

    ``torch.manual_seed`` seeds the same CPU generator (so the draws are identical) and also
    every accelerator's; with a CUDA build of torch whose CUDA is not initialised, each such
    call formats the Python stack for CUDA's lazy initialisation: about 1 ms at a training
    loop's stack depth, once per image, which cost MCAE about a fifth of a CIFAR-10 epoch on
    one thread (``python benchmarks/seeded_items.py``).
    """
    torch.default_generator.manual_seed(seed)


def seeded_subset(dataset: Dataset, n: int | None, seed: int) -> Dataset:
    """A seeded random subset of ``n`` items (all of them when ``n`` is None or too big)."""
    size = len(dataset)  # type: ignore[arg-type]
    if n is None or n >= size:
        return dataset
    g = torch.Generator().manual_seed(mix_seed(seed, 0xBA4C))
    idx = torch.randperm(size, generator=g)[:n].sort().values.tolist()
    return torch.utils.data.Subset(dataset, idx)


class SelfcapsDataModule(L.LightningDataModule):
    """Train / bank / validation / test data of a run.

    * ``train``: the train split (official train minus the carved validation)
      through the method's random training transform;
    * ``bank``: the same images through the deterministic evaluation
      transform (the kNN feature bank; ``bank_size`` subsamples it for the
      online monitor);
    * ``val``: the carved validation split (evaluation transform);
    * ``test``: the official test split, touched only by final evaluation.

    Args:
        cfg: The run configuration (``data``, ``seed``, ``monitor`` sections).
        train_transform: Random training transform (may return a list of views).
        eval_transform: Deterministic evaluation transform.
        root_source: Where ``cfg.data.root`` came from (``--data-root``, ...), for error messages.
        subset_seed: Seed of the images drawn by ``data.train_subset`` and by bank subsets
            (default: ``cfg.seed``). ``selfcaps eval --seed`` sets ``cfg.seed`` to change the
            evaluation's batch order and augmentation and keeps the run's images with this.
    """

    def __init__(
        self,
        cfg: Any,
        train_transform: Callable[[Any], Any],
        eval_transform: Callable[[Any], Any],
        root_source: str | None = None,
        subset_seed: int | None = None,
    ) -> None:
        super().__init__()
        self.cfg, self.root_source = cfg, root_source
        self.subset_seed = int(cfg.seed) if subset_seed is None else int(subset_seed)
        self.train_transform, self.eval_transform = train_transform, eval_transform
        self._splits: dict[str, Dataset] = {}
        self._resume: tuple[int, int] | None = None

    def resume_at(self, epoch: int, batches: int) -> None:
        """The next training loader starts at batch ``batches`` of ``epoch`` (a resumed run).

        Only the first :meth:`train_dataloader` (the resumed training's) starts there.
        """
        self._resume = (int(epoch), int(batches))

    def split(self, name: str) -> Dataset:
        """The raw (untransformed) dataset of a split: ``train``, ``val`` or ``test``."""
        if name not in self._splits:
            d = self.cfg.data
            extra = {"image_size": int(d.image_size)} if d.get("image_size") else {}
            ds = get_dataset(
                d.name,
                root=d.root,
                split=name,
                val_fraction=d.val_fraction,
                root_source=self.root_source,
                **extra,
            )
            if name == "train":
                ds = seeded_subset(ds, d.train_subset, self.subset_seed)
            self._splits[name] = ds
        return self._splits[name]

    def _loader(self, ds: Dataset, shuffle: bool, batch_size: int, drop_last: bool) -> DataLoader:
        sampler = EpochSampler(
            len(ds),  # type: ignore[arg-type]
            seed=self.cfg.seed,
            shuffle=shuffle,
            drop_last=drop_last,
            batch_size=batch_size,
            buffer=self.cfg.data.get("shuffle_buffer") if shuffle else None,
        )
        return DataLoader(
            ds, batch_size=batch_size, sampler=sampler, drop_last=False, **loader_kwargs(self.cfg)
        )

    @property
    def batched_train_transform(self) -> bool:
        """True when the training transform works on whole batches (applied by the module).

        A batch transform (``is_batch_transform``) always; one with
        ``batches_on_accelerator`` (per-image parameters, batch application) only while a
        trainer fits on an accelerator (or sized as one,
        :func:`selfcaps.caps.chunking.sized_for`): a CPU run, and any loader made outside
        the fit (MCAE's finetuning, ``selfcaps eval``), keep the per-image transform.
        """
        tf = self.train_transform
        if getattr(tf, "is_batch_transform", False):
            return True
        return bool(getattr(tf, "batches_on_accelerator", False)) and self._fitting_on_accelerator()

    def _fitting_on_accelerator(self) -> bool:
        trainer = self.trainer
        if trainer is None or not trainer.training:
            return False
        kind = sizing()
        return trainer.strategy.root_device.type != "cpu" if kind == "device" else kind != "cpu"

    def training_split(self) -> Dataset:
        """The training split as the method trains on it (its ``training_dataset`` hook)."""
        module = self.trainer.lightning_module if self.trainer is not None else None
        train = self.split("train")
        return module.training_dataset(train) if module is not None else train

    def train_dataloader(self) -> DataLoader:
        """Training batches: transformed per sample, or raw uint8 for a batch transform.

        Raw uint8 with each image's parameters (:class:`SeededParamsDataset`) for a
        transform that draws them per image and applies them per batch.
        """
        train = self.training_split()
        seed = self.cfg.seed
        if self.batched_train_transform and hasattr(self.train_transform, "item_params"):
            ds: Dataset = SeededParamsDataset(train, self.train_transform, seed)
        elif self.batched_train_transform:
            ds = TransformDataset(train, None)
        else:
            ds = SeededTransformDataset(train, self.train_transform, seed)
        loader = self._loader(ds, True, self.cfg.data.batch_size, drop_last=True)
        if self._resume is not None:
            loader.sampler.resume_at(*self._resume)  # type: ignore[attr-defined]
            self._resume = None
        return loader

    def eval_loader(self, split: str, bank_size: int | None = None) -> DataLoader:
        """Deterministic loader of a split through the evaluation transform."""
        ds = self.split(split)
        if bank_size is not None:
            ds = seeded_subset(ds, bank_size, self.subset_seed)
        return self._loader(
            TransformDataset(ds, self.eval_transform), False, self.cfg.data.eval_batch_size, False
        )

    def val_dataloader(self) -> list[DataLoader]:
        """``[bank, val]`` for the online kNN monitor; ``[val]`` if the method has none."""
        module = self.trainer.lightning_module if self.trainer is not None else None
        if not getattr(module, "knn_monitor", True):
            return [self.eval_loader("val")]
        return [self.eval_loader("train", self.cfg.monitor.bank_size), self.eval_loader("val")]

    @property
    def num_train_batches(self) -> int:
        """Full training batches per epoch on this process."""
        n = len(self.training_split())  # type: ignore[arg-type]
        _, world = _dist_info()
        return (n // world) // self.cfg.data.batch_size
