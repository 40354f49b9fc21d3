"""What every method's LightningModule shares.

Configuration, optimiser and schedule, non-finite guards, the online
weighted-kNN monitor, figures and checkpointed state.

A method subclasses :class:`CapsuleMethod` and provides the network
(:meth:`build_network`), its transforms (:meth:`build_transforms`), its loss
(:meth:`compute_loss`), the features it is evaluated on (:meth:`features`) and
its final evaluation (:meth:`evaluate`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, ParamSpec, TypeVar

import lightning as L
import torch
from omegaconf import DictConfig, OmegaConf
from torch import Tensor, nn
from torch.utils.data import Dataset

from selfcaps.data import DatasetInfo, dataset_info
from selfcaps.data.datamodule import mix_seed, on_accelerator
from selfcaps.eval import knn_evaluate
from selfcaps.methods.optimizers import build_optimizer
from selfcaps.methods.retrieval import retrieval_figure
from selfcaps.methods.schedules import cosine_schedule
from selfcaps.records import MethodRecord, get_record
from selfcaps.viz.figures import Figure

__all__ = ["CapsuleMethod", "NonFiniteError", "build_optimizer"]

P = ParamSpec("P")
R = TypeVar("R")


class NonFiniteError(FloatingPointError):
    """A loss or gradient that is NaN or infinite; the message names the step and quantity."""


def _gather_uneven(module: L.LightningModule, t: Tensor) -> Tensor:
    """All-gather tensors whose first dimension differs across processes."""
    if module.trainer is None or module.trainer.world_size == 1:
        return t
    n = torch.tensor([t.shape[0]], device=t.device)
    sizes = module.all_gather(n).flatten().tolist()
    pad = torch.zeros((max(sizes) - t.shape[0], *t.shape[1:]), dtype=t.dtype, device=t.device)
    gathered = module.all_gather(torch.cat([t, pad]))  # (world, max, ...)
    return torch.cat([gathered[r, :s] for r, s in enumerate(sizes)])


def _dataset_info(data: Any) -> DatasetInfo:
    """The dataset's static facts, with the configured size for image folders."""
    info = dataset_info(data.name, root=data.root)
    if info.image_size is None:
        if not data.get("image_size"):
            raise ValueError(
                f"data.image_size: {data.name} holds images of any size; set the size to "
                "load them at, e.g. data.image_size=64"
            )
        info = dataclasses.replace(info, image_size=(int(data.image_size),) * 2)
    return info


class CapsuleMethod(L.LightningModule):
    """Base class of the methods (see the module docstring).

    Args:
        cfg: The full run configuration (a plain dict or ``DictConfig``).
    """

    name: ClassVar[str] = ""
    #: Feature kind used by the online kNN monitor (a key of :meth:`features`).
    monitor_feature: ClassVar[str] = "backbone"
    #: Logged validation metric that selects ``best.ckpt``, and ``"max"`` or ``"min"``.
    monitor_metric: ClassVar[tuple[str, str]] = ("val_knn_top1", "max")
    #: Whether validation runs the online kNN monitor. ``False``: the validation loaders are
    #: ``[val]`` only (no feature bank) and the method logs its own ``monitor_metric``.
    knn_monitor: ClassVar[bool] = True

    @classmethod
    def record(cls) -> MethodRecord:
        """The method's record (:mod:`selfcaps.records`): flags, presets, bench keys, claim."""
        return get_record(cls.name)

    def __init__(self, cfg: dict | DictConfig) -> None:
        super().__init__()
        plain = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg
        self.save_hyperparameters({"cfg": plain})
        self.cfg = OmegaConf.create(plain)
        self.info = _dataset_info(self.cfg.data)
        self.net = self.build_network()
        if self.cfg.trainer.compile:  # forward only: see compiled() for the rest
            self.net = torch.compile(self.net, mode=self.compile_mode)  # type: ignore[assignment]
        self.nonfinite_skipped = 0
        self._train_batches_seen = 0
        #: The run directory, set by the CLI before evaluation; methods that write
        #: files of their own (e.g. a second training phase) put them under it.
        self.run_dir: Path | None = None
        self._val_store: dict[int, list[tuple[Tensor, Tensor]]] = {0: [], 1: []}

    def example_input(self, n: int = 1) -> Tensor:
        """``n`` blank images of the dataset through the method's evaluation transform.

        The shape the network sees, which the transform may change (SparseCaps
        places 28x28 digits in a 40x40 canvas); used to probe feature sizes and FLOPs.
        """
        _, eval_tf = self.build_transforms()
        blank = torch.zeros(self.info.channels, *self.info.image_size, dtype=torch.uint8)
        return torch.stack([eval_tf(blank)] * n)

    # ----------------------------------------------------------------- to implement
    def build_network(self) -> nn.Module:
        """The network (saved as ``model.safetensors``)."""
        raise NotImplementedError

    def build_transforms(self) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
        """``(train_transform, eval_transform)`` for this method and dataset."""
        raise NotImplementedError

    def training_dataset(self, train: Dataset) -> Dataset:
        """The dataset training batches are drawn from, given the raw training split.

        The default is the split itself; a method may expand it (SparseCaps'
        ``augment.shift_order=exhaustive``). Evaluation and the kNN bank always read
        the split.
        """
        return train

    def compute_loss(self, batch: Any) -> tuple[Tensor, dict[str, Tensor]]:
        """``(loss, extra metrics to log)`` for a training batch."""
        raise NotImplementedError

    def features(self, x: Tensor) -> dict[str, Tensor]:
        """Named features ``(B, D)`` of a batch of evaluation images (model in eval mode)."""
        raise NotImplementedError

    @torch.no_grad()
    def feature_kinds(self) -> list[str]:
        """The names of :meth:`features`, in its order (one blank image, in eval mode)."""
        was_training = self.training
        self.eval()
        try:
            return list(self.features(self.example_input()))
        finally:
            self.train(was_training)

    def evaluate(self, dm: Any) -> dict[str, float | int | str]:
        """Final evaluation on the test split; returns flat metrics (accuracies in percent)."""
        raise NotImplementedError

    def summary_line(self, metrics: dict[str, Any]) -> str | None:
        """One plain sentence that ends the console summary of a run (``None``: nothing)."""
        return None

    def model_config(self) -> dict[str, Any]:
        """What rebuilds :attr:`net` via ``selfcaps.create_model`` (written to config.json)."""
        kwargs = {k: v for k, v in OmegaConf.to_container(self.cfg.model).items() if k != "name"}
        return {"model": self.cfg.model.name, "model_kwargs": kwargs}

    @classmethod
    def validate_config(cls, cfg: DictConfig) -> None:
        """Raise a ``ValueError`` naming bad keys (the message of a ``ConfigError``)."""

    # ------------------------------------------------------------------ training
    @property
    def network(self) -> nn.Module:
        """The uncompiled network (what is saved and evaluated)."""
        return getattr(self.net, "_orig_mod", self.net)

    @property
    def compile_mode(self) -> str | None:
        """``torch.compile``'s mode: ``trainer.compile_mode``, else by the device.

        On a CUDA GPU ``reduce-overhead``: the compiled step is captured as a CUDA graph
        and replayed with one launch (shapes are static and nothing in it reads the
        device on the host). Elsewhere torch's default.
        """
        mode = self.cfg.trainer.get("compile_mode")
        if mode is not None:
            return str(mode)
        return "reduce-overhead" if on_accelerator(self.cfg) and torch.cuda.is_available() else None

    def compiled(self, fn: Callable[P, R]) -> Callable[P, R]:
        """``fn`` as the loss should call it: through ``torch.compile`` under ``trainer.compile``.

        The constructor compiles :attr:`net`, which covers ``self.net(x)`` (its
        ``forward``) only: ``self.net.other_method`` and anything reached through
        :attr:`network` run uncompiled. A loss that calls another method of the network
        (``self.network.forward_pretrain``), a submodule, or a function of the network's
        parts calls it as ``self.compiled(fn)(...)``; each callable is compiled once.
        Without ``trainer.compile``, ``fn`` itself is returned.

        Args:
            fn: A bound method, an ``nn.Module`` or a function.
        """
        if not self.cfg.trainer.compile:
            return fn
        cache: dict[Any, Any] = self.__dict__.setdefault("_compiled_calls", {})
        if fn not in cache:
            cache[fn] = torch.compile(fn, mode=self.compile_mode)
        return cache[fn]

    def training_step(self, batch: Any, batch_idx: int) -> Tensor | None:
        """The loss, logged on the device; its finiteness is read once, after backward.

        No value is read on the host here: :meth:`on_after_backward` checks the loss and
        every gradient together with one read per step (see :meth:`finite_step`).
        """
        loss, logs = self.compute_loss(batch)
        self._step_loss = loss.detach()
        bs = self._batch_size(batch)
        self.log(
            "train_loss", loss.detach(), on_step=False, on_epoch=True, batch_size=bs, sync_dist=True
        )
        self.log("loss", loss.detach(), prog_bar=True, logger=False, on_step=True, on_epoch=False)
        for k, v in logs.items():
            self.log(
                k,
                v.detach() if isinstance(v, Tensor) else v,
                on_step=False,
                on_epoch=True,
                batch_size=bs,
                sync_dist=True,
            )
        return loss

    @staticmethod
    def _batch_size(batch: Any) -> int:
        x = batch[0]
        while isinstance(x, list | tuple):
            x = x[0]
        return int(x.shape[0])

    def on_after_backward(self) -> None:
        """Check the loss and the gradients (one host read); stop or skip the step if not finite."""
        self.finite_step(getattr(self, "_step_loss", None))

    def finite_step(self, loss: Tensor | None) -> bool:
        """``True`` if ``loss`` and every gradient are finite; else stop, or skip the step.

        One flag is computed on the device (the max-norm of every gradient, one fused op per
        dtype on an accelerator, and the loss) and read once: the only host synchronisation
        of a training step. Only when it is not finite is the cause looked up (the loss, or
        the first parameter whose gradient is not finite) to name it. With
        ``trainer.skip_nonfinite`` the gradients are dropped, so the optimiser leaves every
        parameter as it was, and the step is counted; otherwise :class:`NonFiniteError`.

        Args:
            loss: The step's loss (``None``: gradients only).

        Returns:
            Whether the step is finite (``False``: skipped).
        """
        named = [(n, p) for n, p in self.named_parameters() if p.grad is not None]
        flags = [torch.isfinite(loss).reshape(1)] if loss is not None else []
        if named:
            norms = torch._foreach_norm([p.grad for _, p in named], float("inf"))
            flags.append(torch.isfinite(torch.stack([n.float() for n in norms])).all().reshape(1))
        if not flags or bool(torch.cat(flags).all()):
            return True
        where = f"step {self.global_step} (epoch {self.current_epoch + 1})"
        if loss is not None and not bool(torch.isfinite(loss)):
            msg = f"{where}: loss is {loss.item()}"
        else:
            bad = [n for n, p in named if not bool(torch.isfinite(p.grad).all())]
            msg = f"{where}: gradient of {bad[0]} is not finite ({len(bad)} parameters affected)"
        if not self.cfg.trainer.skip_nonfinite:
            raise NonFiniteError(
                f"{msg}; stopping. The last good checkpoint is kept. "
                "Use trainer.skip_nonfinite=true (--skip-nonfinite) to skip such steps."
            )
        for p in self.parameters():  # optimisers skip parameters without gradients
            p.grad = None
        self.nonfinite_skipped += 1
        self.log("nonfinite_skipped", float(self.nonfinite_skipped), on_epoch=True)
        return False

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Apply a batch training transform (e.g. ``BatchSimCLRTransform``) on the batch's device.

        Its randomness comes from a generator seeded by (seed, epoch, batch, rank), so
        a resumed run sees exactly the views the uninterrupted run saw.
        """
        tf = self._batch_transform
        if tf is None or self.trainer is None or not self.trainer.training:
            return batch
        x, y = batch
        g = torch.Generator().manual_seed(
            mix_seed(self.cfg.seed, self.current_epoch, self._train_batches_seen, self.global_rank)
        )
        self._train_batches_seen += 1
        return tf(x, g), y

    @property
    def _batch_transform(self) -> Callable[..., Any] | None:
        dm = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        if dm is None or not getattr(dm, "batched_train_transform", False):
            return None
        return dm.train_transform

    def on_train_epoch_start(self) -> None:
        """Reseed the global RNG from (seed, epoch, rank).

        An epoch's randomness then never depends on what ran before, so resuming
        from a checkpoint reproduces the uninterrupted run.
        """
        seed = mix_seed(self.cfg.seed, self.current_epoch, self.global_rank, 0x7AA1)
        torch.manual_seed(seed)
        self._train_batches_seen = 0

    def configure_optimizers(self) -> Any:
        """Optimiser and schedule from the ``optim`` section."""
        o = self.cfg.optim
        opt = build_optimizer([p for p in self.parameters() if p.requires_grad], o)
        sched = self._scheduler(opt)
        if sched is None:
            return opt
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": o.interval}}

    def _scheduler(self, opt: torch.optim.Optimizer) -> Any:
        o = self.cfg.optim
        if o.scheduler == "none":
            return None
        if o.scheduler == "step":
            return torch.optim.lr_scheduler.StepLR(opt, step_size=o.step_size, gamma=o.gamma)
        if o.scheduler == "multistep":
            return torch.optim.lr_scheduler.MultiStepLR(
                opt, milestones=list(o.milestones), gamma=o.gamma
            )
        if o.scheduler == "cosine":
            total = (
                self.trainer.estimated_stepping_batches
                if o.interval == "step"
                else self.trainer.max_epochs
            )
            total = int(total) if total and math.isfinite(total) else 1
            steps = int(self.cfg.trainer.max_steps)  # a budget the Trainer does not see
            if o.interval == "step" and steps > 0:
                total = min(total, steps)
            return cosine_schedule(opt, total, o.get("warmup"))
        raise ValueError(
            f"optim.scheduler: unknown schedule {o.scheduler!r}; "
            "valid: none, cosine, step, multistep"
        )

    # ------------------------------------------------------- online kNN monitor
    def monitor_features(self, x: Tensor) -> Tensor:
        """The feature the online kNN monitor uses (``features(x)[monitor_feature]``)."""
        return self.features(x)[self.monitor_feature]

    def on_validation_epoch_start(self) -> None:
        """Start collecting monitor features."""
        self._val_store = {0: [], 1: []}

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Collect monitor features of the bank (loader 0) and the validation split (loader 1)."""
        x, y = batch
        self._val_store[dataloader_idx].append((self.monitor_features(x).float(), y))

    def on_validation_epoch_end(self) -> None:
        """Weighted kNN of the validation split against the bank; logs ``val_knn_top1/5``."""
        if not self._val_store[0] or not self._val_store[1]:
            return
        bank = [torch.cat(t) for t in zip(*self._val_store[0], strict=True)]
        val = [torch.cat(t) for t in zip(*self._val_store[1], strict=True)]
        bank_f, bank_y = (_gather_uneven(self, t) for t in bank)
        val_f, val_y = (_gather_uneven(self, t) for t in val)
        m = self.cfg.monitor
        res = knn_evaluate(
            bank_f,
            bank_y,
            val_f,
            val_y,
            self.info.num_classes,
            k=min(m.knn_k, bank_f.shape[0]),
            t=m.knn_t,
        )
        self.log("val_knn_top1", float(res["top1"]), prog_bar=True, sync_dist=False)
        self.log("val_knn_top5", float(res["top5"]), sync_dist=False)
        self._val_store = {0: [], 1: []}

    # ------------------------------------------------------------------- figures
    def figures(self, dm: Any) -> dict[str, Figure]:
        """Figures of a finished run, by file stem (rendered by ``selfcaps.viz``)."""
        return {"retrieval": retrieval_figure(self, dm)}

    # --------------------------------------------------------- checkpointed state
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Method state that is not a parameter, plus RNG states and the batch counter."""
        checkpoint["selfcaps"] = {
            "nonfinite_skipped": self.nonfinite_skipped,
            "torch_rng_state": torch.get_rng_state(),
            "train_batches_seen": self._train_batches_seen,
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Restore what :meth:`on_save_checkpoint` stored (the RNG state at :meth:`on_train_start`).

        Lightning draws from the global RNG between loading and training (creating the
        data iterator), so the RNG state is set when training starts; a run resumed in
        the middle of an epoch then continues that epoch's random stream exactly (one
        resumed at an epoch's start reseeds it in :meth:`on_train_epoch_start` anyway).
        """
        state = checkpoint.get("selfcaps", {})
        self.nonfinite_skipped = int(state.get("nonfinite_skipped", 0))
        self._train_batches_seen = int(state.get("train_batches_seen", 0))
        self._rng_to_restore = state.get("torch_rng_state")

    def on_train_start(self) -> None:
        """Set the RNG state of the checkpoint being resumed from, if any."""
        rng = getattr(self, "_rng_to_restore", None)
        if rng is not None:
            torch.set_rng_state(rng)
            self._rng_to_restore = None
