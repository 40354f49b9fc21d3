"""CoCa at equal epochs: selfcaps' training vs a training loop written in the reference's style.

Both arms train the paper's network (``selfcaps.create_model("coca")``) on the same
stratified subset of the CIFAR-10 training images for the same number of epochs, and
both are scored by the same code: weighted kNN (k = 50, T = 0.2) on the backbone feature
of the test images against the training subset, model in ``eval()``.

* ``reference``: the loop of the public CoCa code (github.com/Harsh9524/CoCa,
  ``main.py`` / ``utils.py``), written here: per-image torchvision transforms on PIL
  images (``RandomResizedCrop(32)``, flip 0.5, ``ColorJitter(0.4, 0.4, 0.4, 0.1)`` with
  p = 0.8, grayscale 0.2, ``Normalize`` with the reference's std (0.2023, 0.1994,
  0.2010)), a shuffled ``DataLoader`` with ``drop_last``, two forward passes per step
  (one per view), NT-Xent T = 0.2 written as in the reference, Adam lr 1e-3, weight
  decay 1e-6, no schedule. It is evaluated with its own normalisation.
* ``selfcaps``: ``selfcaps.methods.CoCa`` trained by the selfcaps engine (Lightning)
  from the ``quick_cifar10`` preset with batch 128 and this script's epochs, the
  online monitor off; ``selfcaps:key=value,key=value`` changes configuration keys,
  one candidate at a time (e.g. ``selfcaps:augment.views_in_one_batch=false``).
* ``untrained`` (the network at initialisation) and ``pixels`` (normalised pixels):
  baselines scored by the same kNN code.

The default budget fits a shared 2-core machine: 5,000 training images, 1 epoch (39 steps),
2,000 test images, 3 seeds; about 45 CPU-seconds per trained arm and seed at one thread
(the selfcaps step runs about 140 CIFAR-10 pairs per CPU-second). That is far too short to
rank the arms; the comparison on the CoCa page is ``--epochs 5 --test-images 10000`` (about 3
CPU-minutes per trained arm and seed).

    PYTHONPATH=src python benchmarks/coca_vs_reference.py --data-root DATA \\
        [--arms reference selfcaps untrained pixels] [--seeds 0 1 2] [--epochs 1] \\
        [--train-images 5000] [--test-images 2000] [--threads 1] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator
from itertools import islice
from pathlib import Path
from typing import Any

import torch
from PIL import Image
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset, Subset
from torchvision import transforms as T

from _common import load_average, set_threads
from coca_step import reference_ntxent
from selfcaps import create_model
from selfcaps.data import EvalTransform, dataset_info, get_dataset
from selfcaps.data.datamodule import seeded_subset
from selfcaps.data.splits import carve_validation
from selfcaps.eval import knn_evaluate
from selfcaps.eval.labels import dataset_targets

#: The reference code's CIFAR-10 normalisation (``utils.py``).
REFERENCE_MEAN = (0.4914, 0.4822, 0.4465)
REFERENCE_STD = (0.2023, 0.1994, 0.2010)
#: Seed of the stratified subsets (fixed: every arm and seed sees the same images).
SUBSET_SEED = 16


def stratified(dataset: Any, n: int) -> Subset:
    """``n`` images of ``dataset``, the same share of every class (fixed seed)."""
    targets = torch.as_tensor(dataset.targets)
    if n >= len(targets):
        return Subset(dataset, list(range(len(targets))))
    _, idx = carve_validation(targets, n / len(targets), SUBSET_SEED)
    return Subset(dataset, idx.tolist())


# --------------------------------------------------------------------------- evaluation
@torch.no_grad()
def features(fn: Callable[[Tensor], Tensor], data: Dataset, norm: EvalTransform) -> Tensor:
    """``fn`` of every image of ``data`` through ``norm``, in batches of 500."""
    out = []
    for i in range(0, len(data), 500):
        x = torch.stack([norm(data[j][0]) for j in range(i, min(i + 500, len(data)))])
        out.append(fn(x).flatten(1).float())
    return torch.cat(out)


def labels(data: Dataset) -> Tensor:
    """Class indices of a dataset or subset view."""
    return dataset_targets(data)


def knn_score(
    fn: Callable[[Tensor], Tensor], train: Dataset, test: Dataset, norm: EvalTransform
) -> dict[str, float]:
    """Weighted kNN (k 50, T 0.2) top-1/top-5 of ``test`` against ``train`` on ``fn``."""
    bank = features(fn, train, norm)
    query = features(fn, test, norm)
    return knn_evaluate(bank, labels(train), query, labels(test), 10, k=50, t=0.2)


def backbone_score(net: nn.Module, train: Dataset, test: Dataset, norm: EvalTransform) -> dict:
    """:func:`knn_score` of a CoCa network's backbone feature, network in ``eval()``."""
    net.eval()
    return knn_score(net.forward_features, train, test, norm)


# ------------------------------------------------------------------- reference-style
class PairDataset(Dataset):
    """Two per-image augmentations of each uint8 image (the reference's ``CIFAR10Pair``)."""

    def __init__(self, data: Subset, transform: Callable[[Image.Image], Tensor]) -> None:
        self.data, self.transform = data, transform

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        img = Image.fromarray(self.data[i][0].permute(1, 2, 0).numpy())
        return self.transform(img), self.transform(img)


def reference_transform() -> T.Compose:
    """The reference code's training transform (torchvision v1, per PIL image)."""
    return T.Compose(
        [
            T.RandomResizedCrop(32),
            T.RandomHorizontalFlip(p=0.5),
            T.RandomApply([T.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8),
            T.RandomGrayscale(p=0.2),
            T.ToTensor(),
            T.Normalize(REFERENCE_MEAN, REFERENCE_STD),
        ]
    )


def reference_steps(train: Dataset, batch: int, seed: int) -> Iterator[nn.Module]:
    """The reference code's training loop (module docstring) on ``train``, one step per item.

    Yields the network after every step, epoch after epoch, for ever: the caller stops it.
    """
    torch.manual_seed(seed)
    net = create_model("coca", in_chans=3)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3, weight_decay=1e-6)
    loader = DataLoader(
        PairDataset(train, reference_transform()),
        batch_size=batch,
        shuffle=True,
        drop_last=True,
        generator=torch.Generator().manual_seed(seed),
    )
    while True:
        for x1, x2 in loader:
            net.train()
            loss = reference_ntxent(net(x1), net(x2), 0.2)
            opt.zero_grad()
            loss.backward()
            opt.step()
            yield net


def train_reference(train: Subset, epochs: int, batch: int, seed: int) -> nn.Module:
    """:func:`reference_steps` for ``epochs`` epochs."""
    steps = max(1, epochs * (len(train) // batch))
    return deque(islice(reference_steps(train, batch, seed), steps), maxlen=1)[0]


def reference_for_minutes(
    args: argparse.Namespace, seed: int
) -> tuple[list[dict[str, float]], dict[str, float]]:
    """The reference loop on ``quick_cifar10``'s splits for ``args.minutes`` of wall clock.

    The same splits and validation as ``selfcaps run coca --data cifar10``: all 45,000
    images of the train split, validation kNN on the 5,000 carved images against the
    run's 10,000-image bank (``monitor.bank_size``), every ``args.eval_every`` minutes;
    the clock runs from the first step and includes the validations, as a selfcaps
    run's ``elapsed_min`` and ``--max-time`` do. The test kNN (all 10,000 test images
    against the 45,000 training images) scores the weights of the best validation,
    as ``best.ckpt`` does.

    Returns:
        The curve (``minutes``, ``step``, validation ``top1`` / ``top5``) and the test
        scores (``top1``, ``top5``, ``steps``, ``best_minutes``).
    """
    train = get_dataset("cifar10", root=args.data_root, split="train")
    val = get_dataset("cifar10", root=args.data_root, split="val")
    test = get_dataset("cifar10", root=args.data_root, split="test")
    bank = seeded_subset(train, 10_000, seed)  # the run's monitor.bank_size bank
    norm = EvalTransform(REFERENCE_MEAN, REFERENCE_STD)
    curve: list[dict[str, float]] = []
    best: dict[str, Any] = {"top1": -1.0}
    t0 = time.monotonic()
    next_eval = args.eval_every
    net = create_model("coca", in_chans=3)
    for step, net in enumerate(reference_steps(train, args.batch, seed), 1):
        minutes = (time.monotonic() - t0) / 60
        done = minutes >= args.minutes
        if minutes >= next_eval or done:
            score = backbone_score(net, bank, val, norm)
            curve.append({"minutes": minutes, "step": step, **score})
            print(f"  {minutes:6.1f} min, step {step}: val top-1 {score['top1']:.2f}", flush=True)
            if score["top1"] > best["top1"]:
                state = {k: v.clone() for k, v in net.state_dict().items()}
                best = {"top1": score["top1"], "minutes": minutes, "state": state}
            next_eval += args.eval_every
        if done:
            break
    net.load_state_dict(best["state"])
    final = backbone_score(net, train, test, norm)
    return curve, {**final, "steps": step, "best_minutes": best["minutes"]}


# ------------------------------------------------------------------------- selfcaps
def train_selfcaps(
    train: Subset, epochs: int, batch: int, seed: int, root: str, sets: list[str]
) -> tuple[nn.Module, EvalTransform]:
    """``selfcaps.methods.CoCa`` trained by the selfcaps engine on ``train``."""
    import lightning as L

    from selfcaps.config.loading import load_config, parse_overrides
    from selfcaps.data.datamodule import SelfcapsDataModule
    from selfcaps.engine.trainer import build_trainer
    from selfcaps.methods import get_method

    overrides = [
        ("data.root", root),
        ("data.batch_size", batch),
        ("trainer.epochs", epochs),
        ("trainer.max_time", None),
        ("trainer.progress_bar", False),
        ("monitor.knn_every_n_epochs", 0),
        ("seed", seed),
        *parse_overrides(sets),
    ]
    cfg = load_config("coca", "quick_cifar10", overrides)
    L.seed_everything(seed, verbose=False)
    method = get_method("coca")(cfg)
    train_tf, eval_tf = method.build_transforms()

    class SubsetDataModule(SelfcapsDataModule):
        def split(self, name: str) -> Dataset:
            return train if name == "train" else super().split(name)

    dm = SubsetDataModule(method.cfg, train_tf, eval_tf)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = build_trainer(method.cfg, Path(tmp), monitor=None)
        trainer.fit(method, datamodule=dm)
    return method.network, eval_tf


# ----------------------------------------------------------------------------- main
def run_arm(arm: str, seed: int, args: argparse.Namespace, train: Subset, test: Subset) -> dict:
    """Train (if the arm trains) and score one arm for one seed."""
    name, _, sets = arm.partition(":")
    ours = EvalTransform(*[list(v) for v in _norm()])
    t0, c0 = time.perf_counter(), time.process_time()
    if name == "reference":
        net = train_reference(train, args.epochs, args.batch, seed)
        norm = EvalTransform(REFERENCE_MEAN, REFERENCE_STD)
    elif name == "selfcaps":
        net, norm = train_selfcaps(
            train, args.epochs, args.batch, seed, args.data_root, sets.split(",") if sets else []
        )
    elif name == "untrained":
        torch.manual_seed(seed)
        net, norm = create_model("coca", in_chans=3), ours
    elif name == "pixels":
        res = knn_score(lambda x: x, train, test, ours)
        return {**res, "train_s": 0.0, "train_cpu_s": 0.0}
    else:
        raise SystemExit(f"unknown arm {arm!r}: reference, selfcaps[:k=v,...], untrained, pixels")
    train_s, cpu_s = time.perf_counter() - t0, time.process_time() - c0
    return {**backbone_score(net, train, test, norm), "train_s": train_s, "train_cpu_s": cpu_s}


def time_to_accuracy(args: argparse.Namespace) -> None:
    """``--minutes``: the reference loop's validation kNN against minutes, per seed."""
    print(
        f"CoCa reference-style loop on CIFAR-10 for {args.minutes} minutes, batch {args.batch}, "
        f"validation every {args.eval_every} min; {torch.get_num_threads()} thread(s), "
        f"load {load_average():.1f}"
    )
    results = []
    for seed in args.seeds:
        curve, final = reference_for_minutes(args, seed)
        results.append({"seed": seed, "curve": curve, "test": final})
        print(
            f"  seed {seed}: test top-1 {final['top1']:.2f} top-5 {final['top5']:.2f} after "
            f"{final['steps']} steps (best validation at {final['best_minutes']:.1f} min)",
            flush=True,
        )
        if args.json:
            args.json.write_text(json.dumps({"args": vars(args), "results": results}, default=str))
    if args.figure:
        plot_minutes(results, args.selfcaps_runs, args.figure)


def plot_minutes(results: list[dict], runs: list[Path], out: Path) -> None:
    """Validation kNN top-1 against wall-clock minutes: the reference loop and selfcaps runs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.6), layout="constrained")
    for r in results:
        xs, ys = [c["minutes"] for c in r["curve"]], [c["top1"] for c in r["curve"]]
        ax.plot(xs, ys, "o-", label=f"reference-style loop, seed {r['seed']}")
    for run in runs:
        with open(run / "metrics.csv", newline="") as f:
            rows = [r for r in csv.DictReader(f) if r.get("elapsed_min") and r.get("val_knn_top1")]
        xs, ys = [float(r["elapsed_min"]) for r in rows], [float(r["val_knn_top1"]) for r in rows]
        ax.plot(xs, ys, "s-", label=f"selfcaps, {run.name}")
    ax.set_xlabel("wall-clock minutes (validations included)")
    ax.set_ylabel("validation kNN top-1 (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.savefig(out, dpi=120)


def _norm() -> tuple[tuple[float, ...], tuple[float, ...]]:
    info = dataset_info("cifar10")
    return tuple(info.mean), tuple(info.std)


def _mean_std(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):6.2f} +- {sd:4.2f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-root", required=True, help="folder holding cifar10/")
    p.add_argument("--arms", nargs="+", default=["reference", "selfcaps", "untrained", "pixels"])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--train-images", type=int, default=5000)
    p.add_argument("--test-images", type=int, default=2000)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", type=Path, help="also write every result here")
    p.add_argument(
        "--minutes",
        type=float,
        help="time to accuracy: train the reference loop this many wall-clock minutes on "
        "quick_cifar10's splits instead of the arms (reference_for_minutes)",
    )
    p.add_argument("--eval-every", type=float, default=5.0, help="--minutes: validate every N")
    p.add_argument("--figure", type=Path, help="--minutes: draw the curves here (PNG)")
    p.add_argument(
        "--selfcaps-runs",
        type=Path,
        nargs="*",
        default=[],
        help="--minutes: selfcaps run directories whose validation curves join the figure",
    )
    args = p.parse_args()
    set_threads(args.threads)
    if args.minutes is not None:
        time_to_accuracy(args)
        return
    train = stratified(
        get_dataset("cifar10", root=args.data_root, split="train_full"), args.train_images
    )
    test = stratified(get_dataset("cifar10", root=args.data_root, split="test"), args.test_images)
    print(
        f"CoCa on CIFAR-10: {len(train)} training images (stratified), {args.epochs} epochs, "
        f"batch {args.batch}, kNN k=50 T=0.2 on the backbone feature of {len(test)} test "
        f"images; {torch.get_num_threads()} thread(s), load {load_average():.1f}"
    )
    results: dict[str, list[dict]] = {}
    for seed in args.seeds:  # seeds outermost: a run cut short still compares the arms
        for arm in args.arms:
            r = run_arm(arm, seed, args, train, test)
            results.setdefault(arm, []).append({"seed": seed, **r})
            print(
                f"  {arm:<40} seed {seed}: top-1 {r['top1']:6.2f}  top-5 {r['top5']:6.2f}  "
                f"train {r['train_s']:6.1f} s wall, {r['train_cpu_s']:6.1f} s CPU  "
                f"(load {load_average():.1f})",
                flush=True,
            )
            if args.json:
                args.json.write_text(
                    json.dumps({"args": vars(args), "results": results}, default=str, indent=1)
                )
    print(f"\n{'arm':<40} {'top-1':>15} {'top-5':>15} {'wall s':>8} {'CPU s':>8}")
    for arm, rs in results.items():
        print(
            f"{arm:<40} {_mean_std([r['top1'] for r in rs])} {_mean_std([r['top5'] for r in rs])} "
            f"{statistics.mean(r['train_s'] for r in rs):8.1f} "
            f"{statistics.mean(r['train_cpu_s'] for r in rs):8.1f}"
        )


if __name__ == "__main__":
    main()
