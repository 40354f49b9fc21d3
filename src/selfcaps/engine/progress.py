"""What the console shows while a run trains and evaluates: every bar and note on stderr.

:class:`RunProgressBar` is Lightning's tqdm bar with the epoch total
(``Epoch 3/8``), the method's stage where it has one (``stage 2``, from a
``stage`` attribute of the module), validation counted in the training bar
instead of a bar of its own (no ``Validation: 0/?`` lines), and no empty bar
before the first batch. :func:`progress` and :func:`note` report the final
evaluation (feature banks, SVM fits), which has no Lightning loop.
Both are silenced by ``set_progress(False)`` (``--no-progress``).
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.callbacks.progress.tqdm_progress import Tqdm, convert_inf
from tqdm.auto import tqdm

__all__ = ["RunProgressBar", "note", "progress", "set_progress"]

T = TypeVar("T")
_STATE = {"enabled": True, "t0": time.perf_counter()}


def set_progress(enabled: bool) -> None:
    """Turn the evaluation's progress output on or off (and restart its clock)."""
    _STATE["enabled"], _STATE["t0"] = enabled, time.perf_counter()


def note(message: str) -> None:
    """Print one line about the evaluation, with the seconds since :func:`set_progress`."""
    if _STATE["enabled"]:
        elapsed = time.perf_counter() - float(_STATE["t0"])
        print(f"[{elapsed:6.0f} s] {message}", file=sys.stderr, flush=True)


def progress(items: Iterable[T], desc: str, total: int | None = None) -> Iterator[T]:
    """``items`` with a progress bar (removed when done), unless progress output is off."""
    if not _STATE["enabled"]:
        yield from items
        return
    with tqdm(items, desc, total, leave=False, file=sys.stderr, dynamic_ncols=True) as bar:
        yield from bar


class RunProgressBar(TQDMProgressBar):
    """Lightning's progress bar with the epoch total, the stage and validation inline."""

    def _describe(
        self, trainer: Any, pl_module: Any, validating: str = "", refresh: bool = True
    ) -> None:
        total = trainer.max_epochs if trainer.max_epochs and trainer.max_epochs > 0 else "?"
        text = f"Epoch {trainer.current_epoch + 1}/{total}"
        stage = getattr(pl_module, "stage", None)
        if isinstance(stage, int):
            text += f" stage {stage}"
        self.train_progress_bar.set_description(text + validating, refresh=refresh)

    def init_train_tqdm(self) -> Tqdm:
        """Lightning's training bar, not drawn before its first epoch knows its total."""
        return Tqdm(
            desc=self.train_description,
            position=2 * self.process_position,
            disable=self.is_disabled,
            leave=True,
            dynamic_ncols=True,
            file=sys.stderr,  # stdout holds the results: `selfcaps run coca > log` stays clean
            smoothing=0,
            bar_format=self.BAR_FORMAT,
            delay=1e9,  # no "Training: 0/?" line: on_train_epoch_start draws it
        )

    def on_train_epoch_start(self, trainer: Any, *_: Any) -> None:
        """Epoch ``n/total`` and the stage, drawn once with the epoch's number of batches."""
        if self._leave:
            self.train_progress_bar = self.init_train_tqdm()
        bar = self.train_progress_bar
        bar.delay, bar.initial = 0, 0
        self._describe(trainer, trainer.lightning_module, refresh=False)
        bar.reset(total=convert_inf(self.total_train_batches))

    def init_sanity_tqdm(self) -> Tqdm:
        """Lightning's bar, on stderr."""
        with contextlib.redirect_stdout(sys.stderr):
            return super().init_sanity_tqdm()

    def init_test_tqdm(self) -> Tqdm:
        """Lightning's bar, on stderr."""
        with contextlib.redirect_stdout(sys.stderr):
            return super().init_test_tqdm()

    def init_predict_tqdm(self) -> Tqdm:
        """Lightning's bar, on stderr."""
        with contextlib.redirect_stdout(sys.stderr):
            return super().init_predict_tqdm()

    def init_validation_tqdm(self) -> Tqdm:
        """A bar that is never drawn: validation is counted in the training bar instead."""
        return Tqdm(disable=True)

    def on_validation_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:  # fmt: skip
        """``validating i/n`` in the training bar (when there is one)."""
        super().on_validation_batch_end(
            trainer, pl_module, outputs, batch, batch_idx, dataloader_idx
        )
        if self._train_progress_bar is not None and not trainer.sanity_checking:
            total = self.total_val_batches_current_dataloader
            loaders = len(trainer.num_val_batches) if trainer.num_val_batches else 1
            part = f" part {dataloader_idx + 1}/{loaders}:" if loaders > 1 else ""
            self._describe(trainer, pl_module, f" validating{part} {batch_idx + 1}/{total}")
