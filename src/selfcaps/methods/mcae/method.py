"""How MCAE learns: masked-patch reconstruction, then supervised finetuning with class capsules.

"Masked Capsule Autoencoders" (Everett, Zhong, Leontidis, TMLR 2025). The
network is :class:`selfcaps.models.mcae.MCAENet`.

Phase 1, pretraining (the engine's Lightning fit, ``trainer.epochs`` epochs,
``--pretrain-epochs``): a random ``model.mask_ratio`` of the patch positions is
removed, the capsule decoder predicts every patch, and the loss is the MSE on the
masked patches against their pixel values (paper eq. 4,
:func:`~selfcaps.losses.masked_patch_mse`, ``model.target``;
``loss.masked_only=false`` gives the all-patches ablation of Table 3).
``best.ckpt`` is the epoch with the lowest ``val_mse``: the masked-patch MSE on the
validation split (carved from train) with masks fixed per batch, so epochs are
compared on the same masks. ``--pretrain-epochs 0`` skips the phase (the
no-pretraining baseline).

Phase 2, finetuning (in :meth:`MCAE.evaluate`, ``eval.finetune_epochs`` epochs,
``--finetune-epochs``): the decoder is dropped, the class-capsule layer is trained
with the encoder and backbone on the same augmented training split by
cross-entropy of the position-averaged class activations (a distribution over
classes, see the model); same optimiser as pretraining ("All models use the SGD
optimizer", section 4.1), learning rate ``eval.finetune_lr``, cosine schedule over
the finetuning epochs. With ``eval.label_fraction`` or ``eval.labels_per_class``
it trains on a stratified labelled subset of the training split only
(:mod:`selfcaps.eval.labels`), the same for a ``--pretrain-epochs 0`` run of the
same seed. The epoch with
the lowest validation loss is selected and the test split is evaluated once. Its
files live under ``<run>/finetune/``: ``metrics.csv``, ``checkpoints/last.ckpt``,
``checkpoints/best.ckpt`` and ``model.safetensors`` (+ ``config.json``) of the
tested classifier. The run's own ``model.safetensors`` is the pretrained
autoencoder (what ``best.ckpt`` holds), and ``figures/reconstruction.png`` shows
it at work.

Augmentations (paper section 4.2): random resized crops of 80-100% for
Fashion-MNIST and CIFAR-10 (and, our choice, every other dataset of fixed-size
images, e.g. MNIST); smallNORB standardised per image, random ``augment.crop_size``
crops for training and a centre crop for evaluation; image folders (Imagenette,
Imagewoof) random resized crops to ``augment.image_size`` plus colour jitter.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, ClassVar

import torch
from torch import Tensor, nn
from torchvision.transforms import v2

from selfcaps.config.checks.labels import label_suffix
from selfcaps.config.checks.mcae import check as check_mcae_config
from selfcaps.data import EvalTransform
from selfcaps.data.datamodule import mix_seed
from selfcaps.data.layouts import IMAGEFOLDER_PREFIX
from selfcaps.data.transforms import PerImageStandardize
from selfcaps.eval.method_metrics import evaluation_record
from selfcaps.losses import masked_patch_mse
from selfcaps.methods.base import CapsuleMethod
from selfcaps.methods.mcae import finetuning
from selfcaps.methods.mcae.figures import reconstruction_figure
from selfcaps.models import create_model
from selfcaps.models.mcae import MCAENet
from selfcaps.viz.figures import Figure

__all__ = ["MCAE"]

_VAL_MASK_SALT = 0x3A5C


class MCAE(CapsuleMethod):
    """Masked Capsule Autoencoder pretraining and class-capsule finetuning (module docstring).

    Args:
        cfg: Run configuration (``model``, ``loss``, ``augment`` sections as in
            ``configs/mcae_*.yaml``).
    """

    name: ClassVar[str] = "mcae"
    monitor_feature: ClassVar[str] = "capsule"
    monitor_metric: ClassVar[tuple[str, str]] = ("val_mse", "min")
    knn_monitor: ClassVar[bool] = False

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        # Not part of the pretraining objective: frozen, so that no optimiser step (weight
        # decay) touches it and DDP does not wait for its gradients. Finetuning trains a
        # fresh copy (:meth:`classifier`).
        self.mcae.class_caps.requires_grad_(False)
        self._val_sums = torch.zeros(2, dtype=torch.float64)  # sum of MSE * batch, images

    # ------------------------------------------------------------------ configuration
    @classmethod
    def validate_config(cls, cfg: Any) -> None:
        """Check MCAE's keys (:mod:`selfcaps.config.checks.mcae`) and the patch size."""
        check_mcae_config(cfg)
        m = cfg.model
        size = _input_size(cfg)
        if size is not None and size % int(m.patch_size):
            raise ValueError(
                f"model.patch_size: {m.patch_size} does not divide the {size}x{size} input "
                f"of {cfg.data.name}"
            )

    def input_size(self) -> int:
        """Side of the images the network sees (after crops / resizing)."""
        size = _input_size(self.cfg)
        if size is None:
            raise ValueError(f"the image size of {self.cfg.data.name} is not known")
        return size

    def model_config(self) -> dict[str, Any]:
        """Model name and kwargs, with the data's channels, classes and input size."""
        cfg = super().model_config()
        standardized = str(self.cfg.data.name).startswith("smallnorb")
        # Runs made before `model.mask_mode` zeroed the masked pixels.
        cfg["model_kwargs"].setdefault("mask_mode", "pixels_zeroed")
        cfg["model_kwargs"].update(
            in_chans=self.info.channels,
            num_classes=self.info.num_classes,
            img_size=_input_size(self.cfg),
            # The normalisation the transforms apply, undone for target=pixels. smallNORB
            # is standardised per image, which the batch cannot undo: its target is the
            # standardised image.
            pixel_mean=None if standardized else [float(v) for v in self.info.mean],
            pixel_std=None if standardized else [float(v) for v in self.info.std],
        )
        return cfg

    def build_network(self) -> nn.Module:
        """The MCAE network (backbone, encoder, decoder, class capsules)."""
        cfg = self.model_config()
        return create_model(cfg["model"], **cfg["model_kwargs"])

    @property
    def mcae(self) -> MCAENet:
        """The network, typed."""
        net = self.network
        assert isinstance(net, MCAENet)
        return net

    def build_transforms(self) -> tuple[Any, Any]:
        """Per-dataset training augmentation and evaluation transform (paper section 4.2).

        Crops run per batch on an accelerator (:mod:`selfcaps.data.batch_crops`).
        """
        from selfcaps.data.batch_crops import on_device_crops

        a, info, name = self.cfg.augment, self.info, str(self.cfg.data.name)
        size = self.input_size()
        to_float = v2.ToDtype(torch.float32, scale=True)
        if name.startswith("smallnorb"):
            standardize = PerImageStandardize()
            return (
                on_device_crops(v2.Compose([v2.RandomCrop(size), to_float, standardize])),
                v2.Compose([v2.CenterCrop(size), to_float, standardize]),
            )
        steps: list[Any] = [v2.RandomResizedCrop(size, scale=(a.min_scale, 1.0), antialias=True)]
        if name.startswith(IMAGEFOLDER_PREFIX) and a.color_jitter > 0:
            j = float(a.color_jitter)
            steps.append(v2.ColorJitter(brightness=j, contrast=j, saturation=j))
        train = on_device_crops(
            v2.Compose([*steps, to_float, v2.Normalize(list(info.mean), list(info.std))])
        )
        native = info.image_size[0] if info.image_size else None
        return train, EvalTransform(info.mean, info.std, size=None if native == size else size)

    # ------------------------------------------------------------------ pretraining
    def compute_loss(self, batch: Any) -> tuple[Tensor, dict[str, Tensor]]:
        """Masked-patch MSE of a training batch (masks from the global RNG, reseeded per epoch)."""
        x, _ = batch
        out = self.compiled(self.mcae.forward_pretrain)(x)
        return masked_patch_mse(out, self.cfg.loss.masked_only), {}

    def _fixed_mask_mse(self, x: Tensor, batch_idx: int) -> Tensor:
        """Masked-patch MSE with a mask fixed by ``(seed, batch_idx)``: comparable across epochs."""
        g = torch.Generator(device=x.device).manual_seed(
            mix_seed(self.cfg.seed, _VAL_MASK_SALT, batch_idx)
        )
        return masked_patch_mse(self.mcae.forward_pretrain(x, generator=g), True)

    def on_validation_epoch_start(self) -> None:
        """Reset the validation MSE sums."""
        self._val_sums = torch.zeros(2, dtype=torch.float64)

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Masked-patch MSE of a validation batch (no kNN monitor: the only loader is ``val``)."""
        x, _ = batch
        mse = self._fixed_mask_mse(x, batch_idx)
        self._val_sums += torch.tensor([float(mse) * x.shape[0], x.shape[0]], dtype=torch.float64)

    def on_validation_epoch_end(self) -> None:
        """Log ``val_mse``: masked patches only, whatever ``loss.masked_only`` is."""
        total, n = self.trainer.strategy.reduce(self._val_sums.to(self.device), reduce_op="sum")
        if n > 0:
            self.log("val_mse", float(total / n), prog_bar=True, sync_dist=False)

    @torch.no_grad()
    def validation_mse(self, dm: Any) -> float:
        """``val_mse`` of the current weights over the whole validation split (fixed masks)."""
        was = self.training
        self.eval()
        total, n = 0.0, 0
        try:
            for i, (x, _) in enumerate(dm.eval_loader("val")):
                x = x.to(self.device)
                total += float(self._fixed_mask_mse(x, i)) * x.shape[0]
                n += x.shape[0]
        finally:
            self.train(was)
        return total / max(n, 1)

    # ------------------------------------------------------------------ features
    def features(self, x: Tensor) -> dict[str, Tensor]:
        """Backbone features and activation-weighted encoder poses, averaged over positions."""
        net = self.mcae
        pose, act, feat = net.encode(x)
        weighted = (pose * act.unsqueeze(-1)).mean(dim=1)  # (B, A, D)
        return {"backbone": feat.mean(dim=1), "capsule": weighted.flatten(1)}

    # ------------------------------------------------------------------ finetuning
    def classifier(self) -> MCAENet:
        """A new network without the decoder, holding the current backbone, encoder and head."""
        return finetuning.classifier(self)

    def labelled_indices(self, dm: Any) -> list[int] | None:
        """The labelled training images of ``eval.label_fraction`` / ``eval.labels_per_class``.

        See :func:`selfcaps.methods.mcae.finetuning.labelled_indices`.
        """
        return finetuning.labelled_indices(self.cfg, dm)

    def finetune_classifier(
        self, dm: Any, labelled: Sequence[int] | None = None
    ) -> tuple[MCAENet, dict[str, float | int]]:
        """Finetune a decoder-less copy; select on validation loss; test once.

        See :func:`selfcaps.methods.mcae.finetuning.finetune_classifier`.

        Args:
            dm: The run's data.
            labelled: Train on these images of the training split only (label-efficiency
                protocol, :meth:`labelled_indices`); validation and test stay whole.

        Returns:
            The finetuned classifier (selected epoch) and the results of
            :func:`selfcaps.eval.finetune`.
        """
        return finetuning.finetune_classifier(self, dm, labelled)

    def evaluate(self, dm: Any) -> dict[str, float | int | str]:
        """Pretraining val MSE, then finetuning with class capsules and its test accuracy."""
        metrics: dict[str, float | int | str] = {
            "pretrain_val_mse": self.validation_mse(dm),
            "pretrain_epochs": int(self.current_epoch),
            "backbone": str(self.cfg.model.backbone),
            "mask_ratio": float(self.cfg.model.mask_ratio),
        }
        t0 = time.perf_counter()
        labelled = self.labelled_indices(dm)
        # With a labelled subset every finetuning key says so: finetune_top1_lf10, ...
        sfx = "" if labelled is None else label_suffix(
            self.cfg.eval.get("label_fraction"), self.cfg.eval.get("labels_per_class")
        )  # fmt: skip
        # Taken before finetuning: the digest is of the pretrained weights it starts from.
        n_train = len(dm.split("train")) if labelled is None else len(labelled)
        record = evaluation_record(
            f"eval_finetune{sfx}", "test", len(dm.split("test")), "train", n_train, self.network
        )
        _, res = self.finetune_classifier(dm, labelled)
        metrics.update({
            f"finetune_top1{sfx}": float(res["test_top1"]),
            f"finetune_top5{sfx}": float(res["test_top5"]),
            f"finetune_best_val_loss{sfx}": float(res["best_val_loss"]),
            f"finetune_best_val_top1{sfx}": float(res["best_val_top1"]),
            f"best_finetune_epoch{sfx}": int(res["best_epoch"]) + 1,
            "finetune_epochs": int(self.cfg.eval.finetune_epochs),
            f"finetune_time_s{sfx}": round(time.perf_counter() - t0, 1),
        })  # fmt: skip
        metrics.update(record)
        if labelled is not None:
            metrics[f"labelled_images{sfx}"] = len(labelled)
        return metrics

    # ------------------------------------------------------------------ figures
    def figures(self, dm: Any) -> dict[str, Figure]:
        """Nearest-neighbour retrieval and ``reconstruction`` (masked input / output / original)."""
        return {**super().figures(dm), "reconstruction": reconstruction_figure(self, dm)}


def _input_size(cfg: Any) -> int | None:
    """The network's input side for a configuration (see :meth:`MCAE.input_size`)."""
    from selfcaps.data import dataset_info

    name = str(cfg.data.name)
    if name.startswith("smallnorb"):
        return int(cfg.augment.crop_size)
    if name.startswith(IMAGEFOLDER_PREFIX):
        return int(cfg.augment.image_size)
    size = dataset_info(name).image_size
    return int(size[0]) if size else None
