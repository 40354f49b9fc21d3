"""Supervised fine-tuning of a pretrained backbone plus a classifier head, with Lightning.

The whole network (backbone and head) is trained with AdamW and a cosine learning
rate schedule over ``epochs`` (one step per epoch), or with the optimiser an
``optimizer_fn`` returns, in training mode (BatchNorm updates its statistics, dropout
drops) whatever mode the backbone was given in: a network reloaded for evaluation is in
``eval()`` mode, and Lightning keeps the modes it finds. After every epoch the
validation top-1 and loss are measured; the state with the best top-1 (or, with
``select="val_loss"``, the lowest loss; the earliest on ties) is kept in memory, on the
CPU. After training that state is loaded back, and the test split is evaluated once, with
it. The test split never influences training or selection.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from selfcaps.engine.progress import RunProgressBar
from selfcaps.eval._loaders import Data, as_loader, images_and_targets
from selfcaps.eval.metrics import topk_correct

__all__ = ["FinetuneModule", "finetune"]

LossFn = Callable[[Any, Tensor], Tensor]
ScoreFn = Callable[[Any], Tensor]
OptimizerFn = Callable[[L.LightningModule], Any]
Selection = Literal["val_top1", "val_loss"]


def _logits(outputs: Tensor) -> Tensor:
    return outputs


class FinetuneModule(L.LightningModule):
    """``head(backbone(x))`` trained end to end; remembers the best validation state.

    Args:
        backbone: The pretrained network.
        head: Maps ``backbone(x)`` to the classifier's outputs.
        lr: AdamW learning rate (peak of the cosine schedule).
        weight_decay: AdamW weight decay (all parameters).
        epochs: Length of the cosine schedule.
        loss_fn: ``loss_fn(outputs, targets)``; default cross-entropy on logits.
        score_fn: ``score_fn(outputs)`` gives class scores ``(B, C)`` for accuracy
            (larger is better); default: the outputs themselves.
        select: Keep the epoch with the highest ``"val_top1"`` or the lowest ``"val_loss"``.
        optimizer_fn: ``optimizer_fn(module)`` returns what ``configure_optimizers``
            returns (optimiser and schedule); default AdamW with a cosine schedule.

    Attributes:
        val_top1_history: Validation top-1 (percent) of every validation epoch.
        val_loss_history: Mean validation loss of every validation epoch.
        best_val_top1: Validation top-1 of the selected epoch.
        best_val_loss: Validation loss of the selected epoch.
        best_epoch: The selected epoch (0-based, as Lightning counts).
        best_state: A CPU copy of the state dict at that epoch.
        test_metrics: ``{"top1", "top5"}`` of the last test run.
    """

    def __init__(
        self,
        backbone: nn.Module,
        head: nn.Module,
        *,
        lr: float,
        weight_decay: float,
        epochs: int,
        loss_fn: LossFn | None = None,
        score_fn: ScoreFn | None = None,
        select: Selection = "val_top1",
        optimizer_fn: OptimizerFn | None = None,
    ) -> None:
        super().__init__()
        if select not in ("val_top1", "val_loss"):
            raise ValueError(f"select must be 'val_top1' or 'val_loss', got {select!r}")
        self.select, self.optimizer_fn = select, optimizer_fn
        self.backbone, self.head = backbone, head
        self.lr, self.weight_decay, self.epochs = lr, weight_decay, epochs
        self.loss_fn = loss_fn if loss_fn is not None else F.cross_entropy
        self.score_fn = score_fn if score_fn is not None else _logits
        self.val_top1_history: list[float] = []
        self.val_loss_history: list[float] = []
        self.best_val_top1 = float("-inf")
        self.best_val_loss = float("inf")
        self.best_epoch = -1
        self.best_state: dict[str, Tensor] | None = None
        self.test_metrics: dict[str, float] = {}
        self._tally = torch.zeros(3, dtype=torch.long)  # top-1 hits, top-5 hits, samples
        self._loss_sum = torch.zeros((), dtype=torch.float64)  # sum of per-batch mean * size

    def forward(self, x: Tensor) -> Any:
        """``head(backbone(x))``."""
        return self.head(self.backbone(x))

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        """Loss of one training batch."""
        x, y = images_and_targets(batch)
        loss = self.loss_fn(self(x), y)
        self.log("train_loss", loss, on_step=False, on_epoch=True, batch_size=len(y))
        return loss

    def _evaluation_step(self, batch: Any, stage: str) -> None:
        x, y = images_and_targets(batch)
        outputs = self(x)
        loss = self.loss_fn(outputs, y)
        self.log(f"{stage}_loss", loss, on_epoch=True, batch_size=len(y))
        self._loss_sum += loss.detach().double().cpu() * len(y)
        hits = topk_correct(self.score_fn(outputs), y, ks=(1, 5))
        self._tally += torch.tensor([hits["top1"], hits["top5"], len(y)])

    def _accuracies(self) -> dict[str, float]:
        top1, top5, n = self.trainer.strategy.reduce(self._tally.to(self.device), reduce_op="sum")
        loss_sum = self.trainer.strategy.reduce(self._loss_sum.to(self.device), reduce_op="sum")
        self._tally = torch.zeros(3, dtype=torch.long)
        self._loss_sum = torch.zeros((), dtype=torch.float64)
        return {
            "top1": 100.0 * int(top1) / int(n),
            "top5": 100.0 * int(top5) / int(n),
            "loss": float(loss_sum) / int(n),
        }

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        """Count top-1/top-5 hits of one validation batch."""
        self._evaluation_step(batch, "val")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        """Count top-1/top-5 hits of one test batch."""
        self._evaluation_step(batch, "test")

    def on_validation_epoch_end(self) -> None:
        """Log validation accuracy and keep the state if it is the best so far."""
        accuracies = self._accuracies()
        loss = accuracies.pop("loss")
        if self.trainer.sanity_checking:
            return
        self.log_dict({f"val_{key}": value for key, value in accuracies.items()})
        self.val_top1_history.append(accuracies["top1"])
        self.val_loss_history.append(loss)
        if self.select == "val_loss":
            better = loss < self.best_val_loss
        else:
            better = accuracies["top1"] > self.best_val_top1
        if better:
            self.best_val_top1, self.best_val_loss = accuracies["top1"], loss
            self.best_epoch = self.current_epoch
            self.best_state = {
                k: v.detach().to("cpu", copy=True) for k, v in self.state_dict().items()
            }

    def on_test_epoch_end(self) -> None:
        """Store and log the test accuracy."""
        self.test_metrics = self._accuracies()
        self.test_metrics.pop("loss")
        self.log_dict({f"test_{key}": value for key, value in self.test_metrics.items()})

    def configure_optimizers(self) -> Any:
        """``optimizer_fn(self)`` if given, else AdamW with a cosine schedule over ``epochs``."""
        if self.optimizer_fn is not None:
            return self.optimizer_fn(self)
        opt = torch.optim.AdamW(self.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=self.epochs)
        return {"optimizer": opt, "lr_scheduler": schedule}


def finetune(
    backbone: nn.Module,
    feature_dim: int,
    num_classes: int,
    train_data: Data,
    val_data: Data,
    test_data: Data,
    *,
    epochs: int,
    lr: float,
    weight_decay: float,
    batch_size: int,
    head: nn.Module | None = None,
    loss_fn: LossFn | None = None,
    score_fn: ScoreFn | None = None,
    select: Selection = "val_top1",
    optimizer_fn: OptimizerFn | None = None,
    trainer_kwargs: dict[str, Any] | None = None,
    seed: int = 0,
    deterministic: bool = False,
    progress_bar: bool = False,
) -> dict[str, float | int]:
    """Fine-tune ``backbone`` with a classifier head; select the epoch on validation; test once.

    ``backbone`` is trained in place and holds the selected (best-validation)
    weights afterwards. A capsule classifier plugs in through the hooks, e.g.
    ``head=nn.Identity()``, ``score_fn=caps_length`` and ``loss_fn=lambda v, y:
    margin_loss(caps_length(v), y)``.

    Args:
        backbone: Network whose output ``backbone(x)`` feeds the head.
        feature_dim: Size of the flattened ``backbone(x)`` (for the default head).
        num_classes: Number of classes.
        train_data: Dataset of ``(image, target)`` (shuffled with ``seed``) or a DataLoader.
        val_data: Validation split (carved from the training set), for selecting the epoch.
        test_data: Test split, evaluated once with the selected state.
        epochs: Training epochs (also the length of the cosine schedule); 0: no training,
            the network as given is validated and tested (``best_epoch`` -1).
        lr: Peak AdamW learning rate.
        weight_decay: AdamW weight decay.
        batch_size: Batch size for splits given as datasets.
        head: Receives ``backbone(x)`` unchanged; default ``Flatten`` then
            ``nn.Linear(feature_dim, num_classes)``.
        loss_fn: ``loss_fn(head_outputs, targets)``; default cross-entropy.
        score_fn: ``score_fn(head_outputs)`` -> class scores ``(B, C)``; default identity.
        select: Select the epoch with the highest ``"val_top1"`` or lowest ``"val_loss"``.
        optimizer_fn: ``optimizer_fn(module)`` returns the optimiser (and schedule) as
            ``configure_optimizers`` would; default AdamW(``lr``, ``weight_decay``) + cosine.
        trainer_kwargs: Extra ``lightning.Trainer`` arguments, overriding the defaults
            (CPU, one device, no checkpoints, no logger, no progress bar, no sanity
            validation). Pass a ``logger`` to record ``train_loss``, ``val_loss``,
            ``val_top1``, ``val_top5`` per epoch. ``max_epochs`` is set by ``epochs``;
            ``callbacks`` run beside the progress bar (they do not replace it).
        seed: Seeds everything (``lightning.seed_everything``), which makes the head's
            initialisation and the shuffling reproducible.
        deterministic: Passed to the Trainer (``torch.use_deterministic_algorithms``).
        progress_bar: Show Lightning's progress bar.

    Returns:
        ``test_top1``, ``test_top5`` (percent, top-``min(5, num_classes)``),
        ``best_val_top1`` and ``best_val_loss`` (of the selected epoch), ``best_epoch``
        (0-based) and ``last_val_top1``.

    Examples:
        >>> from torch.utils.data import TensorDataset
        >>> g = torch.Generator().manual_seed(0)
        >>> y = torch.arange(48) % 2
        >>> x = torch.randn(48, 1, 2, 2, generator=g) + 2 * y[:, None, None, None]
        >>> data = [TensorDataset(x[i::3], y[i::3]) for i in range(3)]
        >>> result = finetune(nn.Flatten(), 4, 2, *data, epochs=3, lr=0.1,
        ...                   weight_decay=0.0, batch_size=8)
        >>> sorted(result)
        ['best_epoch', 'best_val_loss', 'best_val_top1', 'last_val_top1', 'test_top1', 'test_top5']
    """
    trainer_kwargs = dict(trainer_kwargs or {})
    if "max_epochs" in trainer_kwargs:
        raise ValueError("trainer_kwargs: max_epochs is set by epochs=")
    L.seed_everything(seed, workers=True, verbose=False)
    if head is None:
        head = nn.Sequential(nn.Flatten(1), nn.Linear(feature_dim, num_classes))
    module = FinetuneModule(
        backbone,
        head,
        lr=lr,
        weight_decay=weight_decay,
        epochs=epochs,
        loss_fn=loss_fn,
        score_fn=score_fn,
        select=select,
        optimizer_fn=optimizer_fn,
    )
    settings: dict[str, Any] = {
        "accelerator": "cpu",
        "devices": 1,
        "enable_checkpointing": False,
        "logger": False,
        "enable_progress_bar": progress_bar,
        "enable_model_summary": False,
        "num_sanity_val_steps": 0,
        "deterministic": deterministic,
    }
    callbacks = [RunProgressBar()] if progress_bar else []
    callbacks += list(trainer_kwargs.pop("callbacks", None) or [])
    trainer = L.Trainer(max_epochs=epochs, callbacks=callbacks, **{**settings, **trainer_kwargs})
    if epochs == 0:  # no training: the given state is the selected one
        trainer.validate(module, dataloaders=as_loader(val_data, batch_size), verbose=False)
        module.best_epoch = -1
    else:
        module.train()  # Lightning trains modules in the mode it finds them in
        trainer.fit(
            module,
            train_dataloaders=as_loader(train_data, batch_size, shuffle=True, seed=seed),
            val_dataloaders=as_loader(val_data, batch_size),
        )
    if module.best_state is None:
        raise RuntimeError("no validation epoch ran, so no epoch could be selected")
    module.load_state_dict(module.best_state)
    trainer.test(module, dataloaders=as_loader(test_data, batch_size), verbose=False)
    return {
        "test_top1": module.test_metrics["top1"],
        "test_top5": module.test_metrics["top5"],
        "best_val_top1": module.best_val_top1,
        "best_val_loss": module.best_val_loss,
        "best_epoch": module.best_epoch,
        "last_val_top1": module.val_top1_history[-1],
    }
