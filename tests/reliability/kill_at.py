"""Run the ``selfcaps`` command and SIGKILL it at a named point, for the kill/resume tests.

``python -m tests.reliability.kill_at POINT N ARGS...`` runs ``selfcaps ARGS`` in this
process and sends it a real ``SIGKILL`` (nothing is flushed, no handler runs):

* ``train_batch``: after the N-th training batch this process trains (1-based);
* ``val_batch``: after the N-th validation batch;
* ``epoch_start``: at the start of training epoch N (0-based), before its first batch;
* ``evaluate``: at the start of the final evaluation (N is ignored);
* ``finetune_batch``: after the N-th batch of MCAE's finetuning (its second phase).

A point in the code rather than a moment on the clock, so the test is not at the mercy
of the machine's load.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback

import selfcaps.methods.engine
import selfcaps.methods.mcae
from selfcaps.cli.main import main
from selfcaps.methods import get_method, list_methods

POINTS = ("train_batch", "val_batch", "epoch_start", "evaluate", "finetune_batch")


def die() -> None:
    """SIGKILL this process."""
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


class Killer(Callback):
    """Kills the process at ``point`` number ``n`` (see the module docstring)."""

    def __init__(self, point: str, n: int) -> None:
        self.point, self.n, self.count = point, n, 0

    def _tick(self, point: str) -> None:
        if point == self.point:
            self.count += 1
            if self.count >= self.n:
                die()

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        """Count training batches."""
        self._tick("train_batch")

    def on_validation_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        """Count validation batches."""
        self._tick("val_batch")

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Kill at the start of epoch ``n``."""
        if self.point == "epoch_start" and trainer.current_epoch == self.n:
            die()


def install(point: str, n: int) -> None:
    """Patch the run command so that the process dies at ``point``."""
    if point == "finetune_batch":
        finetune = selfcaps.methods.mcae.finetune

        def killing_finetune(*args: Any, trainer_kwargs: dict[str, Any], **kwargs: Any) -> Any:
            callbacks = [*trainer_kwargs.get("callbacks", []), Killer("train_batch", n)]
            return finetune(
                *args, trainer_kwargs={**trainer_kwargs, "callbacks": callbacks}, **kwargs
            )

        selfcaps.methods.mcae.finetune = killing_finetune  # type: ignore[assignment]
    elif point == "evaluate":
        for name in list_methods():
            get_method(name).evaluate = lambda self, dm: die()  # type: ignore[method-assign]
    else:
        # `selfcaps run` imports build_trainer from the engine when a run starts
        build = selfcaps.methods.engine.build_trainer

        def killing_build(*args: Any, **kwargs: Any) -> L.Trainer:
            return build(*args, **kwargs, callbacks=[Killer(point, n)])

        selfcaps.methods.engine.build_trainer = killing_build  # type: ignore[assignment]


if __name__ == "__main__":
    point, n = sys.argv[1], int(sys.argv[2])
    if point not in POINTS:
        raise SystemExit(f"unknown point {point!r}; valid: {', '.join(POINTS)}")
    install(point, n)
    sys.exit(main(sys.argv[3:]))
