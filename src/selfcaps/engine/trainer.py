"""The training engine: a Lightning ``Trainer`` configured from a run configuration.

Lightning does the loop, DDP, precision, checkpoint/resume, logging and the
progress bar; this module only wires them to the run directory of DESIGN.md:
``checkpoints/last.ckpt`` (every epoch, for resuming), ``checkpoints/best.ckpt``
(the best value of the method's ``monitor_metric``), ``metrics.csv``
(:mod:`selfcaps.engine.csv_logs`, rewritten atomically), ``tensorboard/`` (append-only event
files).
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.loggers import TensorBoardLogger
from torch import Tensor

from selfcaps.engine.checkpoints import AtomicCheckpointIO
from selfcaps.engine.clock import ElapsedTime
from selfcaps.engine.csv_logs import RunCSVLogger
from selfcaps.engine.progress import RunProgressBar
from selfcaps.engine.stopping import StopSignals, agree

__all__ = [
    "STOP_REASONS",
    "LastCheckpoint",
    "build_trainer",
    "epoch_complete",
    "resume_position",
]


# A run resumed in the middle of an epoch starts its data where the checkpoint was written
# (``resume_at``, :meth:`SelfcapsDataModule.resume_at`); Lightning cannot see that and warns.
warnings.filterwarnings(
    "ignore", message="You're resuming from a checkpoint that ended before the epoch ended"
)
# The run directory of a resumed run holds its checkpoints: that is the point of it.
warnings.filterwarnings("ignore", message="Checkpoint directory .* exists and is not empty")

#: What can end training, as ``metrics.json``'s ``stopped_by`` records it: the planned
#: ``trainer.epochs`` all trained, a budget that ended training before them, or SIGTERM /
#: SIGINT (:mod:`selfcaps.engine.stopping`).
STOP_REASONS = ("epochs", "max_steps", "max_time", "signal")


class LastCheckpoint(Callback):
    """``last.ckpt``, budgets and stop signals: where training stops, a resume starts exactly.

    ``last.ckpt`` is written at the end of every training epoch (after that epoch's
    validation), every ``trainer.checkpoint_every_n_minutes`` minutes and every
    ``trainer.checkpoint_every_n_steps`` steps at the end of a batch (so that a kill
    inside a long epoch loses no more than that), and where a budget
    (``trainer.max_steps``, ``trainer.max_time``) or a stop signal (SIGTERM, SIGINT;
    :mod:`selfcaps.engine.stopping`) stops training in the middle of an epoch. Every
    write is atomic (temporary file, then ``os.replace``). It holds everything a resume
    needs: weights, optimiser and scheduler, loop progress, callback state (including
    ``best.ckpt``'s score), method state, the RNG state, the position in the epoch's data order
    (:func:`resume_position`) and, in the middle of an epoch, the running sums behind the
    epoch's logged means (so that its ``metrics.csv`` row is exact too).

    Lightning's own ``max_steps`` is not used: it makes the fit loop "iteration based",
    and a checkpoint written at the end of an epoch is then restored as an epoch that
    still has to end; the resumed run replays that end (an extra logged step, the
    epoch-end hooks twice, and the epoch counter that seeds the data order one ahead, so
    the weights diverge). So Lightning always trains by epochs, and this callback ends
    training at the step the budget allows: at the end of a batch, the way Lightning's
    ``max_steps`` would (no validation of a part of an epoch), after writing
    ``last.ckpt`` there; resuming continues at the next batch of that epoch.

    Under DDP the processes agree at every batch end (one all-reduce,
    :func:`~selfcaps.engine.stopping.agree`): a signal received by any process stops
    all of them after the same batch; the clocks of the time budget and of the
    periodic checkpoint are rank 0's.

    Args:
        path: The checkpoint file.
        epochs: ``trainer.epochs`` (training always ends after them).
        max_steps: Step budget (-1: none); optimiser steps, counted over all resumes.
        max_minutes: Time budget of this process's training (None: none), in minutes.
        every_n_minutes: Also write ``last.ckpt`` at the first batch end this many
            minutes after the previous write (None: not on the clock).
        every_n_steps: Also write it at every batch end whose step count is a multiple
            of this (None: not by steps).
        stop: The run's stop-signal handlers (None: signals are not watched).
    """

    def __init__(
        self,
        path: Path,
        epochs: int,
        max_steps: int = -1,
        max_minutes: float | None = None,
        every_n_minutes: float | None = None,
        every_n_steps: int | None = None,
        stop: StopSignals | None = None,
    ) -> None:
        self.path, self.epochs = path, int(epochs)
        self.max_steps = int(max_steps)
        self.max_seconds = None if max_minutes is None else 60.0 * float(max_minutes)
        self.every_seconds = None if every_n_minutes is None else 60.0 * float(every_n_minutes)
        self.every_steps = None if every_n_steps is None else int(every_n_steps)
        self.stop = stop
        self._saved_at = time.monotonic()
        #: Why training ended (a :data:`STOP_REASONS` item; None while it runs).
        self.stopped_by: str | None = None
        #: :func:`resume_position` of the last ``last.ckpt`` written (or resumed from).
        self.position: tuple[int, int] = (0, 0)
        self._t0 = time.monotonic()
        #: Seconds of training by earlier processes (from the checkpoint resumed; 0 if none).
        self.seconds_before = 0.0
        self._sums_to_restore: dict[str, list[Tensor]] = {}

    def state_dict(self) -> dict[str, Any]:
        """What a resume needs: stop reason, position, seconds trained over every process.

        The stop reason lets a resumed run that trains no further still report it; the
        seconds become the resumed run's ``train_time_s`` base.
        """
        return {
            "stopped_by": self.stopped_by,
            "position": list(self.position),
            "train_seconds": self.seconds_before + time.monotonic() - self._t0,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (a checkpoint without ``train_seconds``: 0 before)."""
        self.stopped_by = state_dict.get("stopped_by")
        self.position = tuple(state_dict.get("position", self.position))  # type: ignore[assignment]
        self.seconds_before = float(state_dict.get("train_seconds", 0.0))

    def _save(self, trainer: L.Trainer) -> None:
        self.position = resume_position(trainer)
        trainer.save_checkpoint(self.path, weights_only=False)
        self._saved_at = time.monotonic()

    def on_save_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        """Record where a run resumed from this checkpoint starts (:func:`resume_position`)."""
        checkpoint["resume_at"] = list(resume_position(trainer))
        if checkpoint["resume_at"][1] > 0 and trainer.world_size == 1:  # (sums are per process)
            checkpoint["epoch_sums"] = _epoch_sums(trainer)

    def on_load_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        """Keep the resumed epoch's running means, to add them once training logs again."""
        self._sums_to_restore = dict(checkpoint.get("epoch_sums", {}))

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Start the clocks (a resumed run has a new time budget); a spent step budget stops.

        The stop-signal handlers are installed again: Lightning has just replaced the
        SIGTERM handler with its own, which would end the run with exit code 0.
        """
        self._t0 = self._saved_at = time.monotonic()
        self.stopped_by = None
        if self.stop is not None:
            self.stop.install()
            if hasattr(trainer, "_signal_connector"):  # a SIGTERM caught by Lightning's handler
                trainer._signal_connector.received_sigterm = False
        if self.max_steps >= 0 and trainer.global_step >= self.max_steps:
            self.stopped_by = "max_steps"
            trainer.fit_loop.epoch_loop.max_steps = trainer.global_step

    def _decisions(self, trainer: L.Trainer) -> tuple[str | None, bool]:
        """Why training stops after this batch (None: it goes on), and whether to checkpoint.

        Signals are any process's; clocks are rank 0's (they differ between processes).
        """
        now = time.monotonic()
        zero = trainer.is_global_zero
        late = zero and self.max_seconds is not None and now - self._t0 >= self.max_seconds
        due = zero and self.every_seconds is not None and now - self._saved_at >= self.every_seconds
        signum, late, due = _agreed(trainer, [self._signum(), late, due])
        if self.every_steps and trainer.global_step % self.every_steps == 0:
            due = True
        if signum:
            self._note_signal(int(signum))
            return "signal", bool(due)
        if self.max_steps >= 0 and trainer.global_step >= self.max_steps:
            return "max_steps", bool(due)
        return ("max_time" if late else None), bool(due)

    def _signum(self) -> int:
        """The stop signal this process received (0: none)."""
        return 0 if self.stop is None or self.stop.signum is None else self.stop.signum

    def _note_signal(self, signum: int) -> None:
        """Record another process's signal as this one's (for the exit code)."""
        if self.stop is not None and self.stop.signum is None:
            self.stop.signum = signum

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        """Stop (and write ``last.ckpt`` if mid-epoch) when a budget is spent or a signal came.

        Otherwise write ``last.ckpt`` if a periodic checkpoint is due (not at the last
        batch of an epoch: the epoch end writes it anyway).
        """
        if self._sums_to_restore:
            _add_epoch_sums(trainer, self._sums_to_restore)
        if self.stopped_by is not None:
            return
        reason, due = self._decisions(trainer)
        last_batch = batch_idx + 1 >= trainer.num_training_batches
        if reason is None:
            if due and not last_batch:
                self._save(trainer)
            return
        if last_batch and trainer.current_epoch + 1 >= self.epochs:
            return  # the planned epochs end here anyway
        self.stopped_by = reason
        if last_batch:  # validate and write last.ckpt as at any epoch end, then stop
            return
        # End the epoch here as Lightning's max_steps does: no validation of a partial epoch.
        trainer.fit_loop.epoch_loop.max_steps = trainer.global_step
        self._save(trainer)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Write ``last.ckpt`` after a whole epoch (atomically, through the checkpoint IO)."""
        if not epoch_complete(trainer):
            return  # a budget stopped it midway: last.ckpt was written at that batch
        self._save(trainer)
        if self.stopped_by is None and trainer.current_epoch + 1 >= self.epochs:
            self.stopped_by = "epochs"
        if self.stopped_by is None and self.stop is not None:  # a signal during validation
            (signum,) = _agreed(trainer, [self._signum()])
            if signum:
                self._note_signal(int(signum))
                self.stopped_by = "signal"
        if self.stopped_by is not None:
            trainer.should_stop = True


def _agreed(trainer: L.Trainer, local: list[float]) -> list[float]:
    """:func:`~selfcaps.engine.stopping.agree` over the trainer's processes (max of each)."""
    if trainer.world_size == 1:
        return local
    strategy = trainer.strategy
    return agree(
        local, lambda t: strategy.reduce(t.to(strategy.root_device), reduce_op="max").cpu()
    )


def _epoch_results(trainer: L.Trainer) -> dict[str, Any]:
    """This epoch's accumulating training metrics (``self.log(..., on_epoch=True)``, mean)."""
    results = getattr(trainer.fit_loop.epoch_loop, "_results", {})
    return {
        k: m
        for k, m in results.items()
        if getattr(m, "is_tensor", False) and m.meta.on_epoch and m.meta.is_mean_reduction
    }


def _epoch_sums(trainer: L.Trainer) -> dict[str, list[Tensor]]:
    """The running sums and counts behind this epoch's logged means (for a mid-epoch resume)."""
    return {
        k: [m.value.detach().clone(), m.cumulated_batch_size.detach().clone()]
        for k, m in _epoch_results(trainer).items()
    }


def _add_epoch_sums(trainer: L.Trainer, sums: dict[str, list[Tensor]]) -> None:
    """Add the interrupted part of the epoch to the means the resumed run accumulates.

    Called after the first batches the resumed run logs, once per metric: the sums are
    added to the resumed batches' (``b + a == a + b`` in floating point), so the epoch's
    logged mean is the uninterrupted run's, bit for bit.
    """
    results = _epoch_results(trainer)
    for k in [k for k in sums if k in results]:
        value, count = sums.pop(k)
        m = results[k]
        m.value = m.value + value.to(m.value)
        m.cumulated_batch_size = m.cumulated_batch_size + count.to(m.cumulated_batch_size)


def epoch_complete(trainer: L.Trainer) -> bool:
    """Whether every batch of the current training epoch has been trained."""
    done = trainer.fit_loop.epoch_loop.batch_progress.current.processed
    return done >= trainer.num_training_batches


def resume_position(trainer: L.Trainer) -> tuple[int, int]:
    """``(epoch, batches of it trained)`` where a run resumed from a checkpoint written now starts.

    At the end of an epoch (or during its validation) that is the next epoch's start.
    """
    epoch = int(trainer.current_epoch)
    if epoch_complete(trainer):
        return epoch + 1, 0
    return epoch, int(trainer.fit_loop.epoch_loop.batch_progress.current.processed)


def _optional(value: Any, kind: type) -> Any:
    """``kind(value)``, or None for a missing, null or zero value (0: off)."""
    return kind(value) if value else None


def build_trainer(
    cfg: Any,
    run_dir: Path,
    monitor: str | None = "val_knn_top1",
    mode: str = "max",
    callbacks: list[Callback] | None = None,
    resume_epoch: int | None = None,
    resume_mid_epoch: bool = False,
    stop: StopSignals | None = None,
) -> L.Trainer:
    """A Trainer for a run configuration.

    Args:
        cfg: Run configuration (``trainer`` and ``monitor`` sections).
        run_dir: The run directory.
        monitor: Metric that selects ``best.ckpt`` (None: no best checkpoint).
        mode: ``"max"`` or ``"min"`` for ``monitor``.
        callbacks: Extra callbacks.
        resume_epoch: Epoch a resumed run starts from (for the CSV log).
        resume_mid_epoch: Whether it starts in that epoch's middle (for the CSV log).
        stop: The run's stop-signal handlers (:mod:`selfcaps.engine.stopping`).

    Returns:
        The configured ``lightning.Trainer``.
    """
    t = cfg.trainer
    ckpt_dir = run_dir / "checkpoints"
    every = int(cfg.monitor.knn_every_n_epochs)
    cbs: list[Callback] = [
        LastCheckpoint(
            ckpt_dir / "last.ckpt",
            epochs=int(t.epochs),
            max_steps=int(t.max_steps),
            max_minutes=float(t.max_time) if t.max_time else None,
            every_n_minutes=_optional(t.get("checkpoint_every_n_minutes"), float),
            every_n_steps=_optional(t.get("checkpoint_every_n_steps"), int),
            stop=stop,
        )
    ]
    if every > 0:
        cbs.append(ElapsedTime())  # elapsed_min beside every validation
    if monitor is not None and every > 0:
        cbs.append(
            ModelCheckpoint(
                dirpath=ckpt_dir,
                filename="best",
                monitor=monitor,
                mode=mode,
                save_top_k=1,
                save_last=False,
                enable_version_counter=False,
                save_on_train_epoch_end=False,
            )
        )
    if t.progress_bar:
        cbs.append(RunProgressBar())  # epoch total, stage, validation inline
    cbs += callbacks or []
    return L.Trainer(
        default_root_dir=str(run_dir),
        max_epochs=int(t.epochs),
        max_steps=-1,  # step and time budgets: LastCheckpoint (see there why)
        accelerator=t.accelerator,
        devices=t.devices,
        num_nodes=int(t.num_nodes),
        strategy=t.strategy,
        precision=t.precision,
        deterministic=bool(t.deterministic),
        benchmark=t.get("cudnn_benchmark"),
        callbacks=cbs,
        logger=[
            RunCSVLogger(run_dir, resume_epoch, resume_mid_epoch),
            TensorBoardLogger(save_dir=str(run_dir), name="tensorboard", version=""),
        ],
        log_every_n_steps=int(t.log_every_n_steps),
        enable_progress_bar=bool(t.progress_bar),
        enable_model_summary=False,
        num_sanity_val_steps=0,
        check_val_every_n_epoch=max(every, 1),
        limit_val_batches=0 if every == 0 else None,
        use_distributed_sampler=False,
        plugins=[AtomicCheckpointIO()],
    )
