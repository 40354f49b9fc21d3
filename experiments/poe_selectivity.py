"""PoE capsules: is the purity lost in the encoder or in generation?

For each finished ``poe`` run (its ``best.ckpt``), every test image (the run's first
``eval.max_images``) goes to its longest capsule, and each capsule's group of images is read
by its true labels (``selfcaps.methods.poe.selectivity``): the share of the group's most
frequent class is how selectively the capsule turns on for one digit. Beside it, the purity
of the capsule's generated samples in the restricted domain, as the run's own evaluation
read it (``metrics.json``, the run's judge): the encoder's side and the generator's side of
the same question.

Prints one JSON line per run (the group metrics, and per capsule: group size, majority
class and share, sample purity and majority) and, over the capsules of every run given, the
Pearson and Spearman correlations between a group's share and the sample purity, and how
often the two majorities agree. For scale, the same images clustered by k-means into as many
groups as there are capsules (on the primary capsules the capsule layer reads, labels unused;
``kmeans_group_purity``) give the purity an unsupervised grouping of that input reaches.
Writes ``RUN_DIR/selectivity.json``; ``metrics.json`` is not touched. A run trained after the
group metrics entered the evaluation already has them in ``metrics.json``: this script gives
the same numbers (a test checks it).

Usage::

    PYTHONPATH=src python experiments/poe_selectivity.py RUN_DIR [RUN_DIR ...]
        [--data-root DIR] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch
from scipy.stats import pearsonr, spearmanr
from sklearn.cluster import KMeans

from selfcaps.engine.atomic import atomic_write_json
from selfcaps.engine.progress import set_progress
from selfcaps.methods.poe.reconstruction import capped_batches
from selfcaps.methods.poe.selectivity import (
    group_counts,
    group_purity,
    loader_group_counts,
    selectivity_metrics,
)
from selfcaps.run.evaluate import load_run_dir


@torch.no_grad()
def kmeans_group_purity(method: Any, loader: Any, seed: int = 0) -> float:
    """Purity (percent) of k-means groups of the primary capsules of the run's test images.

    As many groups as capsules, the same first ``eval.max_images`` images, ``n_init=4``.
    """
    net, feats, labels = method.poe, [], []
    device = next(net.parameters()).device
    for x, y in capped_batches(loader, method.cfg):
        feats.append(net.primary_capsules(x.to(device)).flatten(1).cpu())
        labels.append(y)
    km = KMeans(n_clusters=net.num_caps, n_init=4, random_state=seed)
    assign = torch.as_tensor(km.fit_predict(torch.cat(feats).double().numpy())).long()
    one_hot = torch.nn.functional.one_hot(assign, net.num_caps).float()
    counts = group_counts(one_hot, torch.cat(labels), method.info.num_classes)
    return float(group_purity(counts)["caps_group_purity"])


def selectivity(run_dir: Path, data_root: str | None) -> dict[str, Any]:
    """The group metrics of one run and, per capsule, its group beside its samples."""
    method, dm = load_run_dir(run_dir, data_root, method="poe")
    test, classes = dm.eval_loader("test"), method.info.num_classes
    counts = loader_group_counts(method.poe, test, method.cfg, classes)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    sample_classes = str(metrics.get("purity_majority_classes_restricted", "")).split(",")
    sizes, (top, majority) = counts.sum(1).tolist(), counts.max(1)  # as group_purity reads it
    capsules = []
    for j, size in enumerate(sizes):
        capsules.append(
            {
                "capsule": j,
                "group_images": size,
                "group_majority": int(majority[j]) if size else None,
                "group_share": 100.0 * int(top[j]) / size if size else None,
                "sample_purity_restricted": metrics.get(f"purity_capsule_{j:02d}_restricted"),
                "sample_majority_restricted": (
                    int(sample_classes[j])
                    if j < len(sample_classes) and sample_classes[j]
                    else None
                ),
            }
        )
    return {
        "judge_epochs": int(method.cfg.judge.epochs),
        "purity_mean_restricted": metrics.get("purity_mean_restricted"),
        "purity_classes_covered_restricted": metrics.get("purity_classes_covered_restricted"),
        **group_purity(counts),
        **selectivity_metrics(method.untrained_network(), test, method.cfg, classes, "_untrained"),
        "kmeans_group_purity": kmeans_group_purity(method, test),
        "capsules": capsules,
    }


def pooled(rows: list[dict[str, Any]]) -> dict[str, float | int]:
    """Correlations over every non-empty capsule of every run with a sample purity."""
    pairs = [
        (
            c["group_share"],
            c["sample_purity_restricted"],
            c["group_majority"] == c["sample_majority_restricted"],
        )
        for r in rows
        for c in r["capsules"]
        if c["group_share"] is not None and c["sample_purity_restricted"] is not None
    ]
    out: dict[str, float | int] = {"capsules": len(pairs)}
    if len(pairs) >= 3:
        share, purity, same = zip(*pairs, strict=True)
        out["pearson"] = float(pearsonr(share, purity)[0])
        out["spearman"] = float(spearmanr(share, purity)[0])
        out["same_majority"] = sum(same)
    return out


def main() -> None:
    """Read each run; print one JSON line per run and one for the pooled capsules."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dirs", type=Path, nargs="+")
    p.add_argument("--data-root", default=None)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    set_progress(False)
    rows = []
    for run_dir in args.run_dirs:
        row = selectivity(run_dir, args.data_root)
        atomic_write_json(run_dir / "selectivity.json", row)
        rows.append(row)
        print(json.dumps({"run": str(run_dir), **row}), flush=True)
    print(json.dumps({"pooled": pooled(rows)}), flush=True)


if __name__ == "__main__":
    main()
