"""Wall-clock minutes of a run, logged beside every validation: time to accuracy.

:class:`ElapsedTime` logs ``elapsed_min`` in the row of each validation epoch of
``metrics.csv``: the wall-clock minutes from the start of training to the start of
that validation, summed over every process that trained the run (a resumed run
continues the count from its ``last.ckpt``), earlier validations included. With it,
:func:`selfcaps.viz.curves.plot_against_minutes` draws validation accuracy against
minutes (``figures/time_to_accuracy.png``): what a run with a ``--max-time`` budget
would have reached.
"""

from __future__ import annotations

import time
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback

from selfcaps.engine.metric_names import ELAPSED_KEY

__all__ = ["ElapsedTime"]


class ElapsedTime(Callback):
    """Log ``elapsed_min`` (module docstring) at every validation epoch.

    The count is kept in the checkpoint (``state_dict``): the minutes trained before a
    checkpoint was written, so a run resumed from it goes on from there; time spent
    between the checkpoint and a crash is not counted (those steps are trained again).
    """

    def __init__(self) -> None:
        self._before = 0.0  # seconds of earlier processes (from the checkpoint)
        self._t0 = time.monotonic()
        self._at_validation: float | None = None

    def seconds(self) -> float:
        """Seconds of training so far, earlier processes included."""
        return self._before + time.monotonic() - self._t0

    def state_dict(self) -> dict[str, Any]:
        """The seconds counted when the checkpoint is written."""
        return {"seconds": self.seconds()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue from a checkpoint's count."""
        self._before = float(state_dict.get("seconds", 0.0))
        self._t0 = time.monotonic()

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Start this process's clock (after data, model and checkpoint are loaded)."""
        self._t0 = time.monotonic()

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Read the clock before the validation's own cost."""
        self._at_validation = self.seconds()

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Log the minutes read at the start of this validation."""
        if trainer.sanity_checking or self._at_validation is None:
            return
        pl_module.log(ELAPSED_KEY, self._at_validation / 60.0, on_epoch=True, rank_zero_only=True)
