"""How products of expert capsules learn: three stages, the last two by contrastive divergence.

Hauser, "Training products of expert capsules with mixing by dynamic routing"
(2019, arXiv:1907.11643), section 4.1. One Lightning fit with manual
optimisation; the stage is a function of the epoch (``model.stage_epochs =
[a, b, c]``; epochs past ``a + b + c``, e.g. after ``--resume --epochs``, stay
in stage 3), so a resumed run continues in the right stage:

1. **Autoencoder** (epochs ``[0, a)``): the tied-weight convolutional
   autoencoder by backpropagation of the binary cross-entropy of its
   reconstructions (dropout on the code), Adam from the ``optim`` section.
   Frozen afterwards (and in eval mode: no dropout).
2. **Capsule encoder W** (``[a, a+b)``), Algorithm 1, no backpropagation: one step of
   contrastive divergence per batch
   (:func:`~selfcaps.losses.contrastive_divergence.encoder_cd_update`, whose module
   gives the update and its phases).
   With ``model.center=true`` (not the paper's; see :mod:`selfcaps.models.poe`) the
   primary capsules are squashed *centred* codes; the mean code is the running mean
   over the first epoch after stage 1 (every code seen so far is in it).
3. **Capsule decoder U** (``[a+b, ...)``), W frozen, the paper's rule
   (``cd.decoder_rule=paper``, section 4.1,
   :func:`~selfcaps.losses.contrastive_divergence.decoder_cd_update`). The paper says the
   data's ``z_i`` and ``x_j`` "are fixed by the W_ij's" and does not spell out ``z_i``:
   ``cd.decoder_target=code`` (default) takes the data's pre-squash primary capsules
   ``unsquash(x_i)`` (the autoencoder's code, which generation decodes); ``transpose``
   takes Algorithm 1's reconstruction ``sum_j c_ij W_ij^T x_j``.
   ``cd.decoder_rule=reconstruction`` is ours
   (:func:`~selfcaps.losses.contrastive_divergence.decoder_reconstruction_update`).

CD updates are applied as gradients (``p.grad = -dW``) of SGD with momentum,
L2 regularisation (``weight_decay``) and a per-epoch learning-rate decay
``lr * lr_decay ** (epochs into the stage)`` (the paper's note under
Algorithm 1), so the base class's non-finite check sees them: a NaN in an
update stops the run with :class:`~selfcaps.methods.base.NonFiniteError`
naming the parameter, or skips the step with ``trainer.skip_nonfinite``.

Routing normalisation: the paper normalises ``sum_i c_ij = 1`` over children
(``model.normalize=children``, the default, used by both W and U); ``parents``
is Sabour's softmax over parents. The coefficients set the scale of the
updates (they enter squared): for W, children normalisation gives ``c_ij ~
1/576`` and parents ``~1/20``; for U (whose children are the 20 capsules) it is
the other way round. Switching to ``parents`` therefore needs ``cd.lr_encoder``
about 1000 times smaller and ``cd.lr_decoder`` about 1000 times larger.
``model.decoder_normalize`` gives U its own normalisation.

Why the paper's settings collapse (measured in docs/methods/poe.md): see
:mod:`selfcaps.methods.poe.collapse`, whose ``collapse_stats`` is logged after every
stage-2 epoch (``w_top_share``, ``w_pair_similarity``).

Competing capsules (the ``center_parents_sparse`` preset, formerly ``competitive``; not the
paper): centred codes (``model.center``) remove the common direction of the primaries, W
routed with the softmax over parents makes the 20 capsules compete for each primary capsule
(U keeps the normalisation over children), and a sparsity penalty
``lambda/2 sum_j (q_j - p)^2`` on each capsule's mean on-probability ``q_j``
(:func:`~selfcaps.losses.contrastive_divergence.sparsity_term`, ``cd.sparsity``,
``cd.sparsity_target``) is added to Algorithm 1's update in stage 2, as sparse RBMs do;
with our stage-3 rule and generation ``alone``. Under DDP ``q_j`` is each process's batch
mean.

Model selection (``best.ckpt``): lowest ``val_select = (3 - stage) +
val_recon_caps_mse``, where ``val_recon_caps_mse`` is the pixel MSE (at most 1)
of validation images reconstructed through the whole model (autoencoder, W, U,
unsquash, decoder) -- the path generation uses. So the best checkpoint is the
epoch of the latest stage reached (normally stage 3: a trained decoder) whose
capsule reconstructions of the validation split are best.

Final evaluation (``metrics.json``, :mod:`~selfcaps.methods.poe.evaluation`):
reconstruction errors on the test split
(autoencoder alone, through W and its transpose, through W and U), the free
energies of data and one-step reconstructions and their gap for the trained
and an untrained capsule layer (same trained autoencoder; W and U a fresh draw
of the initial distribution); and per-capsule **class purity** of generated
samples, judged by a small CNN trained on the run's training split: capsule
``j``'s purity is the share of its samples given its most frequent class. A
constant generator is 100% pure, so ``purity_classes_covered`` (distinct
majority classes over the capsules) is reported beside it, and the same numbers
for the untrained capsule layer are the baseline; also the test images grouped by
their longest capsule and the rank-one shares of every capsule's ``W_j`` and ``U_j``.
``eval.max_images`` caps the images of the validation and test reconstruction metrics (for
CPU runs).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from selfcaps.caps import unsquash
from selfcaps.config.checks.poe import check as check_poe_config
from selfcaps.data import BatchEvalTransform, EvalTransform
from selfcaps.data.datamodule import mix_seed
from selfcaps.losses.contrastive_divergence import (
    decoder_cd_update,
    decoder_reconstruction_update,
    encoder_cd_update,
)
from selfcaps.methods.base import CapsuleMethod
from selfcaps.methods.optimizers import build_optimizer
from selfcaps.methods.poe.collapse import COLLAPSE_IMAGES, collapse_stats, spread_images
from selfcaps.methods.poe.evaluation import poe_evaluation
from selfcaps.methods.poe.figures import poe_figures
from selfcaps.methods.poe.geometry import equalize_encoder_maps
from selfcaps.methods.poe.reconstruction import first_images, reconstruction_stats
from selfcaps.models import create_model
from selfcaps.models.poe import PoECapsNet
from selfcaps.viz.figures import Figure

__all__ = ["PoE", "stage_of", "stages_completed"]


def stage_of(epoch: int, stage_epochs: list[int] | tuple[int, ...]) -> int:
    """Training stage (1, 2, 3) of a 0-based epoch; epochs past the schedule stay in stage 3.

    Examples:
        >>> [stage_of(e, [2, 1, 1]) for e in range(6)]
        [1, 1, 2, 3, 3, 3]
    """
    a, b = int(stage_epochs[0]), int(stage_epochs[1])
    return 1 if epoch < a else 2 if epoch < a + b else 3


def stages_completed(epochs_done: int, stage_epochs: list[int] | tuple[int, ...]) -> int:
    """How many of the three stages ran all their epochs after ``epochs_done`` full epochs.

    Examples:
        >>> [stages_completed(e, [2, 1, 1]) for e in (0, 1, 2, 3, 4)]
        [0, 0, 1, 2, 3]
        >>> stages_completed(0, [0, 0, 1])
        2
    """
    ends = torch.tensor([int(s) for s in stage_epochs]).cumsum(0)
    return int((ends <= int(epochs_done)).sum())


# ------------------------------------------------------------------------ the method
class PoE(CapsuleMethod):
    """Products of expert capsules (see the module docstring).

    Args:
        cfg: Run configuration (``model``, ``cd``, ``samples``, ``judge`` sections as in
            ``configs/poe_*.yaml``).
    """

    name: ClassVar[str] = "poe"
    monitor_feature: ClassVar[str] = "capsules"
    monitor_metric: ClassVar[tuple[str, str]] = ("val_select", "min")
    knn_monitor: ClassVar[bool] = False

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        self.automatic_optimization = False
        self._hemisphere_sum: Tensor | None = None
        self._collapse_images: Tensor | None = None
        #: Epochs whose every batch was trained (a budget can stop one midway, which
        #: Lightning still counts in ``current_epoch``); checkpointed, for ``stages_completed``.
        self.register_buffer("epochs_finished", torch.zeros((), dtype=torch.long))
        #: The same count for the training of this process (and the checkpoint it resumed
        #: from): unlike the buffer, loading ``best.ckpt``'s weights for evaluation, which
        #: may be from an earlier epoch, does not lower it.
        self._epochs_run = 0

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        """Count the epoch as finished at its last batch."""
        if batch_idx + 1 >= self.trainer.num_training_batches:
            self.epochs_finished.fill_(self.current_epoch + 1)
            self._epochs_run = self.current_epoch + 1

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Also the running sum of stage 3's capsule poses (a budget can stop an epoch midway)."""
        super().on_save_checkpoint(checkpoint)
        checkpoint["selfcaps"]["hemisphere_sum"] = self._hemisphere_sum

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Also take the resumed checkpoint's finished epochs as this training's."""
        super().on_load_checkpoint(checkpoint)
        self._hemisphere_sum = checkpoint.get("selfcaps", {}).get("hemisphere_sum")
        finished = checkpoint.get("state_dict", {}).get("epochs_finished")
        if finished is not None:
            self._epochs_run = max(self._epochs_run, int(finished))

    def stages_trained(self) -> int:
        """How many of the three stages training completed (:func:`stages_completed`).

        Counted from the training, not from the evaluated weights: ``best.ckpt`` may be an
        earlier epoch of stage 3 than the last, and all three stages still ran.
        """
        epochs = max(int(self.epochs_finished), self._epochs_run)
        return stages_completed(epochs, self.cfg.model.stage_epochs)

    # ------------------------------------------------------------------ setup
    @property
    def poe(self) -> PoECapsNet:
        """The network, typed."""
        return self.network  # type: ignore[return-value]

    def build_network(self) -> nn.Module:
        """The PoE capsule network for this dataset's channels and image size."""
        cfg = self.model_config()
        return create_model(cfg["model"], **cfg["model_kwargs"])

    def model_config(self) -> dict[str, Any]:
        """Model name and kwargs (without the stage schedule), with channels and image size."""
        cfg = super().model_config()
        cfg["model_kwargs"].pop("stage_epochs", None)
        cfg["model_kwargs"]["in_chans"] = self.info.channels
        cfg["model_kwargs"]["image_size"] = self.info.image_size[0]
        return cfg

    def build_transforms(self) -> tuple[Any, Any]:
        """Pixels in ``[0, 1]`` (the sigmoid decoder's range), no augmentation.

        Training batches are converted on their device (:class:`BatchEvalTransform`): the
        same numbers as image by image, without per-image work in the loader.
        """
        return BatchEvalTransform(), EvalTransform()

    @classmethod
    def validate_config(cls, cfg: Any) -> None:
        """Check the PoE keys; every error names its key (:mod:`selfcaps.config.checks.poe`)."""
        check_poe_config(cfg)

    def configure_optimizers(self) -> list[torch.optim.Optimizer]:
        """``optim`` for the autoencoder (Adam in presets); SGD with momentum and L2 for W, U."""
        o, cd, net = self.cfg.optim, self.cfg.cd, self.poe
        sgd = {"momentum": cd.momentum, "weight_decay": cd.weight_decay}
        return [
            build_optimizer(net.ae.parameters(), o),
            torch.optim.SGD(net.encoder.parameters(), lr=cd.lr_encoder, **sgd),
            torch.optim.SGD(net.decoder.parameters(), lr=cd.lr_decoder, **sgd),
        ]

    # ------------------------------------------------------------------ training
    @property
    def stage(self) -> int:
        """The current training stage (1: autoencoder, 2: encoder W, 3: decoder U)."""
        return stage_of(self.current_epoch, self.cfg.model.stage_epochs)

    def on_train_epoch_start(self) -> None:
        """Reseed; set this epoch's CD learning rate; start measuring the capsules' mean poses."""
        super().on_train_epoch_start()
        stage, cd = self.stage, self.cfg.cd
        if stage > 1:
            a, b, _ = (int(s) for s in self.cfg.model.stage_epochs)
            into = self.current_epoch - (a if stage == 2 else a + b)
            base_lr = cd.lr_encoder if stage == 2 else cd.lr_decoder
            for group in self._optimizer(stage).param_groups:
                group["lr"] = base_lr * cd.lr_decay**into
        if stage == 3:
            self._hemisphere_sum = torch.zeros_like(self.poe.hemisphere, dtype=torch.float64)
        self.log("stage", float(stage), on_step=False, on_epoch=True)

    def _optimizer(self, stage: int) -> Any:
        opts = self.optimizers()
        return opts[stage - 1] if isinstance(opts, list) else opts

    def compute_loss(self, batch: Any) -> tuple[Tensor, dict[str, Tensor]]:
        """This stage's update, left in the parameters' ``.grad``; returns a monitor loss.

        Stage 1: the autoencoder's BCE, backpropagated (under autocast with ``bf16-mixed``;
        :meth:`training_step` checks it and the gradients before the optimiser steps).
        Stages 2 and 3: ``grad = -update`` (averaged over processes under DDP), always
        computed in float32, and, as the loss, the batch's free-energy gap (stage 2) or
        capsule reconstruction MSE (stage 3).
        """
        x = batch[0]
        net, stage, cd = self.poe, self.stage, self.cfg.cd
        if stage == 1:
            net.ae.train()
            recon = self.compiled(net.ae)(x)
            loss = F.binary_cross_entropy(recon, x)
            self.manual_backward(loss)  # checked with the gradients in training_step
            return loss, {"train_ae_mse": (recon - x).pow(2).mean().detach()}
        net.ae.eval()
        # Stages 2 and 3 in float32 under bf16-mixed too: the CD updates are sums of small
        # differences (Algorithm 1) and the parameters' .grad must keep their dtype.
        with torch.no_grad(), torch.autocast(x.device.type, enabled=False):
            code = self.compiled(net.ae.encode)(x)
            if net.center and self.current_epoch == int(self.cfg.model.stage_epochs[0]):
                self._observe_codes(code)
            caps = self.compiled(net.code_to_capsules)(code)
            if stage == 2:
                update, stats = self.compiled(encoder_cd_update)(
                    net.encoder, caps, float(cd.sparsity), float(cd.sparsity_target)
                )
                param, loss = net.encoder.weight, stats["free_energy_gap"]
            else:
                _, y, c = self.compiled(net.encoder.route)(caps)
                if cd.decoder_rule == "reconstruction":
                    update, stats = self.compiled(decoder_reconstruction_update)(
                        net.decoder, y, caps
                    )
                else:
                    z_data = unsquash(caps) if cd.decoder_target == "code" else None
                    if z_data is None:  # "transpose": Algorithm 1's sum_j c_ij W_ij^T x_j
                        z_data = self.compiled(net.encoder.transpose)(y, c)
                    update, stats = self.compiled(decoder_cd_update)(net.decoder, y, z_data)
                param, loss = net.decoder.weight, stats["recon_caps_mse"]
                if self._hemisphere_sum is not None:
                    self._hemisphere_sum += y.sum(0).double()
            if self.trainer.world_size > 1:
                update = self.trainer.strategy.reduce(update, reduce_op="mean")
            param.grad = -update
        return loss, {f"train_{k}": v for k, v in stats.items()}

    def _observe_codes(self, code: Tensor) -> None:
        """Fold this batch's codes (of every process) into the mean code (``model.center``)."""
        total, count = code.sum(0), torch.tensor(code.shape[0], device=code.device)
        if self.trainer.world_size > 1:
            total = self.trainer.strategy.reduce(total, reduce_op="sum")
            count = self.trainer.strategy.reduce(count, reduce_op="sum")
        self.poe.observe_codes(total, count)  # a device count: nothing read on the host

    def on_after_backward(self) -> None:
        """Nothing: :meth:`training_step` checks the loss and the update once, before stepping."""

    def training_step(self, batch: Any, batch_idx: int) -> Tensor | None:
        """This stage's loss and update, one finiteness read (stop or skip), then the step."""
        opt = self._optimizer(self.stage)
        opt.zero_grad(set_to_none=True)
        loss = super().training_step(batch, batch_idx)
        self.finite_step(loss)  # non-finite: raises, or drops the update (skip_nonfinite)
        opt.step()
        if self.stage == 2 and self.cfg.cd.orthogonal_encoder:
            equalize_encoder_maps(self.poe.encoder)
        return loss

    def _store_hemisphere(self) -> None:
        """Copy this stage-3 epoch's summed capsule poses (all processes) into the network."""
        if self.stage != 3 or self._hemisphere_sum is None:
            return
        total = self._hemisphere_sum
        if self.trainer.world_size > 1:
            total = self.trainer.strategy.reduce(total, reduce_op="sum")
        self.poe.hemisphere.copy_(total.to(self.poe.hemisphere.dtype))

    def on_train_epoch_end(self) -> None:
        """Store the mean capsule poses before ``last.ckpt`` is written; stage 2: the collapse.

        After every stage-2 epoch, ``collapse_stats`` on ``COLLAPSE_IMAGES`` fixed
        training images goes to ``metrics.csv`` (and so to ``figures/curves.png``).
        """
        self._store_hemisphere()
        if self.stage == 2:
            images = self._fixed_training_images()
            if images is not None:
                for k, v in collapse_stats(self.poe, images).items():
                    self.log(k, float(v), on_step=False, on_epoch=True)

    def _fixed_training_images(self) -> Tensor | None:
        """:data:`COLLAPSE_IMAGES` training images spread evenly over the split (cached)."""
        if self._collapse_images is None:
            dm = getattr(self.trainer, "datamodule", None)
            if dm is None:
                return None
            self._collapse_images = spread_images(dm.split("train"), COLLAPSE_IMAGES)
        return self._collapse_images.to(self.device)

    # --------------------------------------------------------------- validation
    def on_validation_epoch_start(self) -> None:
        """Store the mean capsule poses before ``best.ckpt`` may be written."""
        self._store_hemisphere()

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Reconstruction errors and the free-energy gap of the validation split."""
        x = first_images(batch[0], batch_idx * int(self.cfg.data.eval_batch_size), self.cfg)
        if x is None:
            return
        stats = reconstruction_stats(self.poe, x)
        stats["select"] = stats["recon_caps_mse"] + float(3 - self.stage)
        for k, v in stats.items():
            self.log(
                f"val_{k}",
                v,
                on_epoch=True,
                batch_size=x.shape[0],
                sync_dist=True,
                add_dataloader_idx=False,
                prog_bar=k in ("recon_caps_mse", "select"),
            )

    def on_validation_epoch_end(self) -> None:
        """Nothing to aggregate: Lightning averages the logged means."""

    # ------------------------------------------------------------- evaluation
    def features(self, x: Tensor) -> dict[str, Tensor]:
        """Capsule poses (320-D) and the autoencoder's code (4608-D)."""
        net = self.poe
        code = net.ae.encode(x)
        _, y, _ = net.encoder.route(net.code_to_capsules(code))
        return {"capsules": y.flatten(1), "code": code.flatten(1)}

    def untrained_network(self) -> PoECapsNet:
        """This network with the trained autoencoder and freshly initialised W and U."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(mix_seed(self.cfg.seed, 0x9E0))
            cfg = self.model_config()
            net = create_model(cfg["model"], **cfg["model_kwargs"])
        net.ae.load_state_dict(self.poe.ae.state_dict())
        net.code_mean.copy_(self.poe.code_mean)  # the same primary capsules (model.center)
        net.code_count.copy_(self.poe.code_count)
        return net.to(self.device).eval()  # type: ignore[return-value]

    @torch.no_grad()
    def evaluate(self, dm: Any) -> dict[str, float | int | str]:
        """Test-split reconstructions, free energies, groups, ranks, sample purity."""
        return poe_evaluation(self, dm)

    @torch.no_grad()
    def figures(self, dm: Any) -> dict[str, Figure]:
        """Samples per capsule (Fig. 2), restricted-domain samples, reconstructions."""
        return poe_figures(self.poe, self.cfg.samples, dm.eval_loader("test").dataset, self.device)
