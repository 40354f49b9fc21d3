"""The training engine: a Lightning ``Trainer`` configured from a run configuration.

Lightning does the loop, DDP, precision, checkpoint/resume, logging and the
progress bar; this module only wires them to the run directory of DESIGN.md:
``checkpoints/last.ckpt`` (every epoch, for resuming), ``checkpoints/best.ckpt``
(highest online validation kNN top-1), ``metrics.csv`` (CSV logger, rewritten
atomically), ``tensorboard/`` (append-only event files).
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment

from selfcaps.eval.progress import RunProgressBar
from selfcaps.methods.io import AtomicCheckpointIO, atomic_write_text, atomic_write_yaml

__all__ = ["RunCSVLogger", "build_trainer"]


class _AtomicExperimentWriter(ExperimentWriter):
    """Keeps every row in memory and rewrites ``metrics.csv`` atomically on each save.

    On resume, rows of epochs at or after ``resume_epoch`` (written after the
    checkpoint being resumed from) are dropped, so no epoch appears twice.
    """

    def __init__(self, log_dir: str, resume_epoch: int | None) -> None:
        self.rows: list[dict[str, Any]] = []
        path = Path(log_dir) / self.NAME_METRICS_FILE
        if resume_epoch is not None and path.is_file():
            with open(path, newline="") as f:
                for row in csv.DictReader(f):
                    epoch = row.get("epoch", "")
                    if epoch == "" or float(epoch) < resume_epoch:
                        self.rows.append({k: v for k, v in row.items() if v != ""})
        super().__init__(log_dir=log_dir)

    def _check_log_dir_exists(self) -> None:  # never delete earlier logs
        return

    def log_hparams(self, params: dict[str, Any]) -> None:
        self.hparams.update(params)
        atomic_write_yaml(os.path.join(self.log_dir, self.NAME_HPARAMS_FILE), self.hparams)

    def save(self) -> None:
        self.rows.extend(self.metrics)
        self.metrics = []
        if not self.rows:
            return
        keys = sorted(set().union(*self.rows))
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=keys)
        writer.writeheader()
        writer.writerows(self.rows)
        atomic_write_text(self.metrics_file_path, buf.getvalue())


class RunCSVLogger(CSVLogger):
    """CSV logger writing ``<run>/metrics.csv`` directly, atomically, resume-aware.

    Args:
        run_dir: The run directory.
        resume_epoch: Epoch being resumed from (older rows are kept, newer dropped).
    """

    def __init__(self, run_dir: Path, resume_epoch: int | None = None) -> None:
        super().__init__(save_dir=str(run_dir), name="", version="")
        self._resume_epoch = resume_epoch

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        """The atomic writer."""
        if self._experiment is None:
            os.makedirs(self.log_dir, exist_ok=True)
            self._experiment = _AtomicExperimentWriter(self.log_dir, self._resume_epoch)
        return self._experiment


class LastCheckpoint(Callback):
    """Write ``last.ckpt`` at the end of every training epoch (after that epoch's validation).

    It holds everything a resume needs: weights, optimiser and scheduler, loop
    progress, callback state (including ``best.ckpt``'s score) and method state.

    Args:
        path: The checkpoint file.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Save, atomically (through the trainer's checkpoint IO)."""
        trainer.save_checkpoint(self.path, weights_only=False)


def build_trainer(
    cfg: Any,
    run_dir: Path,
    monitor: str | None = "val_knn_top1",
    mode: str = "max",
    callbacks: list[Callback] | None = None,
    resume_epoch: int | None = None,
) -> L.Trainer:
    """A Trainer for a run configuration.

    Args:
        cfg: Run configuration (``trainer`` and ``monitor`` sections).
        run_dir: The run directory.
        monitor: Metric that selects ``best.ckpt`` (None: no best checkpoint).
        mode: ``"max"`` or ``"min"`` for ``monitor``.
        callbacks: Extra callbacks.
        resume_epoch: Epoch a resumed run starts from (for the CSV log).

    Returns:
        The configured ``lightning.Trainer``.
    """
    t = cfg.trainer
    ckpt_dir = run_dir / "checkpoints"
    every = int(cfg.monitor.knn_every_n_epochs)
    cbs: list[Callback] = [LastCheckpoint(ckpt_dir / "last.ckpt")]
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
        max_steps=int(t.max_steps),
        max_time={"minutes": float(t.max_time)} if t.max_time else None,
        accelerator=t.accelerator,
        devices=t.devices,
        num_nodes=int(t.num_nodes),
        strategy=t.strategy,
        precision=t.precision,
        deterministic=bool(t.deterministic),
        callbacks=cbs,
        logger=[
            RunCSVLogger(run_dir, resume_epoch),
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
