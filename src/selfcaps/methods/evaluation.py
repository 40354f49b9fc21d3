"""Final-evaluation helpers shared by the methods: features of whole splits, kNN reports."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from selfcaps.eval import knn_evaluate
from selfcaps.eval.progress import progress

__all__ = ["collect_features", "knn_metrics"]


@torch.no_grad()
def collect_features(
    module: nn.Module, loader: Any, fn: Callable[[Tensor], dict[str, Tensor]], kinds: Sequence[str]
) -> tuple[dict[str, Tensor], Tensor]:
    """Run ``fn`` over a loader with ``module`` in eval mode; features per kind and labels.

    Args:
        module: Put in ``eval()`` for the pass and restored afterwards.
        loader: Yields ``(images, labels)``.
        fn: Images -> ``{kind: (B, D) features}``.
        kinds: The kinds to keep.

    Returns:
        ``({kind: (N, D) float32 CPU features}, (N,) labels)``.
    """
    was_training = module.training
    module.eval()
    device = next(module.parameters()).device
    feats: dict[str, list[Tensor]] = {k: [] for k in kinds}
    labels = []
    try:
        n = len(getattr(loader, "dataset", ()))
        for x, y in progress(loader, f"features of {n} images" if n else "features"):
            out = fn(x.to(device))
            for k in kinds:
                feats[k].append(out[k].flatten(1).float().cpu())
            labels.append(y.cpu())
    finally:
        module.train(was_training)
    return {k: torch.cat(v) for k, v in feats.items()}, torch.cat(labels)


def knn_metrics(
    module: nn.Module,
    dm: Any,
    fn: Callable[[Tensor], dict[str, Tensor]],
    kinds: Sequence[str],
    num_classes: int,
    bank_split: str = "train",
    query_split: str = "test",
) -> dict[str, float]:
    """Weighted-kNN top-1/top-5 (percent) of ``query_split`` against ``bank_split``, per kind.

    Keys: ``knn_top1_<kind>``, ``knn_top5_<kind>``. k and T come from ``dm.cfg.eval``; the
    bank is the deterministic evaluation transform of ``bank_split``.
    """
    cfg = dm.cfg
    bank, bank_y = collect_features(module, dm.eval_loader(bank_split), fn, kinds)
    query, query_y = collect_features(module, dm.eval_loader(query_split), fn, kinds)
    out: dict[str, float] = {}
    for k in kinds:
        res = knn_evaluate(
            bank[k], bank_y, query[k], query_y, num_classes, k=cfg.eval.knn_k, t=cfg.eval.knn_t
        )
        out[f"knn_top1_{k}"] = float(res["top1"])
        out[f"knn_top5_{k}"] = float(res["top5"])
    return out
