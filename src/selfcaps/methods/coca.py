"""How CoCa learns: NT-Xent between two augmented views, evaluated by weighted kNN.

Training (paper section III, reference ``main.py``): two SimCLR views of each
image go through the same network; the loss is NT-Xent with temperature 0.2
on the L2-normalised class-capsule lengths; Adam, lr 1e-3, weight decay 1e-6,
no schedule.

Evaluation: weighted kNN (k = 50, T = 0.2) of the test split against the
train split, with the model in eval mode and the deterministic transform. The
reference code runs its kNN on the 2048-D backbone feature, not on capsules,
so we report both:

* ``knn_top1_backbone`` / ``knn_top5_backbone`` (what the paper's 70.50% /
  98.10% measure),
* ``knn_top1_capsule`` / ``knn_top5_capsule`` (the 160-D class-capsule poses),

and two baselines computed in the same run: ``knn_top1_pixels`` (raw
normalised pixels) and ``knn_top1_random_init`` (the same network, untrained;
backbone feature, with ``knn_top1_random_init_capsule`` for the capsules).

Deliberate differences from the reference: the best checkpoint is chosen by
kNN accuracy on a validation split carved from train (the reference picks the
epoch with the best *test* accuracy), and the kNN bank is that train split (the
reference's is all 50,000 CIFAR-10 training images). With
``augment.views_in_one_batch=true`` (the ``quick`` presets) both views go
through the network as one batch of 2B images, so BatchNorm normalises them with
shared statistics; ``false`` (the ``paper`` preset) runs one forward pass per
view, as the paper's Algorithm 1 (lines 16-17) and the reference do.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from selfcaps.data import BatchSimCLRTransform, EvalTransform, SimCLRTransform
from selfcaps.data.datamodule import mix_seed
from selfcaps.eval.method_metrics import knn_metrics
from selfcaps.losses import NTXentLoss
from selfcaps.methods.base import CapsuleMethod
from selfcaps.models import create_model

__all__ = ["CoCa"]


class CoCa(CapsuleMethod):
    """Contrastive capsules (see the module docstring).

    Args:
        cfg: Run configuration (``model``, ``loss``, ``augment`` sections as in
            ``configs/coca_*.yaml``).
    """

    name: ClassVar[str] = "coca"
    monitor_feature: ClassVar[str] = "backbone"

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        self.criterion = NTXentLoss(
            temperature=self.cfg.loss.temperature,
            gather_distributed=self.cfg.loss.gather_distributed,
        )

    def build_network(self) -> nn.Module:
        """CoCa's capsule network for this dataset's channels."""
        cfg = self.model_config()
        return create_model(cfg["model"], **cfg["model_kwargs"])

    def model_config(self) -> dict[str, Any]:
        """Model name and kwargs, including the input channels."""
        cfg = super().model_config()
        cfg["model_kwargs"]["in_chans"] = self.info.channels
        return cfg

    def build_transforms(self) -> tuple[Any, Any]:
        """Two SimCLR views for training; normalisation only for evaluation."""
        a = self.cfg.augment
        make = BatchSimCLRTransform if a.batched else SimCLRTransform
        train = make(
            input_size=self.info.image_size[0],
            min_scale=a.min_scale,
            blur_prob=a.blur_prob,
            degrees=a.get("degrees", 0.0),
            channels=self.info.channels,
            normalize=(self.info.mean, self.info.std),
        )
        return train, EvalTransform(mean=self.info.mean, std=self.info.std)

    def compute_loss(self, batch: Any) -> tuple[Tensor, dict[str, Tensor]]:
        """NT-Xent between the embeddings of the two views."""
        (x1, x2), _ = batch
        if self.cfg.augment.views_in_one_batch:
            z1, z2 = self.net(torch.cat([x1, x2])).chunk(2)
        else:
            z1, z2 = self.net(x1), self.net(x2)
        return self.criterion(z1, z2), {}

    def features(self, x: Tensor) -> dict[str, Tensor]:
        """Backbone feature (2048-D), class-capsule poses (160-D) and the embedding (10-D)."""
        net = self.network
        f = net.forward_backbone(x)
        caps = net.capsules_from_backbone(f)
        return {
            "backbone": torch.flatten(f, 1),
            "capsule": torch.flatten(caps, 1),
            "embedding": net.embedding(caps),
        }

    def evaluate(self, dm: Any) -> dict[str, float | int | str]:
        """KNN on backbone and capsules, plus pixel and random-init baselines (percent)."""
        e = self.cfg.eval
        metrics: dict[str, float | int | str] = {}
        nc = self.info.num_classes
        kinds = ["backbone", "capsule"]
        metrics.update(knn_metrics(self, dm, self.features, kinds, nc, record="eval_knn"))
        if e.baselines:
            pixels = knn_metrics(
                self, dm, lambda x: {"pixels": x.flatten(1)}, ["pixels"], nc,
                record="eval_knn_pixels", weights=False,
            )  # fmt: skip
            metrics.update(pixels)
            untrained = self.untrained_copy()
            rand = knn_metrics(
                untrained, dm, untrained.features, kinds, nc, record="eval_knn_random_init"
            )
            metrics.update({k: v for k, v in rand.items() if k.startswith("eval_")})
            metrics["knn_top1_random_init"] = rand["knn_top1_backbone"]
            metrics["knn_top5_random_init"] = rand["knn_top5_backbone"]
            metrics["knn_top1_random_init_capsule"] = rand["knn_top1_capsule"]
        metrics["knn_k"], metrics["knn_t"] = int(e.knn_k), float(e.knn_t)
        return metrics

    def untrained_copy(self) -> CoCa:
        """The same network freshly initialised with the baseline's own seed (not the run's).

        ``mix_seed(seed, 0x0417)`` seeds the initialisation, so the untrained baseline is the
        same network for every run of a seed, and independent of the training's random stream.
        """
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(mix_seed(self.cfg.seed, 0x0417))
            return type(self)(self.hparams["cfg"]).to(self.device)

    def summary_line(self, metrics: dict[str, Any]) -> str | None:
        """``"... trained X vs untrained Y vs pixels Z."``: backbone kNN top-1 of the test split."""
        keys = ("knn_top1_backbone", "knn_top1_random_init", "knn_top1_pixels")
        if not all(k in metrics for k in keys):
            return None
        trained, untrained, pixels = (float(metrics[k]) for k in keys)
        return (
            "kNN top-1 on the test split (backbone feature): "
            f"trained {trained:.2f} vs untrained {untrained:.2f} vs pixels {pixels:.2f}."
        )
