"""One generic path through any method's training step, for the benchmarks.

:func:`build_method` makes a method's LightningModule and data module from a preset,
exactly as ``selfcaps run`` does; :func:`fit_steps` then trains it for a few steps with a
bare Lightning ``Trainer`` (no logger, checkpoint, validation or progress bar) at a given
precision, so that every method's own ``training_step`` runs (its batch transform in
``on_after_batch_transfer``, PoE's manual optimisation, Lightning's autocast for
``bf16-mixed``). :class:`StepTimer` records each step's wall and CPU seconds: ``step``
from the start of ``training_step``'s hook to the end of the optimiser step, ``loop`` from
the end of one step to the end of the next (data loading and batch transforms included).
"""

from __future__ import annotations

import logging
import os
import statistics
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback

from selfcaps.config.loading import load_config
from selfcaps.data.datamodule import SelfcapsDataModule
from selfcaps.methods import get_method

METHODS = ("coca", "sparsecaps", "mcae", "encapnet", "poe")

#: Small widths of the same structure, per method (``--tiny``): ``model.<key>=<value>``.
TINY_MODEL: dict[str, dict[str, Any]] = {
    "coca": {"planes": 4, "num_caps": 4, "caps_dim": 4},
    "sparsecaps": {"conv_channels": 8, "primary_types": 2, "decoder_widths": [32, 64]},
    "mcae": dict(dim=16, kernel_size=3, primary_caps=4, caps_dim=4, encoder_caps=4)
    | {"decoder_caps": 1, "decoder_dim": 4},
    "encapnet": {"num_caps": 4, "num_type2": 1, "strides": [1, 2, 2, 1]},  # 28 / 4 = 7
    "poe": {"channels": 16, "num_caps": 4},
}


def paper_copy(
    name: str, tiny: bool, batches: int, batch_size: int | None = None
) -> list[tuple[str, Any]]:
    """Overrides of ``name``'s ``paper`` preset for a few bare training steps.

    No validation; PoE trains one epoch in each of its three stages. ``tiny``: the widths of
    :data:`TINY_MODEL` on mnist5k, batch ``batch_size`` (default 8), with images for
    ``batches`` batches and one spare; otherwise the preset's data, at ``batch_size`` if given.
    """
    out: list[tuple[str, Any]] = [("monitor.knn_every_n_epochs", 0)]
    if tiny:
        batch = batch_size or 8
        out += [("data.name", "mnist5k"), ("data.batch_size", batch)]
        out += [("data.eval_batch_size", 16), ("data.train_subset", batch * (batches + 1))]
        out += [(f"model.{k}", v) for k, v in TINY_MODEL[name].items()]
    elif batch_size:
        out.append(("data.batch_size", batch_size))
    if name == "poe":
        out += [("model.stage_epochs", [1, 1, 1]), ("trainer.epochs", 3)]
    return out


def quiet_lightning() -> None:
    """Silence Lightning's start-up lines (GPU available, TPU available, ...)."""
    for name in ("lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=".*smaller than the logging interval.*")
    warnings.filterwarnings("ignore", message="You have overridden `on_after_batch_transfer`")
    warnings.filterwarnings("ignore", message=".*LeafSpec.*is deprecated")


def default_data_root() -> str | None:
    """``$SELFCAPS_DATA`` if set (mnist5k needs no root)."""
    return os.environ.get("SELFCAPS_DATA")


def build_method(
    name: str,
    preset: str = "quick",
    overrides: Sequence[tuple[str, Any]] = (),
    data_root: str | Path | None = None,
    seed: int = 0,
) -> tuple[L.LightningModule, SelfcapsDataModule]:
    """A method's module and data module from ``preset`` plus ``overrides`` (``(key, value)``)."""
    cfg = load_config(name, preset, list(overrides))
    cfg.data.root = None if data_root is None else str(data_root)
    return method_from_config(cfg, seed)


def method_from_config(cfg: Any, seed: int = 0) -> tuple[L.LightningModule, SelfcapsDataModule]:
    """A method's module and data module from a full configuration (e.g. a run's config.yaml)."""
    L.seed_everything(seed, verbose=False)
    method = get_method(str(cfg["method"]))(cfg)
    train_tf, eval_tf = method.build_transforms()
    dm = SelfcapsDataModule(method.cfg, train_tf, eval_tf, root_source="--data-root")
    return method, dm


class StepTimer(Callback):
    """Wall and CPU seconds of every training step (see the module docstring)."""

    def __init__(self) -> None:
        self.step_wall: list[float] = []
        self.step_cpu: list[float] = []
        self.loop_wall: list[float] = []
        self.loop_cpu: list[float] = []
        self._start: tuple[float, float] | None = None
        self._end: tuple[float, float] | None = None

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, idx: int) -> None:
        self._start = (time.perf_counter(), time.process_time())

    def on_train_batch_end(self, trainer: Any, module: Any, out: Any, batch: Any, idx: int) -> None:
        now = (time.perf_counter(), time.process_time())
        assert self._start is not None
        self.step_wall.append(now[0] - self._start[0])
        self.step_cpu.append(now[1] - self._start[1])
        if self._end is not None:
            self.loop_wall.append(now[0] - self._end[0])
            self.loop_cpu.append(now[1] - self._end[1])
        self._end = now

    def median(self, kind: str = "step_wall", skip: int = 1) -> float:
        """Median of ``kind`` (``step_wall``, ``step_cpu``, ``loop_wall``, ``loop_cpu``).

        The first ``skip`` steps are warm-up (``loop_*`` has one entry fewer than ``step_*``).
        """
        values = getattr(self, kind)
        skip = max(0, skip - 1) if kind.startswith("loop") else skip
        return statistics.median(values[skip:] or values)


def fit_steps(
    method: L.LightningModule,
    dm: SelfcapsDataModule,
    steps: int,
    precision: str = "32-true",
    callbacks: Sequence[Callback] = (),
    accelerator: str = "cpu",
) -> StepTimer:
    """Train ``method`` for ``steps`` steps (one epoch of that many batches); return the timings."""
    timer = StepTimer()
    trainer = L.Trainer(
        accelerator=accelerator,
        devices=1,
        precision=precision,  # type: ignore[arg-type]
        benchmark=method.cfg.trainer.get("cudnn_benchmark"),
        max_epochs=1,
        limit_train_batches=steps,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        use_distributed_sampler=False,
        callbacks=[timer, *callbacks],
    )
    trainer.fit(method, datamodule=dm)
    return timer
