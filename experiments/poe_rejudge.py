"""PoE capsules: how much the purity metrics depend on the judging CNN.

A capsule's purity is the share of its samples that a small CNN, trained on the run's
training split, gives its most frequent class (``selfcaps.methods.poe.judge``). The judge is
a measuring instrument with its own errors: a judge that misreads real digits also misreads
samples. This script rescores the *same* samples of finished runs (their ``best.ckpt``, the
run's ``samples.seed`` and ``samples.per_capsule``) with judges trained for several numbers of
epochs, everything else as the run's own evaluation, and prints per run and judge: the judge's
test top-1, mean purity and classes covered in the complete and the restricted domain.
With the run's own ``judge.epochs`` and thread count (``--threads``, default 1 as in the
presets' runs) it reproduces the run's ``metrics.json`` (the judge's initialisation and batch
order are seeded from the run's seed; another thread count sums in another order and can move a
purity by a tenth of a point).

``--judge-from OTHER_RUN`` scores every run's samples with OTHER_RUN's judge instead of its
own: the judge OTHER_RUN's evaluation trains (its training split, seed and ``judge`` settings;
``--judge-epochs`` still sets its epochs), so that runs on different data sizes can be read by
one instrument; with several RUN_DIRs that judge is trained once per number of epochs.

``--judge-seeds S [S ...]`` trains each judge once per seed S in place of the run's seed (the
seed of the judge's initialisation and batch order only: its training split, the samples and
everything else stay the run's): the spread of a purity over judge seeds is the instrument's
own noise, measured on fixed samples. The run's own seed gives the run's own judge.

The results are also written to ``RUN_DIR/rejudge.json`` (one entry per number of epochs, keyed
``"E"``, or ``"E from OTHER_RUN"`` with ``--judge-from``, then ``" seed S"`` with
``--judge-seeds``; merged with what is there); the run's
``metrics.json`` is not touched.

Usage::

    PYTHONPATH=src python experiments/poe_rejudge.py RUN_DIR [RUN_DIR ...]
        [--judge-epochs 2 10] [--judge-from OTHER_RUN] [--judge-seeds 0 1 2]
        [--data-root DIR] [--threads 1]
"""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path
from typing import Any

import torch

from selfcaps.engine.atomic import update_json
from selfcaps.engine.progress import set_progress
from selfcaps.methods.poe.judge import purity_metrics, train_judge
from selfcaps.run.evaluate import load_run_dir

DOMAINS = {"": False, "_restricted": True}  # metric suffix -> restricted domain


class Judges:
    """One ``poe`` run's judges, each trained once per number of epochs.

    A judge is trained as the run's evaluation trains it (its training split, seed and
    ``judge`` settings, ``judge.epochs`` replaced), so one instance can score the samples of
    many runs without training the same judge again.
    """

    def __init__(self, method: Any, dm: Any, source: Path | None = None) -> None:
        """Hold one run's method and data; train nothing yet.

        Args:
            method: The loaded ``poe`` method whose evaluation trains the judge.
            dm: That run's data module (the judge's training split).
            source: That run's directory when it is another run than the one scored (it
                names the judge in :func:`rejudge`'s result); ``None`` for a run's own judges.
        """
        self.method, self.dm, self.source = method, dm, source
        self._trained: dict[tuple[int, int | None], tuple[torch.nn.Module, float]] = {}

    @classmethod
    def of_run(cls, run_dir: Path, data_root: str | None) -> Judges:
        """The judges of the finished ``poe`` run in ``run_dir``, to score other runs with."""
        return cls(*load_run_dir(run_dir, data_root, method="poe"), source=run_dir)

    def __call__(self, epochs: int, seed: int | None = None) -> tuple[torch.nn.Module, float]:
        """The judge trained for ``epochs`` and its test top-1 (trained on first use).

        Args:
            epochs: The judge's training epochs.
            seed: Seeds the judge's initialisation and batch order in place of the run's seed
                (``None``: the run's seed, as its own evaluation).
        """
        if (epochs, seed) not in self._trained:
            m = self.method
            cfg = copy.deepcopy(m.cfg)  # the run's configuration stays as loaded
            cfg.judge.epochs = epochs
            if seed is not None:
                cfg.seed = seed
            self._trained[epochs, seed] = train_judge(self.dm, cfg, m.info, m.device)
        return self._trained[epochs, seed]


def rejudge(
    run_dir: Path,
    epochs: list[int],
    data_root: str | None,
    judges: Judges | None = None,
    judge_seeds: list[int] | None = None,
) -> dict[str, Any]:
    """Score one run's samples with a judge trained for each number of ``epochs``.

    Args:
        run_dir: A finished ``poe`` run directory.
        epochs: Judge training epochs to try, in order.
        data_root: Dataset root (default: the run's, then ``SELFCAPS_DATA``).
        judges: Another finished ``poe`` run's judges (:meth:`Judges.of_run`: its training
            split, seed and ``judge`` settings), which score this run's samples and can be
            shared between runs (default: this run's own judges).
        judge_seeds: Seeds of the judges' initialisation and batch order, one judge per seed
            and number of epochs (default: the run's seed only).

    Returns:
        ``{key: {judge_epochs, judge_test_top1, purity_mean[_restricted],
        purity_classes_covered[_restricted], purity_majority_classes[_restricted]}}``, with
        key ``str(e)``, or ``f"{e} from {judges.source}"`` (and ``judge_from`` in the row),
        followed by ``f" seed {s}"`` for each of ``judge_seeds`` (and ``judge_seed``).

    Raises:
        ValueError: ``run_dir`` is not a run of ``poe``.
    """
    method, dm = load_run_dir(run_dir, data_root, method="poe")
    if judges is None:
        judges = Judges(method, dm)
    judge_from = judges.source
    net, samples, device = method.poe, method.cfg.samples, method.device
    domains = DOMAINS if net.hemisphere_measured else {"": False}
    out: dict[str, Any] = {}
    for e in epochs:
        for s in judge_seeds or [None]:
            judge, top1 = judges(e, s)
            row: dict[str, Any] = {"judge_epochs": e, "judge_test_top1": top1}
            key = str(e)
            if judge_from is not None:
                row["judge_from"] = str(judge_from)
                key += f" from {judge_from}"
            if s is not None:
                row["judge_seed"] = s
                key += f" seed {s}"
            with torch.no_grad():
                for suffix, restricted in domains.items():
                    m = purity_metrics(net, judge, samples, device, suffix, restricted)
                    for name in ("purity_mean", "purity_classes_covered",
                                 "purity_majority_classes"):  # fmt: skip
                        row[name + suffix] = m[name + suffix]
            out[key] = row
    return out


def main() -> None:
    """Rescore each run; print one JSON line per run and judge."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dirs", type=Path, nargs="+")
    p.add_argument("--judge-epochs", type=int, nargs="+", default=[2, 10])
    p.add_argument("--judge-from", type=Path, default=None, metavar="OTHER_RUN",
                   help="score with this poe run's judge instead of each run's own")  # fmt: skip
    p.add_argument("--judge-seeds", type=int, nargs="+", default=None, metavar="S",
                   help="one judge per seed of its initialisation and batch order")  # fmt: skip
    p.add_argument("--data-root", default=None)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    if any(e < 1 for e in args.judge_epochs):
        p.error(f"--judge-epochs: expected numbers >= 1, got {args.judge_epochs}")
    torch.set_num_threads(args.threads)
    set_progress(False)
    judges = None if args.judge_from is None else Judges.of_run(args.judge_from, args.data_root)
    for run_dir in args.run_dirs:  # with --judge-from, one judge per epochs for every run
        result = rejudge(run_dir, args.judge_epochs, args.data_root, judges, args.judge_seeds)
        update_json(run_dir / "rejudge.json", result)
        for row in result.values():
            print(json.dumps({"run": str(run_dir), **row}), flush=True)


if __name__ == "__main__":
    main()
