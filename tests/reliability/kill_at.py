"""Run the ``selfcaps`` command and signal it at a named point, for the kill/resume tests.

``python -m tests.reliability.kill_at POINT N ARGS...`` runs ``selfcaps ARGS`` in this
process and sends it a real ``SIGKILL`` (nothing is flushed, no handler runs):

* ``train_batch``: after the N-th training batch this process trains (1-based);
* ``val_batch``: after the N-th validation batch;
* ``epoch_start``: at the start of training epoch N (0-based), before its first batch;
* ``evaluate``: at the start of the final evaluation (N is ignored);
* ``finetune_batch``: after the N-th batch of MCAE's finetuning (its second phase).

or a real SIGTERM / SIGINT, which the run handles (``selfcaps.engine.stopping``):

* ``term_batch`` / ``int_batch``: SIGTERM / SIGINT as the N-th training batch starts;
* ``term_twice_batch``: two SIGTERMs as the N-th training batch starts;
* ``term_val_batch``: SIGTERM after the N-th validation batch;
* ``term_evaluate``: SIGTERM at the start of the final evaluation.

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

import selfcaps.engine.trainer
import selfcaps.methods.mcae.finetuning
from selfcaps.cli.main import main
from selfcaps.methods import get_method, list_methods

POINTS = ("train_batch", "val_batch", "epoch_start", "evaluate", "finetune_batch")
#: Points that send SIGTERM / SIGINT: (the SIGKILL point they stand in for, signals sent).
SIGNAL_POINTS = {
    "term_batch": ("train_batch_start", (signal.SIGTERM,)),
    "int_batch": ("train_batch_start", (signal.SIGINT,)),
    "term_twice_batch": ("train_batch_start", (signal.SIGTERM, signal.SIGTERM)),
    "term_val_batch": ("val_batch", (signal.SIGTERM,)),
    "term_evaluate": ("evaluate", (signal.SIGTERM,)),
}


def die() -> None:
    """SIGKILL this process."""
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def send(*signals: int) -> None:
    """Send these signals to this process (its handlers run at once, in this thread)."""
    for s in signals:
        os.kill(os.getpid(), s)


class Killer(Callback):
    """Kills (or signals) the process at ``point`` number ``n`` (see the module docstring)."""

    def __init__(self, point: str, n: int, action: Any = die) -> None:
        self.point, self.n, self.count, self.action = point, n, 0, action

    def _tick(self, point: str) -> None:
        if point == self.point:
            self.count += 1
            if self.count == self.n:
                self.action()

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        """Count training batches as they start."""
        self._tick("train_batch_start")

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
    """Patch the run command so that the process dies (or is signalled) at ``point``."""
    action: Any = die
    if point in SIGNAL_POINTS:
        point, signals = SIGNAL_POINTS[point]
        action = lambda: send(*signals)  # noqa: E731
    if point == "finetune_batch":
        finetune = selfcaps.methods.mcae.finetuning.finetune

        def killing_finetune(*args: Any, trainer_kwargs: dict[str, Any], **kwargs: Any) -> Any:
            callbacks = [*trainer_kwargs.get("callbacks", []), Killer("train_batch", n)]
            return finetune(
                *args, trainer_kwargs={**trainer_kwargs, "callbacks": callbacks}, **kwargs
            )

        selfcaps.methods.mcae.finetuning.finetune = killing_finetune  # type: ignore[assignment]
    elif point == "evaluate":
        for name in list_methods():
            evaluate = get_method(name).evaluate

            def acting_evaluate(self: Any, dm: Any, evaluate: Any = evaluate) -> Any:
                action()
                return evaluate(self, dm)

            get_method(name).evaluate = acting_evaluate  # type: ignore[method-assign]
    else:
        # `selfcaps run` imports build_trainer from the engine when a run starts
        build = selfcaps.engine.trainer.build_trainer

        def killing_build(*args: Any, **kwargs: Any) -> L.Trainer:
            return build(*args, **kwargs, callbacks=[Killer(point, n, action)])

        selfcaps.engine.trainer.build_trainer = killing_build  # type: ignore[assignment]


if __name__ == "__main__":
    point, n = sys.argv[1], int(sys.argv[2])
    if point not in POINTS and point not in SIGNAL_POINTS:
        valid = ", ".join([*POINTS, *SIGNAL_POINTS])
        raise SystemExit(f"unknown point {point!r}; valid: {valid}")
    install(point, n)
    sys.exit(main(sys.argv[3:]))
