"""The retrieval figure every method draws: test images and their nearest training images."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from selfcaps.viz.figures import ImageGrid

__all__ = ["retrieval_figure"]


@torch.no_grad()
def retrieval_figure(
    method: Any, dm: Any, queries: int = 8, k: int = 8, bank: int = 5000
) -> ImageGrid:
    """Test images (first column) and their ``k`` nearest training images (monitor feature).

    Args:
        method: A :class:`~selfcaps.methods.base.CapsuleMethod`; its
            ``monitor_features`` are compared by cosine similarity.
        dm: The run's data module.
        queries: Test images, spread over the split.
        k: Neighbours per query.
        bank: Training images searched (a fixed random choice).
    """
    _, eval_tf = method.build_transforms()
    test, train = dm.split("test"), dm.split("train")
    q_idx = torch.linspace(0, len(test) - 1, queries).long().tolist()
    b_idx = torch.randperm(len(train), generator=torch.Generator().manual_seed(0))[:bank].tolist()

    def load(ds: Any, idx: list[int]) -> tuple[Tensor, Tensor]:
        raw = torch.stack([ds[i][0] for i in idx])
        feats = [
            method.monitor_features(
                torch.stack([eval_tf(r) for r in raw[j : j + 256]]).to(method.device)
            )
            .float()
            .cpu()
            for j in range(0, len(raw), 256)
        ]
        return raw.float() / 255.0, torch.cat(feats)

    was_training = method.training
    method.eval()
    try:
        q_img, q_f = load(test, q_idx)
        b_img, b_f = load(train, b_idx)
    finally:
        method.train(was_training)
    sim = F.normalize(q_f, dim=1) @ F.normalize(b_f, dim=1).t()
    nn_idx = sim.topk(min(k, len(b_idx)), dim=1).indices
    rows = [torch.cat([q_img[i : i + 1], b_img[nn_idx[i]]]) for i in range(len(q_idx))]
    k = nn_idx.shape[1]
    return ImageGrid(
        torch.cat(rows),
        nrow=k + 1,
        title=f"test images (framed) and their {k} nearest training images "
        f"({method.monitor_feature} feature)",
        col_labels=["query", *(str(j + 1) for j in range(k))],
        xlabel="nearest training images, most similar first",
        highlight_col=0,
    )
