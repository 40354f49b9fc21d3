"""MCAE's second phase: supervised finetuning of the class capsules with the pretrained network.

Section 3.2 of the paper: the decoder is dropped, a class capsule layer takes its place,
and the whole network is finetuned by cross-entropy of the position-averaged class
activations (:func:`~selfcaps.losses.class_nll`). The epoch with the lowest validation
loss is selected and the test split is evaluated once (:func:`selfcaps.eval.finetune`).
The Trainer settings and the files under ``<run>/finetune/`` are the engine's
(:mod:`selfcaps.engine.finetune_runs`).

The functions take the :class:`~selfcaps.methods.mcae.MCAE` method (typed ``Any``:
``method.py`` imports this module); its :meth:`~selfcaps.methods.mcae.MCAE.classifier`,
:meth:`~selfcaps.methods.mcae.MCAE.labelled_indices` and
:meth:`~selfcaps.methods.mcae.MCAE.finetune_classifier` call them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import lightning as L
from torch import nn
from torch.utils.data import DataLoader, Subset

from selfcaps.data.datamodule import EpochSampler, SeededTransformDataset, loader_kwargs, mix_seed
from selfcaps.engine.finetune_runs import finetune_trainer_kwargs, save_finetuned
from selfcaps.eval import finetune
from selfcaps.eval.labels import dataset_targets, stratified_label_indices
from selfcaps.losses import class_nll
from selfcaps.methods.optimizers import build_optimizer
from selfcaps.methods.schedules import cosine_schedule
from selfcaps.models import create_model
from selfcaps.models.mcae import MCAENet

__all__ = [
    "classifier",
    "finetune_classifier",
    "finetune_param_groups",
    "labelled_indices",
]

#: Salt of the finetuning seed (mixed with the run's seed).
_FINETUNE_SALT = 0xF17E


def finetune_param_groups(net: MCAENet, lr: float, scale: float) -> list[dict[str, Any]]:
    """Optimiser parameter groups for finetuning: pretrained layers at ``lr * scale``.

    The backbone (primary capsules) and the capsule encoder are what pretraining
    trained; the class capsules are new at finetuning (section 3.2: "replace it with a
    class capsule layer"). The paper finetunes everything at one rate (section 4.1: "We
    then add the class capsules to our network and fully finetune it"): ``scale = 1``,
    the default. A smaller scale (``eval.finetune_pretrained_lr_scale``, ours) is meant
    to keep finetuning from overwriting what pretraining learnt; 0 freezes the
    pretrained weights (their BatchNorm statistics still adapt).

    Args:
        net: The decoder-less classifier (:func:`classifier`).
        lr: The finetuning learning rate (``eval.finetune_lr``).
        scale: Factor of ``lr`` for the backbone and encoder.

    Returns:
        ``[{"params": pretrained, "lr": lr * scale}, {"params": the rest, "lr": lr}]``;
        a group is left out when it has no parameters.
    """
    pretrained = [*net.backbone.parameters(), *net.encoder.parameters()]
    ids = {id(p) for p in pretrained}
    rest = [p for p in net.parameters() if id(p) not in ids]
    groups = [{"params": pretrained, "lr": lr * scale}, {"params": rest, "lr": lr}]
    return [g for g in groups if g["params"]]


def classifier_config(method: Any) -> dict[str, Any]:
    """The method's model name and kwargs for the decoder-less classifier."""
    cfg = method.model_config()
    cfg["model_kwargs"]["decoder"] = False
    return cfg


def classifier(method: Any) -> MCAENet:
    """A new network without the decoder, holding the method's backbone, encoder and head."""
    cfg = classifier_config(method)
    net = create_model(cfg["model"], **cfg["model_kwargs"])
    state = {k: v for k, v in method.mcae.state_dict().items() if not k.startswith("decoder.")}
    net.load_state_dict(state)
    assert isinstance(net, MCAENet)
    return net.to(method.device).requires_grad_(True)


def finetune_optimizer(cfg: Any, steps_per_epoch: int) -> Callable[[L.LightningModule], Any]:
    """``optimizer_fn`` of :func:`selfcaps.eval.finetune`: the pretraining optimiser, cosine.

    Args:
        cfg: Run configuration (``optim`` and the ``eval.finetune_*`` keys).
        steps_per_epoch: Training batches per finetuning epoch (for a per-step schedule).

    Returns:
        ``make(module)``, which returns what ``configure_optimizers`` returns for the
        ``FinetuneModule`` holding the classifier as ``backbone``.
    """
    e, o, epochs = cfg.eval, cfg.optim, int(cfg.eval.finetune_epochs)
    lr = float(e.finetune_lr)
    scale = float(e.get("finetune_pretrained_lr_scale", 1.0))

    def make(module: L.LightningModule) -> Any:
        net = module.backbone  # FinetuneModule(backbone=the classifier, head=Identity)
        assert isinstance(net, MCAENet)
        opt = build_optimizer(finetune_param_groups(net, lr, scale), o, lr=lr)
        if o.scheduler == "none":
            return opt
        total = epochs * steps_per_epoch if o.interval == "step" else epochs
        sched = cosine_schedule(opt, total, o.get("warmup"))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": o.interval}}

    return make


def labelled_indices(cfg: Any, dm: Any) -> list[int] | None:
    """The labelled training images of ``eval.label_fraction`` / ``eval.labels_per_class``.

    ``None`` (every label) unless one of the two keys is set; the subset is
    stratified and fixed by ``eval.label_seed`` (default: the run's seed), see
    :mod:`selfcaps.eval.labels`. A run with ``--pretrain-epochs 0`` and the same
    seed finetunes on the same images.

    Args:
        cfg: Run configuration.
        dm: The run's data (its training split).
    """
    e = cfg.eval
    fraction, per_class = e.get("label_fraction"), e.get("labels_per_class")
    if fraction is None and per_class is None:
        return None
    seed = int(cfg.seed if e.get("label_seed") is None else e.label_seed)
    return stratified_label_indices(
        dataset_targets(dm.split("train")),
        fraction=None if fraction is None else float(fraction),
        per_class=None if per_class is None else int(per_class),
        seed=seed,
    ).tolist()


def labelled_loader(cfg: Any, dm: Any, labelled: Sequence[int]) -> DataLoader:
    """Training batches of the labelled images only (augmented as ``dm.train_dataloader``).

    The last, incomplete batch is kept: a 1% subset may hold only a few batches.
    """
    seed = int(cfg.seed)
    ds = SeededTransformDataset(Subset(dm.split("train"), list(labelled)), dm.train_transform, seed)
    sampler = EpochSampler(len(ds), seed=seed, shuffle=True, rank=0, world_size=1)
    return DataLoader(
        ds, batch_size=int(cfg.data.batch_size), sampler=sampler, **loader_kwargs(cfg)
    )


def finetune_classifier(
    method: Any, dm: Any, labelled: Sequence[int] | None = None
) -> tuple[MCAENet, dict[str, float | int]]:
    """Finetune a decoder-less copy; select on validation loss; test once.

    With a run directory, the phase's files go to ``<run>/finetune/``
    (:mod:`selfcaps.engine.finetune_runs`).

    Args:
        method: The :class:`~selfcaps.methods.mcae.MCAE` method (pretrained).
        dm: The run's data.
        labelled: Train on these images of the training split only (label-efficiency
            protocol, :func:`labelled_indices`); validation and test stay whole.

    Returns:
        The finetuned classifier (selected epoch, eval mode) and the results of
        :func:`selfcaps.eval.finetune`.
    """
    cfg = method.cfg
    net = classifier(method)
    train = dm.train_dataloader() if labelled is None else labelled_loader(cfg, dm, labelled)
    out = method.run_dir / "finetune" if method.run_dir is not None else None
    classes = method.info.num_classes
    result = finetune(
        net,
        classes,
        classes,
        train,
        dm.eval_loader("val"),
        dm.eval_loader("test"),
        epochs=int(cfg.eval.finetune_epochs),
        lr=float(cfg.eval.finetune_lr),
        weight_decay=float(cfg.optim.weight_decay),
        batch_size=int(cfg.data.batch_size),
        head=nn.Identity(),
        loss_fn=class_nll,
        select="val_loss",
        optimizer_fn=finetune_optimizer(cfg, len(train)),
        trainer_kwargs=finetune_trainer_kwargs(cfg, out),
        seed=mix_seed(cfg.seed, _FINETUNE_SALT) % 2**31,
        deterministic=bool(cfg.trainer.deterministic),
        progress_bar=bool(cfg.trainer.progress_bar),
    )
    net.eval()
    if out is not None:
        config = {**classifier_config(method), "method": method.name}
        save_finetuned(
            out,
            net.state_dict(),
            config,
            epoch=int(result["best_epoch"]),
            selected_on="min val_loss",
        )
    return net, result
