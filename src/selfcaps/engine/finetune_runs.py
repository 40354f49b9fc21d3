"""A supervised finetuning phase inside a run: its Trainer settings and the files it leaves.

A method that finetunes a classifier after pretraining (MCAE's class capsules) gives its
network, data and optimiser to :func:`selfcaps.eval.finetune`; this module holds the run
machinery around that call, so that the method assembles no Trainer, logger or checkpoint
IO itself. A finetuning phase writes, under its own directory (``<run>/finetune/``):

- ``metrics.csv``: ``train_loss``, ``val_loss``, ``val_top1``, ... per epoch
  (:class:`~selfcaps.engine.csv_logs.RunCSVLogger`);
- ``checkpoints/last.ckpt``: written at the end of every training epoch;
- ``checkpoints/best.ckpt``: the selected epoch's weights, with ``epoch`` and
  ``selected_on`` (:func:`save_finetuned`);
- ``model.safetensors`` and ``config.json``: the selected network, loadable without
  Lightning (:func:`selfcaps.models.weights.load_weights`).

Every file is written atomically (:class:`~selfcaps.engine.checkpoints.AtomicCheckpointIO`,
:func:`~selfcaps.engine.checkpoints.save_weights`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import ModelCheckpoint
from torch import Tensor

from selfcaps.engine.checkpoints import AtomicCheckpointIO, save_weights
from selfcaps.engine.csv_logs import RunCSVLogger

__all__ = ["finetune_trainer_kwargs", "save_finetuned"]


def finetune_trainer_kwargs(cfg: Any, out: Path | None) -> dict[str, Any]:
    """``lightning.Trainer`` arguments of a finetuning phase (``trainer_kwargs`` of ``finetune``).

    The run's ``trainer.accelerator``, ``trainer.precision`` and
    ``trainer.log_every_n_steps``; the data loaders are the caller's, so Lightning adds
    no distributed sampler. With ``out``, the phase logs to ``out/metrics.csv`` and
    writes ``out/checkpoints/last.ckpt`` after every training epoch, atomically.

    Args:
        cfg: Run configuration (its ``trainer`` section).
        out: The phase's directory (e.g. ``<run>/finetune``); None: no files (no logger,
            no checkpoint; what :func:`selfcaps.eval.finetune` does by default).

    Returns:
        Keyword arguments for ``lightning.Trainer``; they override ``finetune``'s
        defaults (``callbacks`` are added to its progress bar).
    """
    t = cfg.trainer
    kwargs: dict[str, Any] = {
        "accelerator": t.accelerator,
        "precision": t.precision,
        "log_every_n_steps": int(t.log_every_n_steps),
        "use_distributed_sampler": False,
    }
    if out is None:
        return kwargs
    return {
        **kwargs,
        "default_root_dir": str(out),
        "logger": RunCSVLogger(out),
        "enable_checkpointing": True,
        "callbacks": [
            ModelCheckpoint(
                dirpath=out / "checkpoints",
                save_top_k=0,
                save_last=True,
                every_n_epochs=1,
                save_on_train_epoch_end=True,
            )
        ],
        "plugins": [AtomicCheckpointIO()],
    }


def save_finetuned(
    out: Path,
    state_dict: Mapping[str, Tensor],
    config: dict[str, Any],
    *,
    epoch: int,
    selected_on: str,
    prefix: str = "backbone.",
) -> None:
    """Write a finetuned network's weights and its selected checkpoint, each atomically.

    ``out/model.safetensors`` + ``out/config.json`` (the network alone, rebuilt from
    ``config`` without Lightning) and ``out/checkpoints/best.ckpt``: ``{"epoch",
    "state_dict", "selected_on"}``, the state dict's keys prefixed as in the
    LightningModule that trained it (``selfcaps.eval.finetune`` holds the network as
    ``backbone``, hence the default).

    Args:
        out: The phase's directory (as given to :func:`finetune_trainer_kwargs`).
        state_dict: The selected network's weights.
        config: What rebuilds the network (``model`` name and kwargs, ``method``, ...),
            written as ``config.json``.
        epoch: The selected epoch (0-based, as Lightning counts).
        selected_on: How it was selected, e.g. ``"min val_loss"``.
        prefix: Prefix of every key in ``best.ckpt``'s ``state_dict``.
    """
    save_weights(out / "model.safetensors", state_dict, config)
    best = {
        "epoch": int(epoch),
        "state_dict": {f"{prefix}{k}": v for k, v in state_dict.items()},
        "selected_on": selected_on,
    }
    AtomicCheckpointIO().save_checkpoint(best, out / "checkpoints" / "best.ckpt")
